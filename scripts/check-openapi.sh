#!/usr/bin/env bash
# Checks api/openapi.yaml. Three subcommands:
#
#   install         Installs the pinned OpenAPI validator (@redocly/cli, from api/package.json
#                   and api/package-lock.json) into api/node_modules with `npm ci`. Installs
#                   Debian's nodejs + npm first when `node` is missing. Idempotent: a second run
#                   with an unchanged lockfile needs no network. scripts/install-deps.sh calls it.
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
stamp="$api/node_modules/.fencegate-lock.sha256"

die() { echo "check-openapi: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root to run: $*"; fi
}

cmd_install() {
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        # A fresh Debian 12 has neither: take Debian's (node 18, npm 9). If a node without npm
        # is present (unusual), only npm is added.
        local pkgs=(npm)
        command -v node >/dev/null 2>&1 || pkgs=(nodejs npm)
        echo "check-openapi: installing ${pkgs[*]} from apt"
        export DEBIAN_FRONTEND=noninteractive
        as_root apt-get update -q
        as_root apt-get install -y -q --no-install-recommends "${pkgs[@]}"
    fi
    local major
    major=$(node -p 'process.versions.node.split(".")[0]')
    [ "$major" -ge 18 ] || die "node $(node --version) is too old; @redocly/cli needs node >= 18.17"

    local want have=""
    want=$(sha256sum "$api/package-lock.json" | cut -d' ' -f1)
    [ -f "$stamp" ] && have=$(cat "$stamp")
    if [ "$want" = "$have" ] && [ -x "$redocly" ]; then
        echo "check-openapi: validator already installed ($("$redocly" --version))"
        return 0
    fi
    echo "check-openapi: npm ci in api/ (pinned @redocly/cli)"
    # --ignore-scripts: the linter needs no install scripts (only core-js has one, a banner).
    (cd "$api" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    [ -x "$redocly" ] || die "npm ci finished but $redocly is missing"
    echo "$want" >"$stamp"
    echo "check-openapi: installed @redocly/cli $("$redocly" --version)"
}

cmd_lint() {
    command -v node >/dev/null 2>&1 \
        || die "node is not installed: run scripts/install-deps.sh (or scripts/check-openapi.sh install)"
    [ -x "$redocly" ] \
        || die "the OpenAPI validator is not installed in api/node_modules: run scripts/install-deps.sh (or scripts/check-openapi.sh install)"
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
