#!/usr/bin/env bash
# Every route `fencegate --routes` prints names its scope, one of the known operations (or
# public); a route without one fails here. Usage: scopes.sh PATH/TO/fencegate
source "$(dirname "$0")/sec_common.sh"
bin=${1:?usage: scopes.sh PATH/TO/fencegate}
[ -x "$bin" ] || fail "fencegate binary not found: $bin"

routes=$("$bin" --routes) || fail "'$bin --routes' failed"
[ -n "$routes" ] || fail "'$bin --routes' printed nothing"
while read -r method path scope extra; do
    [ -z "$extra" ] || fail "'$method $path $scope $extra': more than METHOD /path SCOPE"
    case "$scope" in
        public | lock | write | read | admin | metrics) ;;
        *) fail "'$method $path' has no scope rule (got '${scope:-nothing}'): name its operation in gateway/src/base/routes.c" ;;
    esac
done <<<"$routes"
echo "ok: every route names its scope"
