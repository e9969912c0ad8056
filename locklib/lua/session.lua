-- session.lua: one session, a lease many locks share. Runs atomically in Redis.
--
-- Every session key is in the hash slot of the tag {#sessions} ('#' is never in a resource
-- name, so no lock shares it), so one script sees a session and the deadline set together
-- (on a Cluster they live on one master).
--
-- KEYS[1]  session hash fg:{#sessions}:s:<id>: "#ttl" = the lease in ms, "#client" = the
--          client it is bound to ("" for none), "#ending" = "1" once its end has begun, and
--          one field "l:<resource>" = "<token> <owner>" per lock taken in it
-- KEYS[2]  deadline set fg:{#sessions}:deadline: member <id>, score = when the session
--          expires (ms, Redis's clock), or, once ending, when its ender's claim runs out
-- ARGV[1]  the operation (below)
-- ARGV[2]  the session id (32 lowercase hex digits; "" for reap)
-- ARGV[3]  the caller's client ("" for none): a session bound to another client reads as
--          unknown
-- ARGV[4..] the operation's arguments
--
-- The hash has no expiry of its own: a session is alive while its deadline is in the future
-- and its end has not begun. An expired session keeps its list of locks until somebody ends
-- it (lk_session_reap() finds it), so that the locks it held are fenced.
--
-- Prelude: limits.lua idem.lua mint.lua
--
-- Operations and answers ({0} always means: unknown, ended, expired, or another client's):
--   create ttl           {1, ttl}; {-1} when the id exists
--   renew                {1, ttl, r1, o1, r2, o2, ...}  the deadline moved to now + ttl;
--                        the locks (resource, owner) for the caller to renew
--   get                  {1, ttl, remaining_ms, r1, t1, r2, t2, ...}
--   add max owner list   list = "r1 t1 r2 t2 ...": locks the caller took for owner, each
--                        resource with its token, recorded all or none. {1, remaining_ms};
--                        {-2} when that would give the session more than max locks
--   end claim_ms reaper  {1, r1, t1, r2, t2, ...}  the end has begun (the session answers
--                        {0} to everything but end and forget from now on) and the caller
--                        has claim_ms to finish it (fence every lock, then forget); an ender
--                        that dies is taken over by reap once the claim runs out. reaper
--                        "1": the caller is the reaper, which ends any client's session
--   forget               {1}  the session is gone
--   reap claim_ms max    {id1, id2, ...}: at most max sessions whose deadline (or claim) has
--                        passed, each marked ending and claimed for claim_ms, for the caller
--                        to end. The session hashes it touches are named from KEYS[2] (same
--                        slot, {#sessions}): which sessions expired is what it looks up

local op = ARGV[1]
local id = ARGV[2]
local client = ARGV[3] or ''
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- ARGV[i] as a whole number above 0, or nil.
local function positive(i)
    local n = mint_floor(ARGV[i])
    if n == nil or n < 1 then
        return nil
    end
    return n
end

if op == 'reap' then
    local claim = positive(4)
    local max = positive(5)
    if claim == nil or max == nil then
        return redis.error_reply('fencegate: invalid argument')
    end
    local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, max)
    local out = {}
    for _, sid in ipairs(ids) do
        -- Claimed sessions are ending: nothing renews them or takes a lock in them again.
        local key = string.gsub(KEYS[2], 'deadline$', 's:' .. sid)
        if redis.call('EXISTS', key) == 1 then
            redis.call('HSET', key, '#ending', '1')
            redis.call('ZADD', KEYS[2], now + claim, sid)
            out[#out + 1] = sid
        else
            redis.call('ZREM', KEYS[2], sid)
        end
    end
    return out
end

if not string.match(id, '^' .. string.rep('[0-9a-f]', 32) .. '$') then
    return redis.error_reply('fencegate: invalid session')
end

if op == 'create' then
    local ttl = positive(4)
    if ttl == nil then
        return redis.error_reply('fencegate: invalid argument')
    end
    if redis.call('EXISTS', KEYS[1]) == 1 then
        return {-1}
    end
    redis.call('HSET', KEYS[1], '#ttl', ttl, '#client', client)
    redis.call('ZADD', KEYS[2], now + ttl, id)
    return {1, ttl}
end

if op == 'forget' then
    redis.call('DEL', KEYS[1])
    redis.call('ZREM', KEYS[2], id)
    return {1}
end

local meta = redis.call('HMGET', KEYS[1], '#ttl', '#client', '#ending')
if meta[1] == false then
    return {0}
end

-- The locks of the session: {resource, token, owner} for each.
local function locks()
    local out = {}
    local all = redis.call('HGETALL', KEYS[1])
    for i = 1, #all, 2 do
        local r = string.match(all[i], '^l:(.+)$')
        if r ~= nil then
            local tok, owner = string.match(all[i + 1], '^(%d+) (.+)$')
            out[#out + 1] = {r, tok, owner}
        end
    end
    return out
end

if op == 'end' then
    local claim = positive(4)
    if claim == nil then
        return redis.error_reply('fencegate: invalid argument')
    end
    if ARGV[5] ~= '1' and meta[2] ~= client then
        return {0}
    end
    redis.call('HSET', KEYS[1], '#ending', '1')
    redis.call('ZADD', KEYS[2], now + claim, id)
    local out = {1}
    for _, l in ipairs(locks()) do
        out[#out + 1] = l[1]
        out[#out + 1] = l[2]
    end
    return out
end

local deadline = tonumber(redis.call('ZSCORE', KEYS[2], id) or '0')
if meta[2] ~= client or meta[3] == '1' or deadline <= now then
    return {0}
end
local ttl = tonumber(meta[1])

if op == 'renew' then
    redis.call('ZADD', KEYS[2], now + ttl, id)
    local out = {1, ttl}
    for _, l in ipairs(locks()) do
        out[#out + 1] = l[1]
        out[#out + 1] = l[3]
    end
    return out
elseif op == 'get' then
    local out = {1, ttl, deadline - now}
    for _, l in ipairs(locks()) do
        out[#out + 1] = l[1]
        out[#out + 1] = l[2]
    end
    return out
elseif op == 'add' then
    local max = positive(4)
    local owner = ARGV[5]
    local words = {}
    for w in string.gmatch(ARGV[6] or '', '%S+') do
        words[#words + 1] = w
    end
    if max == nil or not valid_owner(owner) or #words == 0 or #words % 2 ~= 0 then
        return redis.error_reply('fencegate: invalid argument')
    end
    local fields, new = {}, 0
    for i = 1, #words, 2 do
        local tok = mint_floor(words[i + 1])
        if tok == nil or tok < 1 or not valid_resource(words[i]) then
            return redis.error_reply('fencegate: invalid argument')
        end
        local field = 'l:' .. words[i]
        if redis.call('HEXISTS', KEYS[1], field) == 0 then
            new = new + 1
        end
        fields[#fields + 1] = field
        fields[#fields + 1] = string.format('%d %s', tok, owner)
    end
    if new > 0 and redis.call('HLEN', KEYS[1]) - 2 + new > max then
        return {-2}
    end
    redis.call('HSET', KEYS[1], unpack(fields))
    return {1, deadline - now}
end
return redis.error_reply('fencegate: invalid operation')
