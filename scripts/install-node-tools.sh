#!/usr/bin/env bash
# Installs the npm-pinned checkers the test suite runs, each folder from its own
# package-lock.json with `npm ci`:
#   api/             @redocly/cli, the OpenAPI validator, and @stoplight/prism-cli, whose proxy
#                    checks the real gateway's answers against the spec (scripts/check-openapi.sh)
#   tests/packaging/ dockerfilelint and the Compose JSON schema with Ajv (tests/packaging/)
#   tests/ui/        puppeteer-core, which drives Debian's Chromium against the status page
# Installs Debian's nodejs + npm first when `node` is missing. Idempotent: a folder whose
# lockfile has not changed since its last install is left alone and needs no network.
# scripts/install-deps.sh calls it; FENCEGATE_SKIP_NODE_TOOLS=1 there skips it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "install-node-tools: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root to run: $*"; fi
}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    # A fresh Debian 12 has neither: take Debian's (node 18, npm 9). If a node without npm
    # is present (unusual), only npm is added.
    pkgs=(npm)
    command -v node >/dev/null 2>&1 || pkgs=(nodejs npm)
    echo "install-node-tools: installing ${pkgs[*]} from apt"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -q
    as_root apt-get install -y -q --no-install-recommends "${pkgs[@]}"
fi
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || die "node $(node --version) is too old; the checkers need node >= 18.17"

# npm_ci DIR: `npm ci` in DIR unless its node_modules already matches its lockfile.
npm_ci() {
    local dir=$1 want have=""
    local stamp="$dir/node_modules/.fencegate-lock.sha256"
    want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
    [ -f "$stamp" ] && have=$(cat "$stamp")
    if [ "$want" = "$have" ]; then
        echo "install-node-tools: ${dir#"$root"/} already installed"
        return 0
    fi
    echo "install-node-tools: npm ci in ${dir#"$root"/}"
    # --ignore-scripts: none of the checkers needs an install script.
    (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    echo "$want" >"$stamp"
}

npm_ci "$root/api"
npm_ci "$root/tests/packaging"
npm_ci "$root/tests/ui"
[ -x "$root/api/node_modules/.bin/redocly" ] || die "npm ci finished but redocly is missing"
[ -x "$root/tests/packaging/node_modules/.bin/dockerfilelint" ] \
    || die "npm ci finished but dockerfilelint is missing"
[ -f "$root/tests/ui/node_modules/puppeteer-core/package.json" ] \
    || die "npm ci finished but puppeteer-core is missing"
