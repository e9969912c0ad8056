-- token_range.lua: which tokens were issued for a resource in its current run. Read-only.
--
-- KEYS[1]  fence counter fg:{R}:fence  (the last token issued)
-- KEYS[2]  lift point    fg:{R}:base   (written by acquire when it lifts the counter)
-- KEYS[3]  recent tokens fg:{R}:recent (the last 16 minted, written by acquire)
-- ARGV[1]  a token to look for among the recent ones, decimal; "0" for none
--
-- Returns  {base, last, recent}  base and last 0 when absent (never minted, lost with Redis
--          data, or expired idle: prelude/idle.lua). A token t was issued for the
--          resource in its current run iff base < t <= last. The counter is only ever lifted
--          while nobody holds the lock, so a token <= base was never issued for the resource,
--          or was issued to a holder whose lock was gone before the lift: refusing it is
--          safe. recent is 1 when ARGV[1] is one of the last 16 tokens minted for the
--          resource (so issued for it, and superseded if below last), else 0.

local last = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local base = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local recent = 0
if ARGV[1] ~= '0' then
    for _, t in ipairs(redis.call('LRANGE', KEYS[3], 0, 15)) do
        if t == ARGV[1] then
            recent = 1
            break
        end
    end
end
return {base, last, recent}
