-- prelude/idem.lua: idempotency records, one shape for every script that takes an
-- idempotency key (acquire, fair_acquire, release, renew). Not a script of its own: the
-- build prepends it to each script whose header names it (locklib/cmake/embed_lua.cmake).
--
-- A record is a hash at the script's idempotency key: op (which call answered), owner (who
-- asked), then the fields of the answer. A retry with the same key finds the record and
-- answers from it instead of acting twice; the same key used by another owner or another
-- operation is refused. With a retention of 0 (no idempotency key) nothing is read or written.

-- Looks up the first answer. Returns nil when there is none (act), false when the key was
-- used by another owner or operation (refuse), else the list of the values of `...` (the
-- answer's fields, in order, false where absent).
local function idem_replay(key, ttl_ms, op, owner, ...)
    if ttl_ms <= 0 then
        return nil
    end
    local rec = redis.call('HMGET', key, 'op', 'owner', ...)
    if not rec[1] then
        return nil
    end
    if rec[1] ~= op or rec[2] ~= owner then
        return false
    end
    return {unpack(rec, 3)}
end

-- Stores an answer (field, value, ... in `...`) for ttl_ms, for idem_replay() to find.
-- Numbers are stored as integers ('%d'). Nothing is evaluated, let alone written, when
-- ttl_ms is 0: a call without a key never fails here.
local function idem_record(key, ttl_ms, op, owner, ...)
    if ttl_ms <= 0 then
        return
    end
    local fields = {...}
    for i = 2, #fields, 2 do
        if type(fields[i]) == 'number' then
            fields[i] = string.format('%d', fields[i])
        end
    end
    redis.call('HSET', key, 'op', op, 'owner', owner, unpack(fields))
    redis.call('PEXPIRE', key, ttl_ms)
end
