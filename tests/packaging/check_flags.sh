#!/usr/bin/env bash
# ctest packaging_flags: every FENCEGATE_* setting that docker/Dockerfile, docker/compose.yaml
# and the systemd unit give the gateway is one it accepts, with the value they give.
#
#   check_flags.sh PATH/TO/fencegate SOURCE_DIR
#
# fencegate ignores environment variables it does not know (so a typo there would silently
# fall back to a default), hence two checks per setting:
#   1. its name is one that `fencegate --help` lists ("env: NAME");
#   2. `fencegate --check-config`, run with exactly those settings in an empty environment,
#      accepts them (exit 0). Each compose service is checked on top of the image's ENV, as
#      the container would see them.
set -euo pipefail
bin=${1:?usage: check_flags.sh PATH/TO/fencegate SOURCE_DIR}
src=${2:?}
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "packaging_flags: FAIL: $*" >&2; exit 1; }

known=$("$bin" --help | sed -n 's/.*env: \(FENCEGATE_[A-Z_]*\).*/\1/p' | sort -u)
[ -n "$known" ] || fail "fencegate --help lists no environment variables"

# The Dockerfile's ENV instructions (with their continuation lines; a RUN's own variables are
# not the gateway's) and the unit's Environment= lines.
image_env=$(awk '/^ENV[[:space:]]/ {on = 1} on {print} on && !/\\$/ {on = 0}' \
    "$src/docker/Dockerfile" | grep -oE 'FENCEGATE_[A-Z_]+=[^ \\"]+' || true)
[ -n "$image_env" ] || fail "docker/Dockerfile sets no FENCEGATE_* variable"
unit_env=$(sed -n 's/^Environment=\(FENCEGATE_[A-Z_]*=.*\)$/\1/p' \
    "$src/scripts/packaging/fencegate.service.in")
[ -n "$unit_env" ] || fail "the systemd unit sets no FENCEGATE_* variable"

# check_set WHERE KEY=VALUE...: both checks for one set of settings.
check_set() {
    local where=$1 kv name
    shift
    for kv in "$@"; do
        name=${kv%%=*}
        grep -qx "$name" <<<"$known" \
            || fail "$where sets $name, which fencegate does not know (fencegate --help)"
    done
    local rc=0
    env -i PATH="$PATH" "$@" timeout 20 "$bin" --check-config >/dev/null 2>"$tmp_err" || rc=$?
    if [ "$rc" -eq 2 ]; then
        cat "$tmp_err" >&2
        fail "fencegate --check-config refuses the settings of $where: $*"
    elif [ "$rc" -ne 0 ]; then
        # 1: this host's open-file limit is too low for the loops these settings ask for,
        # which says nothing about the settings; anything else is a crash or a hang.
        cat "$tmp_err" >&2
        fail "fencegate --check-config exited $rc for the settings of $where (not a settings" \
            "error: see above; ulimit -n here is $(ulimit -Hn)): $*"
    fi
    echo "ok: $where: $*"
}
tmp_err=$(mktemp)
trap 'rm -f "$tmp_err"' EXIT

mapfile -t image <<<"$image_env"
check_set docker/Dockerfile "${image[@]}"
mapfile -t unit <<<"$unit_env"
check_set fencegate.service "${unit[@]}"

# compose.yaml, parsed as YAML: one "SERVICE<TAB>KEY=VALUE" line per FENCEGATE_* setting.
compose=$(NODE_PATH="$here/node_modules" node -e '
    const yaml = require("js-yaml");
    const doc = yaml.load(require("fs").readFileSync(process.argv[1], "utf8"));
    for (const [name, svc] of Object.entries(doc.services || {})) {
        let env = svc.environment || {};
        if (Array.isArray(env)) {
            env = Object.fromEntries(env.map((l) => [l.split("=")[0], l.split("=").slice(1).join("=")]));
        }
        for (const [k, v] of Object.entries(env)) {
            if (k.startsWith("FENCEGATE_")) console.log(`${name}\t${k}=${v}`);
        }
    }' "$src/docker/compose.yaml")
[ -n "$compose" ] || fail "docker/compose.yaml gives no service a FENCEGATE_* variable"
for svc in $(cut -f1 <<<"$compose" | sort -u); do
    mapfile -t settings < <(awk -F'\t' -v s="$svc" '$1 == s {print $2}' <<<"$compose")
    check_set "compose service $svc" "${image[@]}" "${settings[@]}"
done
echo "PASS: every FENCEGATE_* setting in docker/ and the unit is accepted by fencegate"
