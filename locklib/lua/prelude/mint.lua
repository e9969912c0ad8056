-- prelude/mint.lua: taking a lock and minting its fencing token, shared by acquire.lua and
-- fair_acquire.lua so the two can never drift. Not a script of its own: the build prepends
-- it to each script whose header names it (locklib/cmake/embed_lua.cmake). Uses idem.lua and
-- limits.lua.
--
-- The token rule: a first acquisition mints token = INCR(fence) after lifting the counter to
-- the floor, so a counter lost with Redis data can never hand out a token at or below the
-- floor again. Each lift also stores the lift point in the base key: the tokens issued for
-- the resource since then are exactly (base, fence], and a token at or below base was never
-- issued in this run (a lift only happens while nobody holds the lock). A counter found
-- below base (lost on its own) is lifted to base as well, so base <= fence always holds.
-- Every token is below TOKEN_MAX (limits.lua, which comes first).

-- The floor as a number, or nil unless it is plain decimal digits: a fraction, an exponent
-- or NaN would otherwise reach the counter and the base (the lift) through
-- string.format('%d').
local function mint_floor(arg)
    if not string.match(arg or '', '^%d+$') then
        return nil
    end
    return tonumber(arg)
end

-- A first acquisition of the free lock k_lock by owner: lifts the counter k_fence (and the
-- lift point k_base) to the floor when it is below, mints the next token, remembers it in
-- the list k_recent (the last 16, newest first) and takes the lock for lease_ms, with the
-- hold id hold_id when it is not '' (acquire.lua ARGV[8]). extra, optional, is a list of
-- more field-value pairs written to the lock in the same HSET (a hand-off's grant fields).
-- Returns token, raised (1 when the counter was lifted); or nil when the token space is
-- exhausted, and then nothing has been written.
local function mint(k_lock, k_fence, k_base, k_recent, owner, floor, lease_ms, hold_id, extra)
    local got = redis.call('MGET', k_fence, k_base)
    local current = tonumber(got[1] or '0') or 0
    local lift = floor
    local base = tonumber(got[2] or '0') or 0
    if base > lift then
        lift = base
    end
    -- Check before writing anything: INCR past 2^53 - 1 would stay in the counter (a script
    -- error does not roll back), and status would report a token never issued.
    if current >= TOKEN_MAX or lift >= TOKEN_MAX then
        return nil
    end
    local raised = 0
    if current < lift then
        -- Redis lost the counter (restart without AOF, failover, FLUSHALL) or it lags
        -- behind the durable ledger: lift it before minting, and remember where.
        redis.call('SET', k_fence, string.format('%d', lift))
        redis.call('SET', k_base, string.format('%d', lift))
        raised = 1
    end
    local token = redis.call('INCR', k_fence)
    redis.call('LPUSH', k_recent, string.format('%d', token))
    redis.call('LTRIM', k_recent, 0, 15)
    local fields = {'#token', string.format('%d', token), owner, 1}
    if hold_id ~= '' then
        fields[5] = '#hold'
        fields[6] = hold_id
    end
    if extra then
        for _, v in ipairs(extra) do
            fields[#fields + 1] = v
        end
    end
    redis.call('HSET', k_lock, unpack(fields))
    redis.call('PEXPIRE', k_lock, lease_ms)
    return token, raised
end

-- The holder acquires again: one more hold, the first acquisition's token, a fresh lease.
-- Returns holds, token.
local function reenter(k_lock, owner, lease_ms)
    local holds = redis.call('HINCRBY', k_lock, owner, 1)
    local token = tonumber(redis.call('HGET', k_lock, '#token'))
    redis.call('PEXPIRE', k_lock, lease_ms)
    return holds, token
end

-- The first answer to an idempotent acquisition (idem.lua's idem_replay): nil, false, or
-- {token, holds, lease_ms}. Records written before the lease was stored fall back to this
-- call's lease.
--
-- supersede (0 for none) is a token the caller must not hand out (a shared token ledger
-- refused it, and the hold it came with was given back): a record of this owner that
-- answers exactly that token is deleted and nil returned, so this call acts afresh and, if
-- it acquires, records its own answer in its place; if it does not, the key is free, as
-- after any answer that was not ACQUIRED. A record with another token is replayed as usual:
-- a concurrent call of the same key already superseded it.
--
-- will_wait is true when the caller WAITs for replicas after the answer (locklib's
-- min_replicas), a replay too (locklib/src/locks.c: the first call's client may have died
-- between its script and its WAIT). A replay then writes the record's 'op' field again,
-- with the value it has: nothing changes, but the write is replicated. WAIT is documented
-- to wait for the connection's own earlier writes, and later Redis versions record a
-- connection's offset only after a command that propagated: a connection that wrote
-- nothing is answered at once, counting replicas that never saw the grant. With this
-- write the connection's offset is past the first answer's writes. (Redis 7.0, Debian
-- 12's, records the offset after any command, reads too.) Without will_wait a replay
-- writes nothing.
local function acquire_replay(k_idem, idem_ms, owner, lease_ms, supersede, will_wait)
    local rec = idem_replay(k_idem, idem_ms, 'acquire', owner, 'token', 'holds', 'lease')
    if rec then
        local token = tonumber(rec[1])
        if supersede > 0 and token == supersede then
            redis.call('DEL', k_idem)
            return nil
        end
        if will_wait then
            redis.call('HSET', k_idem, 'op', 'acquire')
        end
        return {token, tonumber(rec[2]), tonumber(rec[3]) or lease_ms}
    end
    return rec
end

-- Remembers an acquisition's answer for acquire_replay().
local function acquire_record(k_idem, idem_ms, owner, token, holds, lease_ms)
    idem_record(k_idem, idem_ms, 'acquire', owner, 'token', token, 'holds', holds, 'lease',
        lease_ms)
end
