# rev_lock.sh - sourced by the before/after benchmarks: builds another
# revision's lock/ into DIR/libdlock.a (its public headers in DIR/lock/).
# Sets rev_flags to the flags it built with; CC and PKG_CONFIG as in make.
CC=${CC:-cc}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
rev_lock() { # rev_lock REV DIR
    local rev=$1 dir=$2 c
    rev_flags="-std=c11 -O2 -g -pthread -D_GNU_SOURCE $($PKG_CONFIG --cflags hiredis)"
    mkdir -p "$dir"
    git archive "$rev" lock | tar -x -C "$dir"
    for c in "$dir"/lock/*.c; do
        $CC $rev_flags -I"$dir" -c -o "${c%.c}.o" "$c"
    done
    ar rcs "$dir/libdlock.a" "$dir"/lock/*.o
}
