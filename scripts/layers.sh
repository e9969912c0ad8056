#!/usr/bin/env bash
# Checks that the files of a component's source folder form layers: no circle of dependencies.
# A module is a file name without its extension (fence.c and fence.h are one module). Module A
# depends on module B when a file of A includes "B.h", or calls a function that B.c defines
# (non-static). Counting calls, not only includes, keeps a header that declares everything from
# hiding a circle. Headers of other components (locklib/locklib.h, <hiredis/hiredis.h>) and
# functions of other components do not count.
#
#   bash scripts/layers.sh [DIR[:ORDER]...]
#       (default: gateway/src:base,core,rt,http,ops,. locklib/src storage/src)
#
# DIR alone: its files are one folder. For each folder it prints every module with what it
# depends on, then the layers: layer 0 depends on nothing in the folder, layer k only on lower
# layers. A circle is named, and the exit status is then 1.
#
# DIR:ORDER: DIR's subfolders, listed from the bottom up ("." is DIR itself), each checked for
# circles as above. A module is then named by its path under DIR ("rt/pipe"), and an include
# "rt/pipe.h" is resolved from DIR (an include without a folder, from the including file's
# folder). A module may depend only on modules of its own folder or of a folder before it in
# ORDER. A dependency on a later folder is named, as is a folder with sources that ORDER does
# not list, and the exit status is then 1. With an ops/ folder (the gateway's), no file there
# may name gw_server or include rt/gateway.h, directly or through other headers: operations
# see only the runtime (rt/runtime.h).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- gateway/src:base,core,rt,http,ops,. locklib/src storage/src
status=0

# Prints the layers of the modules given as arguments, counting only dependencies among them
# (deps[] as filled below). Sets status=1 on a circle.
layers_of() {
    declare -A layer=() in=()
    local m d k=0 ok
    for m in "$@"; do in[$m]=1; done
    while [ "${#layer[@]}" -lt "$#" ]; do
        next=()
        for m in "$@"; do
            [ -n "${layer[$m]:-}" ] && continue
            ok=1
            for d in ${deps[$m]}; do
                [ -n "${in[$d]:-}" ] || continue
                if [ -z "${layer[$d]:-}" ] || [ "${layer[$d]}" -gt "$k" ]; then ok=0; break; fi
            done
            [ $ok -eq 1 ] && next+=("$m")
        done
        if [ "${#next[@]}" -eq 0 ]; then
            left=()
            for m in "$@"; do [ -z "${layer[$m]:-}" ] && left+=("$m"); done
            echo "  CIRCLE among: $(printf '%s\n' "${left[@]}" | sort | tr '\n' ' ')"
            status=1
            return
        fi
        for m in "${next[@]}"; do layer[$m]=$((k + 1)); done
        echo "  layer $k: $(printf '%s\n' "${next[@]}" | sort | tr '\n' ' ')"
        k=$((k + 1))
    done
}

for arg in "$@"; do
    dir=${arg%%:*}
    order=
    [ "$arg" != "$dir" ] && order=${arg#*:}
    declare -A deps=() owner=() folder=()
    files=()
    folders=(.)
    if [ -n "$order" ]; then
        IFS=, read -r -a folders <<<"$order"
        # A folder with sources that the order leaves out would escape the check.
        while read -r sub; do
            sub=${sub#"$dir"/}
            [ "$sub" = "$dir" ] && sub=.
            case ",$order," in *",$sub,"*) ;; *)
                echo "== $dir: folder $sub is not in the order ($order)"
                status=1 ;;
            esac
        done < <(find "$dir" -name '*.[ch]' -printf '%h\n' | sort -u)
    fi
    # The module of a file, into mod: its path under dir without the extension ("./"
    # dropped). It sets a variable rather than printing, so that no call forks a subshell:
    # the check runs it for every include of every file.
    module_of() { local p=${1#"$dir"/}; p=${p%.*}; mod=${p#./}; }
    for sub in "${folders[@]}"; do
        for f in "$dir/$sub"/*.c "$dir/$sub"/*.h; do
            [ -e "$f" ] || continue
            files+=("$f")
            module_of "$f"
            folder[$mod]=$sub
        done
    done
    add_dep() { # module dependency
        [ "$2" = "$1" ] && return 0
        case " ${deps[$1]} " in *" $2 "*) ;; *) deps[$1]="${deps[$1]} $2" ;; esac
    }
    cfiles=()
    for f in "${files[@]}"; do
        module_of "$f"
        deps[$mod]="${deps[$mod]:-}"
        case "$f" in *.c) cfiles+=("$f") ;; esac
    done
    # Which module defines each non-static function (a definition starts at column 0 and its
    # line has no ';'). Each step below reads every file in one process, not one per file.
    while read -r f sym; do
        module_of "$f"
        owner[$sym]=$mod
    done < <(awk '
        /^[A-Za-z][^;=]*[ *][A-Za-z_][A-Za-z0-9_]*\(/ &&
        !/^(static|typedef|struct|enum|union|extern)([^A-Za-z0-9_]|$)/ && !/;/ {
            s = substr($0, 1, index($0, "(") - 1)
            match(s, /[A-Za-z_][A-Za-z0-9_]*$/)
            print FILENAME, substr(s, RSTART, RLENGTH)
        }' "${cfiles[@]}")
    # Calls: identifiers followed by '(' once the compiler has dropped the comments, for
    # every .c file in one compiler run, whose line markers ('# 1 "FILE"') say which file
    # each line is of.
    declare -A calls=() incs=()
    while read -r f sym; do
        calls[$f]="${calls[$f]:-} $sym"
    done < <(gcc -fpreprocessed -dD -E "${cfiles[@]}" 2>/dev/null | awk '
        /^# [0-9]+ "/ { f = $3; gsub(/"/, "", f); next }
        {
            while (match($0, /[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
                s = substr($0, RSTART, RLENGTH); sub(/[ \t]*\($/, "", s); print f, s
                $0 = substr($0, RSTART + RLENGTH)
            }
        }' | sort -u)
    while read -r f inc; do
        incs[$f]="${incs[$f]:-} $inc"
    done < <(awk 'match($0, /^[ \t]*#[ \t]*include[ \t]*"[^"]*"/) {
            s = substr($0, RSTART, RLENGTH); sub(/^[^"]*"/, "", s); sub(/"$/, "", s)
            print FILENAME, s
        }' "${files[@]}")
    for f in "${files[@]}"; do
        module_of "$f"
        m=$mod
        for inc in ${incs[$f]:-}; do
            if [ -n "$order" ] && [ -e "$dir/$inc" ] && module_of "$dir/$inc" &&
                [ -n "${folder[$mod]:-}" ]; then
                add_dep "$m" "$mod"
            elif [ -e "${f%/*}/$inc" ]; then
                module_of "${f%/*}/$inc"
                add_dep "$m" "$mod"
            fi
        done
        case "$f" in *.c) ;; *) continue ;; esac
        for sym in ${calls[$f]:-}; do
            [ -n "${owner[$sym]:-}" ] && add_dep "$m" "${owner[$sym]}"
        done
    done
    for sub in "${folders[@]}"; do
        mods=()
        for m in "${!deps[@]}"; do [ "${folder[$m]}" = "$sub" ] && mods+=("$m"); done
        [ "${#mods[@]}" -gt 0 ] || continue
        if [ "$sub" = . ]; then echo "== $dir"; else echo "== $dir/$sub"; fi
        for m in $(printf '%s\n' "${mods[@]}" | sort); do echo "  $m ->${deps[$m]}"; done
        layers_of "${mods[@]}"
    done
    if [ -n "$order" ]; then
        declare -A rank=()
        k=0
        for sub in "${folders[@]}"; do rank[$sub]=$k; k=$((k + 1)); done
        echo "== $dir: folder order $(echo "$order" | sed 's/,/ < /g')"
        bad=0
        for m in $(printf '%s\n' "${!deps[@]}" | sort); do
            for d in ${deps[$m]}; do
                if [ "${rank[${folder[$d]}]}" -gt "${rank[${folder[$m]}]}" ]; then
                    echo "  WRONG WAY: $m -> $d (${folder[$m]} may not depend on ${folder[$d]})"
                    bad=1
                fi
            done
        done
        if [ $bad -eq 0 ]; then echo "  every dependency points to its own folder or one below"; fi
        [ $bad -eq 0 ] || status=1
        unset rank
    fi
    # Operations see the runtime (rt/runtime.h, gw_rt), never the HTTP server's own state
    # (rt/gateway.h, gw_server): a file of ops/ that names gw_server, or includes rt/gateway.h
    # directly or through other headers, is named, and the exit status is then 1.
    if [ -n "$order" ] && [ -d "$dir/ops" ] && [ -e "$dir/rt/gateway.h" ]; then
        echo "== $dir/ops: operations see gw_rt, not gw_server"
        bad=0
        for f in "$dir"/ops/*.c "$dir"/ops/*.h; do
            [ -e "$f" ] || continue
            if grep -qw gw_server "$f"; then
                echo "  NAMES gw_server: $f"
                bad=1
            fi
            seen=" $f "
            pending=("$f")
            while [ "${#pending[@]}" -gt 0 ]; do
                g=${pending[0]}
                pending=("${pending[@]:1}")
                for inc in ${incs[$g]:-}; do
                    for h in "$dir/$inc" "${g%/*}/$inc"; do
                        [ -e "$h" ] || continue
                        case "$seen" in *" $h "*) continue ;; esac
                        seen="$seen$h "
                        pending+=("$h")
                    done
                done
            done
            case "$seen" in *" $dir/rt/gateway.h "*)
                echo "  INCLUDES rt/gateway.h: $f"
                bad=1 ;;
            esac
        done
        if [ $bad -eq 0 ]; then echo "  none includes rt/gateway.h or names gw_server"; fi
        [ $bad -eq 0 ] || status=1
    fi
    unset deps owner folder calls incs
done
exit $status
