# Turns one Lua script into a C file holding it as a byte array. Run at build time:
#   cmake -DIN=acquire.lua -DOUT=acquire_lua.c -DNAME=acquire -P embed_lua.cmake
# The generated file is never edited by hand.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n    "
       bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from ${IN} by embed_lua.cmake. Do not edit. */\n"
     "#include <stddef.h>\n"
     "extern const char lk__lua_${NAME}[];\n"
     "extern const size_t lk__lua_${NAME}_len;\n"
     "const char lk__lua_${NAME}[] = {\n    ${bytes}0x00};\n"
     "const size_t lk__lua_${NAME}_len = ${len};\n")
