#!/usr/bin/env bash
# ctest scripts_install_deps_services: installing the dependencies leaves no system service
# enabled and creates no PostgreSQL cluster.
#
#   install_deps_test.sh SOURCE_DIR
#
# A real `apt-get install` needs the network and would change this machine, so apt-get,
# dpkg-query and sudo are stand-ins on PATH (the one thing faked here), and
# scripts/install-deps.sh runs with FENCEGATE_DEPS_ROOT set to a temp directory:
#   - dpkg-query reports redis-server, redis-sentinel, etcd-server, prometheus and
#     postgresql-15 missing, all else present;
#   - apt-get install does what those packages' maintainer scripts do to a host: it enables
#     redis-server.service, redis-sentinel.service, etcd.service, prometheus.service and
#     postgresql.service (the real systemctl, with --root on the temp directory), and
#     "creates the main cluster" unless a file in createcluster.d sets
#     create_main_cluster = false; it also records whether policy-rc.d was in place.
# Then checks that every one of those units is disabled (asked of the real systemctl), that
# no cluster was created, and that neither policy-rc.d nor the createcluster.d drop-in is
# left behind. A missing systemctl fails the test; it never skips.
set -euo pipefail

src=${1:?usage: install_deps_test.sh SOURCE_DIR}
fail() { echo "scripts_install_deps_services: FAIL: $*" >&2; exit 1; }
command -v systemctl >/dev/null 2>&1 || fail "systemctl is not installed (Debian's systemd package)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fg-install-deps-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
mkdir -p "$root/lib/systemd/system" "$root/etc/systemd/system" "$root/usr/sbin" "$tmp/bin"
for unit in redis-server redis-sentinel etcd prometheus postgresql; do
    printf '[Unit]\nDescription=%s\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n' \
        "$unit" >"$root/lib/systemd/system/$unit.service"
done

cat >"$tmp/bin/dpkg-query" <<STUB
#!/bin/sh
# dpkg-query -W -f='\${Status}' PACKAGE
for p; do :; done
case "\$p" in
    redis-server | redis-sentinel | etcd-server | prometheus | postgresql-15) exit 1 ;;
    *) printf 'install ok installed' ;;
esac
STUB
cat >"$tmp/bin/apt-get" <<STUB
#!/bin/sh
echo "apt-get \$*" >>"$tmp/apt.log"
[ "\$1" = install ] || exit 0
if [ -x "$root/usr/sbin/policy-rc.d" ]; then echo yes >"$tmp/policy-present"; fi
for p; do
    case "\$p" in
        redis-server) systemctl --root="$root" enable --quiet redis-server.service ;;
        redis-sentinel) systemctl --root="$root" enable --quiet redis-sentinel.service ;;
        etcd-server) systemctl --root="$root" enable --quiet etcd.service ;;
        prometheus) systemctl --root="$root" enable --quiet prometheus.service ;;
        postgresql-15)
            if ! grep -qsE '^create_main_cluster *= *false' "$root"/etc/postgresql-common/createcluster.d/*.conf; then
                echo created >"$tmp/main-cluster"
            fi
            systemctl --root="$root" enable --quiet postgresql.service ;;
    esac
done
STUB
printf '#!/bin/sh\nexec "$@"\n' >"$tmp/bin/sudo"
chmod +x "$tmp/bin/"*

rc=0
PATH="$tmp/bin:$PATH" FENCEGATE_DEPS_ROOT="$root" FENCEGATE_SKIP_NODE_TOOLS=1 \
    bash "$src/scripts/install-deps.sh" --bench postgresql-15 >"$tmp/out" 2>&1 || rc=$?
cat "$tmp/out"
[ "$rc" -eq 0 ] || fail "install-deps.sh exited with status $rc"

grep -q '^apt-get install .*redis-server' "$tmp/apt.log" || fail "apt-get install was not asked for redis-server"
grep -q '^apt-get install .*redis-sentinel' "$tmp/apt.log" || fail "apt-get install was not asked for redis-sentinel"
grep -q '^apt-get install .*etcd-server' "$tmp/apt.log" || fail "apt-get install was not asked for etcd-server"
grep -q '^apt-get install .*prometheus' "$tmp/apt.log" || fail "apt-get install was not asked for prometheus"
grep -q '^apt-get install .*postgresql-15' "$tmp/apt.log" || fail "apt-get install was not asked for postgresql-15"
[ -s "$tmp/policy-present" ] || fail "policy-rc.d was not in place during the install"

for unit in redis-server redis-sentinel etcd prometheus postgresql; do
    state=$(systemctl --root="$root" is-enabled "$unit.service" 2>/dev/null || true)
    [ "$state" = disabled ] || fail "$unit.service is left '$state' after the install"
done
if [ -n "$(find "$root/etc/systemd/system" -type l)" ]; then
    fail "unit links are left behind: $(find "$root/etc/systemd/system" -type l | tr '\n' ' ')"
fi
[ ! -e "$tmp/main-cluster" ] || fail "the postgresql install created a main cluster"
[ ! -e "$root/usr/sbin/policy-rc.d" ] || fail "policy-rc.d was left behind"
if [ -n "$(ls -A "$root/etc/postgresql-common/createcluster.d" 2>/dev/null)" ]; then
    fail "the createcluster.d drop-in was left behind"
fi
echo "scripts_install_deps_services: PASS"
