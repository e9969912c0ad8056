-- token_range.lua: which tokens were issued for a resource in its current run. Read-only.
--
-- KEYS[1]  fence counter fg:{R}:fence  (the last token issued)
-- KEYS[2]  lift point    fg:{R}:base   (written by acquire when it lifts the counter)
--
-- Returns  {base, last}  both 0 when absent. A token t was issued for the resource in its
--          current run iff base < t <= last. The counter is only ever lifted while nobody
--          holds the lock, so a token <= base was never issued for the resource, or was
--          issued to a holder whose lock was gone before the lift: refusing it is safe.

local last = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local base = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
return {base, last}
