#!/usr/bin/env bash
# demo.sh - the one-command demo: a private redis-server and three stockd
# replicas sharing one SQLite file, then loadgen's hot and renew scenarios
# across all three, and compare (replica 1 next to one replica without a lock
# and one with atomic SQL), with their reports and verdicts; each scenario's
# report is also written as a page, $BUILD/report-<scenario>.html, and its
# path printed.
#   scripts/demo.sh        run the demo, stop everything (also on Ctrl-C), exit
#                          with loadgen's status: non-zero if a verdict failed
#   scripts/demo.sh up     start the stack on ports 8081-8083 and leave it running
#   scripts/demo.sh down   stop what "up" started
# DEMO_PORT (default 8081) moves the three HTTP ports. The replicas take an
# operator token made at start ($STACK_DIR/operator.token; the tokens file
# holds only its sha256): the catalog needs it, buying is open.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh

base=${DEMO_PORT:-8081}
replica_flags=(--allow-work-ms --lease-ms 500 --redis-timeout-ms 80)

# An operator token for this stack, and the tokens file of its sha256
# (docs/operations.md shows the same two steps): both in $STACK_DIR, 0600.
make_token() {
    local token=$STACK_DIR/operator.token
    (umask 077 && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$token" && echo >>"$token")
    (umask 077 && printf 'operator demo sha256:%s\n' \
        "$(tr -d '\n' <"$token" | sha256sum | cut -d' ' -f1)" >"$STACK_DIR/api-tokens")
    replica_flags+=(--api-tokens-file "$STACK_DIR/api-tokens")
}

start_stack() {
    make_token
    redis_port=$(free_port)
    stack_redis "$redis_port"
    urls=()
    for i in 0 1 2; do
        stack_stockd "replica-$((i + 1))" "${ports[$i]}" "$redis_port" "${replica_flags[@]}"
        urls+=("http://127.0.0.1:${ports[$i]}")
    done
    targets=$(IFS=,; echo "${urls[*]}")
}

# $1: the operator token of the stack that stays up, or "" (make demo's
# stack is gone by then: make demo-up makes its own).
try_it_yourself() {
    local token=${1:-"\$(cat var/demo/operator.token)"}
    cat <<TXT

Try it yourself: \`make demo-up\` starts the same stack and leaves it running on
ports $base-$((base + 2)) (\`make demo-down\` stops it), with an operator token
made at start in var/demo/operator.token: creating items and setting stock
need it, buying and reading do not. Then:

  curl -s -X POST localhost:$base/items -H "Authorization: Bearer $token" -d '{"name":"widget","stock":42}'
  curl -s -X POST localhost:$base/reduceStock -d '{"itemId":1,"quantity":1,"requestId":"order-1"}'
  curl -s localhost:$((base + 1))/items/1
  build/loadgen --scenario hot --token-file var/demo/operator.token --target http://127.0.0.1:$base,http://127.0.0.1:$((base + 1)),http://127.0.0.1:$((base + 2))
TXT
}

case "${1:-run}" in
run)
    STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/stocklock-demo.XXXXXX")
    trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
    trap 'exit 130' INT TERM
    ports=("$(free_port)")
    ports+=("$(free_port $((ports[0] + 1)))")
    ports+=("$(free_port $((ports[1] + 1)))")
    start_stack
    echo "demo: redis-server and 3 stockd replicas on one SQLite file: ${urls[*]}"
    # compare's other two lock modes, on the same Redis and database
    mode_ports=("$(free_port $((ports[2] + 1)))")
    mode_ports+=("$(free_port $((mode_ports[0] + 1)))")
    stack_stockd none "${mode_ports[0]}" "$redis_port" --lock none --allow-work-ms \
        --api-tokens-file "$STACK_DIR/api-tokens"
    stack_stockd atomic "${mode_ports[1]}" "$redis_port" --lock atomic --allow-work-ms \
        --api-tokens-file "$STACK_DIR/api-tokens"
    status=0
    reports=()
    for scenario in hot renew compare; do
        echo
        if [ "$scenario" = compare ]; then
            echo "=== loadgen --scenario compare (replica 1, with the lock, next to a replica" \
                "without one and one with atomic SQL)"
            args=(--target "redis=${urls[0]}" --target "none=http://127.0.0.1:${mode_ports[0]}"
                --target "atomic=http://127.0.0.1:${mode_ports[1]}")
        else
            echo "=== loadgen --scenario $scenario (across all three replicas)"
            args=(--target "$targets")
        fi
        report="$BUILD/report-$scenario.html"
        "$BUILD/loadgen" --scenario "$scenario" "${args[@]}" --html "$report" \
            --token-file "$STACK_DIR/operator.token" || status=$?
        echo "report: $report"
        reports+=("$report")
    done
    echo
    echo "Reports (open them in a browser; each is one file, no network needed):"
    printf '  %s\n' "${reports[@]}"
    try_it_yourself
    exit "$status"
    ;;
up)
    STACK_DIR=$PWD/var/demo
    mkdir -p "$STACK_DIR"
    if [ -f "$STACK_DIR/pids" ]; then
        echo "demo-up: already running (make demo-down stops it)" >&2
        exit 1
    fi
    ports=("$base" "$((base + 1))" "$((base + 2))")
    for p in "${ports[@]}"; do
        if port_in_use "$p"; then
            echo "demo-up: port $p is in use; pick others with DEMO_PORT=N" >&2
            exit 1
        fi
    done
    rm -f "$STACK_DIR"/stock.db* "$STACK_DIR"/*.log # a fresh stack: item 1 is yours, a new token
    trap 'stack_stop' ERR
    start_stack
    echo "demo-up: running (logs and database in $STACK_DIR/):"
    printf '  %s\n' "${urls[@]}"
    echo "operator token (var/demo/operator.token): $(cat "$STACK_DIR/operator.token")"
    try_it_yourself "$(cat "$STACK_DIR/operator.token")"
    ;;
down)
    STACK_DIR=$PWD/var/demo
    stack_stop
    echo "demo-down: stopped"
    ;;
*)
    echo "usage: scripts/demo.sh [run|up|down]" >&2
    exit 2
    ;;
esac
