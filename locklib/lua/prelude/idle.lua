-- prelude/idle.lua: the idle expiry of a resource's token keys (fence, base, recent), shared
-- by acquire.lua, fair_acquire.lua and renew.lua. Not a script of its own.
--
-- Every grant and renewal makes the keys' time to live at least max(idle_ms, lease_ms), so the
-- keys of a resource used within idle_ms stay, and they never expire while the lease they were
-- last touched for runs. A grant recorded for an idempotency key keeps them at least as long
-- as that record (record_ms): a retry may replay the record's token as long as it lives, so
-- the counter must outlive it, or an acquisition after the keys expired could mint the same
-- token again for another owner (the counter gone, and the replayed token never counted by
-- the caller's floor when the first answer was lost). A time to live is never shortened.
-- When the keys do expire, the next acquisition finds no counter and lifts it to the floor it
-- is passed (mint.lua): tokens stay monotonic only for a caller whose floor covers every
-- token handed out (the gateway's ledger), the same argument as for Redis data loss. idle_ms
-- 0 means never: the keys are made persistent again.

-- The idle time as a number, or nil unless it is plain decimal digits.
local function idle_arg(arg)
    if not string.match(arg or '', '^%d+$') then
        return nil
    end
    return tonumber(arg)
end

-- Makes the time to live of the keys k_fence, k_base and k_recent (a missing one is left
-- missing) at least max(idle_ms, lease_ms, record_ms), or removes it when idle_ms is 0.
-- A relative time to live that falls short is set IDLE_SLACK_DIV-th longer than needed
-- (7 h more on the 7 days the gateway uses by default), so the grants and renewals that
-- follow within that slack find it long enough and write nothing: on a hot lock, three
-- PEXPIREs per hand-off otherwise, each a write Redis logs and replicates.
-- record_ms: the retention of the idempotency record k_record written with this grant, 0 for
-- none. The caller writes that record first: with one, every expiry is counted from the
-- instant the record's own was set (its PEXPIRETIME less record_ms) and set as an absolute
-- time (PEXPIREAT), so no key expires even a millisecond before the record. Relative
-- PEXPIREs would not do: Redis before 7.2 reads the clock afresh for each command of a
-- script, so two PEXPIREs of the same length one after the other can end on different
-- milliseconds.
local IDLE_SLACK_DIV = 24
local function keep_token_keys(k_fence, k_base, k_recent, idle_ms, lease_ms, k_record,
        record_ms)
    local keys = {k_fence, k_base, k_recent}
    if idle_ms == 0 then
        for _, k in ipairs(keys) do
            redis.call('PERSIST', k)
        end
        return
    end
    local ttl_ms = math.max(idle_ms, lease_ms)
    local record_at = -1
    if record_ms > 0 then
        record_at = redis.call('PEXPIRETIME', k_record)
    end
    if record_at > 0 then
        local at = record_at - record_ms + math.max(ttl_ms, record_ms)
        for _, k in ipairs(keys) do
            local cur = redis.call('PEXPIRETIME', k)
            if cur == -1 or (cur >= 0 and cur < at) then
                redis.call('PEXPIREAT', k, at)
            end
        end
        return
    end
    local set_ms = ttl_ms + math.floor(ttl_ms / IDLE_SLACK_DIV)
    for _, k in ipairs(keys) do
        local left = redis.call('PTTL', k)
        if left == -1 or (left >= 0 and left < ttl_ms) then
            redis.call('PEXPIRE', k, set_ms)
        end
    end
end
