#!/usr/bin/env bash
# Checks that the files of a component's source folder form layers: no circle of dependencies.
# A module is a file name without its extension (fence.c and fence.h are one module). Module A
# depends on module B when a file of A includes "B.h", or calls a function that B.c defines
# (non-static). Counting calls, not only includes, keeps a header that declares everything from
# hiding a circle. Headers of other folders (locklib/locklib.h, <hiredis/hiredis.h>) and
# functions of other components do not count.
#
#   bash scripts/layers.sh [DIR...]      (default: gateway/src locklib/src storage/src)
#
# For each folder it prints every module with what it depends on, then the layers: layer 0
# depends on nothing in the folder, layer k only on lower layers. A circle is named, and the
# exit status is then 1.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- gateway/src locklib/src storage/src
status=0
for dir in "$@"; do
    declare -A deps=() owner=()
    files=()
    for f in "$dir"/*.c "$dir"/*.h; do [ -e "$f" ] && files+=("$f"); done
    add_dep() { # module dependency
        [ "$2" = "$1" ] && return 0
        case " ${deps[$1]} " in *" $2 "*) ;; *) deps[$1]="${deps[$1]} $2" ;; esac
    }
    # Which module defines each non-static function (a definition starts at column 0 and its
    # line has no ';').
    for f in "${files[@]}"; do
        m=$(basename "${f%.*}")
        deps[$m]="${deps[$m]:-}"
        case "$f" in *.c) ;; *) continue ;; esac
        while read -r sym; do
            owner[$sym]=$m
        done < <(grep -E '^[A-Za-z][^;=]*[ *][A-Za-z_][A-Za-z0-9_]*\(' "$f" |
            grep -vE '^(static|typedef|struct|enum|union|extern)\b' | grep -v ';' |
            sed -E 's/^[^(]*[ *]([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/')
    done
    for f in "${files[@]}"; do
        m=$(basename "${f%.*}")
        while read -r inc; do
            [ -e "$dir/$inc" ] && add_dep "$m" "${inc%.h}"
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
        case "$f" in *.c) ;; *) continue ;; esac
        # Calls: identifiers followed by '(' once the compiler has dropped the comments.
        while read -r sym; do
            [ -n "${owner[$sym]:-}" ] && add_dep "$m" "${owner[$sym]}"
        done < <(gcc -fpreprocessed -dD -E -P "$f" 2>/dev/null |
            grep -oE '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(' | sed -E 's/[[:space:]]*\($//' | sort -u)
    done
    echo "== $dir"
    for m in $(printf '%s\n' "${!deps[@]}" | sort); do echo "  $m ->${deps[$m]}"; done
    declare -A layer=()
    k=0
    while [ "${#layer[@]}" -lt "${#deps[@]}" ]; do
        next=()
        for m in "${!deps[@]}"; do
            [ -n "${layer[$m]:-}" ] && continue
            ok=1
            for d in ${deps[$m]}; do
                if [ -z "${layer[$d]:-}" ] || [ "${layer[$d]}" -gt "$k" ]; then ok=0; break; fi
            done
            [ $ok -eq 1 ] && next+=("$m")
        done
        if [ "${#next[@]}" -eq 0 ]; then
            left=()
            for m in "${!deps[@]}"; do [ -z "${layer[$m]:-}" ] && left+=("$m"); done
            echo "  CIRCLE among: $(printf '%s\n' "${left[@]}" | sort | tr '\n' ' ')"
            status=1
            break
        fi
        for m in "${next[@]}"; do layer[$m]=$((k + 1)); done
        echo "  layer $k: $(printf '%s\n' "${next[@]}" | sort | tr '\n' ' ')"
        k=$((k + 1))
    done
    unset deps layer owner
done
exit $status
