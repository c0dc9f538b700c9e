#!/usr/bin/env bash
# fifo.sh - fairness between processes waiting for one key (issue 23, part
# 8): the share of waiters that get the key in the order they asked
# (bench/fifobench.c), beside two busy loops that keep both CPUs of a small
# machine busy, for REV's lock/ (built in a temporary directory) and this
# tree's, in blocks that take turns, on one private redis-server. Two
# settings: the holder's retry_ms 10 and the waiters' 1000 (the arrival-order
# tests'), and both at the default, 100.
# Usage: bench/fifo.sh REV [BLOCKS=5] [ROUNDS=40] [WAITERS=4]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
. bench/rev_lock.sh
rev=${1:?usage: bench/fifo.sh REV [BLOCKS] [ROUNDS] [WAITERS]}
blocks=${2:-5}
rounds=${3:-40}
waiters=${4:-4}

STACK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/fifo.XXXXXX")
trap 'stack_stop; rm -rf "$STACK_DIR"' EXIT
trap 'exit 130' INT TERM

base=$STACK_DIR/base
rev_lock "$rev" "$base"
$CC $rev_flags -I"$base" -o "$base/fifobench" bench/fifobench.c "$base/libdlock.a" \
    $($PKG_CONFIG --libs hiredis)
make -s "$BUILD/bench/fifobench"

port=$(free_port)
stack_redis "$port"
for i in 1 2; do # the load: stack_stop stops them by PID with the rest
    sh -c 'while :; do :; done' &
    echo $! >>"$STACK_DIR/pids"
done
echo "fifo: $(git rev-parse --short "$rev") (base) against this tree (new), $blocks blocks" \
     "of $rounds rounds, $waiters waiters, two busy loops; load average" \
     "$(cut -d' ' -f1-3 /proc/loadavg)"
for b in $(seq "$blocks"); do
    for retries in "10 1000" "100 100"; do
        for v in base new; do
            bin=$BUILD/bench/fifobench
            [ "$v" = base ] && bin=$base/fifobench
            echo "block=$b build=$v $("$bin" "$port" "$rounds" "$waiters" $retries)"
        done
    done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
