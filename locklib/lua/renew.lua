-- renew.lua: reset the lease of a lock the owner holds. Runs atomically in Redis.
--
-- KEYS[1]  lock hash fg:{R}:lock
-- KEYS[2]  idempotency record fg:{R}:idem:<key> (untouched when ARGV[3] is "0")
-- ARGV[1]  owner id
-- ARGV[2]  lease in ms
-- ARGV[3]  idempotency retention in ms, "0" for no idempotency key
--
-- Returns  {1, token, replayed, lease_ms}  renewed; a replay reports the lease granted by
--                                         the first answer, not this call's
--          {0, 0, 0, 0, held}             not the owner: nothing changes; held is 1 when
--                                         another owner holds the lock, 0 when nobody does
--          {-1, 0, 0, 0}                  the idempotency key was used by another owner or
--                                         operation

local owner = ARGV[1]
local lease_ms = tonumber(ARGV[2])
local idem_ms = tonumber(ARGV[3])

if type(owner) ~= 'string' or #owner < 1 or #owner > 128 or
        not string.match(owner, '^[%w%.:_%-]+$') then
    return redis.error_reply('fencegate: invalid owner')
end
if lease_ms == nil or lease_ms < 1 or idem_ms == nil then
    return redis.error_reply('fencegate: invalid argument')
end

if idem_ms > 0 then
    local rec = redis.call('HMGET', KEYS[2], 'op', 'owner', 'token', 'lease')
    if rec[1] then
        if rec[1] ~= 'renew' or rec[2] ~= owner then
            return {-1, 0, 0, 0}
        end
        -- Records written before the lease was stored fall back to this call's lease.
        return {1, tonumber(rec[3]), 1, tonumber(rec[4]) or lease_ms}
    end
end

if redis.call('HEXISTS', KEYS[1], owner) == 0 then
    return {0, 0, 0, 0, redis.call('EXISTS', KEYS[1])}
end
redis.call('PEXPIRE', KEYS[1], lease_ms)
local token = tonumber(redis.call('HGET', KEYS[1], '#token'))

if idem_ms > 0 then
    redis.call('HSET', KEYS[2], 'op', 'renew', 'owner', owner,
        'token', string.format('%d', token), 'lease', string.format('%d', lease_ms))
    redis.call('PEXPIRE', KEYS[2], idem_ms)
end
return {1, token, 0, lease_ms}
