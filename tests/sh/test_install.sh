#!/usr/bin/env bash
# test_install.sh - libdlock as somebody else's program gets it: make install
# into a private prefix (its own build directory, whatever make test built),
# stockd in sbin and loadgen in bin,
# the man pages where man finds them, then the example programs of
# lock/README.md and README.md compiled against the installed files only
# (pkg-config; shared, then static) and run against a private redis-server,
# which is stopped by its PID. Also: the soname, the exported
# symbols (exactly what the public headers declare), headers that need no
# hiredis and compile alone, as C99 and as C++, and make uninstall. Prints cmocka-style lines for
# tests/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."

REPORT_SUITE=install
. tests/sh/report.sh

tmp=$(mktemp -d /tmp/dlock-install.XXXXXX)
redis_pid=""
cleanup() {
    if [ -n "$redis_pid" ]; then
        kill "$redis_pid" 2>/dev/null
        wait "$redis_pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

prefix=$tmp/prefix
lib=$prefix/lib
export PKG_CONFIG_PATH=$lib/pkgconfig

# 1. The files, where the README says.
# Its own build, plain: not the sanitizer flags of a make asan that runs this
# test (they come through MAKEFLAGS).
out=$(env -u MAKEFLAGS -u MFLAGS make --no-print-directory -s install PREFIX="$prefix" \
    BUILD="$tmp/build" SANFLAGS= 2>&1)
rc=$?
# The version dlock.h gives; the soname carries its major.
version=$(sed -n 's/^#define DLOCK_VERSION "\(.*\)"/\1/p' lock/dlock.h)
major=${version%%.*}
headers=(dlock.h dlock_base.h dlock_async.h dlock_sem.h dlock_rw.h) # libdlock's public headers
for f in sbin/stockd bin/loadgen lib/libdlock.a lib/libdlock.so lib/libdlock.so.$major \
    lib/libdlock.so.$version "${headers[@]/#/include/}" lib/pkgconfig/dlock.pc \
    share/man/man1/loadgen.1 share/man/man3/libdlock.3 share/man/man3/dlock_acquire.3 share/man/man8/stockd.8 share/loadgen/profiles/stockd.json; do
    [ -e "$prefix/$f" ] || { rc=1; out+=$'\n'"missing: $f"; }
done
soname=$(readelf -d "$lib/libdlock.so.$version" 2>&1 | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "libdlock.so.$major" ] || { rc=1; out+=$'\n'"soname: '$soname'"; }
[ "$(pkg-config --modversion dlock 2>&1)" = "$version" ] || { rc=1; out+=$'\n'"dlock.pc version"; }
report "make install lays out stockd, loadgen, the library, headers, dlock.pc, man pages, profiles" \
    "$rc" "$out"

# The pages as man finds them there: by program, by library, by function
# (a page of one .so line that opens libdlock's).
out=$(for name in "8 stockd" "1 loadgen" "3 libdlock" "3 dlock_acquire"; do
    set -- $name
    title=$(LC_ALL=C.UTF-8 MANPATH=$prefix/share/man MANPAGER=cat MAN_DISABLE_SECCOMP=1 \
        man "$1" "$2" 2>&1 | head -n 1)
    want=STOCKD\(8\)
    case $2 in loadgen) want=LOADGEN\(1\) ;; lib* | dlock*) want=LIBDLOCK\(3\) ;; esac
    [[ $title == "$want"* ]] || echo "man $1 $2: '$title', expected $want"
done)
report "man finds stockd(8), loadgen(1), libdlock(3) and dlock_acquire(3) there" \
    "$([ -z "$out" ] && echo 0 || echo 1)" "$out"

# 2. Exported: the functions and tables the public headers declare, nothing else.
includes=$(printf '#include <%s>\n' "${headers[@]}")
declared=$(cc -E -P -I"$prefix/include" -x c - <<<"$includes" |
    grep -oE '\bdlock_[a-z0-9_]+[[:space:]]*[(\[]' | grep -oE 'dlock_[a-z0-9_]+' | sort -u)
exported=$(nm -D --defined-only "$lib/libdlock.so" | awk '{ print $3 }' | sort -u)
diff_out=$(diff <(echo "$declared") <(echo "$exported"))
[ -n "$declared" ] && [ -z "$diff_out" ]
report "libdlock.so exports exactly what the public headers declare" "$?" \
    "declared (<) vs exported (>):"$'\n'"$diff_out"

# 3. Each header alone: no hiredis on the include path, strict C, and C++.
rc=0 out=""
for h in "${headers[@]}"; do
    printf '#include <%s>\nint main(void) { return dlock_strerror(DLOCK_OK) == 0; }\n' "$h" \
        >"$tmp/alone.c"
    out+=$(cc -std=c99 -Wall -Wextra -Werror -pedantic -I"$prefix/include" -c \
        -o "$tmp/alone.o" "$tmp/alone.c" 2>&1) || rc=1
    ! grep -n hiredis "$prefix/include/$h" || rc=1
    if command -v g++ >/dev/null; then
        out+=$(g++ -Wall -Werror -I"$prefix/include" -x c++ -o "$tmp/alone-cxx" "$tmp/alone.c" \
            -L"$lib" -ldlock 2>&1) || rc=1
    fi
done
report "each public header compiles alone, as C99 and as C++, without hiredis" "$rc" "$out"

# A private redis-server on a free loopback port: sets port and redis_pid in
# this shell (not in a $(...) subshell, whose redis_pid cleanup would never see).
start_redis() {
    for _ in $(seq 1 50); do
        port=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
        redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" \
            >"$tmp/redis.log" 2>&1 &
        redis_pid=$!
        for _ in $(seq 1 50); do
            kill -0 "$redis_pid" 2>/dev/null || break # the port was taken meanwhile: not ours
            [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && return 0
            sleep 0.1
        done
        kill "$redis_pid" 2>/dev/null
        wait "$redis_pid" 2>/dev/null
        redis_pid=""
    done
    return 1
}

# The example runs: two writes, the second with a larger fence.
check_run() {
    local bin=$1 out fences
    out=$(LD_LIBRARY_PATH=$lib timeout 30 "$bin" "127.0.0.1:$port" 2>&1) || {
        echo "$out"
        return 1
    }
    fences=$(sed -n 's/^\(first\|second\) write under example:record:{42}, fence //p' <<<"$out")
    if [ "$(wc -l <<<"$fences")" -ne 2 ] ||
        [ "$(tail -n 1 <<<"$fences")" -le "$(head -n 1 <<<"$fences")" ]; then
        echo "$out"
        return 1
    fi
}

# 4. The pages' programs, exactly as written there.
# example PAGE NAME: the C block after PAGE's "<!-- example: NAME" line.
example() { sed -n "/^<!-- example: $2/,/^\`\`\`\$/p" "$1" | sed '1,2d;$d'; }
example lock/README.md dlock-example.c >"$tmp/dlock-example.c"
example README.md sell.c >"$tmp/sell.c"
if ! start_redis; then
    report "the README example builds with pkg-config and runs" 1 "no redis-server started"
    exit 0
fi
out=$(cc -std=c11 -Wall -Wextra -Werror -o "$tmp/dlock-example" "$tmp/dlock-example.c" \
    $(pkg-config --cflags --libs dlock) 2>&1) &&
    LD_LIBRARY_PATH=$lib ldd "$tmp/dlock-example" | grep -q "libdlock.so.$major => $lib/libdlock.so.$major" &&
    out=$(check_run "$tmp/dlock-example")
report "the README example builds with pkg-config against libdlock.so and runs" "$?" "$out"

out=$(cc -std=c11 -Wall -Wextra -Werror -o "$tmp/dlock-example-static" \
    "$tmp/dlock-example.c" $(pkg-config --cflags dlock) "$lib/libdlock.a" \
    $(pkg-config --libs hiredis) -pthread 2>&1) &&
    ! ldd "$tmp/dlock-example-static" | grep -q libdlock &&
    out=$(check_run "$tmp/dlock-example-static")
report "the README example links libdlock.a statically and runs" "$?" "$out"

out=$(cc -std=c11 -Wall -Wextra -Werror -o "$tmp/sell" "$tmp/sell.c" \
    $(pkg-config --cflags --libs dlock) 2>&1) &&
    out=$(LD_LIBRARY_PATH=$lib timeout 30 "$tmp/sell" "127.0.0.1:$port" 2>&1) &&
    grep -qE '^sold item 1 under fence [0-9]+$' <<<"$out"
report "the top README's example builds with pkg-config and sells under the lock" "$?" "$out"

# 5. make uninstall takes back every file.
out=$(env -u MAKEFLAGS -u MFLAGS make --no-print-directory -s uninstall PREFIX="$prefix" 2>&1)
left=$(find "$prefix" -type f -o -type l)
[ -z "$left" ]
report "make uninstall removes what make install put" "$?" "$out$left"
