#!/usr/bin/env bash
# history.sh - issue 34's history check, what it costs loadgen: REPLICAS (3)
# stockd replicas of stockd's defaults on one Redis and one SQLite file; N
# (20,000) POST /reduceStock of one unit over ITEMS (8) fresh items of as much
# stock (so nothing sells out), C (64) connections, closed loop; runs that take
# turns, ROUNDS (5) of each, with the check (--history-ms each of HISTORY, "5
# 1": a read of the first item every 5 ms, the default, and every 1 ms) and
# without it (--history-ms 0). Printed per run: requests/s, the reads taken,
# the check's verdict; then the medians per setting, each against the median
# without, and the median of the rounds' own ratios (each run against the
# run without the check of its round, which drifts less with the machine's
# load). Usage: bench/history.sh. Knobs: BUILD, REPLICAS, N, ITEMS, C,
# ROUNDS, HISTORY, STOCKD_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
REPLICAS=${REPLICAS:-3}
N=${N:-20000}
ITEMS=${ITEMS:-8}
C=${C:-64}
ROUNDS=${ROUNDS:-5}
HISTORY=${HISTORY:-5 1}
STOCKD_FLAGS=${STOCKD_FLAGS:-}
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/history-bench.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
redis_port=$(free_port)
stack_redis "$redis_port"
targets=""
for i in $(seq "$REPLICAS"); do
    port=$(free_port)
    # shellcheck disable=SC2086 # the flags are a list
    stack_stockd "r$i" "$port" "$redis_port" $STOCKD_FLAGS
    targets+="${targets:+,}http://127.0.0.1:$port"
done
echo "history check's cost: $REPLICAS replicas, $(nproc) cores, $N requests over $ITEMS items," \
    "$C connections, $ROUNDS rounds; stockd flags: ${STOCKD_FLAGS:-(defaults)}"

# One run with --history-ms $1: "ms rate reads violations verdict".
run() {
    local json=$STACK_DIR/run.json rc=0
    "$BUILD/loadgen" -n "$N" -c "$C" --items "$ITEMS" --stock "$N" --history-ms "$1" \
        --json "$json" --target "$targets" >"$STACK_DIR/run.out" 2>&1 || rc=$?
    if [ ! -s "$json" ]; then
        echo "loadgen exited $rc without a report:" >&2
        cat "$STACK_DIR/run.out" >&2
        return 1
    fi
    jq -r --arg ms "$1" '"\($ms) \(.throughput) \(.history.reads // 0) " +
        "\(.history.violations // 0) \(.verdict)"' "$json"
    rm -f "$json"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

: >"$STACK_DIR/rates"
for r in $(seq "$ROUNDS"); do
    for ms in 0 $HISTORY; do
        line=$(run "$ms")
        echo "round $r: --history-ms $line" | awk '{ printf "%s %s %s %-4s %9.0f req/s, %6d reads, %d violations, %s\n", $1, $2, $3, $4, $5, $6, $7, $8 }'
        echo "$r $line" >>"$STACK_DIR/rates"
    done
done
base=$(awk '$2 == 0 { print $3 }' "$STACK_DIR/rates" | median)
echo
printf 'median without the check (--history-ms 0): %.0f req/s\n' "$base"
for ms in $HISTORY; do
    m=$(awk -v ms="$ms" '$2 == ms { print $3 }' "$STACK_DIR/rates" | median)
    reads=$(awk -v ms="$ms" '$2 == ms { print $4 }' "$STACK_DIR/rates" | median)
    ratios=$(awk -v ms="$ms" '$2 == 0 { b[$1] = $3 } $2 == ms { w[$1] = $3 }
        END { for (r in w) if (b[r] > 0) printf "%.3f\n", w[r] / b[r] }' "$STACK_DIR/rates")
    printf 'median with --history-ms %s: %.0f req/s (%.0f reads a run): ratio of medians %.3f,' \
        "$ms" "$m" "$reads" "$(echo "$m / $base" | bc -l)"
    printf ' median of the rounds'"'"' ratios %.3f (%s)\n' "$(echo "$ratios" | median)" \
        "$(echo "$ratios" | sort -g | paste -sd ' ')"
done
