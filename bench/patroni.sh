#!/usr/bin/env bash
# patroni.sh - issue 35's PostgreSQL leader lost mid-sale: etcd and three
# Patroni-managed nodes (synchronous_mode, ttl 10 s), three replicas on a
# multi-host --db with target_session_attrs=read-write, loadgen selling one
# item at 150 requests/s with --retry, and the leader's Patroni and postmaster
# killed (kill -KILL) 4 s in. That is tests/it/test_patroni, run RUNS times
# (default 3): it starts and stops every process by PID and fails on a broken
# verdict. Prints per run how long after the kill the first order was served
# (loadgen's timeline, to a bucket's width), the error answers meanwhile and
# their outcomes (other_5xx: 503 storage_unavailable; commit_unknown; a
# transport_error retried), whether orders resumed within Patroni's
# ttl + 5 s, and how the test's orders held in doubt at the next leader's
# loss were answered (written, not written, commit_unknown). Usage:
# bench/patroni.sh (RUNS=n, BUILD=dir); about 60 s a run; not part of make
# bench.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/stockd" "$BUILD/loadgen" "$BUILD/tests/it/test_patroni"
out=$(mktemp -d "${TMPDIR:-/tmp}/patroni-bench.XXXXXX")
trap 'rm -rf "$out"' EXIT

echo "| run | first order after the kill (s) | error answers meanwhile | by outcome | ttl + 5 s | in doubt: written / not / unknown | verdict |"
echo "|---|---|---|---|---|---|---|"
for i in $(seq 1 "$RUNS"); do
    verdict=PASS
    TEST_BUILD_DIR=$BUILD "$BUILD/tests/it/test_patroni" >"$out/run$i" 2>&1 || verdict=FAIL
    line=$(grep -m1 'first order served' "$out/run$i" || true)
    if [ -z "$line" ]; then
        echo "| $i | - | - | - | - | - | $verdict (no measure; see below) |"
        tail -30 "$out/run$i" >&2
        continue
    fi
    secs=$(sed 's/.*served \([0-9.-]*\) s after.*/\1/' <<<"$line")
    errs=$(sed 's/.*, \([0-9]*\) answered errors.*/\1/' <<<"$line")
    by=$(sed 's/.* commit_unknown; \(.*\)); ttl.*/\1/' <<<"$line")
    ttl=$(sed 's/.*ttl \([0-9]*\) s.*/\1/' <<<"$line")
    within=$(awk -v s="$secs" -v t="$ttl" 'BEGIN { print (s >= 0 && s <= t + 5) ? "within" : "NOT within" }')
    doubt=$(sed -n 's/^\([0-9]*\) resolved as written, \([0-9]*\) as not written, \([0-9]*\) commit_unknown$/\1 \/ \2 \/ \3/p' "$out/run$i" | head -1)
    echo "| $i | $secs | $errs | $by | $within | ${doubt:--} | $verdict |"
done
