#!/usr/bin/env bash
# Checks api/openapi.yaml. Three subcommands:
#
#   install         Installs the pinned OpenAPI validator (@redocly/cli, from api/package.json
#                   and api/package-lock.json) with scripts/install-node-tools.sh, which
#                   scripts/install-deps.sh also calls.
#   lint            Runs `redocly lint` (recommended-strict ruleset, api/redocly.yaml) on the
#                   spec. Fails loudly when the validator is not installed: never skips.
#   routes BINARY   Runs `BINARY --routes` (one "METHOD /path/template" line per served route)
#                   and fails unless the routes it prints and the operations in openapi.yaml
#                   are the same set, both ways.
#
# The ctest tests api_openapi_lint and api_routes_match_openapi (tests/api/) call lint and routes.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
api="$root/api"
spec="$api/openapi.yaml"
redocly="$api/node_modules/.bin/redocly"

die() { echo "check-openapi: $*" >&2; exit 1; }

cmd_install() {
    bash "$root/scripts/install-node-tools.sh"
}

cmd_lint() {
    command -v node >/dev/null 2>&1 \
        || die "node is not installed: run scripts/install-deps.sh (or scripts/install-node-tools.sh)"
    [ -x "$redocly" ] \
        || die "the OpenAPI validator is not installed in api/node_modules: run scripts/install-deps.sh (or scripts/install-node-tools.sh)"
    echo "check-openapi: redocly $("$redocly" --version) on node $(node --version): lint $spec"
    (cd "$api" && "$redocly" lint --config redocly.yaml openapi.yaml) \
        || die "api/openapi.yaml failed the OpenAPI lint (see above)"
}

# Prints "METHOD /path" for every operation in the spec. The spec keeps the usual layout:
# paths at two spaces under `paths:`, methods at four spaces under each path.
spec_routes() {
    awk '
        /^paths:[[:space:]]*$/ { inpaths = 1; next }
        inpaths && /^[^[:space:]#]/ { inpaths = 0 }
        !inpaths { next }
        /^  \/[^[:space:]]*:[[:space:]]*$/ { p = $1; sub(/:$/, "", p); next }
        /^    (get|put|post|delete|patch|head|options|trace):/ {
            m = $1; sub(/:$/, "", m); print toupper(m) " " p
        }
    ' "$spec" | sort -u
}

cmd_routes() {
    local bin=${1:-}
    [ -n "$bin" ] || die "usage: check-openapi.sh routes PATH/TO/fencegate"
    [ -x "$bin" ] || die "gateway binary not found or not executable: $bin"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT

    spec_routes >"$tmp/spec"
    [ -s "$tmp/spec" ] || die "found no operations under paths: in $spec"

    # --routes only prints; a timeout keeps a broken binary from hanging the test.
    local rc=0
    timeout 10 "$bin" --routes >"$tmp/raw" 2>"$tmp/err" || rc=$?
    if [ "$rc" -ne 0 ]; then cat "$tmp/err" >&2; die "'$bin --routes' failed (exit $rc)"; fi
    # Normalise: trim, squeeze blanks, drop empty lines.
    sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e 's/[[:space:]][[:space:]]*/ /g' "$tmp/raw" \
        | grep -v '^$' | sort -u >"$tmp/bin" || true
    [ -s "$tmp/bin" ] || die "'$bin --routes' printed no routes"
    if grep -Ev '^[A-Z]+ /[^ ]*$' "$tmp/bin" >"$tmp/bad"; then
        cat "$tmp/bad" >&2
        die "'$bin --routes' printed lines that are not 'METHOD /path/template' (above)"
    fi

    local fail=0
    comm -23 "$tmp/bin" "$tmp/spec" >"$tmp/undocumented"
    comm -13 "$tmp/bin" "$tmp/spec" >"$tmp/unserved"
    if [ -s "$tmp/undocumented" ]; then
        echo "check-openapi: served by the gateway but missing from api/openapi.yaml:" >&2
        sed 's/^/  /' "$tmp/undocumented" >&2
        fail=1
    fi
    if [ -s "$tmp/unserved" ]; then
        echo "check-openapi: in api/openapi.yaml but not served by the gateway:" >&2
        sed 's/^/  /' "$tmp/unserved" >&2
        fail=1
    fi
    [ "$fail" -eq 0 ] || die "routes and spec differ"
    echo "check-openapi: all $(wc -l <"$tmp/bin") routes match api/openapi.yaml:"
    sed 's/^/  /' "$tmp/bin"
}

case "${1:-}" in
    install) cmd_install ;;
    lint) cmd_lint ;;
    routes) shift; cmd_routes "$@" ;;
    spec-routes) spec_routes ;;
    *) die "usage: check-openapi.sh install | lint | routes PATH/TO/fencegate | spec-routes" ;;
esac
