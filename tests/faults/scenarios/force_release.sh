# shellcheck shell=bash
# force_release: operators force locks free (POST /admin/release) while the workload runs, and
# the gateway is killed with SIGKILL and restarted on the same data directory between them.
#
# Each fault:
#   1. A holder (this script) takes a lock of its own with a 60 s lease (long enough to be
#      held still when it is forced free on a slow machine) and writes with its
#      token T.
#   2. GET /locks lists the run's held locks (200, never an owner). Each of the workload's three
#      resources is forced free, whoever holds it (a workload client, which carries on: its
#      next write, renew or unlock with that token must be refused), and so is the holder's.
#      Every force is recorded in the history (kind force, with its fenced_token).
#   3. The holder's write with T is 409 stale_token with superseded_by above T, though nobody
#      has locked since; its renew and unlock are 409 not_owner.
#   4. SIGKILL to the gateway, restart on the same data directory, mark heal; the holder's
#      write with T is still 409 stale_token, and a new lock of the resource gets a token
#      above T.
# What must hold: the checks above, and the checker's invariants over the workload's history
# with the forces in it, among them invariant 10 (no write, renew or unlock with a forcibly
# released token is accepted after the release's answer), with strict leases (a forced
# release ends its holder's lease window).
# Full suite only (scripts/faults.sh --full): a short run takes about a minute, most of it
# the workload's run and the three restarts.

# shellcheck source=gateway_stop.sh
source "$(dirname "${BASH_SOURCE[0]}")/gateway_stop.sh" # call, record, write_as ...

faults=3
[ "$length" = full ] && faults=10

# force NAME RES: POST /admin/release, recorded (kind force, token the fenced_token, 0 when
# nothing was held); prints the fenced token or nothing.
force() {
    call "$1" POST /admin/release "{\"resource\":\"$2\",\"reason\":\"fault scenario $1\"}" 8
    record "$1" runner force "$2" - 0 0 "$(field_of "$1" fenced_token)"
    [ "$(code_of "$1")" = 200 ] || fail "$1: the forced release of $2 answered $(code_of "$1") \
$(cat "$tmp/ops/$1.body")"
    field_of "$1" fenced_token
}

# refused NAME KIND RES OWNER CODE ERROR: the holder's renew or unlock, recorded, must be refused.
owner_refused() {
    call "$1" POST "/$2" "{\"resource\":\"$3\",\"owner\":\"$4\"}" 8
    record "$1" runner "$2" "$3" "$4" 0 0 0
    [ "$(code_of "$1")" = 409 ] && [ "$(field_of "$1" error)" = not_owner ] \
        || fail "$1: the forcibly released holder's $2 answered $(code_of "$1") $(cat "$tmp/ops/$1.body")"
}

# superseded NAME RES OWNER TOKEN: the holder's write with its forcibly released token.
superseded() {
    stale_write "$@"
    [ "$(field_of "$1" superseded_by)" -gt "$4" ] \
        || fail "$1: no superseded_by above $4: $(cat "$tmp/ops/$1.body")"
}

force_fault() {
    local res="$scenario-$seed-fr-$1" t fenced i next
    t=$(take_hold "$res" "fr-$1-holder" 60000)
    [ "$(write_as "fr-$1-w1" "$res" "fr-$1-holder" "$t")" = 200 ] \
        || fail "the holder's first write on $res: $(code_of "fr-$1-w1")"
    call "fr-$1-list" GET "/locks?prefix=$scenario-$seed&limit=1000" "" 8
    [ "$(code_of "fr-$1-list")" = 200 ] && ! grep -q owner "$tmp/ops/fr-$1-list.body" \
        || fail "GET /locks answered $(code_of "fr-$1-list") $(cat "$tmp/ops/fr-$1-list.body")"
    for i in 0 1 2; do
        force "fr-$1-wl-$i" "$scenario-$seed-$i" >/dev/null
    done
    fenced=$(force "fr-$1-force" "$res")
    [ "$fenced" = "$t" ] || fail "the forced release of $res fenced '$fenced', not the holder's $t"
    superseded "fr-$1-w2" "$res" "fr-$1-holder" "$t"
    owner_refused "fr-$1-renew" renew "$res" "fr-$1-holder"
    owner_refused "fr-$1-unlock" unlock "$res" "fr-$1-holder"
    kill -KILL "$gw_pid"
    wait "$gw_pid" 2>/dev/null || true
    gw_start
    mark heal
    superseded "fr-$1-w3" "$res" "fr-$1-holder" "$t"
    next=$(take_hold "$res" "fr-$1-next" 1000)
    [ "$next" -gt "$t" ] || fail "the lock after the forced release got $next, not above $t"
    say "force $1: holder token $t fenced; next grant $next; workload forces: $(for i in 0 1 2; do
        printf '%s ' "$(field_of "fr-$1-wl-$i" released)"; done)"
}

scenario_fault() {
    progress "$steps"
    force_fault "$1"
}
