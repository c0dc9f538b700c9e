#!/usr/bin/env bash
# share.sh - issue 31's hot path against GET /health on the same replicas:
# REPLICAS stockd (redis mode, its defaults: hand-off and group commit) on one
# SQLite file at --sync SYNC; loadgen with 64 connections orders one item
# (stock STOCK, never running out by default) for DURATION s, then GETs
# /health for as long on the same replicas. For each: the rate, the
# replicas' CPU and context switches a request (perf stat over the
# replicas), and the orders' mean hand-offs between threads
# (stockd_order_handoffs). With OLD_BUILD, that build's stockd runs too, in
# turn, ROUNDS times; the last lines are each build's medians.
# Usage: [OLD_BUILD=DIR] bench/share.sh [ROUNDS]. Knobs: BUILD (this tree's),
# REPLICAS=1, SYNC=full, DURATION=5, STOCK=100000000 (0: every buyer finds
# the item sold out). Needs perf (linux-perf: `scripts/deps.sh bench` installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
ROUNDS=${1:-3}
REPLICAS=${REPLICAS:-1}
SYNC=${SYNC:-full}
DURATION=${DURATION:-5}
STOCK=${STOCK:-100000000}
NEW_BUILD=$BUILD
LOADGEN=$NEW_BUILD/loadgen # one client for both builds
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/share-bench.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
command -v perf >/dev/null || { echo "share.sh: needs perf (linux-perf)" >&2; exit 2; }
redis_port=$(free_port)
stack_redis "$redis_port"

json_number() { sed -n "s/.*\"$1\": *\([0-9.eE+-]*\).*/\1/p" "$2" | head -n 1; }

# measure FILE PIDS LOADGEN-ARGS...: runs loadgen under perf stat of the
# replicas; prints "rate cpu_us_per_request switches_per_request".
measure() {
    local json=$1 pids=$2
    shift 2
    perf stat -e context-switches,task-clock -x, -o "$STACK_DIR/stat" -p "$pids" \
        -- sleep "$DURATION" >/dev/null 2>&1 &
    local perf_pid=$!
    # --history-ms 0: the history check's reads every 5 ms (on by default) would add load
    # that the earlier figures did not have
    "$LOADGEN" -c 64 -d "$DURATION" --history-ms 0 "$@" --json "$json" >/dev/null 2>&1 || true
    wait "$perf_pid" || true
    local rate cs ms
    rate=$(json_number throughput "$json")
    cs=$(awk -F, '/context-switches/ {print $1}' "$STACK_DIR/stat")
    ms=$(awk -F, '/task-clock/ {print $1}' "$STACK_DIR/stat")
    awk -v r="${rate:-0}" -v cs="${cs:-0}" -v ms="${ms:-0}" -v d="$DURATION" \
        'BEGIN { n = r * d; if (n < 1) n = 1; printf "%.0f %.1f %.2f\n", r, ms * 1000 / n, cs / n }'
}

# one_run LABEL BUILD: fresh replicas, the orders, then /health; one line.
one_run() {
    local label=$1 build=$2 mark i port targets=() pids="" item url hops
    mark=$(wc -l <"$STACK_DIR/pids")
    BUILD=$build
    for i in $(seq "$REPLICAS"); do
        port=$(free_port)
        stack_stockd "$label-$i" "$port" "$redis_port" --log-level warn --sync "$SYNC" \
            --db "$STACK_DIR/$label.db"
        pids+="${pids:+,}$(tail -n 1 "$STACK_DIR/pids")"
        targets+=(--target "http://127.0.0.1:$port")
        url=http://127.0.0.1:$port
    done
    item=$(curl -s -X POST -d "{\"name\":\"hot\",\"stock\":$STOCK}" "$url/items" |
        sed 's/.*"id":\([0-9]*\).*/\1/')
    read -r o_rate o_cpu o_cs <<<"$(measure "$STACK_DIR/o.json" "$pids" --item "$item" "${targets[@]}")"
    read -r h_rate h_cpu h_cs <<<"$(measure "$STACK_DIR/h.json" "$pids" --get /health "${targets[@]}")"
    hops=$(curl -s "$url/metrics" | awk '/^stockd_order_handoffs_sum / {s = $2}
        /^stockd_order_handoffs_count / {c = $2} END {if (c > 0) printf "%.2f", s / c; else print "-"}')
    printf '%-4s orders %6d/s %6.1f us %5.2f cs | /health %6d/s %6.1f us %5.2f cs | share %.2f | hand-offs %s\n' \
        "$label" "$o_rate" "$o_cpu" "$o_cs" "$h_rate" "$h_cpu" "$h_cs" \
        "$(awk -v a="$o_rate" -v b="$h_rate" 'BEGIN { print (b > 0 ? a / b : 0) }')" "$hops" |
        tee -a "$STACK_DIR/runs"
    stack_stop_since "$mark"
    rm -f "$STACK_DIR/$label.db"*
}

echo "share: $REPLICAS replica(s), --sync $SYNC, stock $STOCK, $DURATION s a run, 64 connections"
echo "(rate; the replicas' CPU and context switches a request)"
for round in $(seq "$ROUNDS"); do
    [ -n "${OLD_BUILD:-}" ] && one_run old "$OLD_BUILD"
    one_run new "$NEW_BUILD"
done
# medians per build: share, orders' CPU, orders' switches
for label in old new; do
    grep -q "^$label " "$STACK_DIR/runs" || continue
    awk -v l="$label" '$1 == l { s[++n] = $17; c[n] = $4; w[n] = $6 }
        function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
            if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int((n + 1) / 2)] }
        END { printf "median %s: share %.2f, an order %.1f us and %.2f switches\n", l,
              med(s, n), med(c, n), med(w, n) }' "$STACK_DIR/runs"
done
