#!/usr/bin/env bash
# run.sh - runs every test binary (unit, then integration) and every shell
# test, prints their output, and ends with one line "N passed, N failed" over
# all of them. Exit status is non-zero when anything failed.
# Usage: tests/run.sh BUILD_DIR
set -uo pipefail

build=${1:-build}
export TEST_BUILD_DIR=$build
passed=0 failed=0 skipped=0

# Counts cmocka-style lines: "[ RUN      ]" starts a test, "[       OK ]" passes
# it, "[  SKIPPED ]" skips it; a test that started and did neither failed (also
# when the binary crashed). A failed group set-up or tear-down counts one
# failure (cmocka 1.1 still exits 0 after a failed tear-down), and so does a
# suite that exits non-zero with no failed test.
run_suite() {
    local name=$1; shift
    local out rc runs oks skips
    echo "=== $name"
    out=$("$@" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    runs=$(grep -c '^\[ RUN      \]' <<<"$out")
    oks=$(grep -c '^\[       OK \]' <<<"$out")
    skips=$(grep -c '^\[  SKIPPED \]' <<<"$out")
    local groups
    groups=$(grep -c '^\[  FAILED  \] GROUP ' <<<"$out")
    local bad=$((runs - oks - skips + groups))
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
        echo "=== $name exited with status $rc"
        bad=1
    fi
    passed=$((passed + oks)) failed=$((failed + bad)) skipped=$((skipped + skips))
}

for t in "$build"/tests/unit/test_* "$build"/tests/it/test_*; do
    [ -x "$t" ] && run_suite "$(basename "$t")" "$t"
done
for t in tests/sh/test_*.sh; do
    [ -f "$t" ] && run_suite "$(basename "$t")" bash "$t"
done

[ "$skipped" -gt 0 ] && echo "($skipped skipped)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
