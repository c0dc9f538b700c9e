#!/usr/bin/env bash
# cluster.sh - the lock over a Redis Cluster of three primaries (issue 26):
# one client process of THREADS threads acquiring and releasing keys of its
# own (bench/clusterbench.c), its keys all in one slot (one shard) or spread
# over every slot (three shards), alternating, ROUNDS rounds of SECONDS.
# Per round: acquisitions/s, and per primary its lock commands (EVALSHA
# calls, INFO commandstats) and its CPU (INFO cpu, user + sys), so that the
# split over the shards and each shard's cost per acquisition show; on a
# two-core machine the client is the limit, so the rate alone says little.
# Usage: bench/cluster.sh   Knobs: BUILD, ROUNDS=3, SECONDS_RUN=5, THREADS=8
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
CC=${CC:-cc}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
rounds=${ROUNDS:-3}
seconds=${SECONDS_RUN:-5}
threads=${THREADS:-8}

STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/cluster.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM

make -s "$BUILD/libdlock.a"
$CC -std=c11 -O2 -g -pthread -D_GNU_SOURCE -I. $($PKG_CONFIG --cflags hiredis) \
    -o "$STACK_DIR/clusterbench" bench/clusterbench.c "$BUILD/libdlock.a" \
    $($PKG_CONFIG --libs hiredis)

# Three cluster-mode primaries (the cluster bus listens at port + 10000).
stack_redis_cluster

# One number of every primary, space-separated: EVALSHA calls, or CPU ms.
evalsha() {
    for p in "${ports[@]}"; do
        redis-cli -p "$p" info commandstats | tr -d '\r' |
            awk -F'[=,]' '/^cmdstat_evalsha:/ {n = $2} END {print n + 0}'
    done | xargs
}
cpu_ms() {
    for p in "${ports[@]}"; do
        redis-cli -p "$p" info cpu | tr -d '\r' |
            awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%d\n", s * 1000}'
    done | xargs
}
minus() { paste -d' ' <(tr ' ' '\n' <<<"$1") <(tr ' ' '\n' <<<"$2") | awk '{print $1 - $2}' | xargs; }

echo "cluster: 3 primaries, $threads threads, $rounds rounds of ${seconds}s; commit" \
     "$(git rev-parse --short HEAD); $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round spread acquisitions/s client_cpu/s evalsha_per_primary cpu_ms_per_primary" \
     "split_max_dev primaries_cpu_us_per_acq"
for r in $(seq "$rounds"); do
    for spread in one all; do
        e0=$(evalsha) c0=$(cpu_ms)
        line=$("$STACK_DIR/clusterbench" "$seeds" "$threads" "$seconds" "$spread")
        e=$(minus "$(evalsha)" "$e0") c=$(minus "$(cpu_ms)" "$c0")
        rate=$(sed 's/.* rate=\([0-9]*\).*/\1/' <<<"$line")
        ccpu=$(sed 's/.*client_cpu_per_s=\([0-9.]*\).*/\1/' <<<"$line")
        acq=$(sed 's/^acquired=\([0-9]*\).*/\1/' <<<"$line")
        # the split: the busiest primary's share against an even one; the cost: CPU
        # of the primaries that served, per acquisition
        dev=$(tr ' ' '\n' <<<"$e" | awk '{v[NR] = $1; s += $1; if ($1 > m) m = $1}
              END {printf "%.3f", s ? m / (s / NR) - 1 : 0}')
        cost=$(tr ' ' '\n' <<<"$c" | awk -v a="$acq" '{s += $1} END {printf "%.1f", a ? s * 1000 / a : 0}')
        echo "$r $spread $rate $ccpu [$e] [$c] $dev $cost"
        echo "$spread $rate $dev $cost" >>"$STACK_DIR/rounds"
    done
done
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
col() { awk -v s="$1" -v c="$2" '$1 == s {print $c}' "$STACK_DIR/rounds" | median; }
echo "medians: acquisitions/s one $(col one 2), all $(col all 2)" \
     "(all/one $(awk -v a="$(col all 2)" -v o="$(col one 2)" 'BEGIN {printf "%.2f", a / o}'));" \
     "split of all: busiest primary $(col all 3) over an even third;" \
     "server CPU per acquisition: one $(col one 4) us, all $(col all 4) us"
