#!/usr/bin/env bash
# test_readme.sh - keeps the README and the pages it links to true: every
# command in their ```sh blocks is run here (against a fresh demo-up stack on
# free ports), or is one that CI runs (.ci/run; docker compose commands
# through make docker-demo), or is listed below with the reason it can't run
# here. A command in none of these fails, and so does a page with ```sh
# blocks that is not in the list below, so no page can rot. Prints
# cmocka-style lines for tests/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/stack.sh
BUILD=${TEST_BUILD_DIR:-build}
export BUILD

# Commands that cannot run inside make test, and why.
declare -A elsewhere=(
    ["make test"]="CI runs it, in make test-fresh (and this test is part of it)"
    ["make bench"]="takes minutes; its figures are recorded in bench/RESULTS.md"
    ["make deb"]="CI's make test-deb runs it first, then installs what it built"
    ["scripts/screenshot.sh build/report-compare.html docs/loadgen-report.png"]="it writes the committed picture; tests/it/test_report.c runs the script on pages of its own"
    ['cc -o dlock-example dlock-example.c $(pkg-config --cflags --libs dlock)']="tests/sh/test_install.sh builds the example so, against an installed libdlock"
    ["./dlock-example 127.0.0.1:6379"]="tests/sh/test_install.sh runs it against a private redis-server"
)

# The README's packages: installed, started, asked and reloaded as root under
# a systemd as PID 1, which make test-deb (CI) gives them in a container.
while IFS= read -r c; do
    elsewhere["$c"]="make test-deb installs the packages and runs the unit under systemd in a container"
done <<'EOF'
sudo apt install ./build/deb/stockd_*.deb
sudo apt install ./build/deb/libdlock{3,-dev}_*.deb
sudo systemctl start stockd
curl -s localhost:8080/health
sudo systemctl reload stockd
journalctl -u stockd
EOF

# docs/loadgen.md's walkthrough and examples/README.md: test_examples.c starts
# the same services and runs the same loads, on free ports.
while IFS= read -r c; do
    elsewhere["$c"]="tests/it/test_examples.c runs the examples and these loads on free ports"
done <<'EOF'
redis-server --port 6379 --save '' --daemonize yes
python3 examples/naive_lock.py --port 8091 & naive1=$!
python3 examples/naive_lock.py --port 8092 & naive2=$!
python3 examples/fenced_lock.py --port 8093 & fenced1=$!
python3 examples/fenced_lock.py --port 8094 & fenced2=$!
build/loadgen --api examples/shop.json -d 4s -c 8 --stock 20 --target http://127.0.0.1:8091,http://127.0.0.1:8092 --fault "200ms:kill -STOP $naive1" --fault-end "1700ms:kill -CONT $naive1"
build/loadgen --api examples/shop.json -d 4s -c 8 --stock 20 --target http://127.0.0.1:8093,http://127.0.0.1:8094 --fault "200ms:kill -STOP $fenced1" --fault-end "1700ms:kill -CONT $fenced1"
kill $naive1 $naive2 $fenced1 $fenced2
redis-cli -p 6379 shutdown nosave
EOF

# The pages whose commands run, in reading order: the README's try-it block
# makes item 1, which the block of docs/http-api.md orders with item 2.
pages=(README.md docs/http-api.md docs/operations.md docs/loadgen.md docs/docker.md
    docs/testing.md lock/README.md examples/README.md)

REPORT_SUITE=readme
. tests/sh/report.sh

# Every page with shell blocks is in the list (a new page joins it or fails).
unlisted=$(git ls-files --cached --others --exclude-standard '*.md' | while read -r f; do
    grep -q '^```sh$' "$f" && [[ " ${pages[*]} " != *" $f "* ]] && echo "$f"
done)
[ -z "$unlisted" ]
report "every page with shell blocks is run here" $? \
    "pages with \`\`\`sh blocks missing from pages=() in $0: $unlisted"

# The stack: the demo's own script, on ports nobody uses, with haproxy in
# front (DEMO_PORT + 362) for the README's lines through it.
base=$(free_port 30000)
while port_in_use $((base + 1)) || port_in_use $((base + 2)) || port_in_use $((base + 362)); do
    base=$(free_port $((base + 3)))
done
export DEMO_PORT=$base
up() { if [ "$BUILD" = build ]; then make --no-print-directory demo-up FRONT=haproxy
       else DEMO_FRONT=haproxy scripts/demo.sh up; fi; }
down() { if [ "$BUILD" = build ]; then make --no-print-directory demo-down; else scripts/demo.sh down; fi; }
trap down EXIT
if ! out=$(up 2>&1); then
    report "make demo-up" 1 "$out"
    exit 1
fi
report "make demo-up" 0

# The pages' commands with the stack's ports, build directory and operator
# token (docker.md's is the compose stack's secret).
localize() {
    sed -e "s/:8081/:$base/g" -e "s/:8082/:$((base + 1))/g" -e "s/:8083/:$((base + 2))/g" \
        -e "s/:8443/:$((base + 362))/g" \
        -e "s#^build/#$BUILD/#" -e "s#docker/secrets/operator-token#var/demo/operator.token#g"
}

# check_command PAGE CMD: runs or places one command of PAGE's shell blocks.
check_command() {
    local page=$1 cmd=$2 out st local_cmd target args
    if [ -n "${elsewhere[$cmd]+x}" ]; then # before the cases that would run it here
        report "$page: $cmd" 0
        return
    fi
    case "$cmd" in
    "make demo-up" | "make demo-up FRONT=haproxy" | "make demo-down") ;; # the stack around this test
    "make demo")
        if [ "$BUILD" = build ]; then out=$(DEMO_PORT= make --no-print-directory demo 2>&1)
        else out=$(DEMO_PORT= scripts/demo.sh run 2>&1); fi
        st=$?
        [ "$st" = 0 ] && ! grep -q "VERDICT: FAIL" <<<"$out" && grep -q "VERDICT: PASS" <<<"$out"
        report "$page: $cmd" $? "$out"
        ;;
    curl\ * | build/loadgen\ * | build/stockd\ *)
        local_cmd=$(localize <<<"$cmd")
        out=$(timeout 120 bash -c "$local_cmd" 2>&1 </dev/null)
        st=$?
        if [ "$st" = 0 ] && [ -n "$out" ] && ! grep -q '"error"' <<<"$out"; then
            report "$page: $cmd" 0
        else
            report "$page: $cmd" 1 "exit $st: $out"
        fi
        ;;
    "docker compose -f docker/docker-compose.yml "*) # make docker-demo (CI) runs the same
        args=${cmd#docker compose -f docker/docker-compose.yml }
        grep -qF -- "compose $args" scripts/docker-demo.sh && grep -qE '^make docker-demo( |$)' .ci/run
        report "$page: $cmd" $? "scripts/docker-demo.sh (make docker-demo, in .ci/run) does not run it"
        ;;
    make\ *) # CI runs the target (its own arguments may differ, e.g. FUZZ_SECONDS)
        target=$(awk '{print $2}' <<<"$cmd")
        grep -qE "^make $target( |$)" .ci/run || [ -n "${elsewhere[$cmd]+x}" ]
        report "$page: $cmd" $? "not run here, not in .ci/run and not listed as run elsewhere"
        ;;
    *)
        [ -n "${elsewhere[$cmd]+x}" ]
        report "$page: $cmd" $? "a command that no test, demo or CI step runs"
        ;;
    esac
}

for page in "${pages[@]}"; do
    if [ ! -f "$page" ]; then
        report "$page is there" 1 "listed in pages=() of $0 but missing"
        continue
    fi
    commands=$(awk '/^```sh$/ {on=1; next} /^```/ {on=0} on && NF && $1 !~ /^#/' "$page" |
        sed 's/[[:space:]]\{2,\}#.*$//')
    while IFS= read -r cmd; do
        [ -n "$cmd" ] && check_command "$page" "$cmd"
    done <<<"$commands"
done

out=$(down 2>&1)
report "make demo-down" $? "$out"
trap - EXIT
rm -f /tmp/run.json
