-- renew.lua: reset the lease of a lock the owner holds. Runs atomically in Redis.
--
-- KEYS[1]  lock hash fg:{R}:lock
-- KEYS[2]  idempotency record fg:{R}:idem:<key> (untouched when ARGV[3] is "0")
-- KEYS[3]  fence counter fg:{R}:fence  \
-- KEYS[4]  lift point    fg:{R}:base    } their time to live becomes at least max(ARGV[4],
-- KEYS[5]  recent tokens fg:{R}:recent  /  lease, ARGV[3]) on a renewal (prelude/idle.lua)
-- KEYS[6]  optional: shared holders' leases fg:{R}:readers (prelude/shared.lua): a shared
--          holder's renewal sets its own lease, and the lock lives until the latest one ends
-- ARGV[1]  owner id
-- ARGV[2]  lease in ms
-- ARGV[3]  idempotency retention in ms, "0" for no idempotency key
-- ARGV[4]  idle expiry of the token keys in ms, "0" for never
--
-- Returns  {1, token, replayed, lease_ms, shared}  renewed; a replay reports the lease
--                                         granted by the first answer, not this call's;
--                                         shared is 1 for a shared hold, whose token may be 0
--          {0, 0, 0, 0, held}             not the owner: nothing changes; held is 1 when
--                                         another owner holds the lock, 0 when nobody does
--          {-1, 0, 0, 0}                  the idempotency key was used by another owner or
--                                         operation
--
-- Prelude: limits.lua idem.lua idle.lua wanted.lua shared.lua
-- The build prepends them (from lua/prelude/) to this file, so this file alone is not
-- the whole script: `redis-cli --eval` of it fails; run the generated
-- build/locklib/generated/lua/renew.lua instead.

local owner = ARGV[1]
local lease_ms = tonumber(ARGV[2])
local idem_ms = tonumber(ARGV[3])
local idle_ms = idle_arg(ARGV[4])

if not valid_owner(owner) then
    return redis.error_reply('fencegate: invalid owner')
end
if lease_ms == nil or lease_ms < 1 or idem_ms == nil or idle_ms == nil then
    return redis.error_reply('fencegate: invalid argument')
end

local rec = idem_replay(KEYS[2], idem_ms, 'renew', owner, 'token', 'lease')
if rec == false then
    return {-1, 0, 0, 0}
elseif rec then
    -- Records written before the lease was stored fall back to this call's lease.
    -- Token 0 is only ever a shared hold's (exclusive tokens start at 1).
    local token = tonumber(rec[1])
    return {1, token, 1, tonumber(rec[2]) or lease_ms, token == 0 and 1 or 0}
end

local shared = KEYS[6] ~= nil and lock_mode(KEYS[1]) == 's'
local now = 0
if shared then
    now = server_ms()
    prune_readers(KEYS[1], KEYS[6], now)
end
if redis.call('HEXISTS', KEYS[1], owner) == 0 then
    return {0, 0, 0, 0, redis.call('EXISTS', KEYS[1])}
end
if shared then
    redis.call('ZADD', KEYS[6], now + lease_ms, owner)
    readers_lease(KEYS[1], KEYS[6], now)
else
    redis.call('PEXPIRE', KEYS[1], lease_ms)
end
local token = tonumber(redis.call('HGET', KEYS[1], '#token'))
-- The record first: keep_token_keys() counts the keys' expiry from the record's.
idem_record(KEYS[2], idem_ms, 'renew', owner, 'token', token, 'lease', lease_ms)
keep_token_keys(KEYS[3], KEYS[4], KEYS[5], idle_ms, lease_ms, KEYS[2], idem_ms)
return {1, token, 0, lease_ms, shared and 1 or 0}
