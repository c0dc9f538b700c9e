#!/usr/bin/env bash
# lock_ab.sh - this tree's lock library against another revision's on the
# uncontended acquire+release pair, interleaved in one process
# (bench/lockab.c) next to a plain SET, against a private redis-server: a
# before/after that holds on a machine whose speed moves from one second to
# the next. The other revision's lock/ is built in a temporary directory
# with every symbol renamed base_<name>: its API base_dlock_*, its internals
# base_dlock__* (or, before they were dlock__*, base_dlock_* too).
# Usage: bench/lock_ab.sh REV [ROUNDS=40] [WINDOW_MS=250]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
. bench/rev_lock.sh
rev=${1:?usage: bench/lock_ab.sh REV [ROUNDS] [WINDOW_MS]}
rounds=${2:-40}
window=${3:-250}

STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/lock-ab.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM

# lockab.c passes this tree's config and option structs to the other build:
# their fields there (comments aside) must be the first of ours. Fields this
# tree added at the end are read by its own build only.
structs() { # one line per struct: its name, a tab, its fields
    sed -n '/^typedef struct dlock_\(config\|opts\|endpoint\) {/,/^} dlock_/p' |
        sed 's|/\*.*||; /^ *\*/d; s/ *$//; /^$/d' |
        awk '/^typedef/ {f = ""; next} /^}/ {print $2 "\t" f; next} {f = f $0 "|"}' | sort
}
# Where they are: dlock.h, or dlock_base.h beneath it once that came.
public_of() { # public_of REV: its public headers that declare them, one after the other
    local h
    for h in dlock.h dlock_base.h; do git show "$1:lock/$h" 2>/dev/null || true; done
}
if ! join -t $'\t' <(public_of "$rev" | structs) <(cat lock/dlock.h lock/dlock_base.h | structs) |
    awk -F'\t' 'index($3, $2) == 1 {n++} END {exit n != 3}'; then
    echo "lock_ab.sh: dlock_config or dlock_opts at $rev are not the first fields of" \
         "this tree's: not comparable" >&2
    exit 2
fi

base=$STACK_DIR/base
rev_lock "$rev" "$base"
flags=$rev_flags
# all of them, not only the API: a revision's internals may have this tree's names
nm -g --defined-only "$base/libdlock.a" | awk 'NF == 3 {print $3, "base_" $3}' | sort -u \
    >"$base/rename"
objcopy --redefine-syms="$base/rename" "$base/libdlock.a"

make -s "$BUILD/libdlock.a"
mkdir -p "$BUILD/bench"
$CC $flags -I. -o "$BUILD/bench/lockab" bench/lockab.c "$BUILD/libdlock.a" "$base/libdlock.a" \
    $($PKG_CONFIG --libs hiredis)

port=$(free_port)
stack_redis "$port"
echo "lock_ab: $(git rev-parse --short "$rev") (base) against this tree (new)," \
     "$rounds rounds of $window ms each; load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$BUILD/bench/lockab" "$port" "$rounds" "$window"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
