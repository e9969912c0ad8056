# shellcheck shell=bash disable=SC2154,SC2034
# (SC2154: $tmp, $rport, $seed... are run_scenario.sh's; SC2034: it reads faults, steps...)
# aof_regression: Redis comes back from its append-only file with older data than it had.
# Sourced by run_scenario.sh (see README.md here).
#
# Redis (7.0, multi-part AOF in $tmp/redis/appendonlydir: a base file, incr files and a
# manifest; appendfsync always) is killed with SIGKILL and restarted on data that is behind
# what it had acknowledged, while the workload runs. The faults alternate:
#   odd:  an older AOF restored. A copy of the AOF directory is taken while the workload
#         runs (in faults 3 and 7 right after a BGREWRITEAOF, so it has an RDB base with the
#         data); the workload then takes more grants and writes; Redis is killed, its AOF
#         directory replaced by the copy, and restarted.
#   even: a truncated AOF. Redis is killed and its last incr file cut short in the middle of
#         one of its last five writes to a fence counter (typically a few hundred to a few
#         thousand bytes off its end).
#         With aof-load-truncated yes (Debian's and upstream's default, given explicitly
#         here) Redis logs a warning, drops the cut command (and the rest of its MULTI) and
#         starts as if nothing happened; the scenario checks it did start that way.
# In faults 3, 4, 7 and 8 the gateway is killed with SIGKILL together with Redis and
# restarted after it, so only the floor's durable parts (storage's token ledger, the highest
# token written) can keep the tokens growing.
# After each kill a probe redis-server loads a copy of the AOF directory twice on a port of
# its own, where the gateway cannot change it: as Redis left it, and as it will be restarted
# on. At least one fence counter of the run must be lower in the second, or the fault took
# nothing back and the scenario fails (aof_regression.helpers.bash).
#
# Expected: tokens keep growing across the regression (the gateway passes a floor with every
# acquisition, gateway/src/core/fence.c), so each counter that fell is lifted above its old value
# and fencegate_token_floor_corrections_total goes up; the checker's invariants 1-6 and 8
# hold (7, overlapping leases, is only reported: restored lock keys can hold a lease that
# its owner already gave up, and a lease lost with the data can be granted again); during
# each fault the gateway answers 503, never 500, and succeeds again within 5 s of the heal.
# ctest: short
# data-loss

# shellcheck source=SCRIPTDIR/aof_regression.helpers.bash
source "$(dirname "${BASH_SOURCE[0]}")/aof_regression.helpers.bash"

[ "$length" = short ] && faults=4 # two of each kind, one of each with the gateway killed
persist=(--appendonly yes --appendfsync always --aof-load-truncated yes)

scenario_prestart() { chain_cleanup; }

# What Redis 7.0 logs when it loads a cut AOF (the warnings before it name the offset).
loaded_anyway='AOF .* loaded anyway because aof-load-truncated is enabled'

aof_dir() { echo "$tmp/redis/appendonlydir"; }

# probe_load DIR FILE: loads a copy of the AOF directory DIR in a probe redis-server of its
# own and writes its fence counters to FILE (fences). The probe's log is left in
# $tmp/extra-probe.log until the next probe.
probe_load() {
    rm -rf "$tmp/probe" "$tmp/extra-probe.log"
    mkdir -p "$tmp/probe"
    cp -a "$1" "$tmp/probe/appendonlydir"
    extra_start probe "$tmp/probe" "${persist[@]}"
    fences "$extra_port" "$2"
    extra_stop "$extra_pid"
}

# aof_rewritten: no AOF rewrite running or scheduled, and the base file is not the first.
aof_rewritten() {
    local info
    info=$(rcli info persistence | tr -d '\r')
    grep -qx 'aof_rewrite_in_progress:0' <<<"$info" && grep -qx 'aof_rewrite_scheduled:0' <<<"$info" \
        && ! grep -q '^file appendonly.aof.1.base' "$(aof_dir)"/*.manifest
}

# copy_old I: the first half of an older AOF restored.
#   1. Copy the AOF directory while Redis appends to it. With appendfsync always a file
#      holds no more than Redis has acknowledged, so the copy is no newer than the counters
#      read right after it; a command cut by the copy is dropped on load (aof-load-truncated).
#   2. Let the workload go on until a counter of the run is past those values and a write
#      was acknowledged since the copy (more grants and writes the copy does not have).
copy_old() {
    progress "$steps"
    if (($1 % 4 == 3)); then
        # Faults 3 and 7 first rewrite the AOF, so the copy is a new base (an RDB holding the
        # data so far) plus a short incr file, and the older files are gone from the manifest.
        rcli bgrewriteaof >/dev/null
        wait_until "the AOF rewrite" 20 aof_rewritten
        say "fault $1: AOF rewritten: $(awk '$1 == "file" { printf "%s ", $2 }' "$(aof_dir)"/*.manifest)"
    fi
    rm -rf "$tmp/aof-old"
    cp -a "$(aof_dir)" "$tmp/aof-old"
    fences "$rport" "$tmp/fences-copied"
    copied_at=$(lines)
    wait_until "a grant past the copy" 30 moved_past "$tmp/fences-copied"
    wait_until "an acknowledged write past the copy" 30 write_ok_since "$copied_at"
}

# restore_old: the second half, once Redis is killed: the copy replaces its AOF directory.
restore_old() {
    rm -rf "$(aof_dir)"
    mv "$tmp/aof-old" "$(aof_dir)"
    say "fault $1: the AOF directory copied $(($(lines) - copied_at)) operations ago restored"
}

# truncate_last: the truncated AOF, once Redis is killed. Its last incr file (the manifest's
# last "type i" line) is cut in the middle of the key of one of its last five writes to a
# fence counter of the run (INCR or a lift), chosen at random: that write and everything
# after it are lost.
truncate_last() {
    local manifest incr offsets n k at size
    manifest=$(ls "$(aof_dir)"/*.manifest)
    incr=$(aof_dir)/$(awk '$1 == "file" && $NF == "i" { f = $2 } END { print f }' "$manifest")
    [ -f "$incr" ] || fail "no incr file in $manifest"
    # The keys are fg:{RESOURCE}:fence. Only writes of the counter count (INCR, or SET for a
    # lift): since token keys expire when idle, a renewal's PEXPIRE names the key too, and
    # cutting one takes no counter back. In the AOF (RESP) a command's name is the line two
    # before its key; awk counts the byte offset of each line, so the offset printed is that
    # of the key's "{".
    offsets=$(LC_ALL=C awk -v prefix="fg:{$scenario-$seed-" '
        index($0, prefix) == 1 && $0 ~ /}:fence\r?$/ && p2 ~ /^(INCR|incr|SET|set)\r?$/ {
            print off + 3
        }
        { p2 = p1; p1 = $0; off += length($0) + 1 }' "$incr") || true
    n=$(echo "$offsets" | grep -c . || true)
    [ "$n" -gt 0 ] || fail "no write to a fence counter of the run in $incr"
    k=$((1 + RANDOM % (n < 5 ? n : 5)))
    at=$(($(echo "$offsets" | tail -n "$k" | head -n 1) + 4)) # inside "{RESOURCE}"
    size=$(stat -c %s "$incr")
    truncate -s "$at" "$incr"
    say "fault $1: $(basename "$incr") cut from $size to $at bytes ($((size - at)) off, \
in the fence write $k from the end)"
}

# scenario_fault I: odd I an older AOF restored, even I a truncated one. The counters Redis
# had when it was killed are read by a probe from the files as they were (appendfsync
# always: they hold all it acknowledged), so writes between a read and the kill cannot
# blur the comparison.
scenario_fault() {
    local with_gw=0
    if (((($1 - 1) % 4) >= 2)); then with_gw=1; fi # faults 3, 4, 7, 8
    if (($1 % 2 == 1)); then copy_old "$1"; else progress "$steps"; fi
    corrections=$(floor_corrections)
    redis_kill
    if [ "$with_gw" = 1 ]; then gw_kill; fi
    probe_load "$(aof_dir)" "$tmp/fences-before"
    if (($1 % 2 == 1)); then restore_old "$1"; else truncate_last "$1"; fi
    probe_load "$(aof_dir)" "$tmp/fences-loaded"
    if (($1 % 2 == 0)); then
        grep -q "$loaded_anyway" "$tmp/extra-probe.log" \
            || fail "the probe did not load the truncated AOF with a warning (see its log)"
    fi
    proof_fell "$tmp/fences-before" "$tmp/fences-loaded" "fault $1"
    redis_start
    if [ "$with_gw" = 1 ]; then
        gw_start
        check_sanitizers
        say "fault $1: the gateway was killed with Redis and restarted"
    fi
    mark heal
    wait_lifted "$corrections"
}

scenario_check() {
    # Every even fault restarted Redis on a cut file: its own log must say it loaded one.
    [ "$faults" -ge 2 ] || return 0
    grep -q "$loaded_anyway" "$tmp/redis/redis.log" \
        || fail "redis.log never says a truncated AOF was loaded"
}
