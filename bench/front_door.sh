#!/usr/bin/env bash
# front_door.sh - what the front door costs (issue 35). e2e-hot (POST
# /reduceStock on one hot item, 64 keep-alive connections, redis mode with its
# defaults, SQLite --sync full) through haproxy with TLS (scripts/front-door.sh
# on docker/haproxy/haproxy.cfg, its CA made here) against direct HTTP to the
# same three replicas, in runs that take turns (ROUNDS rounds, the order
# flipped each round, DURATION s a run); the share of the direct rate kept
# through haproxy is the median of the rounds' ratios (target >= 0.8; stockd's
# own TLS keeps 0.39, bench/tls.sh). A third way, the same haproxy without
# TLS (its config with the bind's ssl taken out), tells the hop's cost from
# TLS's. Also what a request costs in CPU: the replicas', haproxy's and
# loadgen's.
# Usage: bench/front_door.sh. Knobs: BUILD, ROUNDS=5, DURATION=5,
# FRONT_CONFIG (docker/haproxy/haproxy.cfg: another config to try).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
FRONT_CONFIG=${FRONT_CONFIG:-docker/haproxy/haproxy.cfg}
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/front-bench.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
for tool in /usr/sbin/haproxy openssl bc /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "front_door.sh: needs $tool (make deps)" >&2; exit 2; }
done

# hap_us PIDS... -- NAME: e2e_hot's line for NAME with the CPU a request cost
# haproxy's workers (PIDS) appended.
hap_us() {
    local h=() line h0 h1
    while [ "$1" != -- ]; do h+=("$1"); shift; done
    shift
    h0=$(proc_ticks "${h[@]}")
    line=$(e2e_hot "$@")
    h1=$(proc_ticks "${h[@]}")
    awk -v hz="$(getconf CLK_TCK)" -v t=$((h1 - h0)) -v d="$DURATION" \
        '{ n = $1 * d; print $0, (n > 0 ? t / hz * 1e6 / n : 0) }' <<<"$line"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

redis_port=$(free_port)
stack_redis "$redis_port"
ports=() pids=()
for i in 0 1 2; do
    ports+=("$(free_port)")
    stack_stockd "r$i" "${ports[$i]}" "$redis_port" --log-level warn
    pids+=("$(tail -n 1 "$STACK_DIR/pids")")
done
direct=$(printf 'http://127.0.0.1:%s,' "${ports[@]}")
direct=${direct%,}
ca=$STACK_DIR/front/ca.pem
# start_haproxy NAME PORT URL [CONFIG]: front-door.sh on PORT, waits until URL's
# /health answers through it; prints its worker's PIDs (haproxy -W: the
# master's PID is the one recorded, its worker does the work).
start_haproxy() {
    local name=$1 port=$2 url=$3 i
    shift 3
    # a bench's one source must not meet the per-source limits
    FRONT_BIND=127.0.0.1:$port FRONT_S1=127.0.0.1:${ports[0]} FRONT_S2=127.0.0.1:${ports[1]} \
        FRONT_S3=127.0.0.1:${ports[2]} FRONT_CONN_MAX=100000 FRONT_RATE_MAX=100000000 \
        scripts/front-door.sh "$STACK_DIR/front" "$@" </dev/null >"$STACK_DIR/$name.log" 2>&1 &
    echo $! >>"$STACK_DIR/pids"
    for i in $(seq 101); do
        curl -sf -o /dev/null --cacert "$ca" "$url/health" 2>/dev/null && break
        [ "$i" -le 100 ] || { echo "front_door.sh: haproxy does not answer (see $STACK_DIR/$name.log)" >&2; exit 1; }
        sleep 0.1
    done
    pgrep -P "$(tail -n 1 "$STACK_DIR/pids")" haproxy | paste -sd' '
}
port=$(free_port)
front=https://localhost:$port
hap=$(start_haproxy haproxy "$port" "$front" "$FRONT_CONFIG")
sed 's| ssl crt "${FRONT_CERT}" alpn http/1.1||' "$FRONT_CONFIG" >"$STACK_DIR/plain.cfg"
port=$(free_port $((port + 1)))
plain=http://127.0.0.1:$port
hap_plain=$(start_haproxy haproxy-plain "$port" "$plain" "$STACK_DIR/plain.cfg")

echo "e2e-hot through haproxy (TLS), and through it without TLS, against direct HTTP: the same 3 replicas, 64 keep-alive connections, $DURATION s a run, $ROUNDS rounds"
echo "$(/usr/sbin/haproxy -v | head -n 1 | cut -d' ' -f1-3), $(openssl version | cut -d' ' -f1-2), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
: >"$STACK_DIR/ratios"
: >"$STACK_DIR/plain_ratios"
for round in $(seq "$ROUNDS"); do
    order=(direct front plain)
    [ $((round % 2)) -eq 0 ] && order=(plain front direct)
    declare -A got=()
    for way in "${order[@]}"; do
        # shellcheck disable=SC2086 # hap, hap_plain: the workers' PIDs
        case $way in
        front) got[$way]=$(hap_us $hap -- front "$front" "$ca" "${pids[@]}") ;;
        plain) got[$way]=$(hap_us $hap_plain -- plain "$plain" "" "${pids[@]}") ;;
        direct) got[$way]=$(e2e_hot direct "$direct" "" "${pids[@]}") ;;
        esac
    done
    read -r r_d p_d v_d s_d l_d <<<"${got[direct]}"
    read -r r_f p_f v_f s_f l_f h_f <<<"${got[front]}"
    read -r r_p p_p v_p s_p l_p h_p <<<"${got[plain]}"
    echo "$s_d $l_d $s_f $l_f $s_p $l_p $h_f $h_p" >>"$STACK_DIR/cpu"
    [ "$v_d $v_f $v_p" = "PASS PASS PASS" ] || status=1
    ratio=$(awk -v a="$r_f" -v b="$r_d" 'BEGIN { print (b > 0 ? a / b : 0) }')
    echo "$ratio" >>"$STACK_DIR/ratios"
    awk -v a="$r_p" -v b="$r_d" 'BEGIN { print (b > 0 ? a / b : 0) }' >>"$STACK_DIR/plain_ratios"
    printf 'round %d: direct %6.0f req/s p99 %6.2f ms %s, CPU us/req replicas %4.0f loadgen %3.0f | haproxy+TLS %6.0f req/s p99 %6.2f ms %s, replicas %4.0f haproxy %4.0f loadgen %3.0f | haproxy plain %6.0f req/s p99 %6.2f ms %s, %4.0f %4.0f %3.0f | front/direct %.3f, plain/direct %.3f\n' \
        "$round" "${r_d:-0}" "$(echo "${p_d:-0} / 1000" | bc -l)" "$v_d" "$s_d" "$l_d" \
        "${r_f:-0}" "$(echo "${p_f:-0} / 1000" | bc -l)" "$v_f" "$s_f" "$h_f" "$l_f" \
        "${r_p:-0}" "$(echo "${p_p:-0} / 1000" | bc -l)" "$v_p" "$s_p" "$h_p" "$l_p" \
        "$ratio" "$(tail -n 1 "$STACK_DIR/plain_ratios")"
done
for col in 1 2 3 4 5 6 7 8; do awk -v c=$col '{ print $c }' "$STACK_DIR/cpu" | median; done | paste -sd' ' |
    awk '{ printf "CPU a request (medians): replicas %.0f us direct, %.0f through haproxy with TLS, %.0f without; haproxy %.0f with TLS, %.0f without; loadgen %.0f, %.0f with TLS (x%.2f), %.0f without; the share by CPU (all three): %.3f with TLS, %.3f without\n",
           $1, $3, $5, $7, $8, $2, $4, $4 / $2, $6, ($1 + $2) / ($3 + $4 + $7), ($1 + $2) / ($5 + $6 + $8) }'
printf 'through haproxy without TLS: %.3f of direct HTTP'"'"'s rate (median)\n' "$(median <"$STACK_DIR/plain_ratios")"
share=$(median <"$STACK_DIR/ratios")
printf 'e2e-hot through haproxy with TLS keeps %.3f of direct HTTP'"'"'s rate (median of %d rounds; target >= 0.8: %s)\n' \
    "$share" "$ROUNDS" "$(echo "$share >= 0.8" | bc -l | sed 's/1/met/;s/0/MISSED/')"
exit "$status"
