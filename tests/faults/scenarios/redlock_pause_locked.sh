# shellcheck shell=bash disable=SC2154,SC2034
# redlock_pause_locked: pause_locked.sh (a client frozen with SIGSTOP past its lease, then
# SIGCONT, while the next holder has locked but not yet written) with the gateway on Redlock
# over 3 independent masters ("a paused client: its late write is a 409 once a
# newer holder has locked"). The late write must be 409 stale_token, its renew and unlock
# 409 not_owner, the next holder's write 200; strict leases.
# ctest: short

# shellcheck source=SCRIPTDIR/pause_locked.sh
source "$(dirname "${BASH_SOURCE[0]}")/pause_locked.sh"
rl_max_ttl=20s # the next holder's lease is 15 s
# shellcheck source=SCRIPTDIR/redlock.helpers.bash
source "$(dirname "${BASH_SOURCE[0]}")/redlock.helpers.bash"

eval "pl_check() $(declare -f scenario_check | tail -n +2)"
scenario_check() {
    pl_check
    rl_check_reported "$gport"
}
