#!/usr/bin/env bash
# reserve.sh - issue 33's two measurements, on REPLICAS (3) fresh replicas of
# stockd's defaults on one Redis and one SQLite file:
#   sale:  BUYERS (10,000) buyers, RATE (500) a second, reserve one unit each of
#          an item of STOCK (500) with holdMs HOLD_MS (2000); 80 % confirm, 20 %
#          walk away (loadgen -s reserve --shares 80/0/20). Printed: loadgen's
#          verdict (every lapsed unit back within holdMs + 1 s, every
#          reservation its one fate, the totals), whether the item sold out
#          exactly, and the sweep's lag behind expiresAt from the replicas'
#          stockd_reservation_sweep_lag_seconds (buckets summed over the
#          replicas; p50/p99 are bucket bounds) with the mean.
#   steps: the cost of two steps: SALES (3000) sales on a hot item of as much
#          stock, C (64) connections, closed loop, as reservation + confirm
#          (-s reserve --shares 100/0/0) and as POST /reduceStock alone, in
#          runs that take turns, ROUNDS (3) of each, on fresh items; sales a
#          second of each, the medians and their ratio.
# Usage: bench/reserve.sh. Knobs: BUILD, PARTS="sale steps", REPLICAS, BUYERS,
# RATE, STOCK, HOLD_MS, SALES, C, ROUNDS, STOCKD_FLAGS (extra stockd flags;
# PARTS=steps STOCKD_FLAGS="--batch off" compares the two against
# /reduceStock without group commit, which is what /reduceStock's edge is).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
PARTS=${PARTS:-sale steps}
REPLICAS=${REPLICAS:-3}
BUYERS=${BUYERS:-10000}
RATE=${RATE:-500}
STOCK=${STOCK:-500}
HOLD_MS=${HOLD_MS:-2000}
SALES=${SALES:-3000}
C=${C:-64}
ROUNDS=${ROUNDS:-3}
STOCKD_FLAGS=${STOCKD_FLAGS:-}
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/reserve-bench.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
redis_port=$(free_port)
stack_redis "$redis_port"
targets="" ports=()
for i in $(seq "$REPLICAS"); do
    port=$(free_port)
    # shellcheck disable=SC2086 # the flags are a list
    stack_stockd "r$i" "$port" "$redis_port" $STOCKD_FLAGS
    targets+="${targets:+,}http://127.0.0.1:$port"
    ports+=("$port")
done
echo "reservations: $REPLICAS replicas, $(nproc) cores, stockd flags: ${STOCKD_FLAGS:-(defaults)}"

# The sweep's lag: every replica's histogram buckets summed, then the bound
# under which 50 % and 99 % of the expiries fall, and the mean.
sweep_lag() {
    local p
    for p in "${ports[@]}"; do curl -s "http://127.0.0.1:$p/metrics"; done | awk '
        /^stockd_reservation_sweep_lag_seconds_bucket/ {
            match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5)
            if (!(le in n)) order[++k] = le
            n[le] += $NF }
        /^stockd_reservation_sweep_lag_seconds_sum/ { sum += $NF }
        /^stockd_reservation_sweep_lag_seconds_count/ { count += $NF }
        END {
            if (count == 0) { print "sweep lag: no expiry counted (no histogram?)"; exit }
            for (i = 1; i <= k; i++) {
                if (p50 == "" && n[order[i]] >= count * 0.5) p50 = order[i]
                if (p99 == "" && n[order[i]] >= count * 0.99) p99 = order[i]
            }
            printf "sweep lag behind expiresAt: %d expiries, p50 <= %s s, p99 <= %s s, " \
                "mean %.3f s\n", count, p50, p99, sum / count }'
}

sale() {
    local out=$STACK_DIR/sale.out rc=0
    "$BUILD/loadgen" -s reserve -n "$BUYERS" --rate "$RATE" --stock "$STOCK" \
        --hold-ms "$HOLD_MS" --shares 80/0/20 --json "$STACK_DIR/sale.json" \
        --target "$targets" >"$out" 2>&1 || rc=$?
    echo
    echo "== sale: $BUYERS buyers at $RATE/s, one item of $STOCK, holdMs $HOLD_MS," \
        "80 % confirm, 20 % lapse; exit $rc"
    grep -E '^(reservations|  [0-9]+ held|  item|  the item|VERDICT|  (expectation|reserv))|^loadgen:' \
        "$out" || cat "$out"
    jq -r '.reservations | "sold \(.sold) of \(.before.available): sold out exactly: " +
        (if .soldOut and .after.reserved == 0 then "yes" else "no" end) +
        "; reads that found a lapsed unit late: \(.lateReads)"' "$STACK_DIR/sale.json"
    sweep_lag
}

# One closed-loop run; prints sales a second (the load's own time, without
# the reserve run's wait for holds and read-back).
one() {
    local json=$STACK_DIR/steps.json
    if [ "$1" = reserve ]; then
        "$BUILD/loadgen" -s reserve -n "$SALES" --stock "$SALES" -c "$C" --shares 100/0/0 \
            --hold-ms 60000 --json "$json" --target "$targets" >/dev/null 2>&1
    else
        # --history-ms 0: the plain sale without the history check's reads every 5 ms,
        # which the reservations' run (no check: its stock may rise) does not make
        "$BUILD/loadgen" -n "$SALES" --stock "$SALES" -c "$C" --history-ms 0 --json "$json" \
            --target "$targets" >/dev/null 2>&1
    fi
    jq -r --arg s "$SALES" '($s | tonumber) / .elapsedSec' "$json"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

steps() {
    local r two=() one_=() a b
    for r in $(seq "$ROUNDS"); do
        a=$(one reserve)
        b=$(one reduce)
        two+=("$a") one_+=("$b")
        printf 'round %d: reserve + confirm %.0f sales/s, /reduceStock %.0f sales/s\n' "$r" "$a" "$b"
    done
    a=$(printf '%s\n' "${two[@]}" | median)
    b=$(printf '%s\n' "${one_[@]}" | median)
    echo
    echo "== steps: $SALES sales of a hot item, $C connections, closed loop, $ROUNDS rounds"
    printf 'medians: reserve + confirm %.0f sales/s (%.0f requests/s), /reduceStock %.0f sales/s;' \
        "$a" "$(echo "$a * 2" | bc -l)" "$b"
    printf ' ratio %.2f\n' "$(echo "$a / $b" | bc -l)"
}

wanted() { [[ " $PARTS " == *" $1 "* ]]; }
if wanted sale; then sale; fi
if wanted steps; then steps; fi
