#!/usr/bin/env bash
# faults.sh - issue 34's faults on stockd, given to loadgen by --fault and
# --fault-end: REPLICAS (3) replicas on one Redis and one SQLite file, loadgen
# for DURATION (8 s) on C (32) connections with --retry and the history check
# reading every HISTORY_MS (5) ms, and one fault from AT (2 s) to END (4 s):
#   pause: kill -STOP of the second replica, then kill -CONT;
#   kill:  kill -9 of the third replica, then a new one on its port;
#   redis: redis-cli SHUTDOWN NOSAVE, then a new redis-server on the same port
#          (empty: every lock key and fence counter gone).
# Printed for each: loadgen's verdict and exit status, the reads the history
# check took, the fault's commands as the report has them, and the verdict's
# note on the fault (answers per second before, during and after it, the
# errors during it, the first ok after it).
# Usage: bench/faults.sh. Knobs: BUILD, FAULTS="pause kill redis", REPLICAS,
# DURATION, C, AT, END, HISTORY_MS, STOCKD_FLAGS (default "--lease-ms 1000
# --redis-timeout-ms 150":
# a pause of 2 s outlasts the lease, so another replica takes the lock from
# the paused holder, and fencing must refuse the holder's write).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
FAULTS=${FAULTS:-pause kill redis}
REPLICAS=${REPLICAS:-3}
DURATION=${DURATION:-8}
C=${C:-32}
AT=${AT:-2}
END=${END:-4}
HISTORY_MS=${HISTORY_MS:-5}
STOCKD_FLAGS=${STOCKD_FLAGS:---lease-ms 1000 --redis-timeout-ms 150}
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/faults-bench.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
redis_port=$(free_port)
stack_redis "$redis_port"
targets="" ports=() pids=()
for i in $(seq "$REPLICAS"); do
    port=$(free_port)
    # shellcheck disable=SC2086 # the flags are a list
    stack_stockd "r$i" "$port" "$redis_port" $STOCKD_FLAGS
    targets+="${targets:+,}http://127.0.0.1:$port"
    ports+=("$port")
    pids+=("$(tail -n 1 "$STACK_DIR/pids")")
done
disown -a # a replica the kill fault kills is no job of ours to report; the trap stops it by PID
history=()
if "$BUILD/loadgen" --help | grep -q -- --history-ms; then
    history=(--history-ms "$HISTORY_MS")
fi
echo "faults: $REPLICAS replicas, $(nproc) cores, stockd flags: ${STOCKD_FLAGS:-(defaults)};" \
    "loadgen ${DURATION}s, $C connections, --retry, ${history[*]:-no history check (not built)}"

# The commands of each fault. A process a command starts in the background is
# recorded in the stack's pids, so that the trap stops it too.
fault_of() {
    local r3=${ports[2]:-${ports[0]}} p3=${pids[2]:-${pids[0]}}
    case $1 in
    pause)
        start="kill -STOP ${pids[1]}"
        end="kill -CONT ${pids[1]}" ;;
    kill)
        start="kill -9 $p3"
        end="$BUILD/stockd --port $r3 --db $STACK_DIR/stock.db --redis-port $redis_port"
        end+=" --instance-id r3b $STOCKD_FLAGS </dev/null >/dev/null 2>>$STACK_DIR/r3b.log &"
        end+=" echo \$! >>$STACK_DIR/pids" ;;
    redis)
        start="redis-cli -p $redis_port SHUTDOWN NOSAVE; ! redis-cli -p $redis_port ping"
        end="redis-server --port $redis_port --bind 127.0.0.1 --save '' --appendonly no"
        end+=" --dir $STACK_DIR --logfile $STACK_DIR/redis2.log </dev/null >/dev/null 2>&1 &"
        end+=" echo \$! >>$STACK_DIR/pids; for i in \$(seq 50); do"
        end+=" redis-cli -p $redis_port ping 2>/dev/null | grep -q PONG && exit 0; sleep 0.1;"
        end+=" done; exit 1" ;;
    esac
}

run() {
    local name=$1 out=$STACK_DIR/$1.out json=$STACK_DIR/$1.json rc=0
    fault_of "$name"
    "$BUILD/loadgen" -n 0 -d "${DURATION}s" -c "$C" --stock 1000000 --retry \
        --timeout-ms 10000 "${history[@]}" --json "$json" --target "$targets" \
        --fault "${AT}s:$start" --fault-end "${END}s:$end" >"$out" 2>&1 || rc=$?
    echo
    echo "== $name: $start, then at ${END}s the end; loadgen exit $rc"
    grep -E '^[0-9]+ requests|^history check|^VERDICT|^  (expectation|item|fault|oversold|lost|unack|unrec|stale|impossible|sold)' \
        "$out" || cat "$out"
    jq -r '"reads taken: " + ((.history.reads // (.stock.tMs | length)) | tostring) +
        (if .history then "" else " (stock samples; no history check)" end),
        (.faults[] | "fault: run exit \(.run.exitStatus) at \(.run.startSec | . * 1000 | round) ms" +
            " (took \(.run.tookSec * 1000 | round) ms), end exit \(.end.exitStatus) at" +
            " \(.end.startSec | . * 1000 | round) ms (took \(.end.tookSec * 1000 | round) ms)"),
        (.notes[] | select(.kind == "fault") | "errors during the fault: \(.amount)")' \
        "$json" 2>/dev/null || true
}

for f in $FAULTS; do
    run "$f"
done
