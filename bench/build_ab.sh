#!/usr/bin/env bash
# build_ab.sh - this tree's stockd against another build's (OLD_BUILD) on the
# e2e load, in a way that holds on a busy shared machine: replicas in redis
# lock mode with its defaults (group commit) on one SQLite file or one
# PostgreSQL database (a fresh one a run), loadgen (this tree's, for
# both) and a stock that never runs out, in short runs that take turns
# between the builds for ROUNDS rounds. Prints each run, then each build's
# medians and the median of the rounds' own new/old ratios: rate, the
# replicas' CPU a request and, on PostgreSQL, the server's (the postmaster
# and its processes), the pages its sessions looked up in pg_subtrans a
# request (pg_stat_slru's Subtrans: snapshots overflowed by a transaction
# of more than 64 subtransactions) and the mean orders a transaction.
# Usage: OLD_BUILD=DIR bench/build_ab.sh [ROUNDS]. Knobs: BACKEND=sqlite (or
# postgres), WORKLOAD=hot (or spread: ITEMS items, 1000), DURATION=3 (seconds a
# run), SYNC=full (or normal: PostgreSQL's synchronous_commit off, so that
# no fsync of a busy shared disk decides the rate), RATE (requests/s, open
# loop: both builds then do the same work at the same batch sizes, which a
# closed loop's rate, moving with whatever else the machine runs, does not
# give; keep it below the slowest run's rate), CONNS=64 (loadgen's
# connections), REPLICAS=3, WARMUP=0 (seconds of the same load, not
# measured, before each run: a large pool's sessions open), BUILD (this
# tree's). A replica's orders in flight are bounded by its sessions
# (STOCKD_DB_POOL, 16): for transactions of more than 64 orders, a pool and
# connections above 64 a replica. A run with any answer but ok stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
: "${OLD_BUILD:?set OLD_BUILD to the build directory to compare with}"
ROUNDS=${1:-6}
DURATION=${DURATION:-3}
WORKLOAD=${WORKLOAD:-hot}
BACKEND=${BACKEND:-sqlite}
SYNC=${SYNC:-full}
CONNS=${CONNS:-64}
NEW_BUILD=$BUILD
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/build-ab.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
redis_port=$(free_port)
stack_redis "$redis_port"
pg_port="" pg_pid=""
if [ "$BACKEND" = postgres ]; then
    pg_port=$(free_port)
    stack_pg "$pg_port"
    pg_pid=$(tail -n 1 "$STACK_DIR/pids")
fi

# CPU ticks of the postmaster and its processes (0 on SQLite).
pg_ticks() {
    [ -n "$pg_pid" ] || { echo 0; return; }
    cat /proc/[0-9]*/stat 2>/dev/null | sed 's/^\([0-9]*\) (.*) /\1 /' |
        awk -v pg="$pg_pid" '$1 == pg || $3 == pg { t += $13 + $14 } END { print t + 0 }'
}

psql_pg() { "$(pg_bindir)/psql" -qAtX -h 127.0.0.1 -p "$pg_port" -U stock -d stock -c "$1"; }

# Pages of pg_subtrans looked up so far, from memory or disk (0 on SQLite).
# The statistics of a session are complete once it has ended.
subtrans_pages() {
    [ -n "$pg_pid" ] || { echo 0; return; }
    psql_pg "SELECT blks_hit + blks_read FROM pg_stat_slru WHERE name IN ('Subtrans',
             'subtransaction')"
}

# The replicas' group-commit transactions and their orders so far (ports $@).
commit_orders() {
    local port
    for port; do curl -s "http://127.0.0.1:$port/metrics"; done |
        awk '/^stockd_commit_orders_sum / { o += $2 } /^stockd_commit_orders_count / { n += $2 }
             END { printf "%d %d\n", n, o }'
}

# run old|new ROUND: REPLICAS fresh replicas of that build, one loadgen run;
# prints "rate replicas_us_cpu_a_request postgres_us_cpu_a_request
# subtrans_pages_a_request orders_a_transaction".
run() {
    local build=$NEW_BUILD ports=() pids=() i mark targets json=$STACK_DIR/run.json db=()
    [ "$1" = old ] && build=$OLD_BUILD
    rm -f "$STACK_DIR"/stock.db*
    if [ -n "$pg_port" ]; then
        psql_pg "CREATE DATABASE ab_$2_$1" >/dev/null
        db=(--db "postgresql://stock@127.0.0.1:$pg_port/ab_$2_$1")
    fi
    mark=$(wc -l <"$STACK_DIR/pids")
    for i in $(seq 0 $((${REPLICAS:-3} - 1))); do
        ports+=("$(free_port)")
        BUILD=$build stack_stockd "r$i" "${ports[$i]}" "$redis_port" "${db[@]}" --sync "$SYNC" \
            --log-level warn
        pids+=("$(tail -n 1 "$STACK_DIR/pids")")
    done
    targets=$(printf 'http://127.0.0.1:%s,' "${ports[@]}")
    local items=() c0 c1 p0 p1 s0 s1 t0 t1 tp bad
    [ "$WORKLOAD" = spread ] && items=(--items "${ITEMS:-1000}")
    [ -n "${RATE:-}" ] && items+=(-R "$RATE")
    # --history-ms 0: the history check's reads every 5 ms (on by default) would add load
    # that the figures of earlier builds did not have
    local load=(-n 0 -c "$CONNS" --stock 100000000 "${items[@]}" --history-ms 0
                --target "${targets%,}")
    [ "${WARMUP:-0}" = 0 ] || # the replicas' sessions opened before the run
        "$NEW_BUILD/loadgen" -d "$WARMUP" "${load[@]}" >"$STACK_DIR/out" 2>&1 || true
    c0=$(proc_ticks "${pids[@]}") p0=$(pg_ticks) s0=$(subtrans_pages) t0=$(commit_orders "${ports[@]}")
    "$NEW_BUILD/loadgen" -d "$DURATION" "${load[@]}" --json "$json" >"$STACK_DIR/out" 2>&1 || true
    c1=$(proc_ticks "${pids[@]}") p1=$(pg_ticks)
    grep -q "VERDICT: PASS" "$STACK_DIR/out" || { echo "build_ab: $1 did not PASS" >&2; exit 1; }
    # failures answered fast would pass for a higher rate
    bad=$(awk '/^outcome / { o = 1; next } o && NF == 0 { exit } o && $1 != "ok" { b += $2 }
               END { print b + 0 }' "$STACK_DIR/out")
    [ "$bad" = 0 ] || { echo "build_ab: $1 answered $bad requests with errors:" >&2
        grep -A 14 "^outcome " "$STACK_DIR/out" >&2; exit 1; }
    tp=$(json_number throughput "$json")
    t1=$(commit_orders "${ports[@]}")
    stack_stop_since "$mark"
    s1=$(subtrans_pages)
    [ -z "$pg_port" ] || psql_pg "DROP DATABASE ab_$2_$1" >/dev/null
    awk -v c=$((c1 - c0)) -v p=$((p1 - p0)) -v hz="$(getconf CLK_TCK)" -v tp="$tp" \
        -v d="$DURATION" -v s=$((s1 - s0)) -v t0="$t0" -v t1="$t1" \
        'BEGIN { n = tp * d; split(t0, a, " "); split(t1, b, " "); tx = b[1] - a[1]
                 printf "%.0f %.1f %.1f %.2f %.1f\n", tp, c / hz * 1e6 / n, p / hz * 1e6 / n,
                        s / n, tx ? (b[2] - a[2]) / tx : 0 }'
}

echo "== build_ab: $WORKLOAD${ITEMS:+ over $ITEMS items} on $BACKEND, sync=$SYNC, ${DURATION}s runs${RATE:+ at $RATE req/s}," \
    "${REPLICAS:-3} replicas, $CONNS connections," \
    "$ROUNDS rounds of new ($NEW_BUILD) and old ($OLD_BUILD)"
: >"$STACK_DIR/results"
for r in $(seq "$ROUNDS"); do
    order=(new old)
    [ $((r % 2)) = 0 ] && order=(old new) # neither always runs first
    for v in "${order[@]}"; do
        line=$(run "$v" "$r") # a run that fails stops the script here
        read -r tp cpu pg sub opt <<<"$line"
        echo "$r $v $tp $cpu $pg $sub $opt" >>"$STACK_DIR/results"
        printf 'round %d %-3s %7.0f req/s  replicas %6.1f us CPU a request  postgres %6.1f' \
            "$r" "$v" "$tp" "$cpu" "$pg"
        printf '  subtrans %6.2f pages a request  %5.1f orders a transaction\n' "$sub" "$opt"
    done
done
# median COLUMN [VARIANT]: of a variant's values, or (no variant) of the
# rounds' new/old ratios.
median() {
    awk -v col="$1" -v v="${2:-}" '{ x[$1, $2] = $col; r = $1 }
        END { for (i = 1; i <= r; i++)
                  print v == "" ? (x[i, "old"] ? x[i, "new"] / x[i, "old"] : 0) : x[i, v] }' \
        "$STACK_DIR/results" | sort -g | awk '{ a[NR] = $1 }
        END { printf "%.3f", NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
echo "== medians over $ROUNDS rounds"
for v in new old; do
    printf '%-3s %7.0f req/s  replicas %6.1f us CPU a request  postgres %6.1f' "$v" \
        "$(median 3 "$v")" "$(median 4 "$v")" "$(median 5 "$v")"
    printf '  subtrans %6.2f pages a request  %5.1f orders a transaction\n' "$(median 6 "$v")" \
        "$(median 7 "$v")"
done
printf 'new/old, the median of the rounds'"'"' ratios: rate x%s, replicas'"'"' CPU a request x%s' \
    "$(median 3)" "$(median 4)"
[ -n "$pg_pid" ] && printf ', postgres'"'"' x%s' "$(median 5)"
echo
