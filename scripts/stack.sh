# stack.sh - sourced by the demo, valgrind and benchmark scripts: starts
# redis-server and stockd replicas on loopback ports, each recorded by PID in
# $STACK_DIR/pids, so that stack_stop (also from a trap) stops exactly them.
# Expects BUILD (default build) and STACK_DIR to be set by the caller.

BUILD=${BUILD:-build}

# A loopback port nobody listens on, searched from $1 (default: random in
# 20000-31999, below the kernel's ephemeral range, which outgoing connections
# use without listening).
free_port() {
    local p=${1:-$((20000 + RANDOM % 12000))}
    while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do
        p=$((p + 1))
    done
    echo "$p"
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Waits up to 10 s for an HTTP answer on port $1.
wait_http() {
    local i
    for i in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$1/health" && return 0
        sleep 0.1
    done
    echo "stack: nothing answers on port $1" >&2
    return 1
}

# stack_redis PORT: a private redis-server without persistence.
stack_redis() {
    redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$STACK_DIR" --logfile "$STACK_DIR/redis.log" --daemonize no </dev/null >/dev/null 2>&1 &
    echo $! >>"$STACK_DIR/pids"
    local i
    for i in $(seq 100); do
        [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.1
    done
    echo "stack: redis-server did not start on port $1 (see $STACK_DIR/redis.log)" >&2
    return 1
}

# stack_stockd NAME PORT REDIS_PORT [flags...]: a replica on $STACK_DIR/stock.db,
# logging to $STACK_DIR/NAME.log. STOCKD_WRAPPER (e.g. valgrind ...) runs it under a tool.
stack_stockd() {
    local name=$1 port=$2 redis_port=$3
    shift 3
    ${STOCKD_WRAPPER:-} "$BUILD/stockd" --port "$port" --db "$STACK_DIR/stock.db" \
        --redis-port "$redis_port" --instance-id "$name" "$@" </dev/null >/dev/null \
        2>>"$STACK_DIR/$name.log" &
    echo $! >>"$STACK_DIR/pids"
    wait_http "$port" || { echo "stack: see $STACK_DIR/$name.log" >&2; return 1; }
}

# Stops every recorded process: SIGTERM, up to 10 s, then SIGKILL.
stack_stop() {
    [ -f "$STACK_DIR/pids" ] || return 0
    local pid i
    while read -r pid; do kill -TERM "$pid" 2>/dev/null || true; done <"$STACK_DIR/pids"
    for i in $(seq 100); do
        local alive=0
        while read -r pid; do kill -0 "$pid" 2>/dev/null && alive=1; done <"$STACK_DIR/pids"
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$STACK_DIR/pids"
    rm -f "$STACK_DIR/pids"
}
