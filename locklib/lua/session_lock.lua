-- session_lock.lua: one lock of a session, by the token the session recorded for it. Runs
-- atomically in Redis, on the lock's own hash slot (on a Cluster, the lock's master).
--
-- KEYS[1]  lock hash fg:{R}:lock
-- KEYS[2]  fence counter fg:{R}:fence
-- KEYS[3]  lift point fg:{R}:base
-- KEYS[4]  recent tokens fg:{R}:recent
-- ARGV[1]  "ttl" or "end"
-- ARGV[2]  T, the token the session recorded for the lock (decimal)
-- ARGV[3]  end: the floor (the caller's durable floor), decimal
-- ARGV[4]  end: release channel fg:{R}:released
--
-- ttl  {1, pttl}  the lock is held with token T; {0, 0} when it is not (released, expired,
--      or taken by another holder since)
-- end  the session ended, so its hold of T must end and T must be fenced, as a forced
--      release does (force_release.lua), but only the session's own hold: a lock found with
--      another token belongs to somebody else and is left alone.
--        {1, T, F, published}  the lock was held with T and is gone; F > T was burned
--        {2, T, F, 0}          nothing holds the lock and T is still the last token issued
--                              (the lease ran out first): F > T was burned, so T is
--                              superseded at once
--        {0, T, last, 0}       a later token was issued already: T is superseded, nothing
--                              changed
--
-- Prelude: limits.lua idem.lua mint.lua wanted.lua burn.lua

local token = mint_floor(ARGV[2])
if token == nil or token < 1 then
    return redis.error_reply('fencegate: invalid argument')
end
-- Held by this lock: an exclusive hold with its token. Readers that came after that hold
-- lapsed carry the same token in "#token" (prelude/shared.lua: a shared period answers the
-- last token minted), but their hold is not the session's.
local held = tonumber(redis.call('HGET', KEYS[1], '#token') or '0') == token and
    redis.call('HEXISTS', KEYS[1], '#mode') == 0

if ARGV[1] == 'ttl' then
    if held then
        return {1, redis.call('PTTL', KEYS[1])}
    end
    return {0, 0}
end
if ARGV[1] ~= 'end' then
    return redis.error_reply('fencegate: invalid operation')
end
local floor = mint_floor(ARGV[3])
if floor == nil then
    return redis.error_reply('fencegate: invalid argument')
end
local current = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if not held and current > token then
    return {0, token, current, 0}
end
local burned = burn(KEYS[2], KEYS[3], KEYS[4], floor, token, current)
if burned == nil then
    return redis.error_reply('fencegate: token space used up')
end
local published = 0
local status = 2
if held then
    status = 1
    local ids = redis.call('HMGET', KEYS[1], '#token', '#hold')
    local wanted = is_wanted(KEYS[1])
    redis.call('DEL', KEYS[1])
    if wanted then
        redis.call('PUBLISH', ARGV[4], release_message(ids))
        published = 1
    end
end
return {status, token, burned, published}
