#!/usr/bin/env bash
# log_ab.sh - what the order lines cost the replicas, as CPU per request, in
# a way that holds on a busy shared machine: the e2e load (3 replicas on one
# SQLite file, redis lock mode with its defaults, loadgen -c 64, a stock that
# never runs out) in short runs that take turns between the variants, ROUNDS
# rounds; then each variant's median CPU a request and the median of its
# ratios to "warn" within each round. Variants: warn (no order lines), info
# (a text line per order), json (the same in JSON), and, with OLD_BUILD set,
# old (that build at info: a build without the order lines); token (warn,
# with --api-tokens-file closing the buyer's role: every order's bearer token
# hashed and checked) when VARIANTS names it.
# Usage: bench/log_ab.sh [ROUNDS]. Knobs: DURATION=3 (seconds a run),
# WORKLOAD=hot (or spread: 1000 items), SYNC=full, BUILD, OLD_BUILD, RATE
# (requests/s, open loop: each variant then does the same work at the same
# batch sizes, where a closed loop's rate, and with it the batching, moves
# with whatever else the machine runs; keep it below the slowest run's rate),
# VARIANTS (default "warn info json"; warn must be among them).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
ROUNDS=${1:-6}
DURATION=${DURATION:-3}
WORKLOAD=${WORKLOAD:-hot}
SYNC=${SYNC:-full}
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/log-ab.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
redis_port=$(free_port)
stack_redis "$redis_port"
read -r -a variants <<<"${VARIANTS:-warn info json}"
[ -n "${OLD_BUILD:-}" ] && variants+=(old)
# token: a buyer's line closes the role; loadgen's operator token may buy too
token=bench-operator-token-0123456789
printf '%s\n' "$token" >"$STACK_DIR/operator.token"
printf 'buyer shop sha256:%s\noperator bench %s\n' "$(printf '%s' "$token-b" | sha256sum |
    cut -d' ' -f1)" "$token" >"$STACK_DIR/api-tokens"

# run VARIANT: three fresh replicas, one loadgen run; prints "cpu_us_per_request rate".
run() {
    local build=$BUILD level=info ports=() pids=() i mark targets json=$STACK_DIR/run.json
    local tokens=()
    [ "$1" = warn ] && level=warn
    [ "$1" = token ] && level=warn tokens=(--api-tokens-file "$STACK_DIR/api-tokens")
    [ "$1" = old ] && build=$OLD_BUILD
    local format=text
    [ "$1" = json ] && format=json
    rm -f "$STACK_DIR"/stock.db* "$STACK_DIR"/r[0-9].log
    mark=$(wc -l <"$STACK_DIR/pids")
    for i in 0 1 2; do
        ports+=("$(free_port)")
        BUILD=$build STOCKD_LOG_FORMAT=$format stack_stockd "r$i" "${ports[$i]}" "$redis_port" \
            --sync "$SYNC" --log-level "$level" "${tokens[@]}"
        pids+=("$(tail -n 1 "$STACK_DIR/pids")")
    done
    targets=$(printf 'http://127.0.0.1:%s,' "${ports[@]}")
    local items=()
    [ "$WORKLOAD" = spread ] && items=(--items 1000)
    [ -n "${RATE:-}" ] && items+=(-R "$RATE")
    [ "$1" = token ] && items+=(--token-file "$STACK_DIR/operator.token")
    local c0 c1 tp
    c0=$(proc_ticks "${pids[@]}")
    # --history-ms 0: the history check's reads every 5 ms (on by default) would add load
    # that the earlier figures did not have
    "$build/loadgen" -d "$DURATION" -n 0 -c 64 --stock 100000000 "${items[@]}" \
        --history-ms 0 --target "${targets%,}" --json "$json" >"$STACK_DIR/out" 2>&1 || true
    c1=$(proc_ticks "${pids[@]}")
    grep -q "VERDICT: PASS" "$STACK_DIR/out" || { echo "log_ab: $1 did not PASS" >&2; exit 1; }
    tp=$(json_number throughput "$json")
    stack_stop_since "$mark"
    awk -v c=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v tp="$tp" -v d="$DURATION" \
        'BEGIN { printf "%.1f %.0f\n", c / hz * 1e6 / (tp * d), tp }'
}

echo "== log_ab: $WORKLOAD, sync=$SYNC, ${DURATION}s runs${RATE:+ at $RATE req/s}, $ROUNDS rounds" \
    "of: ${variants[*]}"
: >"$STACK_DIR/results"
for r in $(seq "$ROUNDS"); do
    # each round in another order, so that no variant always follows the same one
    order=("${variants[@]}")
    [ $((r % 2)) = 0 ] && mapfile -t order < <(printf '%s\n' "${variants[@]}" | tac)
    for v in "${order[@]}"; do
        line=$(run "$v") # a run that fails stops the script here
        read -r cpu tp <<<"$line"
        echo "$r $v $cpu $tp" >>"$STACK_DIR/results"
        printf 'round %d %-5s %7.1f us CPU a request  %7.0f req/s\n' "$r" "$v" "$cpu" "$tp"
    done
done
echo "== medians over $ROUNDS rounds (ratio: within each round, to warn)"
awk 'function median(s,   n, a, i, j, t) {
         n = split(s, a, " ")
         for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) {
             t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
         return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
     { cpu[$1, $2] = $3; all[$2] = all[$2] " " $3; rate[$2] = rate[$2] " " $4; vs[$2] = 1
       rounds = $1 }
     END { for (v in vs) {
               ratios = ""
               for (r = 1; r <= rounds; r++) ratios = ratios " " cpu[r, v] / cpu[r, "warn"]
               printf "%-5s %7.1f us CPU a request  %7.0f req/s  x%.3f the CPU a request of warn\n",
                      v, median(all[v]), median(rate[v]), median(ratios) } }' \
    "$STACK_DIR/results" | sort
