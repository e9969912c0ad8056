-- fair_cancel.lua: take an owner out of the fair queue, and a waiter out of the hand-off
-- keys (prelude/handoff.lua). Runs atomically in Redis.
--
-- KEYS[1]  lock hash      fg:{R}:lock
-- KEYS[2]  queue list     fg:{R}:queue
-- KEYS[3]  deadlines zset fg:{R}:qtimeout
-- ARGV[1]  owner id, [A-Za-z0-9._:-]{1,128}
-- ARGV[2]  release channel fg:{R}:released
-- KEYS[4]  optional: waiting requests fg:{R}:rwait (prelude/shared.lua): an exclusive
--          waiter that leaves the queue leaves the writers' preference too, so that new
--          readers are not held back for it until its wait would have ended
-- ARGV[3]  optional: the waiter's hand-off id, "" (or absent) for none. With it KEYS[5]
--          fg:{R}:hq, KEYS[6] fg:{R}:wq and KEYS[7] fg:{R}:wqt are the hand-off keys: the
--          waiter leaves them, and a grant a release made to it is reported.
--
-- The owner leaves whichever way it was queued: as itself (exclusive) or as '#' .. owner
-- (shared, fair_acquire.lua; '#' is never in an owner id).
--
-- Returns  {1}  the owner was queued and is not any more
--          {0}  it was not queued: nothing changes
--          {2, token}  a release handed the lock to this waiter (its id is the lock's
--                      "#grant") and the owner still holds it: a waiter that leaves answered
--                      nobody with it, so the caller gives the hold of that token back
--                      (release.lua), which hands the lock on
-- When the owner was first in line and the lock is free, "released" is published on the
-- channel: the next waiter may now take the lock and would otherwise sleep until its retry
-- hint.
--
-- Prelude: limits.lua handoff.lua
-- The build prepends it (from lua/prelude/) to this file, so this file alone is not the
-- whole script: `redis-cli --eval` of it fails; run the generated
-- build/locklib/generated/lua/fair_cancel.lua instead.

local owner = ARGV[1]
local id = ARGV[3] or ''

if not valid_owner(owner) then
    return redis.error_reply('fencegate: invalid owner')
end
if id ~= '' and not handoff_valid_id(id) then
    return redis.error_reply('fencegate: invalid argument')
end
if id ~= '' then
    handoff_leave(KEYS[5], KEYS[6], KEYS[7], owner, id)
    local g = redis.call('HMGET', KEYS[1], '#grant', owner, '#token')
    if g[1] == id and g[2] then
        redis.call('LREM', KEYS[2], 0, owner)
        redis.call('ZREM', KEYS[3], owner)
        return {2, tonumber(g[3]) or 0}
    end
end

local as_shared = '#' .. owner
local head = redis.call('LINDEX', KEYS[2], 0)
local as_writer = redis.call('LREM', KEYS[2], 0, owner)
local removed = as_writer + redis.call('LREM', KEYS[2], 0, as_shared)
redis.call('ZREM', KEYS[3], owner, as_shared)
if as_writer > 0 and KEYS[4] then
    redis.call('ZREM', KEYS[4], owner)
end
if removed == 0 then
    return {0}
end
if (head == owner or head == as_shared) and redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('PUBLISH', ARGV[2], 'released')
end
return {1}
