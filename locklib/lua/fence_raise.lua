-- fence_raise.lua: Redlock's write-back of a granted token (locklib/src/redlock.c, step c):
-- set-if-greater of the resource's fence counter on one node. Runs atomically in Redis.
--
-- KEYS[1]  fence counter fg:{R}:fence  never deleted; its time to live is kept (KEEPTTL)
-- KEYS[2]  lift point    fg:{R}:base   read only: base <= fence stays true
-- KEYS[3]  recent tokens fg:{R}:recent the last 16 tokens, newest first
-- KEYS[4]  lock hash     fg:{R}:lock
-- ARGV[1]  the token T granted across the majority, decimal digits, 1..TOKEN_MAX
-- ARGV[2]  owner id of the grant, or "" for none
--
-- Returns  {counter}  the counter after the call, always >= T: the acknowledgement the
--                     combiner counts towards the majority
-- Errors   "fencegate: invalid argument"; nothing is written before it is found.
--
-- The counter only ever goes up: it becomes max(counter, base, T) (prelude/mint.lua lifts a
-- counter found below base to base the same way). base is left alone: T was issued, so it
-- must stay inside (base, fence] for token_range.lua, and a lift point above T would refuse
-- it. T goes to the head of the recent list (unless it is already there: this node minted
-- it), so token_range.lua reports it as issued here too. When the owner holds the lock on
-- this node, its "#token" becomes T: a reentrant acquisition and a renewal on this node then
-- report the token of the grant, not the one this node happened to mint.
--
-- Prelude: limits.lua
-- The build prepends it (from lua/prelude/) to this file, so this file alone is not the
-- whole script: run the generated build/locklib/generated/lua/fence_raise.lua instead.

local token_s = ARGV[1] or ''
local owner = ARGV[2] or ''
if not string.match(token_s, '^%d+$') then
    return redis.error_reply('fencegate: invalid argument')
end
local token = tonumber(token_s)
if token < 1 or token > TOKEN_MAX or (owner ~= '' and not valid_owner(owner)) then
    return redis.error_reply('fencegate: invalid argument')
end

local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local base = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local after = current
if base > after then
    after = base
end
if token > after then
    after = token
end
if after ~= current then
    -- KEEPTTL: a raise is no grant on this node, so it leaves the idle expiry that the
    -- last grant set (prelude/idle.lua) as it is.
    redis.call('SET', KEYS[1], string.format('%d', after), 'KEEPTTL')
end
local head = redis.call('LINDEX', KEYS[3], 0)
if head ~= string.format('%d', token) then
    redis.call('LPUSH', KEYS[3], string.format('%d', token))
    redis.call('LTRIM', KEYS[3], 0, 15)
end
if owner ~= '' and redis.call('HEXISTS', KEYS[4], owner) == 1 then
    redis.call('HSET', KEYS[4], '#token', string.format('%d', token))
end
return {after}
