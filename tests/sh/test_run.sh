#!/usr/bin/env bash
# test_run.sh - tests tests/run.sh itself: it is fed canned cmocka outputs
# (tests/sh/run_outputs/, as cmocka 1.1 prints them) from fake suites, and
# each case must give the right totals, skip list and exit status. Prints
# cmocka-style lines for tests/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
canned=$repo/tests/sh/run_outputs
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-run.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# check NAME WANT_LAST_LINE WANT_STATUS [SUITE:OUTPUT:EXIT ...]: runs run.sh
# over fake suites that print the canned OUTPUT and exit with EXIT.
check() {
    local name=$1 want_line=$2 want_status=$3
    shift 3
    local dir=$tmp/$name
    mkdir -p "$dir/build/tests/unit" "$dir/cwd"
    for spec in "$@"; do
        IFS=: read -r suite output status <<<"$spec"
        printf '#!/bin/sh\ncat "%s"\nexit %s\n' "$canned/$output.out" "$status" \
            >"$dir/build/tests/unit/$suite"
        chmod +x "$dir/build/tests/unit/$suite"
    done
    local out status
    out=$(cd "$dir/cwd" && bash "$repo/tests/run.sh" "$dir/build" 2>&1)
    status=$?
    echo "[ RUN      ] run.sh: $name"
    local got_line
    got_line=$(tail -n 1 <<<"$out")
    if [ "$got_line" != "$want_line" ]; then
        printf 'want "%s", got "%s"\n%s\n' "$want_line" "$got_line" "$out"
        echo "[  FAILED  ] run.sh: $name"
    elif { [ "$want_status" = 0 ] && [ "$status" != 0 ]; } ||
        { [ "$want_status" != 0 ] && [ "$status" = 0 ]; }; then
        printf 'want exit status %s, got %s\n%s\n' "$want_status" "$status" "$out"
        echo "[  FAILED  ] run.sh: $name"
    elif [ -n "${want_skip:-}" ] && ! grep -qF -- "$want_skip" <<<"$out"; then
        printf 'the skip list lacks "%s"\n%s\n' "$want_skip" "$out"
        echo "[  FAILED  ] run.sh: $name"
    else
        echo "[       OK ] run.sh: $name"
    fi
    want_skip=""
}

check pass "2 passed, 0 failed" 0 test_a:pass:0
want_skip="test_a: test_needs_a_tool: skip: docker-compose is not installed" \
    check skip "1 passed, 0 failed" 0 test_a:skip:0
want_skip="test_a: test_skip: skip: not today" \
    check fail "1 passed, 2 failed" 2 test_a:fail:2
check crash_mid_test "1 passed, 1 failed" 137 test_a:crash:137
check group_setup_failed "0 passed, 1 failed" 1 test_a:group_setup:1
check group_teardown_failed_exit_0 "1 passed, 1 failed" 1 test_a:group_teardown:0
check nonzero_exit_without_failed_test "2 passed, 1 failed" 1 test_a:pass:3
want_skip="test_a: test_b: skip: redis-server 7 needed" \
    check two_groups_one_binary "2 passed, 0 failed" 0 test_a:two_groups:0
check shell_test_without_header "1 passed, 1 failed" 1 test_a:shell:1
check totals_over_suites "7 passed, 3 failed" 1 test_a:pass:0 test_b:skip:0 test_c:fail:2 \
    test_d:two_groups:0 test_e:crash:137
