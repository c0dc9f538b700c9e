#!/usr/bin/env bash
# sweep.sh - issue 33's mass expiry: N reservations (100,000) of one item, made
# through the store's API (bench/sweepfill.c, compiled here) and held HOLD_MS,
# lapse within the seconds it took to make them, while loadgen orders another
# item at RATE req/s (open loop: latency counts from the intended send time)
# over two replicas in redis mode on one SQLite file; before that, the same
# load with nothing lapsing. Prints: the orders' p50/p99 and errors with and
# without the sweep, how long after the last one lapsed every unit was back,
# the sweep's lag (its histogram's p99 bucket and the worst a pass logged),
# the passes that gave some back and their largest, which replica swept, and
# the item's books (stock + reserved back to what it was).
# Usage: bench/sweep.sh   (from the repository root, after make)
# Knobs: N=100000 HOLD_MS=10000 (longer than making them takes) RATE=300
# WINDOW_S=20 (the orders' run over the sweep) SWEEP_MS=100 SWEEP_BATCH=256
# BUILD=build
# Exit status: 0, 1 when a unit did not come back or an order failed, 2 on
# set-up errors.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
HOLD_MS=${HOLD_MS:-10000}
WINDOW_S=${WINDOW_S:-20}
RATE=${RATE:-300}
SWEEP_MS=${SWEEP_MS:-100}
SWEEP_BATCH=${SWEEP_BATCH:-256}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
CC=${CC:-cc}
die() { echo "sweep: $*" >&2; exit 2; }
. scripts/stack.sh
for bin in "$BUILD/stockd" "$BUILD/loadgen" "$BUILD/libstockd.a" "$BUILD/libdlock.a"; do
    [ -e "$bin" ] || die "$bin not found: run make first"
done
command -v sqlite3 >/dev/null || die "sqlite3 not found (Debian package sqlite3)"
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sweep.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM

$CC -std=c11 -O2 -pthread -D_GNU_SOURCE -I. -o "$STACK_DIR/sweepfill" bench/sweepfill.c \
    "$BUILD/libstockd.a" "$BUILD/libdlock.a" \
    $($PKG_CONFIG --libs hiredis libmicrohttpd gnutls sqlite3 libpq jansson) -lm ||
    die "cannot build bench/sweepfill.c"

redis_port=$(free_port)
stack_redis "$redis_port"
ports=()
for name in a b; do
    port=$(free_port)
    stack_stockd "$name" "$port" "$redis_port" --sync normal --sweep-ms "$SWEEP_MS" \
        --sweep-batch "$SWEEP_BATCH"
    ports+=("$port")
done
targets="http://127.0.0.1:${ports[0]},http://127.0.0.1:${ports[1]}"
db=$STACK_DIR/stock.db
item=$(curl -s -X POST -d "{\"name\":\"lapsing\",\"stock\":$N}" \
    "http://127.0.0.1:${ports[0]}/items" | sed -n 's/.*"id": *\([0-9]*\).*/\1/p')
[ -n "$item" ] || die "cannot create the item"
reserved() { sqlite3 "$db" "PRAGMA busy_timeout = 5000; SELECT reserved FROM items WHERE id = $item;" | tail -n 1; }
stock() { sqlite3 "$db" "PRAGMA busy_timeout = 5000; SELECT stock FROM items WHERE id = $item;" | tail -n 1; }

# loadgen for $1 s at RATE into $2 (its JSON): prints "p50 p99 errors" (ms;
# errors: answers but ok).
orders() {
    # --history-ms 0: the history check's reads every 5 ms (on by default) would add load
    # that the earlier figures did not have
    "$BUILD/loadgen" -R "$RATE" -d "$1" -c 32 --stock 1000000000 --history-ms 0 \
        --target "$targets" --json "$2" >"$2.out" 2>&1 || true
    local p50 p99 ok total
    p50=$(json_number p50 "$2") p99=$(json_number p99 "$2")
    grep -q 'VERDICT: PASS' "$2.out" || echo "sweep: loadgen did not pass (see $2.out)" >&2
    printf '%.2f %.2f %s\n' "$(echo "${p50:-0} / 1000" | bc -l)" \
        "$(echo "${p99:-0} / 1000" | bc -l)" \
        "$(awk '/ requests in / && !n { n = $1 } $1 == "ok" && NF == 2 { ok = $2 }
                END { print (n ? n - ok : "?") }' "$2.out")"
}

# The replicas' metric $1 (a whole series name), summed.
metric_sum() {
    local p s=0 v
    for p in "${ports[@]}"; do
        v=$(curl -s "http://127.0.0.1:$p/metrics" | awk -v m="$1" '$1 == m { print $2 }')
        s=$(echo "$s + ${v:-0}" | bc -l)
    done
    echo "$s"
}

# The lag histogram's p99 bucket over both replicas (the bound it is within).
lag_p99() {
    for p in "${ports[@]}"; do curl -s "http://127.0.0.1:$p/metrics"; done |
        awk '/^stockd_reservation_sweep_lag_seconds_bucket/ {
                 le = $1; sub(/.*le="/, "", le); sub(/".*/, "", le); n[le] += $2; order[le] = NR
             }
             END {
                 total = n["+Inf"]; if (total == 0) { print "-"; exit }
                 best = "+Inf"
                 for (le in n) if (le != "+Inf" && n[le] >= 0.99 * total && (best == "+Inf" || le + 0 < best + 0)) best = le
                 print "<= " best " s"
             }'
}

echo "sweep: N=$N HOLD_MS=$HOLD_MS RATE=$RATE req/s SWEEP_MS=$SWEEP_MS SWEEP_BATCH=$SWEEP_BATCH, 2 replicas (redis mode), SQLite --sync normal"
read -r b50 b99 berr < <(orders "$WINDOW_S" "$STACK_DIR/base.json")
printf 'orders, nothing lapsing:     p50 %7.2f ms  p99 %8.2f ms  errors %s\n' "$b50" "$b99" "$berr"

# The reservations are made first (their transactions, back to back, are
# not what is measured), then the orders run from a second before the first
# one lapses for WINDOW_S: the sweep's window.
t0=$(date +%s.%N)
made_s=$("$STACK_DIR/sweepfill" "$db" "$item" "$N" "$HOLD_MS") || die "sweepfill failed"
first_lapse=$(echo "$t0 + $HOLD_MS / 1000" | bc -l)
last_lapse=$(echo "$t0 + $made_s + $HOLD_MS / 1000" | bc -l)
wait_s=$(echo "$first_lapse - 1 - $(date +%s.%N)" | bc -l)
[ "$(echo "$wait_s > 0" | bc)" = 1 ] || die "HOLD_MS is shorter than making them took ($made_s s)"
sleep "$wait_s"
orders "$WINDOW_S" "$STACK_DIR/sweep.json" >"$STACK_DIR/sweep.txt" &
loadgen_pid=$!
while [ "$(reserved)" != 0 ]; do
    sleep 0.05
    [ "$(echo "$(date +%s.%N) > $last_lapse + 120" | bc)" = 1 ] && break
done
t_back=$(date +%s.%N)
wait "$loadgen_pid" || true
read -r s50 s99 serr <"$STACK_DIR/sweep.txt"
printf 'orders, %6d lapsing:      p50 %7.2f ms  p99 %8.2f ms  errors %s (p99 ratio %.2f)\n' \
    "$N" "$s50" "$s99" "$serr" "$(echo "$s99 / ($b99 + 0.001)" | bc -l)"
printf 'made in %.2f s; all back %.2f s after the last one lapsed (%.0f a second from the first lapse)\n' \
    "$made_s" "$(echo "$t_back - $last_lapse" | bc -l)" \
    "$(echo "$N / ($t_back - $first_lapse)" | bc -l)"
lag_max=$(cat "$STACK_DIR"/a.log "$STACK_DIR"/b.log | grep 'msg="reservations expired"' |
    sed -n 's/.*lagMaxMs=\([0-9]*\).*/\1/p' | sort -n | tail -n 1)
passes=$(cat "$STACK_DIR"/a.log "$STACK_DIR"/b.log | grep -c 'msg="reservations expired"' || true)
largest=$(cat "$STACK_DIR"/a.log "$STACK_DIR"/b.log | grep 'msg="reservations expired"' |
    sed -n 's/.* count=\([0-9]*\).*/\1/p' | sort -n | tail -n 1)
printf 'sweep lag: p99 %s, worst %s ms; %s passes gave some back, the largest %s (--sweep-batch %s)\n' \
    "$(lag_p99)" "${lag_max:-?}" "$passes" "${largest:-?}" "$SWEEP_BATCH"
for name in a b; do
    printf '  replica %s: expired %s, passes %s\n' "$name" \
        "$(curl -s "http://127.0.0.1:${ports[$([ $name = a ] && echo 0 || echo 1)]}/metrics" |
           awk '$1 == "stockd_reservations_total{result=\"expired\"}" { print $2 }')" \
        "$(curl -s "http://127.0.0.1:${ports[$([ $name = a ] && echo 0 || echo 1)]}/metrics" |
           awk '$1 == "stockd_reservation_sweeps_total" { print $2 }')"
done
expired=$(metric_sum 'stockd_reservations_total{result="expired"}')
printf 'item: stock %s reserved %s (made with %s); expired in all %s\n' "$(stock)" "$(reserved)" \
    "$N" "$expired"
[ "$(reserved)" = 0 ] && [ "$(stock)" = "$N" ] && [ "${expired%.*}" = "$N" ] &&
    [ "${serr:-1}" = 0 ] || { echo "sweep: FAIL"; exit 1; }
