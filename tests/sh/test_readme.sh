#!/usr/bin/env bash
# test_readme.sh - keeps the README true: every command in its ```sh blocks is
# run here (against a fresh demo-up stack on free ports), or is one that CI
# runs (.ci/run; docker compose commands through make docker-demo), or is
# listed below with the reason it can't run here. A command in none of these
# fails, so the README can't rot. Prints cmocka-style lines for tests/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/stack.sh
BUILD=${TEST_BUILD_DIR:-build}
export BUILD

# Commands that cannot run inside make test, and why.
declare -A elsewhere=(
    ["make test"]="CI runs it (and this test is part of it)"
    ["make bench"]="takes minutes; its figures are recorded in bench/RESULTS.md"
    ["scripts/screenshot.sh build/report-compare.html docs/loadgen-report.png"]="it writes the committed picture; tests/it/test_report.c runs the script on pages of its own"
)

REPORT_SUITE=readme
. tests/sh/report.sh

# The stack: the demo's own script, on ports nobody uses.
base=$(free_port 30000)
while port_in_use $((base + 1)) || port_in_use $((base + 2)); do base=$(free_port $((base + 3))); done
export DEMO_PORT=$base
up() { if [ "$BUILD" = build ]; then make --no-print-directory demo-up; else scripts/demo.sh up; fi; }
down() { if [ "$BUILD" = build ]; then make --no-print-directory demo-down; else scripts/demo.sh down; fi; }
trap down EXIT
if ! out=$(up 2>&1); then
    report "make demo-up" 1 "$out"
    exit 1
fi
report "make demo-up" 0

# The README's commands with the stack's ports and build directory.
localize() {
    sed -e "s/:8081/:$base/g" -e "s/:8082/:$((base + 1))/g" -e "s/:8083/:$((base + 2))/g" \
        -e "s#^build/#$BUILD/#"
}

commands=$(awk '/^```sh$/ {on=1; next} /^```/ {on=0} on && NF && $1 !~ /^#/' README.md |
    sed 's/[[:space:]]\{2,\}#.*$//')
while IFS= read -r cmd; do
    case "$cmd" in
    "make demo-up" | "make demo-down") ;; # the stack around this test
    "make demo")
        if [ "$BUILD" = build ]; then out=$(DEMO_PORT= make --no-print-directory demo 2>&1)
        else out=$(DEMO_PORT= scripts/demo.sh run 2>&1); fi
        st=$?
        [ "$st" = 0 ] && ! grep -q "VERDICT: FAIL" <<<"$out" && grep -q "VERDICT: PASS" <<<"$out"
        report "$cmd" $? "$out"
        ;;
    curl\ * | build/loadgen\ * | build/stockd\ *)
        local_cmd=$(localize <<<"$cmd")
        out=$(timeout 120 bash -c "$local_cmd" 2>&1)
        st=$?
        if [ "$st" = 0 ] && [ -n "$out" ] && ! grep -q '"error"' <<<"$out"; then
            report "$cmd" 0
        else
            report "$cmd" 1 "exit $st: $out"
        fi
        ;;
    "docker compose -f docker/docker-compose.yml "*) # make docker-demo (CI) runs the same
        args=${cmd#docker compose -f docker/docker-compose.yml }
        grep -qF -- "compose $args" scripts/docker-demo.sh && grep -qE '^make docker-demo( |$)' .ci/run
        report "$cmd" $? "scripts/docker-demo.sh (make docker-demo, in .ci/run) does not run it"
        ;;
    make\ *) # CI runs the target (its own arguments may differ, e.g. FUZZ_SECONDS)
        target=$(awk '{print $2}' <<<"$cmd")
        grep -qE "^make $target( |$)" .ci/run || [ -n "${elsewhere[$cmd]+x}" ]
        report "$cmd" $? "not run here, not in .ci/run and not listed as run elsewhere"
        ;;
    *)
        [ -n "${elsewhere[$cmd]+x}" ]
        report "$cmd" $? "a README command that no test, demo or CI step runs"
        ;;
    esac
done <<<"$commands"

out=$(down 2>&1)
report "make demo-down" $? "$out"
trap - EXIT
rm -f /tmp/run.json
