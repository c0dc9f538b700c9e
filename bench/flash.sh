#!/usr/bin/env bash
# flash.sh - issue 25's flash sales as a script: one item of stock STOCK, and
#   one:   BUYERS_ONE (10,000) buyers on one replica, from one loadgen process;
#   three: BUYERS_THREE (18,000) over three replicas, from one loadgen process;
#   procs: BUYERS_PROCS (50,000) over three replicas, with loadgen --procs PROCS.
# Each sale gets fresh replicas (stockd's defaults but for the descriptor
# limit, raised to the hard one, and STOCKD_FLAGS) on one Redis and one SQLite
# file, and prints the lines the RESULTS table needs: buyers answered and
# unanswered, the status mix, p50/p99/max from the fire, /health's p99
# meanwhile, each replica's threads and RSS at the peak, and the verdict.
# Usage: bench/flash.sh. Knobs: BUILD, SALES="one three procs" (a subset runs
# only those), BUYERS_ONE, BUYERS_THREE, BUYERS_PROCS, PROCS=3, STOCK=500,
# TIMEOUT_MS=60000, STOCKD_FLAGS (extra stockd flags, e.g. "--workers 4"),
# PROBE_PORT=1: each replica also listens on a --probe-port, and a separate
# curl client probes the first replica's /health there every 20 ms through
# the sale (its p50/p99/max printed beside loadgen's own probes).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
SALES=${SALES:-one three procs}
BUYERS_ONE=${BUYERS_ONE:-10000}
BUYERS_THREE=${BUYERS_THREE:-18000}
BUYERS_PROCS=${BUYERS_PROCS:-50000}
PROCS=${PROCS:-3}
STOCK=${STOCK:-500}
TIMEOUT_MS=${TIMEOUT_MS:-60000}
STOCKD_FLAGS=${STOCKD_FLAGS:-}
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/flash-bench.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
ulimit -n "$(ulimit -Hn)" # the replicas inherit it: the one limit the targets let differ
redis_port=$(free_port)
stack_redis "$redis_port"
echo "flash sales: stock $STOCK, descriptors $(ulimit -n), $(nproc) cores, stockd flags:" \
    "${STOCKD_FLAGS:-(defaults)}"

# probe_loop URL FILE: GET URL every 20 ms, "seconds" a line into FILE, until killed.
probe_loop() {
    while :; do
        curl -s -o /dev/null -w '%{time_total}\n' --max-time 10 "$1" >>"$2" || true
        sleep 0.02
    done
}

# sale NAME REPLICAS BUYERS PROCS: fresh replicas, one sale, its report's lines.
sale() {
    local name=$1 n=$2 buyers=$3 procs=$4 mark targets="" i port out rc=0 probe="" flags
    local prober=""
    mark=$(wc -l <"$STACK_DIR/pids")
    for i in $(seq "$n"); do
        port=$(free_port)
        flags=$STOCKD_FLAGS
        if [ -n "${PROBE_PORT:-}" ]; then
            local pp
            pp=$(free_port)
            flags+=" --probe-port $pp"
            [ -z "$probe" ] && probe=http://127.0.0.1:$pp/health
        fi
        # shellcheck disable=SC2086 # the flags are a list
        stack_stockd "$name-$i" "$port" "$redis_port" $flags
        targets+="${targets:+,}http://127.0.0.1:$port"
    done
    out="$STACK_DIR/$name.out"
    if [ -n "$probe" ]; then
        : >"$STACK_DIR/$name.probes"
        probe_loop "$probe" "$STACK_DIR/$name.probes" &
        prober=$!
    fi
    "$BUILD/loadgen" --scenario flash --buyers "$buyers" --procs "$procs" --stock "$STOCK" \
        --timeout-ms "$TIMEOUT_MS" --target "$targets" >"$out" 2>&1 || rc=$?
    [ -n "$prober" ] && { kill "$prober"; wait "$prober" 2>/dev/null || true; }
    echo
    echo "== $name: $buyers buyers over $n replica(s), $procs loadgen process(es); exit $rc"
    grep -E '^(flash sale|buyers|status|from the fire|/health|peak of|VERDICT|  (expectation|oversold|lost))|^loadgen:' \
        "$out" || cat "$out"
    if [ -n "$prober" ]; then
        sort -n "$STACK_DIR/$name.probes" | awk '{ v[NR] = $1 * 1000 } END {
            if (NR) printf "/health on the probe port, from curl every 20 ms (ms): %d probes, " \
                "p50 %.1f  p99 %.1f  max %.1f\n", NR, v[int((NR + 1) / 2)],
                v[int(NR * 0.99 + 0.999)], v[NR] }'
    fi
    stack_stop_since "$mark"
}

wanted() { [[ " $SALES " == *" $1 "* ]]; }
if wanted one; then sale one 1 "$BUYERS_ONE" 1; fi
if wanted three; then sale three 3 "$BUYERS_THREE" 1; fi
if wanted procs; then sale procs 3 "$BUYERS_PROCS" "$PROCS"; fi
