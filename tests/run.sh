#!/usr/bin/env bash
# run.sh - runs every test binary (unit, then integration) and every shell
# test, prints their output, lists the skipped tests with their reasons, and
# ends with one line "N passed, N failed" over all of them. Exit status is
# non-zero when anything failed. TEST_SKIP="suite ..." leaves suites out and
# TEST_SHELL=no the shell tests (the Makefile's sanitizer runs do both).
# Usage: tests/run.sh BUILD_DIR
set -uo pipefail

build=${1:-build}
export TEST_BUILD_DIR=$build
passed=0 failed=0 skipped=0 skip_list=""

# Reads one suite's cmocka-style output and prints "passed failed skipped",
# then one "skip<TAB>test<TAB>reason" line per skipped test. Only tests that
# started count: "[ RUN      ] t" followed by "[       OK ] t" passes,
# "[  SKIPPED ] t" skips (its reason is the last line it printed), and
# "[  FAILED  ] t", "[  ERROR   ] t", another RUN or the end of the output
# (a crash) fails it. What cmocka prints after "[==========] N test(s) run."
# (the summary, which repeats skipped and failed names) is not counted. A
# failed group set-up or tear-down counts as one failure.
count_suite() {
    awk '
        BEGIN { in_run = 1 } # shell tests print no "Running" header
        function finish(outcome) {
            if (current == "") return
            if (outcome == "ok") ok++
            else if (outcome == "skip") { skip++; skips = skips "skip\t" current "\t" (said == "" ? "(no reason given)" : said) "\n" }
            else bad++
            current = ""
        }
        /^\[==========\] Running / { in_run = 1; next }
        /^\[==========\] [0-9]+ test\(s\) run\./ { finish("fail"); in_run = 0; next }
        !in_run { next }
        /^\[  FAILED  \] GROUP (SETUP|TEARDOWN)$/ { finish("fail"); bad++; next }
        /^\[ RUN      \] / { finish("fail"); current = substr($0, 14); said = ""; next }
        /^\[       OK \] / { if (substr($0, 14) == current) finish("ok"); next }
        /^\[  SKIPPED \] / { if (substr($0, 14) == current) finish("skip"); next }
        /^\[  (FAILED|ERROR)   ?\] / { if (substr($0, 14) == current) finish("fail"); next }
        /^\[/ { next }
        NF && current != "" { said = $0 }
        END { finish("fail"); printf "%d %d %d\n%s", ok, bad, skip, skips }
    '
}

run_suite() {
    local name=$1; shift
    local out rc counts ok bad skips
    echo "=== $name"
    local start=$SECONDS
    out=$("$@" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    echo "=== $name took $((SECONDS - start)) s" # what CI's time goes to
    counts=$(count_suite <<<"$out")
    read -r ok bad skips <<<"$(head -n 1 <<<"$counts")"
    if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
        echo "=== $name exited with status $rc"
        bad=1
    fi
    passed=$((passed + ok)) failed=$((failed + bad)) skipped=$((skipped + skips))
    skip_list+=$(tail -n +2 <<<"$counts" | awk -F '\t' -v s="$name" 'NF { printf "  %s: %s: %s\n", s, $2, $3 }')
    [ "$skips" -gt 0 ] && skip_list+=$'\n'
}

for t in "$build"/tests/unit/test_* "$build"/tests/it/test_*; do
    [ -x "$t" ] && [ -f "$t" ] || continue
    if [[ " ${TEST_SKIP:-} " == *" $(basename "$t") "* ]]; then # the Makefile says why
        echo "=== $(basename "$t") left out (TEST_SKIP)"
        continue
    fi
    run_suite "$(basename "$t")" "$t"
done
if [ "${TEST_SHELL:-yes}" != no ]; then # the Makefile says when it is
    for t in tests/sh/test_*.sh; do
        [ -f "$t" ] && run_suite "$(basename "$t")" bash "$t"
    done
fi

if [ "$skipped" -gt 0 ]; then
    echo "skipped ($skipped):"
    printf '%s' "$skip_list"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
