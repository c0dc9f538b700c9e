#!/usr/bin/env bash
# test_layers.sh - keeps the layering of ARCHITECTURE.md true, from the
# #include lines: no include cycle between the modules of a folder, calls
# that stay inside their product (lock/ needs nothing of the others; server/
# only lock/dlock.h of the lock), and http.c that reaches the service, not
# what lies beneath it. A module is x.c with x.h, and x_y.c / x_y.h when x.h
# exists (store_sqlite.c belongs to store). lock/dlock.h is the lock's
# interface, implemented by several of its files, so it is no module of its
# own. Prints cmocka-style lines for tests/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."

REPORT_SUITE=layers
. tests/sh/report.sh

# module DIR FILE: the module a file of DIR belongs to.
module() {
    local dir=$1 base
    base=$(basename "$2")
    base=${base%.*}
    if [[ $base == *_* ]] && [ -f "$dir/${base%%_*}.h" ]; then
        base=${base%%_*}
    fi
    echo "$dir/$base"
}

# edges DIR: "from to" for every include between two files of the repository.
edges() {
    local dir=$1 f inc target
    for f in "$dir"/*.c "$dir"/*.h; do
        [ -f "$f" ] || continue
        while IFS= read -r inc; do
            case $inc in */*) target=$inc ;; *) target=$dir/$inc ;; esac
            [ -f "$target" ] || continue
            [ "$target" = lock/dlock.h ] && [ "$dir" = lock ] && continue
            echo "$(module "$dir" "$f") $(module "$(dirname "$target")" "$target") $f $inc"
        done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
    done
}

# cycles: reads "from to ..." lines, prints one line per cycle found.
cycles() {
    awk '
        $1 != $2 { adj[$1] = adj[$1] " " $2; nodes[$1]; nodes[$2] }
        function visit(n,    i, k, m, next_) {
            state[n] = 1; path[++depth] = n
            k = split(adj[n], next_, " ")
            for (i = 1; i <= k; i++) {
                m = next_[i]
                if (state[m] == 1) {
                    line = m
                    for (j = depth; j >= 1 && path[j] != m; j--) line = path[j] " -> " line
                    print m " -> " line
                } else if (state[m] == 0) visit(m)
            }
            state[n] = 2; depth--
        }
        END { for (n in nodes) if (!state[n]) visit(n) }
    '
}

# expect_none NAME LINES: passes when LINES is empty, else shows them.
expect_none() { report "$1" "$([ -z "$2" ] && echo 0 || echo 1)" "$2"; }

for dir in lock server loadgen; do
    expect_none "no include cycle in $dir/" "$(edges "$dir" | cycles)"
done

expect_none "lock/ includes nothing of the other products" \
    "$(edges lock | awk '$2 !~ /^lock\//')"
expect_none "loadgen/ includes nothing of the other products" \
    "$(edges loadgen | awk '$2 !~ /^loadgen\//')"
expect_none "server/ uses only lock/dlock.h of the lock" \
    "$(edges server | awk '$2 !~ /^server\// && $4 != "lock/dlock.h"')"

# http.c parses, asks the service, answers: it never reaches the store, the
# lock, the group-commit queues or the configuration.
expect_none "http.c reaches the service, not what lies beneath it" \
    "$(edges server | awk '$3 == "server/http.c" &&
        $2 !~ /^server\/(http|reaper|service|request|route|rules|metrics|log)$/')"
