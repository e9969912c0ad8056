-- prelude/burn.lua: fencing a holder without a new holder, shared by force_release.lua and
-- session_lock.lua. Not a script of its own. Uses limits.lua.
--
-- A token handed to nobody is minted above the holder's token T: the counter k_fence is lifted
-- to at least max(floor, base, T) (and the base with it, as a mint's lift does) and INCRed to
-- F > T. Every later write with T is then superseded (T below the last issued), and every
-- later mint is above F. KEEPTTL: no grant, so the idle expiry of the last grant stays
-- (prelude/idle.lua). current is the counter's value, read by the caller.
-- Returns F, or nil when the token space is used up (then nothing was written).
local function burn(k_fence, k_base, k_recent, floor, token, current)
    local base = tonumber(redis.call('GET', k_base) or '0') or 0
    local lift = math.max(floor, base, token)
    if current >= TOKEN_MAX or lift >= TOKEN_MAX then
        return nil
    end
    if current < lift then
        redis.call('SET', k_fence, string.format('%d', lift), 'KEEPTTL')
        redis.call('SET', k_base, string.format('%d', lift), 'KEEPTTL')
    end
    local burned = redis.call('INCR', k_fence)
    redis.call('LPUSH', k_recent, string.format('%d', burned))
    redis.call('LTRIM', k_recent, 0, 15)
    return burned
end
