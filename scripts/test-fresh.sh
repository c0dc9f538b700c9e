#!/usr/bin/env bash
# test-fresh.sh - make test-fresh: the README's quick start on a machine that
# has nothing else. In a copy of a cached bookworm minbase root (plus only git,
# make, gcc, libc6-dev, ca-certificates and sudo), an ordinary user with sudo
# runs the README's quick-start commands (make demo, make test) in a clone of
# the committed tree, so a missing install step in make deps fails here.
# Mounts are undone and the copy is removed on every exit, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/debian-root.sh

if [ "$(id -u)" -ne 0 ]; then
    echo "test-fresh: needs root (debootstrap, mounts, chroot): sudo make test-fresh" >&2
    exit 1
fi
# The commands a new user is told to run, read where they read them.
mapfile -t commands < <(awk '/^## Quick start/ { q = 1 } q && /^```sh$/ { on = 1; next }
    on && /^```/ { exit } on && NF && $1 !~ /^#/' README.md)
[ "${#commands[@]}" -gt 0 ] || { echo "test-fresh: no quick start in README.md" >&2; exit 1; }
scripts/deps.sh fresh
tar=$(debian_root_tar git,make,gcc,libc6-dev,ca-certificates,sudo)

work=$(mktemp -d "${TMPDIR:-/var/tmp}/stocklock-fresh.XXXXXX")
root=$work/root

# Processes whose root is the copy (left by an interrupted test), by PID.
chroot_pids() {
    local p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"
    done
    return 0
}

cleanup() {
    local pids
    mapfile -t pids < <(chroot_pids)
    if [ "${#pids[@]}" -gt 0 ]; then
        echo "test-fresh: stopping what still runs in the root: ${pids[*]}" >&2
        kill -KILL "${pids[@]}" 2>/dev/null || true
    fi
    umount_under "$work" # before rm: /dev is bound in there
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir "$root"
tar -C "$root" -xzf "$tar"
# What an installed machine has and a debootstrap root lacks: name service
# files (apt must resolve deb.debian.org; sudo looks up the host name).
cp /etc/resolv.conf "$root/etc/resolv.conf"
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
    "$(uname -n)" >"$root/etc/hosts"
chroot "$root" useradd --create-home --shell /bin/bash dev
echo 'dev ALL=(ALL:ALL) NOPASSWD: ALL' >"$root/etc/sudoers.d/dev"
chmod 440 "$root/etc/sudoers.d/dev"
git clone --quiet --no-hardlinks . "$root/home/dev/stocklock"
chroot "$root" chown -R dev:dev /home/dev/stocklock
echo "test-fresh: $(git rev-parse --short HEAD) in a bookworm minbase root at $root"

mount -t proc proc "$root/proc"
mount -t sysfs -o ro sysfs "$root/sys"
mount --bind /dev "$root/dev"
mount --make-rslave "$root/dev" # mounts below it must not reach the host's /dev
mount --bind /dev/pts "$root/dev/pts"
mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"

for cmd in "${commands[@]}"; do
    echo "=== test-fresh: $cmd"
    start=$SECONDS
    if ! chroot "$root" runuser -l dev -c "cd stocklock && $cmd"; then
        echo "test-fresh: '$cmd' FAILED in a fresh bookworm root" >&2
        exit 1
    fi
    echo "=== test-fresh: $cmd passed in $((SECONDS - start)) s"
done
mapfile -t left < <(chroot_pids)
if [ "${#left[@]}" -gt 0 ]; then
    echo "test-fresh: FAILED: processes left running:" >&2
    ps -o pid,args -p "$(IFS=,; echo "${left[*]}")" >&2 || true
    exit 1
fi
echo "test-fresh: PASS (${commands[*]})"
