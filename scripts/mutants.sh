#!/usr/bin/env bash
# mutants.sh - the tests must catch each break of tests/mutants.txt: applies
# the breaks one at a time to a copy of the tree (never to the tree itself),
# rebuilds there only what the break touches, runs the suites its entry names
# (only the tests its filter names) and prints one line per break, caught or
# SURVIVED, then the totals. The suites named must pass, and run (a skip is
# no pass), on the unbroken copy first. Fails when a break survived or an
# entry's text is not in its file exactly once.
# Usage: scripts/mutants.sh [LIST]   (make mutants)
# Knobs: MUTANTS_DIR (build/mutants: the copy, its build/ and the suites'
# logs), MUTANT_TIMEOUT (300: seconds a suite may run on one break; one that
# hangs counts as caught, its log says so), MUTANT_JOBS (make -j, 2), ONLY
# (a number: that entry alone, without the unbroken run first),
# MUTANTS_CHECK=1 (no build: only whether each entry still fits the tree),
# MUTANTS_BASELINE=no (no unbroken run first: for CI, whose make test-fresh
# has just run every suite on the same commit), MUTANTS_SHARDS (1: how many
# copies run breaks side by side, each every Nth entry in a copy of its own
# under MUTANTS_DIR/shard-K; most of a suite's time is waiting on servers and
# timers, so two shards on 2 cores take little more than half the time).
set -uo pipefail
set -f # the filters hold * and ?: never globbed
cd "$(dirname "$0")/.."
list=${1:-tests/mutants.txt}
work=${MUTANTS_DIR:-build/mutants}
tree=$work/tree
logs=$work/logs
timeout_s=${MUTANT_TIMEOUT:-300}
jobs=${MUTANT_JOBS:-2}
shards=${MUTANTS_SHARDS:-1}
shard=${MUTANTS_SHARD:-0} # set by the sharding run below: this copy takes entries n % shards == shard

# The break in force (a file of the copy and its text before), restored by
# restore() after each break, on failure and on Ctrl-C.
applied="" original=""

# Puts the file back and deletes whatever was built since the break was
# applied (objects, libraries, binaries), so that nothing built from it is
# used again. $work/dirty stays until that is done: a run that finds it
# (this one was killed hard) starts from an empty build.
restore() {
    [ -n "$applied" ] || return 0
    printf '%s' "$original" >"$tree/$applied"
    find "$tree/build" -newer "$work/stamp" -type f -delete 2>/dev/null
    applied="" original=""
    rm -f "$work/dirty"
}
trap 'restore' EXIT
trap 'echo "mutants: interrupted" >&2; exit 130' INT TERM

# The copy: the tree's files (tracked, and new ones git does not ignore) with
# their times kept, so that make rebuilds only what changed since the last run.
copy_tree() {
    mkdir -p "$tree" "$logs"
    [ -e "$work/dirty" ] && rm -rf "$tree/build"
    find "$tree" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
    git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$tree"
}

# The suite's test binary under build/, or "" when there is no such suite.
suite_target() {
    local kind
    for kind in unit it; do
        [ -f "$tree/tests/$kind/$1.c" ] && { echo "build/tests/$kind/$1"; return; }
    done
}

build() { make -C "$tree" --no-print-directory -j"$jobs" all "$@" >>"$logs/build.log" 2>&1; }

# Reads one entry ("FILE `OLD` `NEW` SUITES") into file, old, new, suites;
# returns 1 when the line is not one.
parse() {
    local re='^([^ `]+) +`([^`]+)` +`([^`]*)` +(.+)$'
    [[ $1 =~ $re ]] || return 1
    file=${BASH_REMATCH[1]} old=${BASH_REMATCH[2]} new=${BASH_REMATCH[3]}
    suites=${BASH_REMATCH[4]}
}

# Whether the entry still fits the tree: 0 with its file's text in text,
# or 1 (why says how not): OLD must be in FILE exactly once, every suite
# must exist.
fits() {
    local rest n spec
    [ -f "$tree/$file" ] || { why="no file $file"; return 1; }
    IFS= read -r -d '' text <"$tree/$file"
    rest=${text//"$old"/}
    n=$(((${#text} - ${#rest}) / ${#old}))
    [ "$n" -eq 1 ] || { why="its text is in $file $n times, not once"; return 1; }
    for spec in $suites; do
        [ -n "$(suite_target "${spec%%:*}")" ] || { why="no suite ${spec%%:*}"; return 1; }
    done
}

# Applies the break to the copy: 0, or 1 when the entry does not fit.
apply() {
    local text
    fits || return 1
    : >"$work/dirty"
    touch "$work/stamp"
    sleep 0.01 # what is built from now on is newer than the stamp
    applied=$file original=$text
    printf '%s' "${text/"$old"/"$new"}" >"$tree/$file"
}

# Builds and runs one SUITE[:FILTER] ($1) in the copy, its output to $log:
# its exit status (124 or 137 when it hung and was killed), or 200 when
# there is no such suite, 201 when it does not build.
run_spec() {
    local suite=${1%%:*} filter="" target
    [ "$1" != "$suite" ] && filter=${1#*:}
    target=$(suite_target "$suite")
    [ -n "$target" ] || return 200
    build "$target" || return 201
    (cd "$tree" && TEST_BUILD_DIR=build TEST_FILTER=$filter \
        timeout -k 10 "$timeout_s" "$target") </dev/null >"$log" 2>&1
}

# Whether a suite's log shows a test skipped (it could not run here: a
# tmpfs it may not mount, a tool it lacks): such a pass proves nothing.
skipped() { grep -q '^\[  SKIPPED \]' "$1"; }

# Runs each suite of the entry on the broken build: 0 when one failed
# (caught), 1 when all passed, 2 when the entry is wrong (no such suite, or
# the break does not build); why says which, or that a suite hung.
run_suites() {
    local spec rc skips=
    for spec in $suites; do
        run_spec "$spec"
        rc=$?
        case $rc in
        0) skipped "$log" && skips+=" $spec" ; continue ;;
        200) why="no suite ${spec%%:*}"; return 2 ;;
        201) why="the break does not build (see $logs/build.log)"; return 2 ;;
        124 | 137) why="by $spec (it hung: killed after $timeout_s s)" ;;
        *) why="by $spec" ;;
        esac
        return 0
    done
    why="by none of: $suites${skips:+; skipped here:$skips}"
    return 1
}

# Every SUITE[:FILTER] of the list must pass on the unbroken tree, or a
# break could not be told from a failure of its own.
baseline() {
    local spec failed=0 line
    for spec in $(m=0
                  while IFS= read -r line; do
                      case $line in '' | '#'*) continue ;; esac
                      m=$((m + 1))
                      mine "$m" && parse "$line" 2>/dev/null && printf '%s\n' $suites
                  done <"$list" | sort -u); do
        log=$logs/baseline-${spec//[^A-Za-z0-9_]/_}.log
        if ! run_spec "$spec"; then
            echo "mutants: $spec fails on the unbroken tree (log $log)" >&2
            failed=1
        elif skipped "$log"; then
            echo "mutants: $spec skips its tests here, so its breaks can't be judged (log $log)" >&2
            failed=1
        fi
    done
    return $failed
}

# Whether entry $1 is this copy's to run.
mine() { [ "$shards" -le 1 ] || [ $(($1 % shards)) -eq "$shard" ]; }

# MUTANTS_CHECK=1: only whether every entry fits the tree itself (quick:
# make test runs it), one line per entry that does not.
if [ -n "${MUTANTS_CHECK:-}" ]; then
    tree=. n=0 bad=0
    while IFS= read -r line || [ -n "$line" ]; do
        case $line in '' | '#'*) continue ;; esac
        n=$((n + 1)) why="not an entry: $line" text=""
        parse "$line" && fits && continue
        echo "$list entry $n: $why"
        bad=$((bad + 1))
    done <"$list"
    echo "mutants: $((n - bad)) of $n entries fit the tree"
    exit $((bad > 0))
fi

# MUTANTS_SHARDS=N: this script N times side by side, one per shard, each in
# a copy of its own; fails when one of them does.
if [ "$shards" -gt 1 ] && [ -z "${MUTANTS_SHARD:-}" ] && [ -z "${ONLY:-}" ]; then
    pids=() t0=$SECONDS
    trap 'kill "${pids[@]}" 2>/dev/null; echo "mutants: interrupted" >&2; exit 130' INT TERM
    for ((k = 0; k < shards; k++)); do
        MUTANTS_SHARD=$k MUTANTS_DIR=$work/shard-$k "$0" "$list" &
        pids+=($!)
    done
    failed=0
    for pid in "${pids[@]}"; do
        wait "$pid" || failed=1
    done
    echo "mutants: $shards shards done in $((SECONDS - t0)) s: $([ $failed -eq 0 ] && echo all caught || echo FAILED)"
    exit $failed
fi

copy_tree
echo "mutants: building the copy in $tree (log: $logs/build.log)"
: >"$logs/build.log"
t0=$SECONDS
build || { echo "mutants: the unbroken tree does not build" >&2; exit 1; }
if [ -z "${ONLY:-}" ] && [ "${MUTANTS_BASELINE:-yes}" != no ]; then
    echo "mutants: the suites on the unbroken tree first"
    baseline || exit 1
fi
caught=0 survived=0 stale=0 n=0 name=""
# the list on a descriptor of its own: nothing the loop runs can read it
# away from it (a suite's child reading its stdin once ate the last entries)
while IFS= read -r line <&3 || [ -n "$line" ]; do
    case $line in
    '# '*) name=${line#\# }; continue ;;
    '' | '#'*) name=""; continue ;;
    esac
    n=$((n + 1))
    [ -n "${ONLY:-}" ] && [ "$ONLY" != "$n" ] && { name=""; continue; }
    [ -z "${ONLY:-}" ] && ! mine "$n" && { name=""; continue; }
    log=$logs/$n.log why=""
    if ! parse "$line"; then
        printf '%2d STALE    %s: not an entry: %s\n' "$n" "$list" "$line"
        stale=$((stale + 1)) name=""
        continue
    fi
    label=${name:-$old}
    started=$SECONDS
    if ! apply; then
        printf '%2d STALE    %s: %s\n' "$n" "$label" "$why"
        stale=$((stale + 1))
    else
        run_suites
        case $? in
        0) printf '%2d caught   %s (%s, %d s)\n' "$n" "$label" "$why" $((SECONDS - started))
           caught=$((caught + 1)) ;;
        1) printf '%2d SURVIVED %s: %s in %s (%s; log %s)\n' "$n" "$label" "$old" "$file" "$why" "$log"
           survived=$((survived + 1)) ;;
        *) printf '%2d STALE    %s: %s\n' "$n" "$label" "$why"
           stale=$((stale + 1)) ;;
        esac
        restore
    fi
    name=""
done 3<"$list"
echo "mutants${MUTANTS_SHARD:+ shard $MUTANTS_SHARD}: $caught caught, $survived survived, $stale stale of $((caught + survived + stale)), in $((SECONDS - t0)) s"
[ "$survived" -eq 0 ] && [ "$stale" -eq 0 ]
