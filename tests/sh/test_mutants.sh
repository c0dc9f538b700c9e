#!/usr/bin/env bash
# test_mutants.sh - every break of tests/mutants.txt still fits the tree (its
# text in its file exactly once, its suites there), so that an edit that moves
# one is seen in make test, not only by make mutants; and the check itself
# refuses an entry that does not fit. Prints cmocka-style lines for
# tests/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."

REPORT_SUITE=mutants
. tests/sh/report.sh

out=$(MUTANTS_CHECK=1 scripts/mutants.sh 2>&1)
report "every entry of tests/mutants.txt fits the tree" $? "$out"

bad=$(mktemp)
trap 'rm -f "$bad"' EXIT
printf '%s\n' '# a text that is not there' 'lock/quorum.c `no such text` `x` test_quorum' \
    '# a text that is there many times' 'lock/scripts.c `redis.call(` `x` test_lock' \
    '# no such suite' 'lock/quorum.c `return q->n / 2 + 1;` `x` test_nosuch' 'not an entry' >"$bad"
out=$(MUTANTS_CHECK=1 scripts/mutants.sh "$bad" 2>&1)
rc=$?
[ "$rc" -ne 0 ] && grep -q '0 of 4 entries fit' <<<"$out"
report "an entry that does not fit is refused" $? "status $rc: $out"
