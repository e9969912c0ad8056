-- prelude/handoff.lua: hand-offs, a release that grants the lock to the next waiter in the
-- same script. Shared by acquire.lua, fair_acquire.lua, release.lua and fair_cancel.lua.
-- Not a script of its own. Uses limits.lua, idem.lua, idle.lua, mint.lua and wanted.lua; its
-- callers pass it the time (shared.lua's server_ms()).
--
-- A waiter that asks with a hand-off id (1 to 16 lowercase hex digits, the same on every
-- attempt of its wait; it is the hold id of the grant it gets) and is answered held leaves
-- an entry, in the same script as that answer, for the release to act on:
--   fg:{R}:hq   hash: entry per waiter, field <id> (non-fair) or "f:" .. <owner> (fair),
--               value a cjson object {o = owner, h = id, l = lease_ms, k = its idempotency
--               record key, i = that record's retention in ms (0: none), d = the token keys'
--               idle expiry in ms, t = the end of its wait, ms of Redis server time}
--   fg:{R}:wq   list: the non-fair waiters' ids, first come first
--   fg:{R}:wqt  zset: id -> deadline, ms of Redis server time
-- A fair waiter's place is its place in the fair queue (fair_acquire.lua's KEYS[5] and
-- KEYS[6]): the head of that queue comes first, then the non-fair list. All three keys
-- expire just after the last deadline, so they vanish once everybody has left.
--
-- A release that frees the lock takes the first live entry (a deadline not passed) and
-- grants it: mints its token above the release's floor (mint.lua), for the waiter's lease
-- or, when its wait ends sooner, until shortly after that (handoff_grant_lease), records the
-- grant for the waiter's idempotency key, marks the lock "#grant" = the waiter's id, and
-- publishes
-- "g:<token>:<id>" on the release channel instead of the plain release message. One grant
-- per release: the other waiters stay where they are (no herd). The waiter's next attempt
-- with its id claims the grant (handoff_claim below): ACQUIRED with holds 1. A fair queue
-- whose head is a waiter without an entry (a caller that does not ask for hand-offs) is
-- granted nothing: the release publishes as before and that head comes for the lock itself.
--
-- A release may also name a waiter (release.lua ARGV[7], lk_call.handoff_to: a caller that
-- answers that waiter from the release's reply, or sends its claim right behind it): when
-- nobody is queued, it is granted as above without being queued, unless the release says
-- it may only be granted as the first queued (ARGV[12], lk_call.handoff_first: a fair
-- waiter). Queued waiters come first, so a waiter that queued after losing a race is not
-- passed over by another process's batched hand-offs; when the first queued is the named
-- waiter itself, it is granted as named, with the lease its caller gives.
--
-- A waiter that has gone: one past its deadline is skipped (and dropped); one that leaves
-- early removes its entry (fair_cancel.lua), and when its grant was made already is told
-- its token so that its caller gives the hold back (release.lua with that token), which
-- hands the lock on; one whose process died leaves a grant that ends with its lease, as
-- any answer lost to a crash. Such a token is never answered to anybody else: the grant is
-- this owner's hold, and the next grant mints a larger token.

local function handoff_valid_id(id)
    return type(id) == 'string' and #id >= 1 and #id <= 16 and
        string.match(id, '^[0-9a-f]+$') ~= nil
end

-- Makes the hand-off keys outlive the last deadline of zset k_dl by 1 ms.
local function handoff_keep(k_list, k_dl, k_hq, now)
    local last = redis.call('ZRANGE', k_dl, -1, -1, 'WITHSCORES')
    if last[2] then
        local keep_ms = tonumber(last[2]) - now + 1
        if keep_ms < 1 then
            keep_ms = 1
        end
        redis.call('PEXPIRE', k_list, keep_ms)
        redis.call('PEXPIRE', k_dl, keep_ms)
        local left = redis.call('PTTL', k_hq)
        if left == -1 or (left >= 0 and left < keep_ms) then
            redis.call('PEXPIRE', k_hq, keep_ms)
        end
    end
end

-- Queues the waiter of a held answer for a hand-off: field of k_hq (its id, or "f:"..owner
-- for a fair waiter, whose place the fair queue keeps), and for a non-fair one its id at the
-- end of k_wq (unless there already) with its deadline in k_wqt.
local function handoff_enqueue(k_hq, k_wq, k_wqt, fair, owner, id, lease_ms, k_idem, idem_ms,
        idle_ms, now, wait_ms)
    local entry = cjson.encode({o = owner, h = id, l = lease_ms, k = k_idem, i = idem_ms,
        d = idle_ms, t = now + wait_ms})
    if fair then
        redis.call('HSET', k_hq, 'f:' .. owner, entry)
        return
    end
    redis.call('HSET', k_hq, id, entry)
    if not redis.call('LPOS', k_wq, id) then
        redis.call('RPUSH', k_wq, id)
    end
    redis.call('ZADD', k_wqt, now + wait_ms, id)
    handoff_keep(k_wq, k_wqt, k_hq, now)
end

-- Takes the waiter (fair or not) out of the hand-off keys.
local function handoff_leave(k_hq, k_wq, k_wqt, owner, id)
    redis.call('HDEL', k_hq, 'f:' .. owner)
    if id ~= '' then
        redis.call('HDEL', k_hq, id)
        redis.call('LREM', k_wq, 0, id)
        redis.call('ZREM', k_wqt, id)
    end
end

-- How long the grant to queued waiter e holds the lock before its claim: e's lease, but no
-- longer than the rest of e's wait and HANDOFF_CLAIM_GRACE_MS (a waiter's last attempt comes
-- at its deadline), so that the grant to a waiter that vanished without leaving (its gateway
-- killed) ends about when its place in line would have (fair_acquire.lua drops such a head
-- at its deadline), not a whole lease later. Returns the lease to grant, and e's lease when
-- that is shorter (the claim then applies it: handoff_claim), else nil.
local HANDOFF_CLAIM_GRACE_MS = 1000
local function handoff_grant_lease(e, now)
    if e.t == nil then
        return e.l, nil
    end
    local left = e.t - now + HANDOFF_CLAIM_GRACE_MS
    if left < e.l then
        return left, e.l
    end
    return e.l, nil
end

-- The grant made to id, if the lock holds one for owner: returns token, holds, and whether
-- the claim set the waiter's lease (the caller then keeps the token keys as long:
-- keep_token_keys in idle.lua); nil when there is none. A claim writes nothing unless the
-- grant's lease was cut to the waiter's wait (handoff_grant_lease: the claim sets the
-- waiter's own lease then, a write) or its caller WAITs; acquire.lua adds the wanted mark
-- when its caller says others wait and the grant is not marked yet. So under appendfsync
-- always a claim of a waiter that waits longer than its lease, or one sent in the release's
-- own batch, waits for no fsync of its own: the release's is the hand-off's only one.
-- "#grant" stays with the hold, and a second attempt with the id answers the same grant
-- again, as a replay would (an id is one wait's).
-- will_wait (the caller WAITs for replicas after the answer, as acquire_replay in mint.lua)
-- makes it write the field again, unchanged, so that this connection's WAIT covers the
-- grant's writes.
local function handoff_claim(k_lock, owner, id, will_wait)
    if id == '' then
        return nil
    end
    local g = redis.call('HMGET', k_lock, '#grant', owner, '#token', '#glease')
    if g[1] ~= id or not g[2] or not g[3] then
        return nil
    end
    if g[4] then
        redis.call('PEXPIRE', k_lock, tonumber(g[4]))
        redis.call('HDEL', k_lock, '#glease')
        return tonumber(g[3]), tonumber(g[2]), true
    elseif will_wait then
        redis.call('HSET', k_lock, '#grant', id)
    end
    return tonumber(g[3]), tonumber(g[2]), false
end

-- The next live waiter for a hand-off, taken out of the keys: the head of the fair queue
-- (k_q, k_qt) when it has an entry, else (the fair queue empty) the first live id of the
-- non-fair list. nil when there is none, or when the fair queue's live head has no entry.
-- Waiters past their deadline are dropped on the way (at most PRUNE of them).
local function handoff_next(k_q, k_qt, k_hq, k_wq, k_wqt, now)
    local PRUNE = 100
    local n = 0
    local head = redis.call('LINDEX', k_q, 0)
    while head and n < PRUNE do
        local dl = tonumber(redis.call('ZSCORE', k_qt, head))
        if dl ~= nil and dl >= now then
            break
        end
        redis.call('LPOP', k_q)
        redis.call('ZREM', k_qt, head)
        redis.call('HDEL', k_hq, 'f:' .. head)
        n = n + 1
        head = redis.call('LINDEX', k_q, 0)
    end
    if head and n >= PRUNE then
        return nil -- the head may be past its deadline too: nobody is handed the lock
    end
    if head then
        local e = redis.call('HGET', k_hq, 'f:' .. head)
        if not e then
            return nil
        end
        local d = cjson.decode(e)
        if d.t == nil or d.t < now then
            -- An entry of an earlier wait of this owner (left by a call without a hand-off
            -- id, which does not clear it): the head's present wait asked for none.
            redis.call('HDEL', k_hq, 'f:' .. head)
            return nil
        end
        redis.call('LPOP', k_q)
        redis.call('ZREM', k_qt, head)
        redis.call('HDEL', k_hq, 'f:' .. head)
        return d
    end
    while n < PRUNE do
        local id = redis.call('LPOP', k_wq)
        if not id then
            return nil
        end
        local dl = tonumber(redis.call('ZSCORE', k_wqt, id))
        redis.call('ZREM', k_wqt, id)
        local e = redis.call('HGET', k_hq, id)
        redis.call('HDEL', k_hq, id)
        if e and dl ~= nil and dl >= now then
            return cjson.decode(e)
        end
        n = n + 1
    end
    return nil
end

-- Whether anybody is still queued after a grant: the grant is then marked wanted, so that
-- its release hands on in turn (and wakes a waiter that does not ask for hand-offs).
local function handoff_others(k_q, k_wq)
    return redis.call('EXISTS', k_q, k_wq) > 0
end
