#!/usr/bin/env bash
# stall.sh - issue 31's stalled restock: item A's lock held by another owner
# for HOLD_MS; 3 plain orders for A, then 16 PUT /items/A and 16 orders for A
# with workMs 20 (twice the service threads at the defaults on 2 cores);
# meanwhile item B, which nobody locked, is read and sold every 50 ms. Prints
# each request's status, when the last request for A was answered after the
# foreign lease lapsed, item B's worst latencies, and the replica's peak
# threads. One replica, one redis-server, a SQLite file, all private.
# Usage: bench/stall.sh [BUILD] (default build; OLD_BUILD=DIR runs that
# build's stockd too, first). Knobs: HOLD_MS=1000, EACH=16.
set -euo pipefail
cd "$(dirname "$0")/.."
HOLD_MS=${HOLD_MS:-1000}
EACH=${EACH:-16}
LOADGEN=${BUILD:-build}/loadgen
. scripts/stack.sh

now_ms() { date +%s%3N; }

# run_case BUILD: one replica of BUILD's stockd, the case, its report.
run_case() {
    BUILD=$1
    STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/stall-bench.XXXXXX")
    local rp port url a b key t0 lapse last bmax threads peak=0
    rp=$(free_port)
    stack_redis "$rp"
    port=$(free_port)
    stack_stockd r1 "$port" "$rp" --allow-work-ms --log-level warn
    url=http://127.0.0.1:$port
    a=$(curl -s -X POST -d '{"name":"held","stock":100000}' "$url/items" | sed 's/.*"id":\([0-9]*\).*/\1/')
    b=$(curl -s -X POST -d '{"name":"free","stock":100000}' "$url/items" | sed 's/.*"id":\([0-9]*\).*/\1/')
    key="stock:lock:{$a}"
    redis-cli -p "$rp" SET "$key" someone-else PX "$HOLD_MS" >/dev/null
    t0=$(now_ms)
    lapse=$((t0 + HOLD_MS))
    local out=$STACK_DIR/out
    mkdir -p "$out"
    # status, seconds the answer took, ms it was sent at; each on its own connection
    call() { curl -s -o /dev/null -w "%{http_code} %{time_total} $(now_ms)\n" "$@"; }
    local pids=()
    for i in 1 2 3; do
        call -X POST -d "{\"itemId\":$a,\"quantity\":1}" "$url/reduceStock" >"$out/plain$i" &
        pids+=($!)
    done
    sleep 0.1
    for i in $(seq 1 "$EACH"); do
        call -X PUT -d '{"stock":100000}' "$url/items/$a" >"$out/put$i" &
        pids+=($!)
        call -X POST -d "{\"itemId\":$a,\"quantity\":1,\"workMs\":20}" "$url/reduceStock" \
            >"$out/work$i" &
        pids+=($!)
    done
    # item B, every 50 ms, until every request for A is answered (or 60 s)
    local deadline=$((t0 + 60000)) alive=1
    while [ "$alive" -gt 0 ] && [ "$(now_ms)" -lt "$deadline" ]; do
        call "$url/items/$b" >>"$out/b-read"
        call -X POST -d "{\"itemId\":$b,\"quantity\":1}" "$url/reduceStock" >>"$out/b-order"
        threads=$(curl -s "$url/metrics" | awk '/^process_threads /{print $2}')
        [ "${threads:-0}" -gt "$peak" ] && peak=$threads
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=$((alive + 1)); done
        sleep 0.05
    done
    wait "${pids[@]}"
    last=$(cat "$out"/plain* "$out"/put* "$out"/work* | awk '{printf "%.0f\n", $3 + $2 * 1000}' |
        sort -n | tail -n 1)
    echo "== $BUILD: $((3 + 2 * EACH)) requests for item A, its lock held by another owner for $HOLD_MS ms"
    for kind in plain put work; do
        printf '  %-5s %s\n' "$kind" "$(cat "$out"/$kind* | awk '{print $1}' | sort | uniq -c |
            awk '{printf "%s x %s  ", $1, $2}')"
    done
    echo "  last answer for A: $((last - lapse)) ms after the foreign lease lapsed"
    for f in b-read b-order; do
        printf '  item B %-5s %d probes, statuses %s, max %.0f ms, p50 %.0f ms\n' "${f#b-}" \
            "$(wc -l <"$out/$f")" "$(awk '{print $1}' "$out/$f" | sort | uniq -c |
                awk '{printf "%s x %s ", $1, $2}')" \
            "$(awk '{print $2 * 1000}' "$out/$f" | sort -n | tail -n 1)" \
            "$(awk '{print $2 * 1000}' "$out/$f" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')"
    done
    echo "  peak threads: $peak"
    stack_stop
    rm -rf "$STACK_DIR"
}

trap 'stack_stop 2>/dev/null; exit 130' INT TERM
[ -n "${OLD_BUILD:-}" ] && run_case "$OLD_BUILD"
run_case "${1:-build}"
