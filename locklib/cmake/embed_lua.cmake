# Builds one Redis script from lua/NAME.lua and the preludes its header names, at build time:
#   cmake -DIN=lua/acquire.lua -DPRELUDE_DIR=lua/prelude -DOUT_LUA=acquire.lua
#         -DOUT_INC=acquire.lua.inc -DLIMITS_H=fencegate/limits.h -P embed_lua.cmake
#
# A script that shares code with others names it in its header, on one line:
#   -- Prelude: idem.lua mint.lua
# The generated script is those files of PRELUDE_DIR, in that order, then the script itself
# (OUT_LUA: what `redis-cli --eval` and the tests run), and OUT_INC holds the same bytes as a
# C initializer list, ending in a NUL, for the script table (script_table.c). Nobody edits
# the generated files.
file(READ "${IN}" body)
set(text "")
if(body MATCHES "\n-- Prelude:([^\n]*)\n")
    string(REGEX MATCHALL "[A-Za-z0-9_]+\\.lua" preludes "${CMAKE_MATCH_1}")
    foreach(p IN LISTS preludes)
        if(NOT EXISTS "${PRELUDE_DIR}/${p}")
            message(FATAL_ERROR "${IN} names the prelude ${p}, which ${PRELUDE_DIR} lacks")
        endif()
        file(READ "${PRELUDE_DIR}/${p}" ptext)
        string(APPEND text "${ptext}\n")
    endforeach()
endif()
string(APPEND text "${body}")
# The limits of fencegate/limits.h (LIMITS_H), by name: @FG_TOKEN_MAX@ and so on.
file(READ "${LIMITS_H}" limits)
foreach(name FG_TOKEN_MAX FG_OWNER_MAX FG_RESOURCE_MAX)
    if(NOT limits MATCHES "#define ${name} ([0-9]+)")
        message(FATAL_ERROR "${LIMITS_H} defines no ${name}")
    endif()
    string(REPLACE "@${name}@" "${CMAKE_MATCH_1}" text "${text}")
endforeach()
if(text MATCHES "@FG_[A-Z_]+@")
    message(FATAL_ERROR "${IN}: ${CMAKE_MATCH_0} is no limit of ${LIMITS_H}")
endif()
# Printable ASCII, tabs and line ends only; one character class, not a pattern over the hex
# dump, whose repetition recurses once per byte and overflows CMake's stack on a large script.
if(text MATCHES "[^\t\r\n -~]")
    message(FATAL_ERROR "${IN}: a byte outside printable ASCII (or a control character)")
endif()
file(WRITE "${OUT_LUA}" "${text}")

file(READ "${OUT_LUA}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n"
       bytes "${bytes}")
file(WRITE "${OUT_INC}" "/* Generated from ${IN} by embed_lua.cmake. Do not edit. */\n"
     "${bytes}0x00\n")
