-- fair_acquire.lua: one attempt at a fair (FIFO) fenced lock. Runs atomically in Redis.
--
-- KEYS[1]  lock hash      fg:{R}:lock      as in acquire.lua
-- KEYS[2]  fence counter  fg:{R}:fence     never deleted; expires after ARGV[6] idle
-- KEYS[3]  idempotency record fg:{R}:idem:<key> (untouched when ARGV[4] is "0")
-- KEYS[4]  lift point     fg:{R}:base      never deleted; expires after ARGV[6] idle
-- KEYS[5]  queue list     fg:{R}:queue     waiting owners, first come first
-- KEYS[6]  deadlines zset fg:{R}:qtimeout  owner -> deadline, ms of Redis server time
-- KEYS[7]  recent tokens  fg:{R}:recent    as in acquire.lua
-- ARGV[1]  owner id, [A-Za-z0-9._:-]{1,128}; "#token" can never be an owner
-- ARGV[2]  lease in ms
-- ARGV[3]  floor: the token handed out is always greater than this (decimal digits
--          only, < 2^53; anything else, "5.5" or "1e3" say, is refused)
-- ARGV[4]  idempotency retention in ms, "0" for no idempotency key
-- ARGV[5]  this waiter's remaining wait in ms, 0..3600000
-- ARGV[6]  idle expiry of the token keys KEYS[2], KEYS[4], KEYS[7] in ms, "0" for never:
--          every grant makes their time to live at least max(ARGV[6], lease, ARGV[4])
--          (prelude/idle.lua: the counter outlives a record that can replay its token)
-- ARGV[7]  optional: a token to supersede, "0" (or absent) for none, as in acquire.lua
-- ARGV[8]  optional: "1" when the caller WAITs for replicas after the answer, "0" (or
--          absent) when not, as acquire.lua's ARGV[9]
-- ARGV[9]  optional: the mode, "x" (or absent) exclusive, "s" shared (prelude/shared.lua)
-- ARGV[10] optional: this waiter's hand-off id (prelude/handoff.lua), "" (or absent) for
--          none; exclusive requests only. With it KEYS[10] is fg:{R}:hq: waiting in line
--          leaves an entry there, so that the release that frees the lock while this owner
--          is first grants it; an attempt claims such a grant; a grant this call mints has
--          the id as its hold id.
-- ARGV[11] optional: "1" to join the queue only, "0" (or absent) for an attempt: the call
--          takes nothing (no mint, no re-entry, no claim of a grant, no replay), so it needs
--          no floor (ARGV[3] is checked, unused). Exclusive, without an idempotency key. The
--          owner's turn (step 4) or a hold of its own (step 3, a grant to its id included)
--          answers {0, 0, -1, 0, 1} with nothing queued: attempt again without this flag.
-- KEYS[8]  shared holders' leases fg:{R}:readers (prelude/shared.lua)
-- KEYS[9]  waiting requests       fg:{R}:rwait   (prelude/shared.lua)
--
-- Returns  {1, token, holds, lease_ms, floor_raised, replayed, -1, shared, handed}  acquired;
--                                   handed is 1 when this claims a hand-off grant (lease_ms is then
--                                   what is left of the grant's lease)
--          {0, retry_ms, position, holder_token}
--                                   not this owner's turn: it is queued at 0-based
--                                   position; retry within retry_ms or on a release message;
--                                   holder_token is the holder's token, 0 when the lock is
--                                   free (another waiter is first)
--          {0, 0, -1, 0, 1}         a join (ARGV[11]) that found this owner's turn or hold
--          A queued answer is {0, retry_ms, position, holder_token, 0, first}: while the
--          lock is free, first is the queue element of the live waiter first in line (its
--          owner, '#' and its owner for a shared one), the one to take it, whose own
--          process may not have woken it; else "".
--          {-1, 0, -1}  the idempotency key was used by another owner or operation, or by a
--                       call of the other mode
--          {-2, 0, -1}  this owner holds the lock in the other mode: nothing changes
-- Errors   "fencegate: ..." for a bad argument or an exhausted token space; neither the
--          counter nor the base is written before either is found (a script error does not
--          roll back).
--
-- The steps, in order:
--   1. Replay an idempotent retry, as acquire.lua does.
--   2. Drop waiters whose deadline has passed (deadline < now), so a waiter that vanished
--      without cancelling blocks the queue only until its own wait would have ended. At most
--      100 are dropped per call to keep the script short; the head of the queue is always
--      checked, which is all that fairness needs.
--   3. The holder re-enters as in acquire.lua, whatever the queue holds.
--   4. A free lock goes to this owner when the queue is empty or this owner is its head:
--      the token is minted by prelude/mint.lua, the code acquire.lua runs too, and the
--      owner leaves the queue.
--   4'. A shared request (prelude/shared.lua) is granted, whatever its place in line, while
--      the lock is free or held shared and no exclusive request waits ahead of it (queued
--      before it, or waiting without the queue): consecutive shared waiters are granted
--      together, and an exclusive one queued before them keeps them out (writers'
--      preference). A shared waiter is queued as '#' .. owner ('#' is never in an owner id),
--      so an exclusive request behind it waits for it to come.
--   5. Otherwise the owner is appended to the queue unless already in it, its deadline is
--      set to now + wait, and both queue keys expire just after the last deadline, so they
--      vanish once everybody has left. A held lock is marked wanted (prelude/wanted.lua),
--      as is a lock minted while others are still in line (step 4).
--
-- The retry hint is the holder's remaining lease while the lock is held (expiry publishes
-- nothing). While the lock is free but another waiter is first, it is the time to that
-- waiter's deadline, capped at 1 s: the first waiter normally takes the lock within a round
-- trip, and its acquisition publishes nothing, so a waiter parked until the head's deadline
-- (up to an hour) would not notice if the new holder died and its lease ran out. The cap
-- makes such a waiter come back, see the new holder and park on its lease instead.
--
-- Time comes from redis TIME. Redis 7 replicates a script's effects, not the script, so
-- replicas and the AOF store the deadlines the primary computed.
-- Non-fair acquire.lua ignores this queue: a non-fair acquisition may barge in.
--
-- Prelude: limits.lua idem.lua idle.lua mint.lua wanted.lua shared.lua handoff.lua
-- The build prepends these (from lua/prelude/) to this file, so this file alone is not
-- the whole script: `redis-cli --eval` of it fails; run the generated
-- build/locklib/generated/lua/fair_acquire.lua instead.

local owner = ARGV[1]
local lease_ms = tonumber(ARGV[2])
local floor = mint_floor(ARGV[3])
local idem_ms = tonumber(ARGV[4])
local wait_ms = tonumber(ARGV[5])
local idle_ms = idle_arg(ARGV[6])
local supersede = mint_floor(ARGV[7] or '0')
local will_wait = ARGV[8] or '0'
local mode_arg = ARGV[9] or 'x'
local handoff_id = ARGV[10] or ''
local join_arg = ARGV[11] or '0'
local HEAD_POLL_MS = 1000
local PRUNE_MAX = 100

if not valid_owner(owner) then
    return redis.error_reply('fencegate: invalid owner')
end
if lease_ms == nil or lease_ms < 1 or floor == nil or floor < 0 or floor >= TOKEN_MAX or
        idem_ms == nil or wait_ms == nil or wait_ms < 0 or wait_ms > 3600000 or
        idle_ms == nil or supersede == nil or (will_wait ~= '0' and will_wait ~= '1') or
        (mode_arg ~= 'x' and mode_arg ~= 's') or (mode_arg == 's' and KEYS[9] == nil) or
        (handoff_id ~= '' and (mode_arg == 's' or not handoff_valid_id(handoff_id) or
            KEYS[10] == nil)) or (join_arg ~= '0' and join_arg ~= '1') or
        (join_arg == '1' and (mode_arg == 's' or idem_ms ~= 0)) then
    return redis.error_reply('fencegate: invalid argument')
end

local join_only = join_arg == '1'
local TURN = {0, 0, -1, 0, 1} -- a join that found this owner's turn or hold: attempt

if handoff_id ~= '' and not join_only then
    local g_token, g_holds, g_leased = handoff_claim(KEYS[1], owner, handoff_id,
        will_wait == '1')
    if g_token then
        if g_leased then
            keep_token_keys(KEYS[2], KEYS[4], KEYS[7], idle_ms, lease_ms, KEYS[3], idem_ms)
        end
        return {1, g_token, g_holds, redis.call('PTTL', KEYS[1]), 0, 0, -1, 0, 1}
    end
end

-- 1. Replay.
local shared = mode_arg == 's'
local elem = owner
if shared then
    elem = '#' .. owner
end
if idem_mode_differs(KEYS[3], idem_ms, owner, shared) then
    return {-1, 0, -1}
end
local rec = acquire_replay(KEYS[3], idem_ms, owner, lease_ms, supersede, will_wait == '1')
if rec == false then
    return {-1, 0, -1}
elseif rec then
    if handoff_id ~= '' then
        redis.call('HDEL', KEYS[10], 'f:' .. owner) -- answered: no hand-off for it
    end
    return {1, rec[1], rec[2], rec[3], 0, 1, -1, shared and 1 or 0, 0}
end

-- Redis before 7 must be told to replicate effects before a write follows TIME.
if redis.replicate_commands then
    redis.replicate_commands()
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- 2. Drop vanished waiters.
local expired = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', string.format('(%d', now),
    'LIMIT', 0, PRUNE_MAX)
for _, w in ipairs(expired) do
    redis.call('LREM', KEYS[5], 0, w)
    redis.call('ZREM', KEYS[6], w)
    if handoff_id ~= '' then
        redis.call('HDEL', KEYS[10], 'f:' .. w)
    end
end
-- The head must be a live waiter: one without a deadline (the two keys out of step) or past
-- it is dropped too.
local head = redis.call('LINDEX', KEYS[5], 0)
local head_deadline = nil
while head do
    head_deadline = tonumber(redis.call('ZSCORE', KEYS[6], head))
    if head_deadline ~= nil and head_deadline >= now then
        break
    end
    redis.call('LPOP', KEYS[5])
    redis.call('ZREM', KEYS[6], head)
    if handoff_id ~= '' then
        redis.call('HDEL', KEYS[10], 'f:' .. head)
    end
    head = redis.call('LINDEX', KEYS[5], 0)
end

local function leave_queue()
    redis.call('LREM', KEYS[5], 0, elem)
    redis.call('ZREM', KEYS[6], elem)
    if handoff_id ~= '' then
        redis.call('HDEL', KEYS[10], 'f:' .. owner)
    end
end

-- A shared grant (3 and 4'): recorded with its mode.
local function shared_granted(token, holds)
    leave_queue()
    if redis.call('EXISTS', KEYS[5]) == 1 then
        mark_wanted(KEYS[1])
    end
    idem_record(KEYS[3], idem_ms, 'acquire', owner, 'token', token, 'holds', holds, 'lease',
        lease_ms, 'mode', 's')
    keep_token_keys(KEYS[2], KEYS[4], KEYS[7], idle_ms, lease_ms, KEYS[3], idem_ms)
    return {1, token, holds, lease_ms, 0, 0, -1, 1, 0}
end

local mode = live_mode(KEYS[1], KEYS[8], now)
local held = mode ~= nil

-- 3. Reentry.
if held and redis.call('HEXISTS', KEYS[1], owner) == 1 then
    if (mode == 's') ~= shared then
        return {-2, 0, -1}
    end
    if join_only then
        return TURN
    end
    if shared then
        return shared_granted(share(KEYS[1], KEYS[2], KEYS[8], owner, lease_ms, now, ''))
    end
    local holds, token = reenter(KEYS[1], owner, lease_ms)
    leave_queue()
    acquire_record(KEYS[3], idem_ms, owner, token, holds, lease_ms)
    keep_token_keys(KEYS[2], KEYS[4], KEYS[7], idle_ms, lease_ms, KEYS[3], idem_ms)
    return {1, token, holds, lease_ms, 0, 0, -1, 0, 0}
end

-- 4'. Shared: no writer ahead.
if shared and mode ~= 'x' and not writer_waits(KEYS[9], now, KEYS[5], elem) then
    return shared_granted(share(KEYS[1], KEYS[2], KEYS[8], owner, lease_ms, now, ''))
end

-- 4. This owner's turn: mint (prelude/mint.lua).
if not shared and not held and (not head or head == owner) then
    if join_only then
        return TURN
    end
    -- Only when left over: a DEL is the script's first write, and Redis lets a script that
    -- has written go on writing, out of memory or not (DEL is allowed then).
    if KEYS[8] and redis.call('EXISTS', KEYS[8]) == 1 then
        redis.call('DEL', KEYS[8])
    end
    local token, raised = mint(KEYS[1], KEYS[2], KEYS[4], KEYS[7], owner, floor, lease_ms,
        handoff_id)
    if token == nil then
        return redis.error_reply('fencegate: token space exhausted')
    end
    leave_queue()
    writer_granted(KEYS[1], KEYS[9], owner, now)
    if redis.call('EXISTS', KEYS[5]) == 1 then
        mark_wanted(KEYS[1]) -- the others in line wait for this holder's release
    end
    acquire_record(KEYS[3], idem_ms, owner, token, 1, lease_ms)
    keep_token_keys(KEYS[2], KEYS[4], KEYS[7], idle_ms, lease_ms, KEYS[3], idem_ms)
    return {1, token, 1, lease_ms, raised, 0, -1, 0, 0}
end

-- 5. Wait in line.
local position = redis.call('LPOS', KEYS[5], elem)
if not position then
    position = redis.call('RPUSH', KEYS[5], elem) - 1
end
redis.call('ZADD', KEYS[6], now + wait_ms, elem)
mark_waiting(KEYS[9], shared and '#s' or owner, now, wait_ms)
local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
local keep_ms = tonumber(last[2]) - now + 1
redis.call('PEXPIRE', KEYS[5], keep_ms)
redis.call('PEXPIRE', KEYS[6], keep_ms)
if handoff_id ~= '' then
    handoff_enqueue(KEYS[10], nil, nil, true, owner, handoff_id, lease_ms, KEYS[3], idem_ms,
        idle_ms, now, wait_ms)
    local left = redis.call('PTTL', KEYS[10])
    if left == -1 or (left >= 0 and left < keep_ms) then
        redis.call('PEXPIRE', KEYS[10], keep_ms)
    end
end

local retry_ms
local holder_token = 0
local first = ''
if held then
    mark_wanted(KEYS[1])
    retry_ms = redis.call('PTTL', KEYS[1])
    holder_token = tonumber(redis.call('HGET', KEYS[1], '#token')) or 0
elseif head and head ~= elem then
    -- head is another live waiter, so head_deadline >= now.
    retry_ms = math.min(head_deadline - now, HEAD_POLL_MS)
    first = head
else
    -- A shared request at the head, refused for a writer waiting without the queue.
    retry_ms = writer_first_retry(KEYS[9], now)
end
if retry_ms < 1 then
    retry_ms = 1
end
return {0, retry_ms, position, holder_token, 0, first}
