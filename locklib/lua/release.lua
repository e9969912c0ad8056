-- release.lua: drop one hold of a reentrant lock. Runs atomically in Redis.
--
-- KEYS[1]  lock hash fg:{R}:lock
-- KEYS[2]  idempotency record fg:{R}:idem:<key> (untouched when ARGV[2] is "0")
-- ARGV[1]  owner id
-- ARGV[2]  idempotency retention in ms, "0" for no idempotency key
-- ARGV[3]  release channel fg:{R}:released
-- KEYS[3]  optional: shared holders' leases fg:{R}:readers (prelude/shared.lua); needed to
--          release a shared hold
-- ARGV[5]  optional: "1" to hand a freed lock to the next exclusive waiter queued for a
--          hand-off (prelude/handoff.lua), "0" (or absent) not to. With "1": ARGV[6] is the
--          floor of the grant's token (decimal digits, as acquire.lua's ARGV[3]), and KEYS[3]
--          (required then), KEYS[4] fg:{R}:fence, KEYS[5] fg:{R}:base, KEYS[6]
--          fg:{R}:recent, KEYS[7] fg:{R}:queue, KEYS[8] fg:{R}:qtimeout, KEYS[9] fg:{R}:hq,
--          KEYS[10] fg:{R}:wq, KEYS[11] fg:{R}:wqt and KEYS[12] fg:{R}:rwait are the keys the
--          grant needs.
-- ARGV[7]  optional, with ARGV[5] "1": the owner of a waiter the caller knows of (an
--          exclusive one, with no idempotency key), "" (or absent) for none, with hold id
--          ARGV[8] (its hand-off id), lease ARGV[9] ms and the token keys' idle expiry
--          ARGV[10] ms. When it is itself the first queued waiter with id ARGV[8] (a fair
--          waiter at the head of the fair queue, or a non-fair one that queued after losing a
--          race), it is granted with that lease, not one cut to its wait: its caller answers
--          it now. When no waiter is queued for a hand-off and ARGV[12] is not "1", the freed
--          lock is granted to it too (past a fair queue whose head asked for none, as a
--          non-fair attempt would). A queued waiter of the releasing owner itself is granted
--          as any queued waiter, and ARGV[7] equal to ARGV[1] is granted nothing. The caller
--          answers that waiter from this reply (direct, below), or sends its attempt right
--          behind, which claims the grant. "g:<token>:<id>" is published only when the lock
--          was marked wanted. ARGV[9] is decimal digits, 1..3600000 (LK_LEASE_MAX_MS).
-- ARGV[11] optional, with ARGV[7]: "1" when the caller knows of other waiters besides that
--          one: a grant to it marks the lock wanted, as its claim with others waiting would
--          (acquire.lua ARGV[6]), so that a caller may answer the waiter from this reply and
--          send no claim; "0" (or absent) when not. A grant to it that was not queued also
--          stays marked when the lock was; one queued is marked as any queued grant, while
--          others are queued.
-- ARGV[12] optional, with ARGV[7]: "1" to grant that waiter only when it is the first
--          queued (a fair waiter, which may not pass the queue; a caller whose waiters share
--          the lock with other processes'), "0" (or absent) to grant it also when nobody is
--          queued.
-- ARGV[4]  optional: "0" (or absent) for a plain release; else this release undoes an
--          acquisition whose ACQUIRED answer never stood (given back unseen, rolled back for
--          want of replicas, short of a Redlock majority), KEYS[2] is that acquisition's
--          idempotency record (ARGV[2] must then be "0": the release keeps no record of its
--          own), and the record is deleted when it is this owner's acquisition answering
--          token ARGV[4] or a smaller one ("-1": any token), whatever the release finds. A
--          retry of the acquisition with its key then acts afresh instead of replaying a
--          grant whose hold is gone. "Or smaller": on Redlock each master records the token
--          it minted, and the grant answered the largest; a record with a larger token is a
--          later call of the key that superseded this one, and stays.
--          The hold is released only if it may be the undone acquisition's: a lock whose
--          token is larger than ARGV[4] is a later hold (the owner took the lock afresh
--          after that hold ended, and a stale record was replayed): it is left alone, and
--          the answer is {2, holds, 0}, still held, so that a watchdog keeps renewing it.
--          "Or smaller" as above, for Redlock's masters; with "-1" (Redlock's own undo of a
--          minority grant, whose masters minted different tokens) any hold is released.
--          A stale record of a re-entry has the token of the hold it entered: the token
--          cannot tell it from that hold, and one hold is released.
--
-- Returns  {1, 0, replayed, published, granted, grant_id, direct}
--                                released: the lock is deleted, and the token of the hold
--                                released (decimal; then ':' and its hold id when it has
--                                one, acquire.lua ARGV[8]) is published on ARGV[3] when the
--                                lock was marked wanted (prelude/wanted.lua); published is 1
--                                when it was, else 0 (a replay: 0); granted is the token
--                                minted for the waiter the lock was handed to (its id in
--                                grant_id), 0 (and "") when none: then "g:<granted>:<id>"
--                                is published instead of the release message, when the
--                                lock was marked wanted (always for a queued waiter);
--                                direct is 1 when the grant went to ARGV[7]'s waiter
--                                (named, or found first in line with hand-off id
--                                ARGV[8]), whose hold then has lease ARGV[9]: what its
--                                claim would answer is all in this reply, else 0
--          {2, holds, replayed}  still held with this many holds; the lease is NOT extended
--          {0, held, 0}          not the owner: nothing changes; held is 1 when another owner
--                                holds the lock, 0 when nobody does (released, or expired)
--          {-1, 0, 0}            the idempotency key was used by another owner or operation
-- Only state-changing answers are recorded for replay: a NOT_OWNER changed nothing.
--
-- A shared holder's last hold (prelude/shared.lua) leaves the other shared holders holding:
-- it answers released, but the lock stays, with the latest of their leases, and nothing is
-- published. Only the release of the last shared holder deletes the lock and publishes (when
-- wanted), which wakes the exclusive request waiting for it.
--
-- Prelude: limits.lua idem.lua idle.lua mint.lua wanted.lua shared.lua handoff.lua
-- The build prepends them (from lua/prelude/) to this file, so this file alone is not
-- the whole script: `redis-cli --eval` of it fails; run the generated
-- build/locklib/generated/lua/release.lua instead.

local owner = ARGV[1]
local idem_ms = tonumber(ARGV[2])
local undo = ARGV[4] or '0'
local hand = ARGV[5] or '0'
local hand_floor = mint_floor(ARGV[6] or '0')
local to = ARGV[7] or ''
local to_id = ARGV[8] or ''
local to_lease = string.match(ARGV[9] or '', '^%d+$') and tonumber(ARGV[9]) or nil
local to_idle = idle_arg(ARGV[10] or '0')
local to_others = ARGV[11] or '0'
local to_first = ARGV[12] or '0'

if not valid_owner(owner) then
    return redis.error_reply('fencegate: invalid owner')
end
if idem_ms == nil or not (undo == '-1' or string.match(undo, '^%d+$')) or
        (undo ~= '0' and idem_ms ~= 0) or (hand ~= '0' and hand ~= '1') or
        hand_floor == nil or hand_floor >= TOKEN_MAX or (hand == '1' and KEYS[12] == nil) or
        (to ~= '' and (hand ~= '1' or not valid_owner(to) or
            not handoff_valid_id(to_id) or to_lease == nil or to_lease < 1 or
            to_lease > 3600000 or to_idle == nil)) or
        (to_others ~= '0' and to_others ~= '1') or (to_first ~= '0' and to_first ~= '1') then
    return redis.error_reply('fencegate: invalid argument')
end

if undo ~= '0' then
    local rec = redis.call('HMGET', KEYS[2], 'op', 'owner', 'token')
    if rec[1] == 'acquire' and rec[2] == owner and
            (undo == '-1' or (tonumber(rec[3]) or 0) <= tonumber(undo)) then
        redis.call('DEL', KEYS[2])
    end
end

local rec = idem_replay(KEYS[2], idem_ms, 'release', owner, 'status', 'holds')
if rec == false then
    return {-1, 0, 0}
elseif rec then
    return {tonumber(rec[1]), tonumber(rec[2]), 1}
end

-- All the release reads of the lock, in one call (a hot lock's hand-off is this script, and
-- each call costs Redis about half a microsecond besides its own work): its mode (set for a
-- shared lock), the owner's holds, the wanted mark, the token and the hold id; a field that
-- is not there (or a lock that is not) reads as false.
local k_readers = KEYS[3]
local function lock_fields()
    return redis.call('HMGET', KEYS[1], '#mode', owner, '#wait', '#token', '#hold')
end
local f = lock_fields()
local shared = k_readers ~= nil and f[1] ~= false
local now = 0
if shared then
    now = server_ms()
    prune_readers(KEYS[1], k_readers, now)
    f = lock_fields()
end
if not f[2] then
    return {0, redis.call('EXISTS', KEYS[1]), 0}
end
if undo ~= '0' and undo ~= '-1' and (tonumber(f[4]) or 0) > tonumber(undo) then
    return {2, tonumber(f[2]), 0}
end
-- The first write, also on the last hold, whose field then goes: HINCRBY may grow memory,
-- so Redis refuses it with -OOM when full under noeviction, and the release then changed
-- nothing (a script's later writes are let through once it has written, and a DEL first
-- would let this release hand the lock on while Redis refuses every grant).
local holds = redis.call('HINCRBY', KEYS[1], owner, -1)
local status = 2
local published = 0
local granted = 0
local grant_id = ''
local direct = false
if holds <= 0 then
    holds = 0
    status = 1
end
if status == 1 and shared then
    redis.call('HDEL', KEYS[1], owner)
    redis.call('ZREM', k_readers, owner)
    if redis.call('ZCARD', k_readers) > 0 then
        readers_lease(KEYS[1], k_readers, now)
        idem_record(KEYS[2], idem_ms, 'release', owner, 'status', status, 'holds', holds)
        return {status, holds, 0, 0, 0, ''}
    end
    redis.call('DEL', k_readers)
end
if status == 1 then
    local wanted = f[3] ~= false
    local ids = {f[4], f[5]}
    redis.call('DEL', KEYS[1])
    local e = nil
    local queued = false
    -- Whether anything is queued for a hand-off: when none of the queues' keys exists,
    -- taking the next waiter, leaving the queue and looking for others are all no-ops, and
    -- one call stands for their five to seven.
    local any_queued = false
    if hand == '1' and (wanted or to ~= '') then
        any_queued = redis.call('EXISTS', KEYS[7], KEYS[9], KEYS[10], KEYS[11]) > 0
        if any_queued then
            -- The queue's deadlines and a queued waiter's grant need the time; a grant to
            -- the caller's waiter with nobody queued does not.
            now = server_ms()
        end
        if wanted and any_queued then
            e = handoff_next(KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], now)
            queued = e ~= nil
        end
        if e and to ~= '' and to ~= owner and e.o == to and e.h == to_id then
            -- The caller's waiter, first in the queue (the fair queue's head, or a non-fair
            -- waiter that queued after losing a race): its caller answers it now, so it is
            -- granted with the lease and idle expiry the caller gives (its record and token
            -- keys too), not a grant cut to its wait.
            e.l = to_lease
            e.d = to_idle
            direct = true
        elseif not e and to ~= '' and to ~= owner and to_first == '0' then
            -- Nobody queued: the caller's waiter, which takes the lock past a fair queue
            -- whose head asked for no hand-off, as its own attempt would (acquire.lua
            -- ignores the fair queue).
            if any_queued then
                handoff_leave(KEYS[9], KEYS[10], KEYS[11], to, to_id)
            end
            e = {o = to, h = to_id, l = to_lease, k = KEYS[2], i = 0, d = to_idle}
            direct = true
        end
    end
    if e then
        -- The hand-off: the grant the waiter's own attempt would have made (mint.lua), with
        -- the waiter's lease, hold id and idempotency record, in this script.
        -- A queued waiter's grant ends with its wait unless claimed (handoff_grant_lease);
        -- the caller's named waiter gets its whole lease, since its caller answers it now,
        -- from this reply or with a claim right behind it.
        local lease, full = e.l, nil
        if not direct then
            lease, full = handoff_grant_lease(e, now)
        end
        -- The grant's fields go in mint's own HSET: the grant's hold id, the lease it gets
        -- when claimed, and the wanted mark when others wait (the lock was just deleted, so
        -- the mark is new, as mark_wanted's HSETNX would write it).
        local extra = {'#grant', e.h}
        if full then
            extra[#extra + 1] = '#glease'
            extra[#extra + 1] = string.format('%d', full)
        end
        if (any_queued and handoff_others(KEYS[7], KEYS[10])) or
                (direct and (to_others == '1' or (wanted and not queued))) then
            extra[#extra + 1] = '#wait'
            extra[#extra + 1] = '1'
        end
        local token = mint(KEYS[1], KEYS[4], KEYS[5], KEYS[6], e.o, hand_floor, lease, e.h,
            extra)
        if token then
            writer_granted(KEYS[1], KEYS[12], e.o, now ~= 0 and now or nil)
            acquire_record(e.k, e.i, e.o, token, 1, e.l)
            keep_token_keys(KEYS[4], KEYS[5], KEYS[6], e.d, e.l, e.k, e.i)
            granted = token
            grant_id = e.h
            if wanted then
                redis.call('PUBLISH', ARGV[3],
                    'g:' .. string.format('%d', token) .. ':' .. e.h)
                published = 1
            end
        end
    end
    if wanted and granted == 0 then
        redis.call('PUBLISH', ARGV[3], release_message(ids))
        published = 1
    end
end

idem_record(KEYS[2], idem_ms, 'release', owner, 'status', status, 'holds', holds)
return {status, holds, 0, published, granted, grant_id, (direct and granted > 0) and 1 or 0}
