#!/usr/bin/env bash
# test_prometheus.sh - the compose demo's Prometheus files, checked with
# promtool (Debian's prometheus package, which make deps installs): the rules
# and the config are valid, the alerts' unit tests (tests/prometheus/
# rules_test.yml) pass, and fail when a rule is broken (so they can fail);
# Prometheus scrapes every replica service of the compose file on its port
# in the container and is published on the host's loopback only. Prints
# cmocka-style lines for tests/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."

REPORT_SUITE=prometheus
. tests/sh/report.sh

rules=docker/prometheus/rules.yml
config=docker/prometheus/prometheus.yml
unit=tests/prometheus/rules_test.yml
compose=docker/docker-compose.yml

# run NAME CMD...: passes when CMD exits 0; its output explains a failure.
run() {
    local name=$1 out
    shift
    out=$("$@" 2>&1)
    report "$name" $? "$out"
}

# The replica services (they merge the x-stockd template) as "name:port", the
# port they listen on in their container (after the last colon of "ports").
replica_targets() {
    awk '/^services:/ { on = 1; next } on && /^[^ #]/ { on = 0 }
        on && /^  [a-z0-9-]+:$/ { svc = substr($1, 1, length($1) - 1); replica = 0 }
        on && $0 ~ /^    <<: \*stockd$/ { replica = 1 }
        on && replica && /^    ports: / { n = split($0, p, "[\":]+"); print svc ":" p[n - 1] }' \
        "$compose" | sort
}

# The targets prometheus.yml's job stockd scrapes, one a line (not the other jobs').
scraped_targets() {
    sed -n '/job_name: stockd$/,/job_name:/ s/^ *- targets: \[\(.*\)\]$/\1/p' "$config" |
        tr ',' '\n' | tr -d ' ' | sort
}

# broken SED_EXPR: the unit tests run against rules.yml edited by SED_EXPR in a
# copy of the tree's two folders; prints what promtool said, returns its status.
broken() {
    local tmp status
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/prom-rules.XXXXXX")
    mkdir -p "$tmp/docker/prometheus" "$tmp/tests/prometheus"
    cp "$unit" "$tmp/tests/prometheus/"
    sed "$1" "$rules" >"$tmp/$rules"
    if cmp -s "$rules" "$tmp/$rules"; then
        echo "the edit $1 changes nothing in $rules"
        rm -rf "$tmp"
        return 0 # as if the tests had passed: the caller reports it
    fi
    promtool test rules "$tmp/$unit" >/dev/null 2>&1
    status=$?
    rm -rf "$tmp"
    return "$status"
}

if ! command -v promtool >/dev/null 2>&1; then
    skip "promtool checks the rules and the config" \
        "promtool is not installed (make deps installs Debian's prometheus)"
    exit 0
fi

run "promtool check rules passes on $rules, lint included" \
    promtool check rules --lint=all --lint-fatal "$rules"
run "promtool check config passes on $config and the rules it loads" \
    promtool check config --lint=all --lint-fatal "$config"
run "the alerts' unit tests pass ($unit)" promtool test rules "$unit"

# Each edit breaks one rule the way a slip would; every one must fail the unit tests.
edits=(
    's/up{job="stockd"} == 0/up{job="stockd"} == 1/'
    's/for: 30s/for: 5s/'
    's/increase(stockd_lock_lost_total\[5m\]) > 0/stockd_lock_lost_total > 0/'
    's/increase(stockd_lock_interrupts_total\[5m\])/increase(stockd_lock_lost_total[5m])/'
    's/sum by (instance, node)/sum by (instance)/'
    's/histogram_quantile(0.99, sum by (instance, le)/histogram_quantile(0.9, sum by (instance, le)/'
    's/instance:stockd_lock_wait_timeouts:rate1m > 0/instance:stockd_lock_wait_timeouts:rate1m > 2/'
    's/outcome="ok"/outcome=~".+"/'
    's/outcome="storage_full"/outcome="storage_busy"/'
)
missed=""
# The control: a copy with an edit no rule sees must pass, or the mutants
# below would "fail" for a broken copy rather than for their edit.
broken '$a\# an edit no rule sees' ||
    missed+="a copy with a harmless edit fails too: the copies are not tested as they should be"$'\n'
for e in "${edits[@]}"; do
    broken "$e" && missed+="still passing with $e"$'\n'
done
report "the unit tests fail on each of ${#edits[@]} broken rules" \
    "$([ -z "$missed" ] && echo 0 || echo 1)" "$missed"

want=$(replica_targets)
got=$(scraped_targets)
[ -n "$want" ] && [ "$want" = "$got" ]
report "prometheus.yml scrapes every replica service of the compose file, on its port" $? \
    "replica services: $(echo $want); scraped: $(echo $got)"

grep -qE '^    ports: \["127\.0\.0\.1:9090:9090"\]$' <(sed -n '/^  prometheus:$/,/^$/p' "$compose")
report "the compose file's prometheus service is published on the host's loopback only" $? \
    "$(sed -n '/^  prometheus:$/,/^$/p' "$compose")"
