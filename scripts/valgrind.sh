#!/usr/bin/env bash
# valgrind.sh - runs one stockd replica under valgrind's memcheck through a
# short load and through the error paths, stops it with SIGTERM, and fails on
# a memory error or a definite leak (make valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh

STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/stocklock-valgrind.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
log=$STACK_DIR/valgrind.log

redis_port=$(free_port)
stack_redis "$redis_port"
port=$(free_port)
STOCKD_WRAPPER="valgrind --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99
    --log-file=$log" stack_stockd vg "$port" "$redis_port" \
    --allow-work-ms --lease-ms 300 --redis-timeout-ms 50 --max-renewals 2 --wait-ms 5000
pid=$(tail -n 1 "$STACK_DIR/pids")
base=http://127.0.0.1:$port

echo "valgrind: load and error paths against stockd under memcheck (slow)"
"$BUILD/loadgen" --scenario hot --target "$base" -n 300 -c 16 >"$STACK_DIR/hot.out"
"$BUILD/loadgen" --scenario interrupt --target "$base" -n 4 -c 4 >"$STACK_DIR/interrupt.out"
"$BUILD/loadgen" --scenario spread --target "$base" -n 300 -c 8 >"$STACK_DIR/spread.out"
call() { curl -s -o /dev/null -w '%{http_code} ' "$@" || true; }
call -X PUT "$base/items/1" -d '{"stock":5}'
call -X POST "$base/reduceStock" -d '{"itemId":1,'
call -X POST "$base/reduceStock" -d '{"itemId":"1","quantity":1}'
call -X POST "$base/reduceStock" -d '{"itemId":999999,"quantity":1}'
call -X POST "$base/reduceStock" -d '{"itemId":1,"quantity":1000000}'
call -X POST "$base/reduceStock" -d '{"itemId":1,"quantity":1,"requestId":"vg-1"}'
call -X POST "$base/reduceStock" -d '{"itemId":1,"quantity":2,"requestId":"vg-1"}'
call -X POST "$base/reduceStock" -H 'Content-Length: 100000' -d '{}'
call -X POST "$base/reduceStock" -d '{"itemId":1,"quantity":1,"requestId":"vg-1"}'
# reservations: held, replayed, confirmed, cancelled, extended, lapsed and
# given back by the sweep; an order's cancel; a per-buyer limit
res='{"lines":[{"itemId":1,"quantity":1}],"holdMs":1000'
call -X POST "$base/reservations" -d "$res"',"requestId":"vg-r1","buyerId":"ann"}'
call -X POST "$base/reservations" -d "$res"',"requestId":"vg-r1","buyerId":"ann"}'
call -X POST "$base/reservations/1/confirm"
call -X POST "$base/reservations/1/confirm"
call -X POST "$base/reservations/1/cancel"
call -X POST "$base/reservations" -d "$res}"
call -X POST "$base/reservations/2/extend" -d '{"holdMs":1000}'
call -X POST "$base/reservations/2/cancel"
call -X POST "$base/reservations/2/cancel"
call -X POST "$base/reservations" -d "$res}"
call -X POST "$base/reservations" -d '{"lines":[],"holdMs":5}'
call -X POST "$base/reservations/999/confirm"
call -X POST "$base/orders/1/cancel" -d '{"requestId":"vg-c1"}'
call -X POST "$base/orders/1/cancel"
call -X PUT "$base/items/1" -d '{"stock":5,"perBuyerLimit":1}'
call -X POST "$base/reduceStock" -d '{"itemId":1,"quantity":1}'
call -X POST "$base/reduceStock" -d '{"itemId":1,"quantity":2,"buyerId":"bob"}'
sleep 3 # the third reservation lapses: the sweep gives it back
call "$base/reservations/3"
call -X DELETE "$base/items/1"
call "$base/nope"
call "$base/items/1?limit=1000"
call "$base/items"
call "$base/health"
call "$base/metrics"
echo

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
grep -E "ERROR SUMMARY|definitely lost|no leaks are possible" "$log" || true
if [ "$status" -ne 0 ]; then
    echo "valgrind: FAILED (stockd exited $status); the report:" >&2
    cat "$log" >&2
    exit 1
fi
echo "valgrind: no memory errors, no definite leaks"
