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
# DEMO_PORT (default 8081) moves the three HTTP ports. DEMO_FRONT=haproxy
# (make demo-up FRONT=haproxy) puts haproxy in front of "up"'s replicas
# (scripts/front-door.sh): HTTPS on DEMO_PORT + 362 (8443), its CA in
# var/demo/front/ca.pem; the replicas then trust its X-Forwarded-For (from
# 127.0.0.2, haproxy's own source address, and no other) and give a
# drain notice on SIGTERM, so that haproxy drops them first. The replicas take an
# operator token made at start ($STACK_DIR/operator.token; the tokens file
# holds only its sha256): the catalog needs it, buying is open.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh

base=${DEMO_PORT:-8081}
front=${DEMO_FRONT:-}
front_port=$((base + 362))
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

# Replica flags for haproxy in front (docs/operations.md, "The front door"):
# a drain notice longer than its checks' 2 x 500 ms, and its X-Forwarded-For
# believed from haproxy's own source address, 127.0.0.2 (front_source): not
# from 127.0.0.1, where buyers are, which would let any of them name its own
# address, through haproxy or straight to a replica.
front_source=127.0.0.2
front_flags() {
    replica_flags+=(--drain-notice-ms 2000 --trusted-proxies "$front_source/32")
}

# haproxy on $front_port over the three replicas, its PID in the stack's
# pids (make demo-down stops it with them); waits until a sale's route answers
# through it.
start_front() {
    FRONT_BIND=127.0.0.1:$front_port FRONT_SOURCE=$front_source FRONT_S1=127.0.0.1:${ports[0]} \
        FRONT_S2=127.0.0.1:${ports[1]} FRONT_S3=127.0.0.1:${ports[2]} \
        scripts/front-door.sh "$STACK_DIR/front" </dev/null >"$STACK_DIR/haproxy.log" 2>&1 &
    echo $! >>"$STACK_DIR/pids"
    local i
    for i in $(seq 100); do
        curl -sf -o /dev/null --cacert "$STACK_DIR/front/ca.pem" \
            "https://localhost:$front_port/health" && return 0
        sleep 0.1
    done
    echo "demo-up: haproxy does not answer on $front_port (see $STACK_DIR/haproxy.log)" >&2
    return 1
}

# The same lines through haproxy: HTTPS with its CA.
try_it_through_front() {
    local token=$1 ca=var/demo/front/ca.pem url=https://localhost:$front_port
    cat <<TXT

Through the front door (haproxy: TLS, round robin over the three, limits per
source address), https://localhost:$front_port with its CA in $ca:

  curl -s --cacert $ca -X POST $url/items -H "Authorization: Bearer $token" -d '{"name":"gadget","stock":42}'
  curl -s --cacert $ca -X POST $url/reduceStock -d '{"itemId":1,"quantity":1,"requestId":"order-2"}'
  curl -s --cacert $ca $url/health
  build/loadgen --scenario hot --token-file var/demo/operator.token --cacert $ca --target $url
TXT
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
    case $front in
    "") ;;
    haproxy) front_flags && ports+=("$front_port") ;;
    *)
        echo "demo-up: unknown front door '$front' (FRONT=haproxy, or none)" >&2
        exit 2
        ;;
    esac
    for p in "${ports[@]}"; do
        if port_in_use "$p"; then
            echo "demo-up: port $p is in use; pick others with DEMO_PORT=N" >&2
            exit 1
        fi
    done
    rm -f "$STACK_DIR"/stock.db* "$STACK_DIR"/*.log # a fresh stack: item 1 is yours, a new token
    trap 'stack_stop' ERR
    start_stack
    [ -z "$front" ] || start_front
    echo "demo-up: running (logs and database in $STACK_DIR/):"
    printf '  %s\n' "${urls[@]}"
    [ -z "$front" ] || echo "  https://localhost:$front_port (haproxy, CA var/demo/front/ca.pem)"
    echo "operator token (var/demo/operator.token): $(cat "$STACK_DIR/operator.token")"
    try_it_yourself "$(cat "$STACK_DIR/operator.token")"
    [ -z "$front" ] || try_it_through_front "$(cat "$STACK_DIR/operator.token")"
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
