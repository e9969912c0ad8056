-- force_release.lua: an operator frees a lock whoever holds it, and fences its holder.
-- Runs atomically in Redis.
--
-- KEYS[1]  lock hash fg:{R}:lock
-- KEYS[2]  fence counter fg:{R}:fence
-- KEYS[3]  lift point fg:{R}:base
-- KEYS[4]  recent tokens fg:{R}:recent
-- ARGV[1]  floor: the burned token is above it (the caller's durable floor), decimal
-- ARGV[2]  release channel fg:{R}:released
--
-- Deleting the hash alone would let the holder write on with its token T until somebody
-- locks again. So the script also burns a token: it lifts the counter to at least T and the
-- floor (and the base with it, as a mint's lift does), then INCRs it to F > T, which nobody
-- is handed. Every later write with T is then superseded (T < the last issued), and every
-- later mint is above F. The release is published exactly as release.lua publishes one
-- (token, and hold id when the grant had one), when the lock was wanted, so a parked or
-- queued waiter is woken in its usual order. Fair queues are left as they are.
--
-- Returns  {1, T, F, published}  the lock was held with token T and is gone; F is burned
--          {0, 0, last, 0}        nothing was held (last: the counter, 0 if none)
--
-- Prelude: limits.lua idem.lua mint.lua wanted.lua burn.lua

local floor = mint_floor(ARGV[1])
if floor == nil then
    return redis.error_reply('fencegate: invalid argument')
end

if redis.call('EXISTS', KEYS[1]) == 0 then
    return {0, 0, tonumber(redis.call('GET', KEYS[2]) or '0') or 0, 0}
end
local ids = redis.call('HMGET', KEYS[1], '#token', '#hold')
local token = tonumber(ids[1] or '0') or 0
local current = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local burned = burn(KEYS[2], KEYS[3], KEYS[4], floor, token, current)
if burned == nil then
    return redis.error_reply('fencegate: token space used up')
end
local wanted = is_wanted(KEYS[1])
redis.call('DEL', KEYS[1])
local published = 0
if wanted then
    redis.call('PUBLISH', ARGV[2], release_message(ids))
    published = 1
end
return {1, token, burned, published}
