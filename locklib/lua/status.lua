-- status.lua: report a lock's state without its owner. Read-only.
--
-- KEYS[1]  lock hash fg:{R}:lock
-- KEYS[2]  fence counter fg:{R}:fence
-- KEYS[3]  fair queue fg:{R}:queue (optional)
-- KEYS[4]  shared holders' leases fg:{R}:readers (optional; prelude/shared.lua)
--
-- Returns  {locked (0|1), token, holds, pttl_ms, last_token, queued, shared (0|1), holders}
--          queued is the length of the fair queue (0 without KEYS[3]).
--          last_token is the last token issued for the resource (0 if none, or once the
--          counter expired idle: prelude/idle.lua).
--          shared is 1 when the lock is held in shared mode; holders is then the number of
--          shared holders whose lease runs (with KEYS[4]; else those in the hash), and holds
--          the same; an exclusive lock has holders 1. A shared holder whose lease ended but
--          that no script has dropped yet is not counted; when none is left the lock reads
--          as free.

local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local fields = redis.call('HGETALL', KEYS[1])
local queued = 0
if KEYS[3] then
    queued = redis.call('LLEN', KEYS[3])
end
if #fields == 0 then
    return {0, 0, 0, 0, last, queued, 0, 0}
end
local token = 0
local holds = 0
local shared = 0
local holders = 0
for i = 1, #fields, 2 do
    if fields[i] == '#token' then
        token = tonumber(fields[i + 1])
    elseif fields[i] == '#mode' then
        shared = 1
    elseif string.sub(fields[i], 1, 1) ~= '#' then -- "#wait", "#hold": never an owner
        holds = tonumber(fields[i + 1])
        holders = holders + 1
    end
end
local pttl = redis.call('PTTL', KEYS[1])
if shared == 1 then
    if KEYS[4] then
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        holders = redis.call('ZCOUNT', KEYS[4], string.format('%d', now), '+inf')
        if holders == 0 then
            return {0, 0, 0, 0, last, queued, 0, 0}
        end
    end
    holds = holders
end
return {1, token, holds, pttl, last, queued, shared, holders}
