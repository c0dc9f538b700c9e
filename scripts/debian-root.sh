# debian-root.sh - sourced by test-fresh.sh and docker-demo.sh: a minimal
# Debian bookworm root made by debootstrap (variant minbase, plus the packages
# asked for), cached as a tarball keyed by what it contains, so that only the
# first run downloads it. Needs root and debootstrap (scripts/deps.sh fresh).
# STOCKLOCK_CACHE (default /var/cache/stocklock) holds the tarballs: outside
# any clone, so a clean CI clone reuses them; delete one to rebuild it.

STOCKLOCK_CACHE=${STOCKLOCK_CACHE:-/var/cache/stocklock}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_ROOT_RECIPE=2 # bump when the steps below change what a root holds

# umount_under DIR: undoes every mount below DIR, deepest first. A copy must
# never be removed while /dev or /proc is still bound into it.
umount_under() {
    local m
    awk -v d="${1%/}/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r |
        while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
}

# debian_root_tar [PKG,PKG...]: prints the path of the cached tarball of a
# bookworm minbase root with those packages, building it first if missing.
# Runs in a subshell so that its traps (clean up a half-built root, also on
# Ctrl-C) don't replace the caller's.
debian_root_tar() (
    set -euo pipefail
    local include=${1:-} arch key tar tmp
    arch=$(dpkg --print-architecture)
    key=$(echo "bookworm minbase $arch $include $DEBIAN_MIRROR $DEBIAN_ROOT_RECIPE" |
        sha256sum | cut -c 1-12)
    tar=$STOCKLOCK_CACHE/bookworm-minbase-$key.tar.gz
    if [ -f "$tar" ]; then
        echo "$tar"
        exit 0
    fi
    mkdir -p "$STOCKLOCK_CACHE"
    tmp=$(mktemp -d "$STOCKLOCK_CACHE/build.XXXXXX")
    # debootstrap mounts /proc and /sys in the root and leaves them on failure.
    trap 'umount_under "$tmp"; rm -rf --one-file-system "$tmp"' EXIT
    trap 'exit 130' INT TERM
    echo "debian-root: debootstrap bookworm minbase${include:+ + $include} (once; cached in $tar)" >&2
    debootstrap --variant=minbase ${include:+--include="$include"} bookworm "$tmp/root" \
        "$DEBIAN_MIRROR" >"$tmp/debootstrap.log" 2>&1 ||
        { tail -n 20 "$tmp/debootstrap.log" >&2; exit 1; }
    # Sources as in the official image (with updates and security fixes), and
    # nothing of this host: Docker and test-fresh supply resolv.conf and hostname.
    rm -f "$tmp/root/etc/apt/sources.list"
    cat >"$tmp/root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $DEBIAN_MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    : >"$tmp/root/etc/resolv.conf"
    echo localhost >"$tmp/root/etc/hostname"
    # No init runs in a chroot or a container, so packages (redis-server) must
    # not start services: in a chroot they would outlive it. As in Docker's image.
    printf '#!/bin/sh\nexit 101\n' >"$tmp/root/usr/sbin/policy-rc.d"
    chmod 755 "$tmp/root/usr/sbin/policy-rc.d"
    # No package lists, as in the official image: installing needs apt-get update.
    rm -f "$tmp/root/var/cache/apt/archives/"*.deb
    find "$tmp/root/var/lib/apt/lists" -maxdepth 1 -type f -delete
    tar -C "$tmp/root" --numeric-owner -czf "$tmp/root.tar.gz" .
    mv "$tmp/root.tar.gz" "$tar" # atomic: a reader never sees half a tarball
    echo "$tar"
)
