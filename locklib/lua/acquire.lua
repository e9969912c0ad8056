-- acquire.lua: take, or re-enter, a fenced reentrant lock. Runs atomically in Redis.
--
-- KEYS[1]  lock hash    fg:{R}:lock   field <owner> = hold count, field "#token" = token
-- KEYS[2]  fence counter fg:{R}:fence  never expires and is never deleted
-- KEYS[3]  idempotency record fg:{R}:idem:<key> (untouched when ARGV[4] is "0")
-- KEYS[4]  lift point   fg:{R}:base   never expires and is never deleted
-- KEYS[5]  recent tokens fg:{R}:recent the last 16 tokens minted, newest first (a list;
--          never expires): token_range.lua tells a superseded token from a forged one
-- ARGV[1]  owner id, [A-Za-z0-9._:-]{1,128}; "#token" can never be an owner
-- ARGV[2]  lease in ms
-- ARGV[3]  floor: the token handed out is always greater than this (decimal digits
--          only, < 2^53; anything else, "5.5" or "1e3" say, is refused)
-- ARGV[4]  idempotency retention in ms, "0" for no idempotency key
--
-- Returns  {1, token, holds, lease_ms, floor_raised, replayed}  acquired
--          {0, holder_pttl_ms}                                  held by another owner
--          {-1, 0}   the idempotency key was used by another owner or operation
-- Errors   "fencegate: ..." for a bad argument or an exhausted token space; nothing is
--          written before either is found (a script error does not roll back).
--
-- A first acquisition mints token = INCR(fence) after lifting the counter to the floor, so
-- a counter lost with Redis data can never hand out a token at or below the floor again.
-- Each lift also stores the lift point in the base key: the tokens issued for the resource
-- since then are exactly (base, fence], and a token at or below base was never issued in
-- this run (a lift only happens while nobody holds the lock). A counter found below base
-- (lost on its own) is lifted to base as well, so base <= fence always holds.
-- A reentrant acquisition returns the first acquisition's token and resets the lease.
-- A replayed acquisition reports the lease it granted the first time, not this call's.
--
-- The fair queue of fair_acquire.lua is ignored on purpose: a non-fair acquisition may
-- barge ahead of queued fair waiters, like tryLock() on a fair java ReentrantLock.
-- fair_acquire.lua repeats the minting below; keep the two in step.

local owner = ARGV[1]
local lease_ms = tonumber(ARGV[2])
local floor = tonumber(ARGV[3])
local idem_ms = tonumber(ARGV[4])
local TOKEN_MAX = 9007199254740991

if type(owner) ~= 'string' or #owner < 1 or #owner > 128 or
        not string.match(owner, '^[%w%.:_%-]+$') then
    return redis.error_reply('fencegate: invalid owner')
end
-- The floor must be plain decimal digits: a fraction, an exponent or NaN would otherwise
-- reach the counter and the base (the lift) through string.format('%d').
if not string.match(ARGV[3] or '', '^%d+$') then
    floor = nil
end
if lease_ms == nil or lease_ms < 1 or floor == nil or floor < 0 or floor >= TOKEN_MAX or
        idem_ms == nil then
    return redis.error_reply('fencegate: invalid argument')
end

if idem_ms > 0 then
    local rec = redis.call('HMGET', KEYS[3], 'op', 'owner', 'token', 'holds', 'lease')
    if rec[1] then
        if rec[1] ~= 'acquire' or rec[2] ~= owner then
            return {-1, 0}
        end
        -- Records written before the lease was stored fall back to this call's lease.
        return {1, tonumber(rec[3]), tonumber(rec[4]), tonumber(rec[5]) or lease_ms, 0, 1}
    end
end

local token
local holds
local raised = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
    local current = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
    local lift = floor
    local base = tonumber(redis.call('GET', KEYS[4]) or '0') or 0
    if base > lift then
        lift = base
    end
    -- Check before writing anything: INCR past 2^53 - 1 would stay in the counter (a script
    -- error does not roll back), and status would report a token never issued.
    if current >= TOKEN_MAX or lift >= TOKEN_MAX then
        return redis.error_reply('fencegate: token space exhausted')
    end
    if current < lift then
        -- Redis lost the counter (restart without AOF, failover, FLUSHALL) or it lags
        -- behind the durable ledger: lift it before minting, and remember where.
        redis.call('SET', KEYS[2], string.format('%d', lift))
        redis.call('SET', KEYS[4], string.format('%d', lift))
        raised = 1
    end
    token = redis.call('INCR', KEYS[2])
    redis.call('LPUSH', KEYS[5], string.format('%d', token))
    redis.call('LTRIM', KEYS[5], 0, 15)
    holds = 1
    redis.call('HSET', KEYS[1], '#token', string.format('%d', token), owner, 1)
    redis.call('PEXPIRE', KEYS[1], lease_ms)
elseif redis.call('HEXISTS', KEYS[1], owner) == 1 then
    holds = redis.call('HINCRBY', KEYS[1], owner, 1)
    token = tonumber(redis.call('HGET', KEYS[1], '#token'))
    redis.call('PEXPIRE', KEYS[1], lease_ms)
else
    return {0, redis.call('PTTL', KEYS[1])}
end

if idem_ms > 0 then
    redis.call('HSET', KEYS[3], 'op', 'acquire', 'owner', owner,
        'token', string.format('%d', token), 'holds', holds,
        'lease', string.format('%d', lease_ms))
    redis.call('PEXPIRE', KEYS[3], idem_ms)
end
return {1, token, holds, lease_ms, raised, 0}
