#!/usr/bin/env bash
# ctest packaging_install: `cmake --install` into a temp prefix must give a usable host
# install, all of one version.
#
#   install_test.sh BUILD_DIR SOURCE_DIR VERSION [EXTRA_CFLAGS]
#
# Checks, in order:
#   1. the installed files: both binaries, locklib's shared (with its SONAME) and static
#      libraries, its header and fencegate/limits.h, locklib.pc, both man pages, the systemd unit and its
#      sysusers.d entry;
#   2. one version everywhere: --version of both binaries, locklib.pc, the library file name;
#   3. the shared library exports only the public lk_ API (hidden visibility);
#   4. a C program built with nothing but `pkg-config --cflags --libs locklib`, and again
#      statically with `pkg-config --static`, prints lk_version() and takes a lock on a real
#      redis-server (unix socket in a temp dir, stopped by PID);
#   5. the unit runs the installed binary, carries the sandboxing docs/operations.md
#      ("Installing on a host") promises, and
#      passes `systemd-analyze verify` with no complaint (when that command exists);
#   6. the man pages render without warnings and name every flag `--help` prints.
set -euo pipefail
build=${1:?usage: install_test.sh BUILD_DIR SOURCE_DIR VERSION [EXTRA_CFLAGS]}
src=${2:?}
version=${3:?}
extra=${4:-}
major=${version%%.*}

# shellcheck source=../common/redis.sh
. "$src/tests/common/redis.sh"
tmp=$(mktemp -d /tmp/fg-install-XXXXXX)
cleanup() {
    fg_redis_stop
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "packaging_install: FAIL: $*" >&2; exit 1; }

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }

# 1. The files.
pc=$(find "$prefix" -name locklib.pc | head -n 1)
[ -n "$pc" ] || fail "locklib.pc was not installed"
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
libdir=$(pkg-config --variable=libdir locklib)
[ "$(cd "$libdir" && pwd)" = "$(cd "$(dirname "$pc")/.." && pwd)" ] \
    || fail "locklib.pc's libdir $libdir is not where the .pc file was installed"
for f in bin/fencegate bin/fencectl include/locklib/locklib.h include/fencegate/limits.h \
    share/man/man1/fencegate.1 share/man/man1/fencectl.1 \
    lib/systemd/system/fencegate.service lib/sysusers.d/fencegate.conf; do
    [ -e "$prefix/$f" ] || fail "$f was not installed"
done
for f in liblocklib.a liblocklib.so "liblocklib.so.$major" "liblocklib.so.$version"; do
    [ -e "$libdir/$f" ] || fail "$f was not installed in $libdir"
done
soname=$(readelf -d "$libdir/liblocklib.so.$version" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
[ "$soname" = "liblocklib.so.$major" ] || fail "SONAME is '$soname', expected liblocklib.so.$major"

# 2. One version.
for bin in fencegate fencectl; do
    out=$("$prefix/bin/$bin" --version)
    [[ "$out" == *"$version"* ]] || fail "$bin --version printed '$out', expected $version"
done
[ "$(pkg-config --modversion locklib)" = "$version" ] \
    || fail "locklib.pc says $(pkg-config --modversion locklib), expected $version"

# 3. Only the public API is exported.
if nm -D --defined-only "$libdir/liblocklib.so.$version" | awk '$2 ~ /^[TDBR]$/ {print $3}' \
    | grep -v '^lk_' >"$tmp/leaked"; then
    cat "$tmp/leaked" >&2
    fail "liblocklib.so exports symbols outside the lk_ API (above)"
fi

# 4. Build against the install, shared and static, and run both against a real Redis.
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror $extra "$src/tests/packaging/lock_once.c" \
    $(pkg-config --cflags --libs locklib) -o "$tmp/lock_once"
# The static build names the archive, so the linker cannot pick the .so beside it.
static_libs=$(pkg-config --static --libs-only-l locklib | sed 's/-llocklib//')
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror $extra "$src/tests/packaging/lock_once.c" \
    $(pkg-config --cflags locklib) "$libdir/liblocklib.a" $static_libs -o "$tmp/lock_once_static"
if ldd "$tmp/lock_once_static" | grep -q liblocklib; then
    fail "the static build still loads liblocklib.so"
fi
fg_redis_start "$tmp"
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/lock_once" "unix://$FG_REDIS_SOCK")
echo "$out"
[ "$(echo "$out" | sed -n 's/^version //p')" = "$version" ] || fail "lk_version() is not $version"
echo "$out" | grep -qx 'token 1' || fail "the shared build did not get token 1"
echo "$out" | grep -qx released || fail "the shared build did not release"
out=$("$tmp/lock_once_static" "unix://$FG_REDIS_SOCK")
echo "$out" | grep -qx 'token 2' || fail "the static build did not get token 2: $out"

# 5. The unit.
unit=$prefix/lib/systemd/system/fencegate.service
grep -qx "ExecStart=$prefix/bin/fencegate" "$unit" || fail "ExecStart does not run $prefix/bin/fencegate"
for line in User=fencegate ProtectSystem=strict ReadWritePaths=/var/lib/fencegate \
    NoNewPrivileges=yes Restart=on-failure; do
    grep -qx "$line" "$unit" || fail "the unit lacks $line"
done
if command -v systemd-analyze >/dev/null 2>&1; then
    # verify exits 0 even for settings it ignores, so any word from it is a failure. Its
    # man: check looks the page up, so point man at the installed pages.
    MANPATH=$prefix/share/man systemd-analyze verify "$unit" >"$tmp/verify" 2>&1 \
        || { cat "$tmp/verify" >&2; fail "systemd-analyze verify failed"; }
    if [ -s "$tmp/verify" ]; then
        cat "$tmp/verify" >&2
        fail "systemd-analyze verify complained (above)"
    fi
    echo "systemd-analyze verify: clean"
else
    echo "systemd-analyze is not installed: the unit was checked by the greps above only"
fi

# 6. The man pages.
for bin in fencegate fencectl; do
    page=$prefix/share/man/man1/$bin.1
    if command -v man >/dev/null 2>&1; then
        MANWIDTH=100 man --warnings -l -Tutf8 "$page" >"$tmp/$bin.txt" 2>"$tmp/$bin.warn" \
            || fail "man could not render $bin.1"
        if [ -s "$tmp/$bin.warn" ]; then cat "$tmp/$bin.warn" >&2; fail "$bin.1 renders with warnings"; fi
        grep -q "$version" "$tmp/$bin.txt" || fail "$bin.1 does not name version $version"
    fi
    "$prefix/bin/$bin" --help 2>&1 | grep -oE -- '--[a-z][a-z-]+' | sort -u >"$tmp/$bin.flags"
    [ -s "$tmp/$bin.flags" ] || fail "$bin --help names no flags"
    while read -r flag; do
        grep -qF -- "${flag//-/\\-}" "$page" || grep -qF -- "$flag" "$page" \
            || fail "$bin.1 does not document $flag, which --help names"
    done <"$tmp/$bin.flags"
done
echo "PASS: the install is complete, of version $version, and usable through pkg-config"
