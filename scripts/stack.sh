# stack.sh - sourced by the demo, valgrind and benchmark scripts: starts
# redis-server, PostgreSQL and stockd replicas on loopback ports, each recorded
# by PID in $STACK_DIR/pids, so that stack_stop (also from a trap) stops
# exactly them.
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

# stack_redis_cluster: a Redis Cluster of three primaries, no replicas, under
# $STACK_DIR/PORT; sets ports (their ports) and seeds ("127.0.0.1:P,...").
# Each port with its bus port (+10000) free.
stack_redis_cluster() {
    local p i t ok
    ports=() seeds=""
    for i in 1 2 3; do
        p=$(free_port $((20000 + RANDOM % 2000))) # the bus, +10000, below the ephemeral ports
        while port_in_use $((p + 10000)); do p=$(free_port $((p + 1))); done
        mkdir "$STACK_DIR/$p"
        redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no \
            --dir "$STACK_DIR/$p" --logfile "$STACK_DIR/$p/redis.log" --cluster-enabled yes \
            --cluster-config-file nodes.conf </dev/null >/dev/null 2>&1 &
        echo $! >>"$STACK_DIR/pids"
        for t in $(seq 101); do [ "$(redis-cli -p "$p" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
        [ "$t" -le 100 ] || { echo "stack: redis-server on $p did not start" >&2; return 1; }
        ports+=("$p")
        seeds+="${seeds:+,}127.0.0.1:$p"
    done
    redis-cli --cluster create $(printf '127.0.0.1:%s ' "${ports[@]}") --cluster-replicas 0 \
        --cluster-yes >"$STACK_DIR/create.log" 2>&1 || { cat "$STACK_DIR/create.log" >&2; return 1; }
    for _ in $(seq 200); do
        ok=0
        for p in "${ports[@]}"; do
            redis-cli -p "$p" cluster info | grep -q cluster_state:ok && ok=$((ok + 1))
        done
        [ "$ok" = 3 ] && return 0
        sleep 0.1
    done
    echo "stack: the cluster did not reach cluster_state:ok" >&2
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

# The newest installed PostgreSQL server's bin directory, found as tests/support/pg.c
# finds it: the highest /usr/lib/postgresql/<version>/bin, else pg_config's.
pg_bindir() {
    local d
    d=$(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)
    d=${d%/initdb}
    [ -x "$d/postgres" ] || d=$(pg_config --bindir 2>/dev/null) || return 1
    [ -x "$d/initdb" ] && [ -x "$d/postgres" ] && echo "$d"
}

# stack_pg PORT: a private PostgreSQL server in $STACK_DIR/pg-PORT with the
# superuser and database "stock", trusted on loopback, and sets STACK_PG_URL.
# fsync stays on, unlike in the tests: benchmarks measure durable commits.
# Called again on the same PORT, it restarts the server on its data.
stack_pg() {
    local port=$1 dir=$STACK_DIR/pg-$1 bin fresh=0 i
    local as=() # postgres refuses to run as root: then it runs as Debian's postgres user
    bin=$(pg_bindir) || { echo "stack: no PostgreSQL server installed (make deps)" >&2; return 1; }
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then
        chmod a+x "$STACK_DIR" # mktemp's 0700 would keep that user out of $dir
        chown postgres:postgres "$dir"
        as=(setpriv --reuid=postgres --regid=postgres --init-groups)
    fi
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        fresh=1
        (cd / && "${as[@]}" "$bin/initdb" -D "$dir/data" -U stock -E UTF8 --locale=C.UTF-8 \
            --auth=trust --no-sync) >"$dir/initdb.log" 2>&1 ||
            { echo "stack: initdb failed (see $dir/initdb.log)" >&2; return 1; }
        printf 'local all all trust\nhost all all 127.0.0.1/32 trust\n' >"$dir/data/pg_hba.conf"
        [ "${#as[@]}" -eq 0 ] || chown postgres:postgres "$dir/data/pg_hba.conf"
    fi
    # TCP only (-k ""): a socket path under a deep STACK_DIR can pass the
    # 107-byte limit. From "/": the caller's cwd may be closed to postgres.
    (cd / && exec "${as[@]}" "$bin/postgres" -D "$dir/data" -p "$port" -k "" \
        -c listen_addresses=127.0.0.1 -c max_connections=200) </dev/null >/dev/null \
        2>>"$dir/postgres.log" &
    local pid=$!
    echo "$pid" >>"$STACK_DIR/pids"
    # Ready when our postmaster says so in its pid file (as pg_ctl waits), not
    # when anything answers on the port, then reachable over TCP.
    for i in $(seq 150); do
        [ "$(sed -n '1p;8p' "$dir/data/postmaster.pid" 2>/dev/null | xargs)" = "$pid ready" ] &&
            "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" && break
        if [ "$i" = 150 ] || ! kill -0 "$pid" 2>/dev/null; then
            echo "stack: postgres did not start on port $port (see $dir/postgres.log)" >&2
            return 1
        fi
        sleep 0.1
    done
    if [ "$fresh" = 1 ]; then
        "$bin/psql" -q -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U stock -d postgres \
            -c 'CREATE DATABASE stock' >/dev/null ||
            { echo "stack: could not create the database stock on port $port" >&2; return 1; }
    fi
    # shellcheck disable=SC2034 # read by the scripts that source this file
    STACK_PG_URL=postgresql://stock@127.0.0.1:$port/stock
}

# CPU ticks (user + system) the processes $@ have used so far; from
# /proc/PID/stat with the command name cut out, utime and stime are $12, $13.
proc_ticks() {
    local p t=0
    for p; do t=$((t + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{ print $12 + $13 }'))); done
    echo "$t"
}

# The first value of "key" $1 in loadgen's JSON report $2 (one value per line there).
json_number() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p" "$2" | head -n 1; }

# e2e_hot NAME TARGET CACERT PIDS...: one e2e-hot loadgen run (64 keep-alive
# connections, one item that never runs out, DURATION s; over TLS with CACERT
# when not ""); prints "rate p99_us verdict cpu_us lg_us": the CPU a request
# cost PIDS (the replicas, and a proxy in front) and loadgen, which moves less
# than the rate on a shared machine. Its output is kept in $STACK_DIR/NAME.out.
# --history-ms 0: the history check's reads (every 5 ms, each on a new
# connection: a full handshake over TLS) would add load the earlier figures
# did not have.
e2e_hot() {
    local name=$1 target=$2 ca=$3 json=$STACK_DIR/$1.json tls=() c0 c1 lg
    shift 3
    rm -f "$json"
    [ -n "$ca" ] && tls=(--cacert "$ca")
    c0=$(proc_ticks "$@")
    /usr/bin/time -f '%U %S' -o "$STACK_DIR/time" "$BUILD/loadgen" -d "$DURATION" -n 0 -c 64 \
        --stock 100000000 --history-ms 0 --target "$target" "${tls[@]}" --json "$json" \
        >"$STACK_DIR/out" 2>&1 || true
    c1=$(proc_ticks "$@")
    lg=$(awk 'END { print $1 + $2 }' "$STACK_DIR/time")
    cp "$STACK_DIR/out" "$STACK_DIR/$name.out"
    local verdict rate
    verdict=$(grep -o 'VERDICT: [A-Z]*' "$STACK_DIR/out" || echo "VERDICT: ERROR")
    [ "$verdict" = "VERDICT: PASS" ] || tail -n 5 "$STACK_DIR/out" | sed "s/^/  $name loadgen: /" >&2
    rate=$(json_number throughput "$json" || true)
    echo "${rate:-0} $(json_number p99 "$json" || true) ${verdict#VERDICT: }" |
        awk -v hz="$(getconf CLK_TCK)" -v s=$((c1 - c0)) -v l="$lg" -v d="$DURATION" '
            { if (NF < 3) { print 0, 0, $NF, 0, 0; next }
              n = $1 * d; print $1, $2, $3, (n > 0 ? s / hz * 1e6 / n : 0), (n > 0 ? l * 1e6 / n : 0) }'
}

# stack_stop_since MARK: stops, one at a time (SIGTERM, waiting up to 10 s for
# each, then SIGKILL), the processes started since $STACK_DIR/pids had MARK
# lines, and forgets them: a run's replicas, the rest of the stack staying up.
stack_stop_since() {
    local pid i
    tail -n +"$(($1 + 1))" "$STACK_DIR/pids" | while read -r pid; do
        kill -TERM "$pid" 2>/dev/null
        for i in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    head -n "$1" "$STACK_DIR/pids" >"$STACK_DIR/pids.keep"
    mv "$STACK_DIR/pids.keep" "$STACK_DIR/pids"
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
