-- prelude/wanted.lua: whether a release has anyone to wake. Shared by acquire.lua,
-- fair_acquire.lua and release.lua. Not a script of its own.
--
-- A release does not PUBLISH on every unlock: nobody listens to most of them (an uncontended
-- lock), yet each one would cost: Redis replicates a script's PUBLISH to every replica, and
-- a Redis Cluster forwards a classic PUBLISH over its bus to every node. So a release
-- publishes only when the lock hash carries the field "#wait" ('#' is never in an owner id,
-- limits.lua), which is set:
--   - by every attempt that finds the lock held by another owner (acquire.lua's held
--     answer, fair_acquire.lua's wait in line), in the same script as that answer;
--   - by a grant while others are known to wait: fair_acquire.lua when the queue is not
--     empty after the grant, acquire.lua when its caller says so (a gateway passes 1 while
--     other waiters of the resource are parked in it).
-- The field goes with the lock hash, so each grant starts unmarked.
--
-- Why no waiter misses a release: a waiter waits only after an attempt answered held. That
-- attempt marked the lock it found, atomically with the answer, so that lock's release
-- publishes. A waiter that was already waiting when a later grant was made either attempts
-- again and is answered held by the new holder (marking it), or is counted by the granting
-- caller (the gateway wakes one parked waiter per release; the one it wakes passes 1 while
-- others stay parked). A lease that runs out publishes nothing (Redis runs no script on
-- expiry): waiters retry when the holder's lease ends (the held answer carries it).
--
-- HSETNX writes (and so replicates and appends to the AOF) only the first time per grant.

local function mark_wanted(k_lock)
    redis.call('HSETNX', k_lock, '#wait', '1')
end

local function is_wanted(k_lock)
    return redis.call('HEXISTS', k_lock, '#wait') == 1
end

-- The message a release publishes, from HMGET lock '#token' '#hold' taken before the DEL.
-- The token tells a listener which hold ended: one that saw a later holder since knows this
-- release changed nothing for it (gateway/src/rt/waiters.c). The hold id, when the
-- acquisition gave one, tells one release published by several Redlock masters from two
-- releases with the same token (locklib/src/sub.c).
local function release_message(ids)
    local msg = ids[1] or '0'
    if ids[2] then
        msg = msg .. ':' .. ids[2]
    end
    return msg
end
