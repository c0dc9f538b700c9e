#!/usr/bin/env bash
# e2e.sh - the service end to end: loadgen against 3 replicas (64 connections,
# DURATION seconds, a stock that never runs out) for lock modes redis with
# spin, redis with notify + hand-off + group commit, and atomic, at --sync
# full and normal; on one hot item (e2e-hot) and spread over 1000 items
# (e2e-spread). Then e2e-cart: POST /orders carts of 3 lines over 8 hot items
# at --sync full, redis with its defaults against atomic. Prints throughput
# (orders/s for carts), p50/p99 and the verdict of each run, and each redis
# mode's throughput as a ratio to atomic's.
# Usage: bench/e2e.sh (make bench runs it). Knobs: BUILD, DURATION=5,
# WORKLOADS="hot spread cart" (a subset runs only those).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
DURATION=${DURATION:-5}
WORKLOADS=${WORKLOADS:-hot spread cart}
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/e2e-bench.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
redis_port=$(free_port)
stack_redis "$redis_port"

declare -A modes=(
    [spin]="--lock redis --wait-mode spin --batch off"
    [handoff+batch]="--lock redis --wait-mode notify --batch on"
    [atomic]="--lock atomic"
    [redis]="--lock redis" # the defaults: notify, hand-off, group commit
)

# run WORKLOAD SYNC MODE: three fresh replicas on a fresh database, one loadgen run.
run() {
    local workload=$1 sync=$2 mode=$3 ports=() targets
    rm -f "$STACK_DIR"/stock.db*
    local pid_mark
    pid_mark=$(wc -l <"$STACK_DIR/pids")
    for i in 0 1 2; do
        ports+=("$(free_port)")
        # shellcheck disable=SC2086 # the mode's flags are words
        stack_stockd "r$i" "${ports[$i]}" "$redis_port" --sync "$sync" ${modes[$mode]} \
            --log-level warn
    done
    targets=$(printf 'http://127.0.0.1:%s,' "${ports[@]}")
    local items=() json=$STACK_DIR/$workload-$sync-$mode.json
    [ "$workload" = spread ] && items=(--items 1000)
    [ "$workload" = cart ] && items=(--items 8 --cart-lines 3)
    "$BUILD/loadgen" -d "$DURATION" -n 0 -c 64 --stock 100000000 "${items[@]}" \
        --target "${targets%,}" --json "$json" >"$STACK_DIR/out" 2>&1 || true
    # stop this run's replicas (the lines added after pid_mark)
    tail -n +"$((pid_mark + 1))" "$STACK_DIR/pids" | while read -r pid; do
        kill -TERM "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    done
    head -n "$pid_mark" "$STACK_DIR/pids" >"$STACK_DIR/pids.keep"
    mv "$STACK_DIR/pids.keep" "$STACK_DIR/pids"
    local verdict tp p50 p99
    verdict=$(grep -o 'VERDICT: [A-Z]*' "$STACK_DIR/out" || echo "VERDICT: ERROR")
    tp=$(json_number throughput "$json")
    p50=$(json_number p50 "$json") p99=$(json_number p99 "$json") # all answers, in us
    echo "$workload $sync $mode ${tp:-0} ${verdict#VERDICT: }" >>"$STACK_DIR/results"
    local unit=req/s
    [ "$workload" = cart ] && unit=orders/s # a request is one order of 3 lines
    printf '%-7s sync=%-6s %-14s %9.0f %s   p50 %7.2f ms   p99 %8.2f ms   %s\n' "$workload" \
        "$sync" "$mode" "${tp:-0}" "$unit" "$(echo "${p50:-0} / 1000" | bc -l)" \
        "$(echo "${p99:-0} / 1000" | bc -l)" "$verdict"
}

# The first value of "key" in loadgen's JSON report (one value per line there).
json_number() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p" "$2" | head -n 1; }

: >"$STACK_DIR/results"
echo "== e2e: loadgen -c 64 -d ${DURATION}s against 3 replicas on one SQLite file"
for workload in hot spread; do
    [[ " $WORKLOADS " == *" $workload "* ]] || continue
    for sync in full normal; do
        for mode in spin handoff+batch atomic; do
            run "$workload" "$sync" "$mode"
        done
    done
done
if [[ " $WORKLOADS " == *" cart "* ]]; then
    echo
    echo "== e2e-cart: carts (POST /orders) of 3 lines over 8 hot items, sync=full"
    for mode in redis atomic; do
        run cart full "$mode"
    done
fi
echo
echo "== throughput relative to atomic (same workload and sync)"
awk '{ tp[$1" "$2" "$3] = $4 } END {
    split("hot spread", W, " "); split("full normal", S, " ");
    for (i = 1; i <= 2; i++) for (j = 1; j <= 2; j++) {
        a = tp[W[i]" "S[j]" atomic"];
        if (a > 0)
            printf "%-7s sync=%-6s spin %.2fx   handoff+batch %.2fx\n", W[i], S[j],
                   tp[W[i]" "S[j]" spin"] / a, tp[W[i]" "S[j]" handoff+batch"] / a }
    if (tp["cart full atomic"] > 0)
        printf "%-7s sync=%-6s redis %.2fx\n", "cart", "full",
               tp["cart full redis"] / tp["cart full atomic"] }' \
    "$STACK_DIR/results"
grep -q "ERROR\|FAIL" "$STACK_DIR/results" && { echo "a run did not PASS" >&2; exit 1; }
exit 0
