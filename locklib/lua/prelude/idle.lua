-- prelude/idle.lua: the idle expiry of a resource's token keys (fence, base, recent), shared
-- by acquire.lua, fair_acquire.lua and renew.lua. Not a script of its own.
--
-- Every grant and renewal sets the keys' time to live to max(idle_ms, lease_ms), so the keys
-- of a resource used within idle_ms stay, and they never expire while the lease they were
-- last touched for runs. When they do expire, the next acquisition finds no counter and lifts
-- it to the floor it is passed (mint.lua): tokens stay monotonic only for a caller whose floor
-- covers every token handed out (the gateway's ledger), the same argument as for Redis data
-- loss. idle_ms 0 means never: the keys are made persistent again.

-- The idle time as a number, or nil unless it is plain decimal digits.
local function idle_arg(arg)
    if not string.match(arg or '', '^%d+$') then
        return nil
    end
    return tonumber(arg)
end

-- Sets the time to live of the keys k_fence, k_base and k_recent (a missing one is left
-- missing) to max(idle_ms, lease_ms), or removes it when idle_ms is 0.
local function keep_token_keys(k_fence, k_base, k_recent, idle_ms, lease_ms)
    local keys = {k_fence, k_base, k_recent}
    if idle_ms == 0 then
        for _, k in ipairs(keys) do
            redis.call('PERSIST', k)
        end
        return
    end
    local ttl_ms = idle_ms
    if lease_ms > ttl_ms then
        ttl_ms = lease_ms
    end
    for _, k in ipairs(keys) do
        redis.call('PEXPIRE', k, ttl_ms)
    end
end
