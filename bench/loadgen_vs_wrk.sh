#!/usr/bin/env bash
# loadgen_vs_wrk.sh - loadgen's own ceiling next to wrk's: both hit GET /health
# of one stockd with the same threads, connections and duration, alternating,
# in one run; prints each round (with each tool's CPU time per request), the
# medians, the ratio of the medians (target >= 0.95) and loadgen's CPU per
# request against wrk's (target <= 1.2x). BASELINE=path/to/another/loadgen runs
# that binary too in every round, right after loadgen (an older build, for a
# before/after in the same time window).
#
# Usage: bench/loadgen_vs_wrk.sh        (from the repository root, after make;
#        make bench runs it)
# Knobs (environment): BUILD=build THREADS=2 CONNS=32 DURATION=10 ROUNDS=3 PIN=0 BASELINE=
# Exit status: 0 when both targets are met, 1 when not, 2 on set-up errors.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
CONNS=${CONNS:-32}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
PIN=${PIN:-0} # 1: stockd on CPU 0, the load tool on CPU 1 (taskset), so neither takes the other's
BASELINE=${BASELINE:-}
TARGET_RATIO=0.95
TARGET_CPU=1.2 # loadgen's CPU per request at most this times wrk's (medians)

die() { echo "loadgen_vs_wrk: $*" >&2; exit 2; }
for bin in "$BUILD/stockd" "$BUILD/loadgen" ${BASELINE:+"$BASELINE"}; do
    [ -x "$bin" ] || die "$bin not found: run make first"
done
command -v wrk >/dev/null || die "wrk not found (Debian package wrk)"
. scripts/stack.sh
STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/loadgen-bench.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM
work=$STACK_DIR
server_cpu=() tool_cpu=()
if [ "$PIN" = 1 ]; then
    server_cpu=(taskset -c 0) tool_cpu=(taskset -c 1)
fi

rport=$(free_port)
stack_redis "$rport"
sport=$(free_port)
STOCKD_WRAPPER="${server_cpu[*]}" stack_stockd bench "$sport" "$rport" --log-level warn
stockd_pid=$(tail -n 1 "$STACK_DIR/pids")
url="http://127.0.0.1:$sport"

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

# Runs a tool, leaving its CPU seconds (user + system) in $work/cpu when
# /usr/bin/time is there, so the report can show CPU per request.
timed() {
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -f '%U %S' -o "$work/cpu" "$@"
    else
        echo "" >"$work/cpu"; "$@"
    fi
}

# The machine's busy CPU time and stockd's, in clock ticks: the run reports how
# much of the machine was busy and how much of that was its own, since other
# work on shared CPUs moves every rate.
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
tool_secs=0 # CPU seconds of every tool run, from /usr/bin/time
add_tool_cpu() { [ -s "$work/cpu" ] && tool_secs=$(awk -v t="$tool_secs" '{ print t + $1 + $2 }' "$work/cpu"); }

cpu_us_per_request() { # requests/s, seconds
    awk -v rate="$1" -v secs="$2" '{ if (NF == 2) printf "%.1f", ($1 + $2) * 1e6 / (rate * secs);
                                     else printf "?" }' "$work/cpu"
}

run_wrk() {
    timed "${tool_cpu[@]}" wrk -t "$THREADS" -c "$CONNS" -d "${DURATION}s" "$url/health" |
        awk '/^Requests\/sec:/ {print $2}'
}

run_loadgen() { # [binary]
    timed "${tool_cpu[@]}" "${1:-$BUILD/loadgen}" --get /health -t "$THREADS" -c "$CONNS" \
        -d "$DURATION" --target "$url" |
        sed -n 's/^.* requests in .* s = \([0-9.]*\) req\/s.*$/\1/p'
}

echo "loadgen vs wrk: GET /health of one stockd, $THREADS threads, $CONNS connections," \
     "${DURATION}s per round, $ROUNDS rounds$([ "$PIN" = 1 ] && echo ', stockd on CPU 0, tool on CPU 1')"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "versions: $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), loadgen with http_parser" \
     "$(dpkg-query -W -f '${Version}' libhttp-parser2.9 2>/dev/null || echo '?')"
[ -n "$BASELINE" ] && echo "baseline: $BASELINE, run after loadgen in every round"
wrk -t "$THREADS" -c "$CONNS" -d 1s "$url/health" >/dev/null # warm-up: connections, caches
busy0=$(busy_ticks) stockd0=$(proc_ticks "$stockd_pid") start=$(date +%s.%N)
for f in wrk lg base wcpu lcpu bcpu; do : >"$work/$f"; done
for r in $(seq "$ROUNDS"); do
    w=$(run_wrk); wcpu=$(cpu_us_per_request "${w:-0}" "$DURATION"); add_tool_cpu
    l=$(run_loadgen); lcpu=$(cpu_us_per_request "${l:-0}" "$DURATION"); add_tool_cpu
    [ -n "$w" ] && [ -n "$l" ] || die "round $r: could not read a rate (wrk '$w', loadgen '$l')"
    echo "$w" >>"$work/wrk"; echo "$l" >>"$work/lg"
    echo "$wcpu" >>"$work/wcpu"; echo "$lcpu" >>"$work/lcpu"
    printf 'round %d: wrk %9.1f req/s (%s us CPU/req)   loadgen %9.1f req/s (%s us CPU/req)' \
        "$r" "$w" "$wcpu" "$l" "$lcpu"
    printf '   ratio %.3f\n' "$(echo "$l / $w" | bc -l)"
    if [ -n "$BASELINE" ]; then
        b=$(run_loadgen "$BASELINE"); bcpu=$(cpu_us_per_request "${b:-0}" "$DURATION")
        add_tool_cpu
        [ -n "$b" ] || die "round $r: could not read the baseline's rate"
        echo "$b" >>"$work/base"; echo "$bcpu" >>"$work/bcpu"
        printf '         baseline %9.1f req/s (%s us CPU/req)   ratio to wrk %.3f\n' \
            "$b" "$bcpu" "$(echo "$b / $w" | bc -l)"
    fi
done
awk -v b0="$busy0" -v b1="$(busy_ticks)" -v s0="$stockd0" -v s1="$(proc_ticks "$stockd_pid")" \
    -v tool="$tool_secs" -v t0="$start" -v t1="$(date +%s.%N)" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { wall = t1 - t0; busy = (b1 - b0) / hz / wall; ours = ((s1 - s0) / hz + tool) / wall
             printf "machine during the rounds: %.2f CPUs busy, %.2f of them stockd and the tools," \
                    " %.2f other work\n", busy, ours, busy - ours }'
w=$(median <"$work/wrk"); l=$(median <"$work/lg")
ratio=$(echo "$l / $w" | bc -l)
printf 'median:  wrk %10.1f req/s   loadgen %10.1f req/s   ratio %.3f (target >= %s)\n' \
    "$w" "$l" "$ratio" "$TARGET_RATIO"
met=1
[ "$(echo "$ratio >= $TARGET_RATIO" | bc -l)" = 1 ] || met=0
if grep -q '?' "$work/wcpu" "$work/lcpu"; then
    echo "median CPU per request: unknown (no /usr/bin/time)"
else
    wc=$(median <"$work/wcpu"); lc=$(median <"$work/lcpu")
    cratio=$(echo "$lc / $wc" | bc -l)
    printf 'median CPU per request: wrk %.1f us   loadgen %.1f us   ratio %.3f (target <= %s)\n' \
        "$wc" "$lc" "$cratio" "$TARGET_CPU"
    [ "$(echo "$cratio <= $TARGET_CPU" | bc -l)" = 1 ] || met=0
fi
if [ -n "$BASELINE" ]; then
    b=$(median <"$work/base")
    printf 'median:  baseline %10.1f req/s   ratio to wrk %.3f   CPU %s us/req\n' "$b" \
        "$(echo "$b / $w" | bc -l)" "$(median <"$work/bcpu")"
fi
if [ "$met" = 1 ]; then
    echo "RESULT: loadgen reaches the targets"
else
    echo "RESULT: loadgen is below a target"
    exit 1
fi
