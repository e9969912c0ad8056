-- prelude/shared.lua: shared (read) holds and the writers' preference, shared by acquire.lua,
-- fair_acquire.lua, release.lua and renew.lua. Not a script of its own. Uses wanted.lua.
--
-- A lock is held in one of two modes. Exclusive: the lock hash as mint.lua writes it. Shared:
-- the hash carries "#mode" = "s", "#token" = the resource's current token when the first
-- shared hold was granted (the fence counter: the last token minted, 0 if none; a shared
-- grant mints nothing, and as no exclusive grant can come between two shared ones, every
-- shared holder of one shared period has that token), and one field per holder (its hold
-- count), like an exclusive holder's.
--
-- Each shared holder has its own lease, as each reader of Redisson's RReadWriteLock has its
-- own timeout: the sorted set fg:{R}:readers maps each holder to its lease's end (ms of
-- Redis server time). The hash and the set expire with the latest of those ends, so they go
-- when the last lease ends; a holder whose own lease ended earlier is dropped by the next
-- script that touches the lock (prune_readers), before that script looks at the holders.
--
-- A caller that passes neither key (one written before shared locks) takes exclusive locks
-- only, as before: the functions below do nothing without them.
--
-- Writers' preference: fg:{R}:rwait maps each exclusive request that waits (answered held
-- with a wait left, parked or fair-queued; a non-fair one only once it meets a reader, see
-- acquire.lua) to the end of its wait. While one of them waits,
-- a new shared request is answered held, not granted, so a stream of readers cannot starve
-- a writer. A writer leaves the set when it is granted; one that gave up stays until its
-- wait would have ended, as a vanished fair waiter blocks its queue. The member "#s" ('#' is
-- never in an owner id) marks that shared requests wait, until the longest of their waits
-- ends: an exclusive grant made while any member is live marks the lock wanted, so its
-- release publishes and wakes them.

-- How far short of a waiting request's end its registered end may fall (mark_waiting).
local RWAIT_SLACK_MS = 100

-- Redis server time in ms. Redis 7 replicates a script's effects, not the script, so the
-- deadlines computed from it reach replicas and the AOF as written here.
local function server_ms()
    if redis.replicate_commands then
        redis.replicate_commands()
    end
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The mode of k_lock: nil (free), 'x' (exclusive) or 's' (shared).
local function lock_mode(k_lock)
    if redis.call('EXISTS', k_lock) == 0 then
        return nil
    end
    if redis.call('HEXISTS', k_lock, '#mode') == 1 then
        return 's'
    end
    return 'x'
end

-- Sets the shared lock's time to live to the latest lease end of k_readers, or deletes both
-- keys when no holder is left. Returns the number of holders.
local function readers_lease(k_lock, k_readers, now)
    local last = redis.call('ZRANGE', k_readers, -1, -1, 'WITHSCORES')
    if #last == 0 then
        redis.call('DEL', k_lock, k_readers)
        return 0
    end
    local ms = tonumber(last[2]) - now
    if ms < 1 then
        ms = 1
    end
    redis.call('PEXPIRE', k_lock, ms)
    redis.call('PEXPIRE', k_readers, ms)
    return redis.call('ZCARD', k_readers)
end

-- Drops the shared holders of k_lock whose lease has ended. Returns the number left; with
-- none the lock is gone (deleted without a release message: a lease that runs out publishes
-- nothing, and waiters retry when the latest lease ends, which their held answer told).
local function prune_readers(k_lock, k_readers, now)
    local below = string.format('(%d', now)
    local gone = redis.call('ZRANGEBYSCORE', k_readers, '-inf', below)
    if #gone == 0 then
        return redis.call('ZCARD', k_readers)
    end
    for _, r in ipairs(gone) do
        redis.call('HDEL', k_lock, r)
    end
    redis.call('ZREMRANGEBYSCORE', k_readers, '-inf', below)
    return readers_lease(k_lock, k_readers, now)
end

-- The mode of k_lock once the shared holders whose lease ended are dropped.
local function live_mode(k_lock, k_readers, now)
    local mode = lock_mode(k_lock)
    if mode == 's' and k_readers then
        prune_readers(k_lock, k_readers, now)
        mode = lock_mode(k_lock)
    end
    return mode
end

-- A shared hold of k_lock for owner (a first one, a new holder, or a re-entry): the lock is
-- free or held shared (the caller checked). Returns token, holds.
local function share(k_lock, k_fence, k_readers, owner, lease_ms, now, hold_id)
    local token
    if redis.call('EXISTS', k_lock) == 0 then
        token = tonumber(redis.call('GET', k_fence) or '0') or 0
        if redis.call('EXISTS', k_readers) == 1 then
            redis.call('DEL', k_readers)
        end
        redis.call('HSET', k_lock, '#token', string.format('%d', token), '#mode', 's')
        if hold_id ~= '' then
            redis.call('HSET', k_lock, '#hold', hold_id)
        end
    else
        token = tonumber(redis.call('HGET', k_lock, '#token')) or 0
    end
    local holds = redis.call('HINCRBY', k_lock, owner, 1)
    redis.call('ZADD', k_readers, now + lease_ms, owner)
    readers_lease(k_lock, k_readers, now)
    return token, holds
end

-- Whether an exclusive request waits ahead of a shared one (writers' preference). Without a
-- queue (non-fair) every live exclusive waiter does; with the fair queue k_queue, a fair
-- shared request queued as elem is passed only by the waiters queued ahead of it, so that
-- two waiters never wait for each other.
local function writer_waits(k_rwait, now, k_queue, elem)
    if not k_rwait then
        return false
    end
    local live = redis.call('ZRANGEBYSCORE', k_rwait, string.format('%d', now), '+inf')
    local pos = false -- LPOS answers nil, false in Lua, for an element not in the list
    if k_queue then
        pos = redis.call('LPOS', k_queue, elem)
    end
    for _, w in ipairs(live) do
        if w ~= '#s' then
            if not pos then
                return true
            end
            local wp = redis.call('LPOS', k_queue, w)
            if not wp or wp < pos then
                return true
            end
        end
    end
    return false
end

-- Remembers that member (an exclusive waiter's owner, or '#s' for the shared waiters) waits
-- for wait_ms more; nothing when it does not wait. The set expires with its last wait.
local function mark_waiting(k_rwait, member, now, wait_ms)
    if wait_ms <= 0 or not k_rwait then
        return
    end
    -- A retry of the same wait asks nothing new: no write, so a held answer to a waiting
    -- writer's retry costs the AOF nothing (under appendfsync always, a write per held
    -- attempt would be an fsync per attempt). The caller's remaining wait and this server's
    -- clock drift apart by a few ms between attempts, so a registered end up to
    -- RWAIT_SLACK_MS short of the new one counts as the same wait: at worst new readers pass
    -- a writer in the last RWAIT_SLACK_MS of its wait.
    local score = redis.call('ZSCORE', k_rwait, member)
    if score and tonumber(score) >= now + wait_ms - RWAIT_SLACK_MS then
        return
    end
    redis.call('ZADD', k_rwait, now + wait_ms, member)
    local last = redis.call('ZRANGE', k_rwait, -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', k_rwait, tonumber(last[2]) - now + 1)
end

-- An exclusive grant to owner: it waits no more, and when others still wait (writers, or
-- readers refused for a writer) the lock is marked wanted so that its release wakes them.
-- now may be nil: the time is then read only when somebody is registered as waiting.
local function writer_granted(k_lock, k_rwait, owner, now)
    if not k_rwait then
        return
    end
    -- Mostly nobody waits to read: one EXISTS then, instead of a ZREM and a ZCOUNT.
    if redis.call('EXISTS', k_rwait) == 0 then
        return
    end
    redis.call('ZREM', k_rwait, owner)
    if redis.call('ZCOUNT', k_rwait, string.format('%d', now or server_ms()), '+inf') > 0 then
        mark_wanted(k_lock)
    end
end

-- The retry hint of a shared request refused while the lock is free (a writer was first):
-- that writer normally takes the lock within a round trip, and its grant publishes nothing,
-- so come back within a second, or when its wait ends if sooner.
local function writer_first_retry(k_rwait, now)
    local first = redis.call('ZRANGEBYSCORE', k_rwait, string.format('%d', now), '+inf',
        'WITHSCORES', 'LIMIT', 0, 1)
    local ms = 1000
    if #first == 2 and tonumber(first[2]) - now < ms then
        ms = tonumber(first[2]) - now
    end
    if ms < 1 then
        ms = 1
    end
    return ms
end

-- The idempotency record k_idem of an acquisition by owner answered in the other mode than
-- shared asks for: a retry must ask what the first call asked.
local function idem_mode_differs(k_idem, idem_ms, owner, shared)
    if idem_ms <= 0 then
        return false
    end
    local rec = redis.call('HMGET', k_idem, 'op', 'owner', 'mode')
    return rec[1] == 'acquire' and rec[2] == owner and (rec[3] == 's') ~= shared
end
