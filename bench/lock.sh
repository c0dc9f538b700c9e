#!/usr/bin/env bash
# lock.sh - the lock library's benchmarks against a private redis-server:
#   lock-uncontended: acquire+release pairs/s on one thread next to
#     redis-benchmark's SET rate with one connection, alternating, medians of
#     ROUNDS rounds (the floor is two round trips per pair: ratio <= 0.5);
#   lock-hot: W workers over 4 processes on one key, for each wait mode, with
#     a critical section of GET+SET (and, variant C, 1 ms of sleep).
# Usage: bench/lock.sh (make bench runs it). Knobs: BUILD, ROUNDS=5, SECONDS_HOT=5.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
ROUNDS=${ROUNDS:-5}
SECONDS_HOT=${SECONDS_HOT:-5}
bench=$BUILD/bench/lockbench
[ -x "$bench" ] || { echo "lock.sh: $bench not found: make $bench" >&2; exit 2; }

STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/lock-bench.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
port=$(free_port)
stack_redis "$port"
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

echo "== lock-uncontended: one thread, acquire+release pairs/s vs redis-benchmark -c 1 SET"
: >"$STACK_DIR/pairs"; : >"$STACK_DIR/set"
for r in $(seq "$ROUNDS"); do
    p=$("$bench" uncontended "$port" 3 | sed 's/pairs_per_s=//')
    s=$(redis-benchmark -p "$port" -c 1 -n 30000 -t set --csv | awk -F'"' '/^"SET"/ {print $4}')
    echo "$p" >>"$STACK_DIR/pairs"; echo "$s" >>"$STACK_DIR/set"
    printf 'round %d: %s pairs/s, SET %s/s, ratio %.3f\n' "$r" "$p" "$s" "$(echo "$p / $s" | bc -l)"
done
p=$(median <"$STACK_DIR/pairs"); s=$(median <"$STACK_DIR/set")
printf 'median: %s pairs/s, SET %s/s, ratio %.3f (target >= 0.45, floor 2 round trips: 0.5)\n' \
    "$p" "$s" "$(echo "$p / $s" | bc -l)"

echo
echo "== lock-hot: 4 processes, one key, lease 10 s, wait up to 10 s, ${SECONDS_HOT} s window"
echo "   lock_cmds_per_acq = Redis commands (script internals included) minus the critical"
echo "   section's GET+SET; fifo_bound = workers x mean hold; violations = acquisitions - counter"
for work in 0 1; do
    for w in 8 32; do
        for mode in spin100 spin5 notify handoff; do
            "$bench" hot "$port" "$w" 4 "$mode" "$work" "$SECONDS_HOT"
        done
    done
done
