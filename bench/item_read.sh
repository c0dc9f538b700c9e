#!/usr/bin/env bash
# item_read.sh - what reading an item costs as its ledger grows (issue 23,
# part 6): one item with N orders, written straight into the database in the
# schema from before the totals, read by the stockd of that revision (BASE:
# sold and orderCount summed over the item's order_lines on every read), then
# by this tree's, which migrates the database on start (its totals filled in
# from the ledger: the start-up time is shown) and reads them off the row.
# For each backend and N: GET /items/1?limit=1 (the item and its newest
# order) and GET /items (a page of items), each by loadgen's raw mode on one
# connection for DURATION s: p50, p99 and reads/s; then, per build, the
# ratio of the p50 at each N to the p50 at the first N.
#
# Usage: bench/item_read.sh      (from the repository root, after make)
# Knobs (environment): BUILD=build ORDERS="10 10000000" BACKENDS="sqlite postgres"
#   DURATION=3 BASE=<rev> (default: the commit before the totals' migration,
#   exported with git archive and built in a temporary directory)
#   OLD_BUILD=<dir with that stockd> (instead of BASE)
# Exit status: 0, or 2 on set-up errors.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
ORDERS=${ORDERS:-"10 10000000"}
BACKENDS=${BACKENDS:-"sqlite postgres"}
DURATION=${DURATION:-3}
OLD_BUILD=${OLD_BUILD:-}
BASE=${BASE:-$(git rev-parse "$(git rev-list -1 HEAD -- schema/sqlite/004_item_totals.sql)~1")}
STOCK=1000000000 # the hot item's stock before its N orders: never runs out

die() { echo "item_read: $*" >&2; exit 2; }
for bin in "$BUILD/stockd" "$BUILD/loadgen"; do
    [ -x "$bin" ] || die "$bin not found: run make first"
done
command -v sqlite3 >/dev/null ||
    die "sqlite3 not found (Debian package sqlite3; make bench installs it)"
. scripts/stack.sh
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/item-read.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM

if [ -z "$OLD_BUILD" ]; then # a copy of BASE's files: the repository is left as it is
    mkdir "$STACK_DIR/base"
    git archive "$BASE" | tar -x -C "$STACK_DIR/base" || die "cannot export $BASE"
    make -C "$STACK_DIR/base" all >"$STACK_DIR/base-build.log" 2>&1 ||
        die "cannot build $BASE (see $STACK_DIR/base-build.log)"
    OLD_BUILD=$STACK_DIR/base/build
fi
[ -x "$OLD_BUILD/stockd" ] || die "$OLD_BUILD/stockd not found"

# The hot item (id 1) with N one-unit orders, the last leaving STOCK - N, and
# a second item with none; SQL for the backend $1 in the old schema.
ledger_sql() {
    local n=$2
    if [ "$1" = sqlite ]; then
        echo "PRAGMA synchronous = OFF;"
        echo "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < $n)"
        echo "INSERT INTO orders (id, instance_id, lock_mode) SELECT i, 'bench', 'atomic' FROM s;"
        echo "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < $n)"
    else
        echo "INSERT INTO orders (instance_id, lock_mode) SELECT 'bench', 'atomic'"
        echo "    FROM generate_series(1, $n);"
        echo "WITH s(i) AS (SELECT generate_series(1, $n))"
    fi
    echo "INSERT INTO order_lines (order_id, item_id, quantity, remaining)"
    echo "    SELECT i, 1, 1, $STOCK - i FROM s;"
}

# A database ($db: a file, or a URL) of the schema before the totals, with
# ledger_sql's orders.
make_database() { # backend n
    local items="INSERT INTO items (name, stock) VALUES ('hot', $((STOCK - $2))), ('cold', 5);"
    if [ "$1" = sqlite ]; then
        db=$STACK_DIR/items-$2.db
        rm -f "$db" "$db"-*
        { cat schema/sqlite/00[1-3]_*.sql; echo "PRAGMA user_version = 3; $items";
          ledger_sql sqlite "$2"; } | sqlite3 "$db" >/dev/null
        sqlite3 "$db" "PRAGMA journal_mode = WAL; ANALYZE; PRAGMA wal_checkpoint(TRUNCATE);" \
            >/dev/null
    else
        local name=items_$2
        PGOPTIONS="-c client_min_messages=warning" "$psql" -q -X -v ON_ERROR_STOP=1 \
            -d "$STACK_PG_URL" -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name" \
            >/dev/null
        db=${STACK_PG_URL%/*}/$name
        { cat schema/postgres/001_init.sql
          echo "CREATE TABLE stockd_schema (version integer PRIMARY KEY, name text NOT NULL,"
          echo "    applied_at timestamptz NOT NULL DEFAULT now());"
          echo "INSERT INTO stockd_schema (version, name) VALUES (1, '001_init.sql'); $items"
          ledger_sql postgres "$2"; } | "$psql" -q -X -v ON_ERROR_STOP=1 -d "$db" >/dev/null
        # the writes flushed now, not by a checkpoint while the reads are timed
        "$psql" -q -X -d "$db" -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
    fi
}

# Starts the stockd of build $1 on $db (port, stockd_pid); start_s: how long
# it took to answer, migrating included.
start_stockd() {
    port=$(free_port)
    local t0
    t0=$(date +%s.%N)
    "$1/stockd" --port "$port" --db "$db" --lock atomic --log-level warn </dev/null \
        >/dev/null 2>>"$STACK_DIR/stockd.log" &
    stockd_pid=$!
    echo "$stockd_pid" >>"$STACK_DIR/pids"
    for _ in $(seq 6000); do # a migration of millions of lines takes a while
        curl -s -o /dev/null "http://127.0.0.1:$port/health" && break
        kill -0 "$stockd_pid" 2>/dev/null || die "stockd exited (see $STACK_DIR/stockd.log)"
        sleep 0.1
    done
    start_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}

stop_stockd() {
    kill -TERM "$stockd_pid"
    wait "$stockd_pid" 2>/dev/null || true
}

# loadgen's raw GET of path $1 on one connection: "p50_ms p99_ms reads/s".
read_cost() {
    local json=$STACK_DIR/read.json
    "$BUILD/loadgen" --get "$1" -c 1 -t 1 -d "$DURATION" --timeout-ms 600000 \
        --target "http://127.0.0.1:$port" --json "$json" >"$STACK_DIR/read.out" ||
        die "loadgen --get $1 failed: $(tail -n 3 "$STACK_DIR/read.out")"
    grep -q '"ok": *0,' "$json" && die "GET $1: no read answered 200"
    awk -v p50="$(json_number p50 "$json")" -v p99="$(json_number p99 "$json")" \
        -v rate="$(sed -n 's/.* = \([0-9.]*\) req\/s.*/\1/p' "$STACK_DIR/read.out")" \
        'BEGIN { printf "%.3f %.3f %.1f", p50 / 1000, p99 / 1000, rate }'
}

echo "item reads as the ledger grows: one item with N orders, GET /items/1?limit=1 and"
echo "GET /items on one connection, ${DURATION} s each; before = $BASE, after = this tree"
echo "commit $(git rev-parse --short HEAD), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo |
    cut -d: -f2- | sed 's/^ //')), $(date -u '+%Y-%m-%d %H:%M UTC')"
printf '%-9s %10s %-7s %9s %-18s %9s %9s %10s\n' backend orders build start_s read p50_ms \
    p99_ms reads/s
pg_started=0
for backend in $BACKENDS; do
    if [ "$backend" = postgres ] && [ "$pg_started" = 0 ]; then
        stack_pg "$(free_port)" || die "no PostgreSQL server"
        psql=$(pg_bindir)/psql
        pg_started=1
    fi
    for n in $ORDERS; do
        t0=$(date +%s)
        make_database "$backend" "$n"
        echo "($backend: $n orders written in $(($(date +%s) - t0)) s)" >&2
        for build in before after; do
            bin=$BUILD
            [ "$build" = before ] && bin=$OLD_BUILD
            start_stockd "$bin"
            for path in "/items/1?limit=1" "/items"; do
                cost=$(read_cost "$path")
                printf '%-9s %10s %-7s %9s %-18s %9s %9s %10s\n' "$backend" "$n" "$build" \
                    "$start_s" "$path" $cost
                echo "$backend $build $path $n ${cost%% *}" >>"$STACK_DIR/p50"
            done
            stop_stockd
        done
    done
done
echo
echo "p50 at each N relative to the first N (1.0: the read costs the same):"
awk '{ k = $1 " " $2 " " $3; if (!(k in first)) first[k] = $5
       printf "  %-9s %-7s %-18s %10s orders: %8.1fx\n", $1, $2, $3, $4, $5 / first[k] }' \
    "$STACK_DIR/p50"
