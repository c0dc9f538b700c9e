#!/usr/bin/env bash
# test_layers.sh - keeps the layering of ARCHITECTURE.md true, from what the
# objects define and use (nm over the build's objects: a call or a table
# used in one .c and defined in another is an arrow between them; each .c is
# its own node): no circle of calls in a product, no call up a layer of
# tests/sh/layers.txt, products that call each other only where allowed
# (server/ calls the lock only through its public headers, lock/dlock*.h;
# lock/ and loadgen/ nothing of the others), and http.c and its handlers that
# reach the service, not what lies beneath it. Inside the lock: only the API
# files include its public headers of calls, and what no public header
# declares is named dlock__name.
# A planted circle proves the check can fail. Prints cmocka-style lines for
# tests/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."

REPORT_SUITE=layers
. tests/sh/report.sh

objs=${TEST_BUILD_DIR:-build}/obj
layers=tests/sh/layers.txt

# graph OBJDIR FILE.o...: "FROM TO SYMBOL" for every file that uses what
# another defines; files are named by their source, relative to OBJDIR.
graph() {
    local dir=$1 o f
    shift
    for o; do
        f=${o#"$dir"/}
        f=${f%.o}.c
        nm -g --defined-only "$o" | awk -v f="$f" 'NF == 3 { print "def", f, $3 }'
        nm -u "$o" | awk -v f="$f" '{ print "use", f, $NF }'
    done | awk -f tests/sh/calls.awk
}

# above LAYERS: reads "FROM TO ..." and prints the arrows inside a product
# that go up (or from or to a file with no layer): a file may use its own
# layer's files and those below.
above() {
    awk -v layers="$1" '
        BEGIN {
            while ((getline line < layers) > 0) {
                sub(/#.*/, "", line)
                if (line ~ /^\[/) { dir = substr(line, 2, index(line, "]") - 2); continue }
                n = split(line, f, " ")
                if (n) depth++
                for (i = 1; i <= n; i++) at[dir "/" f[i]] = depth
            }
        }
        { split($1, a, "/"); split($2, b, "/") }
        a[1] != b[1] { next } # between products: the checks below
        !($1 in at) { print $1 " has no layer in " layers; next }
        !($2 in at) { print $2 " has no layer in " layers; next }
        at[$2] < at[$1] { print $1 " -> " $2 " goes up a layer (" $3 ")" }
    ' | sort -u
}

# expect_none NAME LINES: passes when LINES is empty, else shows them.
expect_none() { report "$1" "$([ -z "$2" ] && echo 0 || echo 1)" "$2"; }

edges=$(graph "$objs" "$objs"/lock/*.o "$objs"/server/*.o "$objs"/loadgen/*.o)
if [ -z "$edges" ]; then
    report "the objects are built" 1 "no call found in $objs/{lock,server,loadgen}: build first"
    exit 1
fi

expect_none "no circle of calls" "$(awk -f tests/sh/circles.awk <<<"$edges")"
expect_none "no call goes up a layer of $layers" "$(above "$layers" <<<"$edges")"
expect_none "lock/ calls nothing of the other products" \
    "$(awk '$1 ~ /^lock\// && $2 !~ /^lock\//' <<<"$edges")"
expect_none "loadgen/ calls nothing of the other products" \
    "$(awk '$1 ~ /^loadgen\// && $2 !~ /^loadgen\//' <<<"$edges")"
# What the lock's public headers declare is its whole surface for the server.
public=(lock/dlock.h lock/dlock_base.h lock/dlock_async.h lock/dlock_sem.h lock/dlock_rw.h)
dlock_api=$(grep -ho 'dlock_[a-z0-9_]*' "${public[@]}" | sort -u)
expect_none "server/ calls the lock only through its public headers" \
    "$(awk -v api="$dlock_api" 'BEGIN { n = split(api, a, "\n"); for (i = 1; i <= n; i++) ok[a[i]] }
        $1 ~ /^server\// && $2 ~ /^lock\// && !($3 in ok)' <<<"$edges")"
# Inside the lock, a name says whether a call crosses its API (as libuv's
# uv__name): what lock/ defines and no public header declares is dlock__name.
expect_none "lock/'s symbols that no public header declares are named dlock__" \
    "$(for o in "$objs"/lock/*.o; do
        nm -g --defined-only "$o" | awk -v f="lock/${o##*/}" 'NF == 3 { print f, $3 }'
    done | awk -v api="$dlock_api" 'BEGIN { n = split(api, a, "\n"); for (i = 1; i <= n; i++) ok[a[i]] }
        !($2 in ok) && $2 !~ /^dlock__/')"
# http.c and its handlers parse, ask the service, answer: they never reach the
# store, the lock, the group-commit queues or the configuration (tls.c is the
# plumbing's own: HTTPS's session tickets; so are proxies.c and tally.c: who
# the client is behind a proxy, and the per-address counts).
expect_none "http.c and handlers.c call the service, not what lies beneath it" \
    "$(awk '$1 ~ /^server\/(http|handlers)\.c$/ &&
        $2 !~ /^server\/(service|service_result|http|reaper|request|route|metrics|log|rules|tls|proxies|tally)\.c$/' \
        <<<"$edges")"
# The lock's API files are side by side: what two of them need lies beneath.
expect_none "lock/'s API files (dlock, dlock_async, sem, rw, fence) call none of each other" \
    "$(awk '$1 ~ /^lock\/(dlock|dlock_async|sem|rw|fence)\.c$/ &&
        $2 ~ /^lock\/(dlock|dlock_async|sem|rw|fence)\.c$/' <<<"$edges")"
# The products stay apart at the include level too (a header may carry
# inline code nm does not see).
expect_none "lock/ and loadgen/ include nothing of the other products" \
    "$(grep -H '^#include "' lock/*.[ch] loadgen/*.[ch] |
        awk -F'"' '{ split($1, p, "/"); if ($2 ~ /\// && $2 !~ "^" p[1] "/") print }')"
expect_none "server/ includes only the lock's public headers" \
    "$(grep -H '^#include "' server/*.[ch] |
        awk -F'"' '$2 ~ /\// && $2 !~ /^server\// && $2 !~ /^lock\/dlock(_async|_sem|_rw)?\.h$/')"
# The library's own files see its API through lock/internal.h, which holds
# only dlock_base.h (codes, limits, config, options, the request): a public
# header of calls is included by the files that define those calls alone, so
# that no include runs back up from the files beneath them.
expect_none "lock/'s internal files include no public header but dlock_base.h, through internal.h" \
    "$(grep -H '^#include "lock/dlock' lock/*.[ch] |
        awk -F'"' '$1 !~ /^lock\/(dlock|dlock_async|sem|rw|fence|handle)\.c:/ &&
            !($1 == "lock/internal.h:#include " && $2 == "lock/dlock_base.h")')"
# One include style: a project header is named from the root ("server/log.h"),
# never by its bare name, so that a name says where the file lives. But for
# the lock's public headers among themselves: they include "dlock.h" or
# "dlock_base.h", their siblings, which works in the tree and from an
# installed include dir alike.
expect_none "every #include \"...\" names its header from the root" \
    "$(grep -H '^#include "' lock/*.[ch] server/*.[ch] loadgen/*.[ch] man/*.c bench/*.c \
        tests/*/*.[ch] |
        awk -F'"' '$1 ~ /^lock\/dlock(_base|_async|_sem|_rw)?\.h:/ &&
                ($2 == "dlock.h" || $2 == "dlock_base.h") { next }
            { if ((getline line < $2) < 0) print; else close($2) }')"

# The check itself: a circle planted in two objects of their own is found.
planted=$(mktemp -d)
trap 'rm -rf "$planted"' EXIT
mkdir -p "$planted/x"
printf 'void b_one(void);\nvoid a_one(void) { b_one(); }\n' >"$planted/x/a.c"
printf 'void a_one(void);\nvoid b_one(void) { a_one(); }\n' >"$planted/x/b.c"
for f in a b; do cc -c -o "$planted/x/$f.o" "$planted/x/$f.c"; done
found=$(graph "$planted" "$planted"/x/*.o | awk -f tests/sh/circles.awk)
report "a planted circle is found" "$([[ $found == *"x/a.c -> x/b.c (b_one)"* ]] && echo 0 || echo 1)" \
    "found: ${found:-nothing}"
