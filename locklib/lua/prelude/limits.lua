-- prelude/limits.lua: the limits of fencegate/limits.h, which locklib and storage enforce in
-- C, written in here by the build (embed_lua.cmake replaces each @FG_...@ with the header's
-- value), so the scripts check exactly the same bounds. Not a script of its own.

-- The largest token, 2^53 - 1: Lua numbers are doubles.
local TOKEN_MAX = @FG_TOKEN_MAX@
local OWNER_MAX = @FG_OWNER_MAX@
local RESOURCE_MAX = @FG_RESOURCE_MAX@

-- An owner id is 1..OWNER_MAX bytes of FG_NAME_CHARS, [A-Za-z0-9._:-] ('%w' is [A-Za-z0-9]
-- in Redis's C locale), so the lock hash's "#token" field can never be an owner.
local function valid_owner(owner)
    return type(owner) == 'string' and #owner >= 1 and #owner <= OWNER_MAX and
        string.match(owner, '^[%w%.:_%-]+$') ~= nil
end

-- A resource name: 1..RESOURCE_MAX bytes of the same characters.
local function valid_resource(name)
    return type(name) == 'string' and #name >= 1 and #name <= RESOURCE_MAX and
        string.match(name, '^[%w%.:_%-]+$') ~= nil
end
