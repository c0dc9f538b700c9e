#!/usr/bin/env bash
# test_man.sh - the man pages that make writes into build/man: each renders
# without a warning (groff -ww, and man -l as a reader gets it) and no wider
# than 80 columns; stockd(8) and loadgen(1) have an entry for every flag
# their --help lists, loadgen(1) for every scenario of --list; libdlock(3)'s
# SYNOPSIS compiles against the lock's public headers and names every
# function they declare, as its NAME does, each with a page of its own that
# opens it. Pages broken on purpose (a bad macro, a flag left out, a wrong or
# missing prototype) prove that each check can fail. Prints cmocka-style
# lines for tests/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."

REPORT_SUITE=man
. tests/sh/report.sh

build=${TEST_BUILD_DIR:-build}
man=$build/man
tmp=$(mktemp -d /tmp/stockd-man.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# man-db and groff as any reader has them: a locale every Debian has, no
# pager; man-db's seccomp sandbox is off because some containers refuse it.
export LC_ALL=C.UTF-8 MANWIDTH=80 MANPAGER=cat PAGER=cat MAN_DISABLE_SECCOMP=1

# render_problems PAGE: every warning of groff and man-db, and each line
# wider than 80 columns as man shows it. Nothing when the page is clean.
render_problems() {
    local page=$1 text line
    groff -ww -man -Tutf8 -z "$page" 2>&1 >/dev/null
    text=$(man --warnings=w -l "$page" 2>&1 >/dev/null) && [ -z "$text" ] ||
        echo "man -l: ${text:-failed}"
    while IFS= read -r line; do
        [ "${#line}" -le 80 ] || echo "wider than 80 columns: $line"
    done < <(man -l "$page" 2>/dev/null)
}

# missing_flags HELP PAGE: each flag that a line of the --help text in file
# HELP starts with ("--port N", "-n, --requests N") and that has no entry of
# its own in the rendered PAGE (a line starting with the same, indented).
missing_flags() {
    local text flags flag
    text=$(man -l "$2" 2>/dev/null)
    flags=$(grep -oE '^ +(-[a-zA-Z], )?--[a-z0-9-]+' "$1" | sed 's/^ *//' | sort -u)
    [ -n "$text" ] || { echo "$2 renders nothing"; return; }
    [ -n "$flags" ] || { echo "no flag found in $1"; return; }
    while IFS= read -r flag; do
        grep -qE "^ {7}$flag( |\\[|=|\$)" <<<"$text" || echo "no entry for $flag"
    done <<<"$flags"
}

# declared: the functions the lock's public headers declare, one a line.
declared() {
    printf '#include <%s>\n' dlock.h dlock_async.h dlock_sem.h dlock_rw.h |
        cc -E -P -Ilock -x c - |
        grep -oE '\bdlock_[a-z0-9_]+[[:space:]]*\(' | grep -oE 'dlock_[a-z0-9_]+' | sort -u
}

# synopsis_problems PAGE: libdlock's SYNOPSIS as C (from its first
# "#include" to "Link with": the public headers, then the prototypes), so
# each prototype must match its declaration; and each function they declare
# that it or NAME leaves out, or that they name and none declares.
synopsis_problems() {
    local text synopsis names
    text=$(man -l "$1" 2>/dev/null)
    synopsis=$(sed -n '/^ *#include/,/^ *Link with/p' <<<"$text" | sed '$d')
    printf '%s\n' "$synopsis" | cc -std=c11 -fsyntax-only -Wall -Werror -Ilock -x c - 2>&1
    diff <(declared) <(grep -oE '\bdlock_[a-z0-9_]+ *\(' <<<"$synopsis" |
        grep -oE 'dlock_[a-z0-9_]+' | sort -u) | sed -n 's/^[<>]/SYNOPSIS &/p'
    names=$(sed -n '/^NAME/,/^SYNOPSIS/p' <<<"$text" | grep -oE 'dlock_[a-z0-9_]+' | sort -u)
    diff <(declared) <(echo "$names") | sed -n 's/^[<>]/NAME &/p'
}

pages=("$man/man8/stockd.8" "$man/man1/loadgen.1" "$man/man3/libdlock.3")
for page in "${pages[@]}"; do
    if [ ! -f "$page" ]; then
        report "$(basename "$page") renders without a warning, 80 columns wide" 1 \
            "$page: not built (make)"
        continue
    fi
    out=$(render_problems "$page")
    report "$(basename "$page") renders without a warning, 80 columns wide" \
        "$([ -z "$out" ] && echo 0 || echo 1)" "$out"
done

for prog in stockd loadgen; do
    page=$man/man8/stockd.8
    [ "$prog" = loadgen ] && page=$man/man1/loadgen.1
    "$build/$prog" --help >"$tmp/$prog.help" 2>&1
    out=$(missing_flags "$tmp/$prog.help" "$page")
    [ -s "$tmp/$prog.help" ] || out="$build/$prog --help printed nothing"
    report "$(basename "$page") has an entry for every flag of $prog --help" \
        "$([ -z "$out" ] && echo 0 || echo 1)" "$out"
done

# The scenarios of loadgen --list ("  hot   flash sale: ..."), each an entry
# of the page's SCENARIOS.
scenarios=$(man -l "$man/man1/loadgen.1" 2>/dev/null | sed -n '/^SCENARIOS/,/^[A-Z]/p')
out=$("$build/loadgen" --list 2>&1 | sed -n 's/^  \([a-z][a-z0-9-]*\) .*/\1/p' |
    while IFS= read -r name; do
        grep -qE "^ {7}$name( |$)" <<<"$scenarios" || echo "no entry for scenario $name"
    done)
[ -n "$("$build/loadgen" --list 2>/dev/null)" ] || out="$build/loadgen --list printed nothing"
report "loadgen.1 has an entry for every scenario of loadgen --list" \
    "$([ -z "$out" ] && echo 0 || echo 1)" "$out"

out=$(synopsis_problems "$man/man3/libdlock.3")
report "libdlock.3's SYNOPSIS and NAME are what the public headers declare" \
    "$([ -z "$out" ] && echo 0 || echo 1)" "$out"

out=$(for f in $(declared); do
    [ "$(cat "$man/man3/$f.3" 2>/dev/null)" = ".so man3/libdlock.3" ] || echo "no $man/man3/$f.3"
done)
report "each function of the public headers has a page that opens libdlock.3" \
    "$([ -z "$out" ] && echo 0 || echo 1)" "$out"

# The checks fail where they should: each on a copy broken on purpose.
sed '/^\.SH NAME/a .XY a macro that does not exist' "$man/man8/stockd.8" >"$tmp/macro.8"
sed '/^\\fB\\-\\-json\\fR/d' "$man/man1/loadgen.1" >"$tmp/noflag.1"
sed 's/^\(\.BI "int dlock_sleep(dlock_handle \*" h ", \)int /\1long /' \
    "$man/man3/libdlock.3" >"$tmp/proto.3"
sed '/^\.BI "int dlock_check(/d' "$man/man3/libdlock.3" >"$tmp/nocheck.3"
macro=$(render_problems "$tmp/macro.8")
noflag=$(missing_flags "$tmp/loadgen.help" "$tmp/noflag.1")
proto=$(synopsis_problems "$tmp/proto.3")
nocheck=$(synopsis_problems "$tmp/nocheck.3")
grep -q "macro 'XY' not defined" <<<"$macro" &&
    [ "$noflag" = "no entry for --json" ] &&
    grep -q "conflicting types for .dlock_sleep" <<<"$proto" &&
    [ "$nocheck" = "SYNOPSIS < dlock_check" ]
report "a bad macro, a flag left out, a wrong or missing prototype fail the checks" "$?" \
    "$(printf 'bad macro: %s\n--json left out: %s\ndlock_sleep(h, long): %s\n%s' "$macro" \
        "$noflag" "$proto" "dlock_check left out: $nocheck")"
