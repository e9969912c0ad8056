# Scenario proxy_slow (issue 7, "Connections dropped", the proxy's delay): the gateway reaches
# Redis through fg_proxy (the helpers of proxy_network.sh), which holds every chunk 900 ms
# each way for 8 s at a time, while the workload runs. Every Redis call then takes about
# 1.8 s: slow, but inside the gateway's 2 s command timeout, so nothing fails fast and every
# call is waited out. Expected: the checker's invariants, above all invariant 8 (every answer
# within wait_ms + 5 s, never a client giving up), at least one lock granted inside each slow
# window, and the end checks of proxy_network.
#
# Not in ctest, and it fails in scripts/faults.sh --full as of this commit: a gateway bug,
# reported to the lead. POST /lock answers come 3.7, 5.5, 7.3 and 8.2 s after the request
# (in steps of one 1.8 s Redis call), past wait_ms + 5 s, some after the client gave up:
# every acquire attempt holds its resource's floor stripe lock (gateway/src/locks.c,
# attempt()) across its Redis round trip, so waiting requests on one resource take turns,
# one Redis call each, whatever their wait_ms; and a pool thread blocked in a call delays
# every other connection it serves (a PUT answered after 5.8 s with one Redis call).
# Once fixed, it belongs in ctest (3 passing runs first).

source "$(dirname "${BASH_SOURCE[0]}")/proxy_network.sh"

faults=2
[ "$length" = full ] && faults=5
hold_s=8

scenario_fault() {
    progress "$steps"
    fault_window "delay 900" proxy_slow "a lock granted through a 900 ms delay" 200 lock 1
}
