# shellcheck shell=bash disable=SC2154,SC2034
# (SC2154: $tmp, $gw_pid, $steps... are run_scenario.sh's; SC2034: it reads faults, mode...)
# transfers: money moved between 8 accounts in fenced transactions (POST /resources, the
# workload's transfers mode: both locks taken with one multi-resource /lock, both accounts read,
# both written in one transaction with their tokens; one transfer in 8 pauses past its lease
# and is sent once another client holds a newer token). On LMDB, one gateway. Sourced by
# run_scenario.sh.
#
# The faults, in turn:
#   1. the gateway killed with SIGKILL while transactions are in flight, and restarted on
#      the same data directory;
#   2. Redis killed with SIGKILL and restarted (AOF, appendfsync always: nothing lost);
#   3. the gateway frozen (SIGSTOP) for 2 s, then thawed.
# Expected: invariant 11 (check_txn.c): no transaction half visible, none acknowledged lost,
# no paused client's transfer accepted, the final balances add up to the total; and the
# usual invariants of every lock and unlock.

faults=3
[ "$length" = full ] && faults=9

# At least one paused client's transfer must meet a newer token and be refused whole.
checker_extra=(--expect-fenced 1)

scenario_mode() { mode=(transfers 8); }

scenario_fault() {
    progress "$steps"
    case $(($1 % 3)) in
        1)
            kill -KILL "$gw_pid"; wait "$gw_pid" 2>/dev/null || true
            gw_start
            mark heal ;;
        2)
            redis_kill
            redis_start
            mark heal ;;
        0)
            mark freeze
            kill -STOP "$gw_pid"
            sleep 2 # the length of the fault, not a wait for anything
            kill -CONT "$gw_pid"
            mark thaw
            mark heal ;;
    esac
    check_sanitizers
}
