#!/usr/bin/env bash
# tls.sh - what HTTPS costs (issue 27). e2e-hot (POST /reduceStock on one hot
# item, 64 keep-alive connections, redis mode with its defaults, SQLite --sync
# full) over HTTPS against HTTP: three replicas of each, side by side on one
# Redis and one database, the same flags but for --tls-cert/--tls-key, in runs
# that take turns (ROUNDS rounds, the order flipped each round, DURATION s a
# run); the share of HTTP's rate HTTPS keeps is the median of the rounds'
# ratios (target >= 0.8). Then a new-connection storm on GET /health of one
# replica: wrk with "Connection: close" (each request on a new connection, a
# full TLS handshake each: wrk resumes no session), HTTPS against HTTP, and
# openssl s_time's new and resumed handshakes a second (one client thread).
# Usage: bench/tls.sh. Knobs: BUILD, ROUNDS=3, DURATION=5, STORM_S=3.
# The CA and certificate are made here, in the run's temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
STORM_S=${STORM_S:-3}
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tls-bench.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
for tool in openssl wrk bc /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "tls.sh: needs $tool (make deps: scripts/deps.sh bench)" >&2; exit 2; }
done

# A test CA and a certificate for 127.0.0.1 and localhost (P-256, as a
# deployment would likely choose), the key 0600 as stockd wants it.
make_certs() {
    local d=$STACK_DIR
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$d/ca.key" \
        -out "$d/ca.pem" -days 2 -subj "/CN=tls.sh CA" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$d/server.key" \
        -out "$d/server.csr" -subj /CN=localhost 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$d/san.ext"
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
        -out "$d/server.pem" -days 2 -extfile "$d/san.ext" 2>/dev/null
    chmod 600 "$d/server.key"
}

# tls_stockd NAME PORT REDIS_PORT [flags...]: stack_stockd's replica over HTTPS.
tls_stockd() {
    local name=$1 port=$2 redis_port=$3 i
    shift 3
    "$BUILD/stockd" --port "$port" --db "$STACK_DIR/stock.db" --redis-port "$redis_port" \
        --instance-id "$name" --tls-cert "$STACK_DIR/server.pem" \
        --tls-key "$STACK_DIR/server.key" "$@" </dev/null >/dev/null 2>>"$STACK_DIR/$name.log" &
    echo $! >>"$STACK_DIR/pids"
    for i in $(seq 100); do
        curl -s -o /dev/null --cacert "$STACK_DIR/ca.pem" "https://127.0.0.1:$port/health" &&
            return 0
        sleep 0.1
    done
    echo "tls.sh: nothing answers on port $port (see $STACK_DIR/$name.log)" >&2
    return 1
}

median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

make_certs
redis_port=$(free_port)
stack_redis "$redis_port"
http_ports=() https_ports=() http_pids=() https_pids=()
for i in 0 1 2; do
    http_ports+=("$(free_port)")
    stack_stockd "h$i" "${http_ports[$i]}" "$redis_port" --log-level warn
    http_pids+=("$(tail -n 1 "$STACK_DIR/pids")")
    https_ports+=("$(free_port)")
    tls_stockd "s$i" "${https_ports[$i]}" "$redis_port" --log-level warn
    https_pids+=("$(tail -n 1 "$STACK_DIR/pids")")
done
http_targets=$(printf 'http://127.0.0.1:%s,' "${http_ports[@]}")
https_targets=$(printf 'https://127.0.0.1:%s,' "${https_ports[@]}")
http_targets=${http_targets%,} https_targets=${https_targets%,}

echo "e2e-hot, HTTPS against HTTP: 3 replicas each, 64 keep-alive connections, $DURATION s a run, $ROUNDS rounds"
status=0
: >"$STACK_DIR/ratios"
for round in $(seq "$ROUNDS"); do
    order=(http https)
    [ $((round % 2)) -eq 0 ] && order=(https http)
    declare -A got=()
    for scheme in "${order[@]}"; do
        if [ "$scheme" = https ]; then
            got[$scheme]=$(e2e_hot "$scheme" "$https_targets" "$STACK_DIR/ca.pem" "${https_pids[@]}")
        else
            got[$scheme]=$(e2e_hot "$scheme" "$http_targets" "" "${http_pids[@]}")
        fi
    done
    read -r r_http p_http v_http s_http l_http <<<"${got[http]}"
    read -r r_https p_https v_https s_https l_https <<<"${got[https]}"
    echo "$s_http $l_http $s_https $l_https" >>"$STACK_DIR/cpu"
    [ "$v_http $v_https" = "PASS PASS" ] || status=1
    ratio=$(awk -v a="$r_https" -v b="$r_http" 'BEGIN { print (b > 0 ? a / b : 0) }')
    echo "$ratio" >>"$STACK_DIR/ratios"
    printf 'round %d: http %6.0f req/s p99 %7.2f ms %s, CPU us/req replicas %4.0f loadgen %3.0f | https %6.0f req/s p99 %7.2f ms %s, %4.0f %3.0f | https/http %.3f\n' \
        "$round" "${r_http:-0}" "$(echo "${p_http:-0} / 1000" | bc -l)" "$v_http" "$s_http" "$l_http" \
        "${r_https:-0}" "$(echo "${p_https:-0} / 1000" | bc -l)" "$v_https" "$s_https" "$l_https" "$ratio"
done
# what a request cost, medians over the rounds: the share HTTPS would keep
# were the machine's CPU the only bound (the replicas' and loadgen's together)
for col in 1 2 3 4; do awk -v c=$col '{ print $c }' "$STACK_DIR/cpu" | median; done | paste -sd' ' |
    awk '{ printf "CPU a request (medians): replicas %.0f us over HTTP, %.0f over HTTPS (x%.2f); loadgen %.0f, %.0f (x%.2f); the share by CPU: %.3f\n",
           $1, $3, $3 / $1, $2, $4, $4 / $2, ($1 + $2) / ($3 + $4) }'
share=$(median <"$STACK_DIR/ratios")
printf 'e2e-hot over HTTPS keeps %.3f of HTTP'"'"'s rate (median of %d rounds; target >= 0.8: %s)\n' \
    "$share" "$ROUNDS" "$(echo "$share >= 0.8" | bc -l | sed 's/1/met/;s/0/MISSED/')"

# ---- the storm: a new connection for every request ----
storm() {
    wrk -t 2 -c 32 -d "${STORM_S}s" -H "Connection: close" "$1/health" 2>&1 |
        awk '/Requests\/sec/ { print $2 }'
}
echo
echo "new-connection storm on GET /health of one replica, wrk -t2 -c32 with Connection: close, $STORM_S s each"
s_http=$(storm "http://127.0.0.1:${http_ports[0]}")
sleep 1
s_https=$(storm "https://127.0.0.1:${https_ports[0]}")
printf 'http  %7.0f connections/s\nhttps %7.0f connections/s (each a full TLS handshake): %.3f of http\n' \
    "${s_http:-0}" "${s_https:-0}" "$(echo "${s_https:-0} / ${s_http:-1}" | bc -l)"
# s_time's "N connections in T real seconds": N / T (its other line counts
# its own CPU time only)
for mode in new reuse; do
    n=$(openssl s_time -connect "127.0.0.1:${https_ports[0]}" -CAfile "$STACK_DIR/ca.pem" \
        -www /health -time "$STORM_S" "-$mode" 2>/dev/null |
        awk '/connections in [0-9]+ real seconds/ { if ($4 > 0) print $1 / $4; exit }')
    printf 'openssl s_time -%-5s %7.0f handshakes/s (one client thread%s)\n' "$mode" "${n:-0}" \
        "$([ "$mode" = reuse ] && echo ', the session resumed' || echo ', full handshakes')"
done
exit "$status"
