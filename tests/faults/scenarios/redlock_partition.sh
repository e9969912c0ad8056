# shellcheck shell=bash disable=SC2154,SC2034
# (SC2154: $tmp, $gport, $seed... are run_scenario.sh's; SC2034: it reads faults, steps...)
# redlock_partition: the gateway on Redlock over 3 independent masters reaches
# master 0 only through fg_proxy (the helpers of proxy_network.sh), which cuts it off in
# three ways, in turn, while the workload runs: blackhole (nothing forwarded, connections kept
# open: the gateway's reads time out), reset (every connection reset, new ones at once) and
# late (every chunk held 2.5 s, past the per-node timeout; commands still reach the master
# after the gateway gave up on them). A minority is cut off, so locks must still be granted:
# each fault lasts 3 s and then until a lock was granted entirely inside it ("rl_cut" to
# "rl_cut_end"); then the proxy goes back to pass and "heal" is marked. No "# data-loss"
# line: the checker runs with --strict-leases (a late acquisition that runs on master 0 after
# the gateway gave up is released there or runs out; it is never part of a majority).
# ctest: short

# shellcheck source=SCRIPTDIR/proxy_network.sh
source "$(dirname "${BASH_SOURCE[0]}")/proxy_network.sh"
# proxy_network.sh's start of the proxy (in front of $rport) and its end checks, kept under
# other names: this file starts the proxy in front of master 0.
eval "proxy_prestart() $(declare -f scenario_prestart | tail -n +2)"
eval "proxy_check() $(declare -f scenario_check | tail -n +2)"
# shellcheck source=SCRIPTDIR/redlock.helpers.bash
source "$(dirname "${BASH_SOURCE[0]}")/redlock.helpers.bash"

faults=3
[ "$length" = full ] && faults=9
steps=30
[ "$length" = full ] && steps=90

rl_proxy_exit() {
    local rc=$?
    set +e
    fg_redis_set_stop
    (exit "$rc") # proxy_exit reads the status from $?
    proxy_exit
}

scenario_prestart() {
    rl_start_set
    local rport=${FG_REDIS_SET_PORTS[0]} # proxy_prestart puts the proxy in front of $rport
    proxy_prestart
    trap rl_proxy_exit EXIT
    rl_node0_port=$proxy_port
    rl_set_url
}

scenario_fault() {
    local mode
    progress "$steps"
    case $((($1 - 1) % 3)) in
        0) mode=blackhole ;;
        1) mode=reset ;;
        2) mode="delay 2500" ;;
    esac
    proxy_cmd "$mode"
    mark rl_cut
    window_from=$(mark_time rl_cut)
    sleep "$hold_s" # the length of the fault, not a wait for anything
    wait_until "a lock granted with master 0 cut off ($mode)" 30 since_mark 200 lock 1
    mark rl_cut_end
    proxy_cmd pass
    mark heal
    say "fault $1 ($mode): locks granted while master 0 was cut off"
}

scenario_check() {
    # A lock granted entirely inside each cut: from the history, as the faults waited for.
    awk -F'\t' '
        $2 == "mark" && $14 == "rl_cut" { w++; from[w] = $5; to[w] = 9e18; next }
        $2 == "mark" && $14 == "rl_cut_end" { to[w] = $4; next }
        $2 != "mark" { n++; op[n] = $2; st[n] = $4; en[n] = $5; code[n] = $6 }
        END {
            bad = 0
            for (i = 1; i <= w; i++) {
                granted = 0
                for (j = 1; j <= n; j++) {
                    if (st[j] >= from[i] && en[j] <= to[i] && op[j] == "lock" && code[j] == 200) granted++
                }
                printf "cut %d: %d locks granted with master 0 cut off\n", i, granted
                if (granted == 0) bad++
            }
            exit bad > 0
        }' "$hist" || fail "a cut of one master of three stopped the locks"
    rl_check_reported "$gport"
    proxy_check
}
