-- acquire.lua: take, or re-enter, a fenced reentrant lock. Runs atomically in Redis.
--
-- KEYS[1]  lock hash    fg:{R}:lock   field <owner> = hold count, field "#token" = token,
--          "#hold" = the hold id (ARGV[8]), "#wait" = marked wanted (prelude/wanted.lua)
-- KEYS[2]  fence counter fg:{R}:fence  never deleted; expires after ARGV[5] idle
-- KEYS[3]  idempotency record fg:{R}:idem:<key> (untouched when ARGV[4] is "0")
-- KEYS[4]  lift point   fg:{R}:base   never deleted; expires after ARGV[5] idle
-- KEYS[5]  recent tokens fg:{R}:recent the last 16 tokens minted, newest first (a list;
--          expires after ARGV[5] idle): token_range.lua tells a superseded token from a
--          forged one
-- ARGV[1]  owner id, [A-Za-z0-9._:-]{1,128}; "#token" can never be an owner
-- ARGV[2]  lease in ms
-- ARGV[3]  floor: the token handed out is always greater than this (decimal digits
--          only, < 2^53; anything else, "5.5" or "1e3" say, is refused)
-- ARGV[4]  idempotency retention in ms, "0" for no idempotency key
-- ARGV[5]  idle expiry of the token keys KEYS[2], KEYS[4], KEYS[5] in ms, "0" for never:
--          every grant makes their time to live at least max(ARGV[5], lease, ARGV[4])
--          (prelude/idle.lua: the counter outlives a record that can replay its token)
-- ARGV[6]  "1" when the caller knows of other waiters for this lock (a gateway's parked
--          waiters): the grant marks the lock as wanted (prelude/wanted.lua); "0" or absent
--          when not
-- ARGV[7]  optional, decimal digits: a token to supersede, "0" (or absent) for none: a
--          record of KEYS[3] for this owner answering exactly this token is dropped, not
--          replayed (acquire_replay in prelude/mint.lua)
-- ARGV[8]  optional: the hold id, 1 to 16 lowercase hex digits, "" (or absent) for none:
--          a new hold keeps it in the field "#hold", and its release names it in the
--          message (release.lua). The caller draws a new one per call, the same for every
--          master of a Redlock call, so that a listener to several masters tells one
--          release published by many from two releases with the same token
--          (locklib/src/sub.c).
-- ARGV[9]  optional: "1" when the caller WAITs for replicas after the answer, so that a
--          replay must write (acquire_replay in prelude/mint.lua); "0" (or absent) when not
-- ARGV[10] optional: the mode, "x" (or absent) exclusive, "s" shared (prelude/shared.lua)
-- ARGV[11] optional, decimal digits: how much longer the caller waits when answered held
--          (its remaining wait_ms), "0" (or absent) when it does not wait: an exclusive
--          request that waits holds new shared requests back until then (writers'
--          preference, prelude/shared.lua)
-- ARGV[12] optional: this waiter's remaining wait in ms, 1..3600000, to wait for a hand-off
--          (prelude/handoff.lua), "0" (or absent) for none; exclusive requests only. With it
--          ARGV[8] is the waiter's hand-off id (required), and KEYS[8] fg:{R}:hq, KEYS[9]
--          fg:{R}:wq and KEYS[10] fg:{R}:wqt are the hand-off keys: a held answer queues the
--          waiter there, an acquisition takes it out, and a grant a release made to this id
--          is claimed. "1" only claims (lk_call.handoff_claim): a held answer queues
--          nothing.
-- KEYS[6]  shared holders' leases fg:{R}:readers (prelude/shared.lua)
-- KEYS[7]  waiting requests       fg:{R}:rwait   (prelude/shared.lua)
--
-- Returns  {1, token, holds, lease_ms, floor_raised, replayed, handed, shared}  acquired;
--                                     handed is 1 when this claims a hand-off grant (lease_ms is
--                                     then what is left of the grant's lease);
--                                     shared is 1 for a shared hold (its token may be 0)
--          {0, holder_pttl_ms, holder_token}   held by another owner, whose hold has that
--                                              token (0 while the lock is free but a writer
--                                              waits first: retry within holder_pttl_ms)
--          {-1, 0}   the idempotency key was used by another owner or operation, or by a
--                    call of the other mode
--          {-2, 0}   this owner holds the lock in the other mode: nothing changes
-- Errors   "fencegate: ..." for a bad argument or an exhausted token space; nothing is
--          written before either is found (a script error does not roll back).
--
-- A first acquisition mints a token by the rule of prelude/mint.lua (the floor, the lift
-- point, TOKEN_MAX), the same code fair_acquire.lua runs.
-- A shared acquisition (prelude/shared.lua) joins the other shared holders with their token
-- and a lease of its own, unless an exclusive request waits (writers' preference); an
-- exclusive one waits for every shared holder to leave.
-- A reentrant acquisition returns the first acquisition's token and resets the lease.
-- A replayed acquisition reports the lease it granted the first time, not this call's.
-- A held answer marks the lock as wanted, so that its release publishes (prelude/wanted.lua).
--
-- The fair queue of fair_acquire.lua is ignored on purpose: a non-fair acquisition may
-- barge ahead of queued fair waiters, like tryLock() on a fair java ReentrantLock.
--
-- Prelude: limits.lua idem.lua idle.lua mint.lua wanted.lua shared.lua handoff.lua
-- The build prepends these (from lua/prelude/) to this file, so this file alone is not
-- the whole script: `redis-cli --eval` of it fails; run the generated
-- build/locklib/generated/lua/acquire.lua instead.

local owner = ARGV[1]
local lease_ms = tonumber(ARGV[2])
local floor = mint_floor(ARGV[3])
local idem_ms = tonumber(ARGV[4])
local idle_ms = idle_arg(ARGV[5])
local others = ARGV[6] or '0'
local supersede = mint_floor(ARGV[7] or '0')
local hold_id = ARGV[8] or ''
local will_wait = ARGV[9] or '0'
local mode_arg = ARGV[10] or 'x'
local wait_ms = mint_floor(ARGV[11] or '0')
local handoff_ms = tonumber(ARGV[12] or '0')

if not valid_owner(owner) then
    return redis.error_reply('fencegate: invalid owner')
end
if lease_ms == nil or lease_ms < 1 or floor == nil or floor < 0 or floor >= TOKEN_MAX or
        idem_ms == nil or idle_ms == nil or (others ~= '0' and others ~= '1') or
        supersede == nil or #hold_id > 16 or string.match(hold_id, '^[0-9a-f]*$') == nil or
        (will_wait ~= '0' and will_wait ~= '1') or (mode_arg ~= 'x' and mode_arg ~= 's') or
        wait_ms == nil or (mode_arg == 's' and KEYS[7] == nil) or handoff_ms == nil or
        handoff_ms < 0 or handoff_ms > 3600000 or
        (handoff_ms > 0 and (mode_arg == 's' or not handoff_valid_id(hold_id) or
            KEYS[10] == nil)) then
    return redis.error_reply('fencegate: invalid argument')
end

if handoff_ms > 0 then
    local g_token, g_holds, g_leased = handoff_claim(KEYS[1], owner, hold_id, will_wait == '1')
    if g_token then
        if g_leased then
            keep_token_keys(KEYS[2], KEYS[4], KEYS[5], idle_ms, lease_ms, KEYS[3], idem_ms)
        end
        -- Others wait in the caller's process, perhaps without a place in Redis: the
        -- grant's release must publish (HSETNX: a write only when not marked yet).
        if others == '1' then
            mark_wanted(KEYS[1])
        end
        return {1, g_token, g_holds, redis.call('PTTL', KEYS[1]), 0, 0, 1, 0}
    end
end

local shared = mode_arg == 's'
if idem_mode_differs(KEYS[3], idem_ms, owner, shared) then
    return {-1, 0}
end
local rec = acquire_replay(KEYS[3], idem_ms, owner, lease_ms, supersede, will_wait == '1')
if rec == false then
    return {-1, 0}
elseif rec then
    if handoff_ms > 0 then
        handoff_leave(KEYS[8], KEYS[9], KEYS[10], owner, hold_id) -- answered: not a waiter
    end
    return {1, rec[1], rec[2], rec[3], 0, 1, 0, shared and 1 or 0}
end

local now = server_ms()
local mode = live_mode(KEYS[1], KEYS[6], now)
local token
local holds
local raised = 0
if mode ~= nil and redis.call('HEXISTS', KEYS[1], owner) == 1 then
    if (mode == 's') ~= shared then
        return {-2, 0}
    end
    if shared then
        token, holds = share(KEYS[1], KEYS[2], KEYS[6], owner, lease_ms, now, hold_id)
    else
        holds, token = reenter(KEYS[1], owner, lease_ms)
    end
elseif shared and mode ~= 'x' and not writer_waits(KEYS[7], now, nil, nil) then
    token, holds = share(KEYS[1], KEYS[2], KEYS[6], owner, lease_ms, now, hold_id)
elseif not shared and mode == nil then
    -- Only when left over: a DEL is the script's first write, and Redis lets a script that
    -- has written go on writing, out of memory or not (DEL is allowed then).
    if KEYS[6] and redis.call('EXISTS', KEYS[6]) == 1 then
        redis.call('DEL', KEYS[6])
    end
    token, raised = mint(KEYS[1], KEYS[2], KEYS[4], KEYS[5], owner, floor, lease_ms, hold_id)
    if token == nil then
        return redis.error_reply('fencegate: token space exhausted')
    end
    holds = 1
    writer_granted(KEYS[1], KEYS[7], owner, now)
else
    -- Held in a mode this call cannot join, or a writer waits first. A writer held by
    -- another writer, with no reader holding or waiting, has no reader to hold back: it
    -- registers at its first retry that meets one (prelude/shared.lua, writers' preference),
    -- so that the hot path of exclusive locks writes nothing for the preference.
    if shared or mode == 's' or (KEYS[7] and redis.call('EXISTS', KEYS[7]) == 1) then
        mark_waiting(KEYS[7], shared and '#s' or owner, now, wait_ms)
    end
    if mode == nil then
        return {0, writer_first_retry(KEYS[7], now), 0}
    end
    mark_wanted(KEYS[1])
    if handoff_ms > 1 then
        handoff_enqueue(KEYS[8], KEYS[9], KEYS[10], false, owner, hold_id, lease_ms, KEYS[3],
            idem_ms, idle_ms, now, handoff_ms)
    end
    return {0, redis.call('PTTL', KEYS[1]), tonumber(redis.call('HGET', KEYS[1], '#token'))}
end
if handoff_ms > 0 then
    handoff_leave(KEYS[8], KEYS[9], KEYS[10], owner, hold_id)
end
if others == '1' then
    mark_wanted(KEYS[1])
end

if shared then
    idem_record(KEYS[3], idem_ms, 'acquire', owner, 'token', token, 'holds', holds, 'lease',
        lease_ms, 'mode', 's')
else
    acquire_record(KEYS[3], idem_ms, owner, token, holds, lease_ms)
end
keep_token_keys(KEYS[2], KEYS[4], KEYS[5], idle_ms, lease_ms, KEYS[3], idem_ms)
return {1, token, holds, lease_ms, raised, 0, 0, shared and 1 or 0}
