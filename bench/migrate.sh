#!/usr/bin/env bash
# migrate.sh - an item's orders while its lock's slot moves to another
# primary of a Redis Cluster (issue 37, part 5): three primaries, three
# stockd replicas on one SQLite file, loadgen ordering one item from all of
# them; after WARMUP seconds the slot of the item's lock key is moved by hand
# in the phases a migration under load goes through: marked (IMPORTING at the
# target, MIGRATING at the source) for SPLIT_MS, the fence counter moved
# alone (a batch of MIGRATE that ended between the lock's keys) for SPLIT_MS,
# the rest moved for ASK_MS (the source answers ASK), then the slot given
# over. Prints each outcome of the whole run, and the answers loadgen got
# in the migration's window (its timeline's buckets), by outcome.
# Usage: bench/migrate.sh [BUILD] (default build; OLD_BUILD=DIR runs that
# build's stockd too, first; loadgen is always this tree's). Knobs:
# CONC=12 (loadgen's connections), WARMUP=2, SPLIT_MS=300, ASK_MS=3000,
# DURATION=WARMUP + 5 seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
CONC=${CONC:-12}
WARMUP=${WARMUP:-2}
SPLIT_MS=${SPLIT_MS:-300}
ASK_MS=${ASK_MS:-3000}
DURATION=${DURATION:-$((WARMUP + 5))}
LOADGEN=$(pwd)/${BUILD:-build}/loadgen
. scripts/stack.sh

now_ms() { date +%s%3N; }
sleep_ms() { sleep "$(awk -v ms="$1" 'BEGIN {print ms / 1000}')"; }

# The port of the primary that serves key $1: the first node's, unless it
# answers MOVED.
owner_of() {
    local r
    r=$(redis-cli -p "${ports[0]}" EXISTS "$1" 2>&1 | tr -d '\r')
    case $r in
    MOVED*) echo "${r##*:}" ;;
    *) echo "${ports[0]}" ;;
    esac
}

# Moves the slot's keys named by GETKEYSINSLOT (or the one key $4) from port
# $2 to port $3.
move_keys() {
    local slot=$1 from=$2 to=$3 keys
    if [ -n "${4:-}" ]; then
        redis-cli -p "$from" MIGRATE 127.0.0.1 "$to" "$4" 0 5000 >/dev/null
        return
    fi
    while keys=$(redis-cli -p "$from" CLUSTER GETKEYSINSLOT "$slot" 100 | xargs) && [ -n "$keys" ]; do
        redis-cli -p "$from" MIGRATE 127.0.0.1 "$to" "" 0 5000 KEYS $keys >/dev/null
    done
}

run_case() {
    BUILD=$1
    STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/migrate-bench.XXXXXX")
    local i port url targets="" item key slot from to from_id to_id t0 tm0 tm1 lg
    stack_redis_cluster
    for i in 1 2 3; do
        port=$(free_port)
        stack_stockd "r$i" "$port" "${ports[0]}" --redis-cluster "$seeds" --allow-work-ms --log-level warn
        targets+="${targets:+,}http://127.0.0.1:$port"
        url=${url:-http://127.0.0.1:$port}
    done
    item=$(curl -s -X POST -d '{"name":"moving","stock":10000000}' "$url/items" |
        sed 's/.*"id":\([0-9]*\).*/\1/')
    key="stock:lock:{$item}"
    slot=$(redis-cli -p "${ports[0]}" CLUSTER KEYSLOT "$key")
    from=$(owner_of "$key")
    for to in "${ports[@]}"; do [ "$to" != "$from" ] && break; done
    from_id=$(redis-cli -p "$from" CLUSTER MYID) to_id=$(redis-cli -p "$to" CLUSTER MYID)
    t0=$(now_ms)
    "$LOADGEN" --target "$targets" --item "$item" -d "${DURATION}s" -n 0 -c "$CONC" \
        --work-ms 1 --json "$STACK_DIR/run.json" >"$STACK_DIR/run.out" 2>&1 &
    lg=$!
    sleep "$WARMUP"
    tm0=$(now_ms)
    redis-cli -p "$to" CLUSTER SETSLOT "$slot" IMPORTING "$from_id" >/dev/null
    redis-cli -p "$from" CLUSTER SETSLOT "$slot" MIGRATING "$to_id" >/dev/null
    sleep_ms "$SPLIT_MS"
    move_keys "$slot" "$from" "$to" "$key:fence"
    sleep_ms "$SPLIT_MS"
    move_keys "$slot" "$from" "$to"
    sleep_ms "$ASK_MS"
    move_keys "$slot" "$from" "$to"
    for i in "$to" "$from" "${ports[@]}"; do
        redis-cli -p "$i" CLUSTER SETSLOT "$slot" NODE "$to_id" >/dev/null
    done
    tm1=$(now_ms)
    wait "$lg" || true
    echo "== $BUILD: item $item, slot $slot from :$from to :$to in $((tm1 - tm0)) ms" \
         "(split ${SPLIT_MS}+${SPLIT_MS} ms, ASK ${ASK_MS} ms), $CONC connections over" \
         "3 replicas; commit $(git rev-parse --short HEAD), $(nproc) CPUs, load" \
         "$(cut -d' ' -f1-3 /proc/loadavg)"
    python3 - "$STACK_DIR/run.json" $((tm0 - t0)) $((tm1 - t0)) <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
lo, hi = int(sys.argv[2]), int(sys.argv[3])
print("  whole run:", ", ".join(f"{k} {v}" for k, v in r["outcomes"].items() if v))
t = r["timeline"]
w = t["bucketMs"]
inside = {k: sum(n for i, n in enumerate(v) if lo <= i * w and (i + 1) * w <= hi + w)
          for k, v in t["outcomes"].items()}
print(f"  in the migration's window ({lo}-{hi} ms of the run, buckets of {w} ms):",
      ", ".join(f"{k} {v}" for k, v in inside.items() if v) or "nothing answered")
EOF
    grep -h 'msg="Redis' "$STACK_DIR"/r*.log | sed 's/^ts=[^ ]* //; s/detail="[^"]*"/detail=.../' |
        sort | uniq -c | sort -rn | head -n 5 | sed 's/^/  log: /' || true # none: grep fails
    stack_stop
    rm -rf "$STACK_DIR"
}

trap 'stack_stop 2>/dev/null' EXIT
trap 'exit 130' INT TERM
[ -n "${OLD_BUILD:-}" ] && run_case "$OLD_BUILD"
run_case "${1:-build}"
