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
# TIMEOUT_MS=60000, STOCKD_FLAGS (extra stockd flags, e.g. "--workers 4").
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

# sale NAME REPLICAS BUYERS PROCS: fresh replicas, one sale, its report's lines.
sale() {
    local name=$1 n=$2 buyers=$3 procs=$4 mark targets="" i port out rc=0
    mark=$(wc -l <"$STACK_DIR/pids")
    for i in $(seq "$n"); do
        port=$(free_port)
        # shellcheck disable=SC2086 # STOCKD_FLAGS is a list of flags
        stack_stockd "$name-$i" "$port" "$redis_port" $STOCKD_FLAGS
        targets+="${targets:+,}http://127.0.0.1:$port"
    done
    out="$STACK_DIR/$name.out"
    "$BUILD/loadgen" --scenario flash --buyers "$buyers" --procs "$procs" --stock "$STOCK" \
        --timeout-ms "$TIMEOUT_MS" --target "$targets" >"$out" 2>&1 || rc=$?
    echo
    echo "== $name: $buyers buyers over $n replica(s), $procs loadgen process(es); exit $rc"
    grep -E '^(flash sale|buyers|status|from the fire|/health|peak of|VERDICT|  (expectation|oversold|lost))|^loadgen:' \
        "$out" || cat "$out"
    stack_stop_since "$mark"
}

wanted() { [[ " $SALES " == *" $1 "* ]]; }
if wanted one; then sale one 1 "$BUYERS_ONE" 1; fi
if wanted three; then sale three 3 "$BUYERS_THREE" 1; fi
if wanted procs; then sale procs 3 "$BUYERS_PROCS" "$PROCS"; fi
