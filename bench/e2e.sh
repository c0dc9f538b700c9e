#!/usr/bin/env bash
# e2e.sh - the service end to end: loadgen against 3 replicas (64 connections,
# DURATION seconds, a stock that never runs out) for lock modes redis with
# spin, redis with notify + hand-off + group commit, and atomic, at --sync
# full and normal; on one hot item (e2e-hot) and spread over 1000 items
# (e2e-spread). Then e2e-cart: POST /orders carts of 3 lines over 8 hot items
# at --sync full, redis with its defaults against atomic. Then e2e-hot and
# e2e-spread with the replicas on one PostgreSQL database (synchronous_commit
# on), redis with its defaults against atomic and db (row locks), each run on
# a fresh database. Prints throughput (orders/s for carts), p50/p99 and the
# verdict of each run, and each redis mode's throughput as a ratio to
# atomic's; for PostgreSQL also where the time went (per order: transactions
# that wrote, WAL bytes, CPU of postgres, Redis, the replicas and loadgen).
# Usage: bench/e2e.sh (make bench runs it). Knobs: BUILD, DURATION=5,
# WORKLOADS="hot spread cart" (a subset runs only those), BACKENDS="sqlite
# postgres" (one of them runs only its runs; cart runs on SQLite only),
# LOG_LEVEL=warn (info: a line per order, as stockd's default; each run then
# says how much its replicas logged). Each run also gives the
# replicas' CPU per request. The replicas read stockd's own
# variables too (STOCKD_DB_POOL=4: a smaller pool, STOCKD_LOG_FORMAT=json).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
DURATION=${DURATION:-5}
LOG_LEVEL=${LOG_LEVEL:-warn}
WORKLOADS=${WORKLOADS:-hot spread cart}
BACKENDS=${BACKENDS:-sqlite postgres}
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/e2e-bench.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
redis_port=$(free_port)
stack_redis "$redis_port"
redis_pid=$(tail -n 1 "$STACK_DIR/pids")

declare -A modes=(
    [spin]="--lock redis --wait-mode spin --batch off"
    [handoff+batch]="--lock redis --wait-mode notify --batch on"
    [atomic]="--lock atomic"
    [redis]="--lock redis" # the defaults: notify, hand-off, group commit
    [db]="--lock db"       # SELECT ... FOR UPDATE (PostgreSQL only)
)
wanted() { [[ " $2 " == *" $1 "* ]]; }

# ---- PostgreSQL: one server for every run, a fresh database per run ----
pg_port="" pg_pid="" pg_db="" pg_runs=0
pg_start() {
    pg_port=$(free_port)
    stack_pg "$pg_port"
    pg_pid=$(tail -n 1 "$STACK_DIR/pids")
}
psql_pg() { "$(pg_bindir)/psql" -qAtX -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U stock "$@"; }
# A fresh database for the next run, after a checkpoint so that no run pays
# for the WAL of the one before.
pg_fresh_db() {
    pg_runs=$((pg_runs + 1))
    pg_db=e2e_$pg_runs
    psql_pg -d stock -c "CREATE DATABASE $pg_db" -c CHECKPOINT
}
# A sample every 0.5 s until killed, one line: time; orders, transactions
# that wrote (the next xid) and WAL bytes so far, read live (the statistics
# views lag by up to a second); CPU ticks (user + system) of the machine
# (busy, idle), of postgres, redis-server, the replicas and loadgen (PID $1;
# the replicas' PIDs follow).
pg_sampler() {
    local db q
    while :; do
        q=$(psql_pg -d "$pg_db" -F ' ' -c "SELECT (SELECT CASE WHEN is_called THEN last_value
            ELSE 0 END FROM orders_id_seq), pg_snapshot_xmax(pg_current_snapshot()),
            pg_current_wal_lsn() - '0/0'") && db=$q || db=""
        [ -n "$db" ] && echo "$(now_s) $db $(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9,
            $5 + $6 }' /proc/stat) $(cpu_ticks "$@")"
        sleep 0.5
    done
}
now_s() { date +%s.%N; }

# "postgres redis-server replicas loadgen" CPU ticks, loadgen's PID $1, the
# replicas' the rest. Postgres is the postmaster, its sessions and workers, and those it
# has reaped. From /proc/PID/stat with the command name cut out: then $3 is
# the parent, $13..$16 utime, stime, cutime and cstime.
cpu_ticks() {
    cat /proc/[0-9]*/stat 2>/dev/null | sed 's/^\([0-9]*\) (.*) /\1 /' |
        awk -v pg="$pg_pid" -v rd="$redis_pid" -v lg="$1" -v sd=" ${*:2} " '
            $1 == pg { p += $13 + $14 + $15 + $16 } $3 == pg { p += $13 + $14 }
            $1 == rd { r += $13 + $14 } index(sd, " " $1 " ") { s += $13 + $14 }
            $1 == lg { l += $13 + $14 } END { print p + 0, r + 0, s + 0, l + 0 }'
}

# Where the time went, from pg_sampler's lines (file $1), between the first
# sample with an order and the last one with orders after it, so inside the
# load: per order, the transactions that wrote, WAL bytes and each one's CPU.
pg_cost() {
    awk -v hz="$(getconf CLK_TCK)" 'NF == 10 { n++; for (i = 1; i <= NF; i++) v[n, i] = $i }
        END {
        for (i = 1; i <= n && v[i, 2] == 0; i++) {}
        a = i;
        for (b = n - 1; b > a && v[b + 1, 2] == v[b, 2]; b--) {}
        o = v[b, 2] - v[a, 2];
        if (b <= a || o <= 0) { print "        (the load was too short to sample)"; exit }
        t = v[b, 1] - v[a, 1];
        d = "";
        for (i = 3; i <= 10; i++) d = d " " (v[b, i] - v[a, i]);
        split(d, D, " ");
        printf "        over %.1f s of load: per order %.3f writing xacts, %.0f WAL bytes;" \
               " CPU us per order: postgres %.0f, redis %.0f, stockd %.0f, loadgen %.0f;" \
               " CPUs busy %.2f of %.2f, %.2f of them these processes\n", t, D[1] / o,
               D[2] / o, D[5] / hz * 1e6 / o, D[6] / hz * 1e6 / o, D[7] / hz * 1e6 / o,
               D[8] / hz * 1e6 / o, D[3] / hz / t, (D[3] + D[4]) / hz / t,
               (D[5] + D[6] + D[7] + D[8]) / hz / t }' "$1"
}

# ---- one run ----

# run WORKLOAD SYNC MODE: three fresh replicas on a fresh database, one loadgen
# run. SYNC is full or normal (SQLite), or pg: PostgreSQL with --sync full
# (synchronous_commit on), and then where the time went as well.
run() {
    local workload=$1 sync=$2 mode=$3 ports=() pids=() targets db=()
    rm -f "$STACK_DIR"/stock.db*
    if [ "$sync" = pg ]; then
        pg_fresh_db
        db=(--db "postgresql://stock@127.0.0.1:$pg_port/$pg_db" --sync full) # synchronous_commit on
    else
        db=(--sync "$sync")
    fi
    local pid_mark log_mark
    pid_mark=$(wc -l <"$STACK_DIR/pids")
    log_mark=$(log_size)
    for i in 0 1 2; do
        ports+=("$(free_port)")
        # shellcheck disable=SC2086 # the mode's flags are words
        stack_stockd "r$i" "${ports[$i]}" "$redis_port" "${db[@]}" ${modes[$mode]} \
            --log-level "$LOG_LEVEL"
        pids+=("$(tail -n 1 "$STACK_DIR/pids")")
    done
    targets=$(printf 'http://127.0.0.1:%s,' "${ports[@]}")
    local items=() json=$STACK_DIR/$workload-$sync-$mode.json
    [ "$workload" = spread ] && items=(--items 1000)
    [ "$workload" = cart ] && items=(--items 8 --cart-lines 3)
    # --history-ms 0: the history check (on by default) reads the item every 5 ms, load
    # the figures recorded before it existed did not carry
    "$BUILD/loadgen" -d "$DURATION" -n 0 -c 64 --stock 100000000 "${items[@]}" \
        --history-ms 0 --target "${targets%,}" --json "$json" >"$STACK_DIR/out" 2>&1 &
    local lg=$! sampler="" cpu0 cpu1
    cpu0=$(proc_ticks "${pids[@]}")
    if [ "$sync" = pg ]; then
        pg_sampler "$lg" "${pids[@]}" >"$STACK_DIR/samples" 2>/dev/null &
        sampler=$!
    fi
    wait "$lg" || true
    cpu1=$(proc_ticks "${pids[@]}")
    : >"$STACK_DIR/ceiling"
    [ "$workload $mode" = "hot handoff+batch" ] &&
        http_ceiling "$sync" "${targets%,}" >"$STACK_DIR/ceiling"
    if [ -n "$sampler" ]; then
        kill "$sampler"
        wait "$sampler" 2>/dev/null || true
    fi
    stack_stop_since "$pid_mark" # this run's replicas
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
    cat "$STACK_DIR/ceiling"
    replica_cost $((cpu1 - cpu0)) "${tp:-0}" "$log_mark"
    if [ "$sync" = pg ]; then
        pg_cost "$STACK_DIR/samples"
        psql_pg -d stock -c "DROP DATABASE $pg_db WITH (FORCE)"
    fi
}

# GET /health through loadgen on the replicas just measured, with the same
# connections and duration: the plain HTTP rate that the locked, durable
# write path is a share of. (/health is no empty answer: it pings the
# database and every Redis server.)
http_ceiling() {
    local tp
    "$BUILD/loadgen" --get /health -d "$DURATION" -c 64 --target "$2" \
        --json "$STACK_DIR/health.json" >/dev/null 2>&1 || true
    tp=$(json_number throughput "$STACK_DIR/health.json")
    echo "health $1 ceiling ${tp:-0} -" >>"$STACK_DIR/results"
    printf '%-7s sync=%-6s %-14s %9.0f req/s   (GET /health, the same replicas: the HTTP ceiling)\n' \
        hot "$1" "GET /health" "${tp:-0}"
}

# "lines bytes" the replicas have logged so far (their logs are appended to).
log_size() { { cat "$STACK_DIR"/r[0-9].log 2>/dev/null || true; } | wc -lc | awk '{ print $1, $2 }'; }

# The replicas' CPU per request (ticks $1 over the load and loadgen's
# read-back, at rate $2): on a shared machine it moves less than the rate
# does. With LOG_LEVEL other than warn, what they logged since log_size's
# mark $3.
replica_cost() {
    local lines bytes l0 b0
    read -r lines bytes <<<"$(log_size)"
    read -r l0 b0 <<<"$3"
    awk -v c="$1" -v hz="$(getconf CLK_TCK)" -v tp="$2" -v d="$DURATION" -v l=$((lines - l0)) \
        -v b=$((bytes - b0)) -v show_log="$([ "$LOG_LEVEL" = warn ] || echo 1)" 'BEGIN {
        printf "        stockd: %.0f us CPU a request", tp ? c / hz * 1e6 / (tp * d) : 0
        if (show_log)
            printf "; log: %d lines, %.0f bytes a line, %.2f MB/s", l, l ? b / l : 0, b / d / 1e6
        printf "\n" }'
}


: >"$STACK_DIR/results"
if wanted sqlite "$BACKENDS"; then
    echo "== e2e: loadgen -c 64 -d ${DURATION}s against 3 replicas on one SQLite file"
    for workload in hot spread; do
        wanted "$workload" "$WORKLOADS" || continue
        for sync in full normal; do
            for mode in spin handoff+batch atomic; do
                run "$workload" "$sync" "$mode"
            done
        done
    done
    if wanted cart "$WORKLOADS"; then
        echo
        echo "== e2e-cart: carts (POST /orders) of 3 lines over 8 hot items, sync=full"
        for mode in redis atomic; do
            run cart full "$mode"
        done
    fi
fi
if wanted postgres "$BACKENDS" && { wanted hot "$WORKLOADS" || wanted spread "$WORKLOADS"; }; then
    pg_start
    echo
    echo "== e2e on PostgreSQL $(psql_pg -d stock -c 'SHOW server_version' | cut -d' ' -f1)" \
         "(fsync $(psql_pg -d stock -c 'SHOW fsync'), --sync full: synchronous_commit on):" \
         "loadgen -c 64 -d ${DURATION}s against 3 replicas" \
         "(--db-pool ${STOCKD_DB_POOL:-16} each) on one database, fresh for each run"
    for workload in hot spread; do
        wanted "$workload" "$WORKLOADS" || continue
        for mode in redis atomic db; do
            run "$workload" pg "$mode"
        done
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
    for (j = 1; j <= 2; j++)
        if (tp["health "S[j]" ceiling"] > 0)
            printf "%-7s sync=%-6s handoff+batch keeps %.2f of GET /health on the same replicas\n",
                   "hot", S[j], tp["hot "S[j]" handoff+batch"] / tp["health "S[j]" ceiling"]
    if (tp["cart full atomic"] > 0)
        printf "%-7s sync=%-6s redis %.2fx\n", "cart", "full",
               tp["cart full redis"] / tp["cart full atomic"]
    for (i = 1; i <= 2; i++) {
        a = tp[W[i]" pg atomic"]; d = tp[W[i]" pg db"]; r = tp[W[i]" pg redis"];
        if (a > 0 && d > 0)
            printf "%-7s sync=%-6s redis %.2fx atomic, %.2fx db, %.2fx the better of the two\n",
                   W[i], "pg", r / a, r / d, r / (a > d ? a : d) } }' \
    "$STACK_DIR/results"
grep -q "ERROR\|FAIL" "$STACK_DIR/results" && { echo "a run did not PASS" >&2; exit 1; }
exit 0
