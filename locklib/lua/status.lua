-- status.lua: report a lock's state without its owner. Read-only.
--
-- KEYS[1]  lock hash fg:{R}:lock
-- KEYS[2]  fence counter fg:{R}:fence
-- KEYS[3]  fair queue fg:{R}:queue (optional)
--
-- Returns  {locked (0|1), token, holds, pttl_ms, last_token, queued}
--          queued is the length of the fair queue (0 without KEYS[3]).
--          last_token is the last token issued for the resource (0 if none, or once the
--          counter expired idle: prelude/idle.lua).

local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local fields = redis.call('HGETALL', KEYS[1])
local queued = 0
if KEYS[3] then
    queued = redis.call('LLEN', KEYS[3])
end
if #fields == 0 then
    return {0, 0, 0, 0, last, queued}
end
local token = 0
local holds = 0
for i = 1, #fields, 2 do
    if fields[i] == '#token' then
        token = tonumber(fields[i + 1])
    elseif string.sub(fields[i], 1, 1) ~= '#' then -- "#wait", "#hold": never an owner
        holds = tonumber(fields[i + 1])
    end
end
return {1, token, holds, redis.call('PTTL', KEYS[1]), last, queued}
