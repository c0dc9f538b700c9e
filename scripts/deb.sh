#!/usr/bin/env bash
# deb.sh - make deb: the Debian packages (stockd, libdlock3, libdlock-dev)
# built by dpkg-buildpackage from a copy of the tracked files in
# build/deb/src (it writes its results beside the tree it builds: build/deb/),
# then lintian on them (any error or warning fails) and systemd-analyze's
# exposure of both units (above 2.0 fails). Installs the packaging tools and
# the Build-Depends first (scripts/deps.sh deb); the build itself needs no
# network.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh deb

out=build/deb
rm -rf "$out"
mkdir -p "$out/src"
# What git tracks, as the working tree has it: a clean clone and a checkout
# with edits build alike, and nothing built or ignored comes along.
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$out/src"

(cd "$out/src" && dpkg-buildpackage -us -uc -b -Jauto)

changes=$(ls "$out"/*.changes)
echo "deb: lintian $changes"
lintian --fail-on error,warning --display-info "$changes"

# The units as systemd judges them (a template is judged as an instance).
for unit in debian/stockd.service debian/stockd@.service; do
    systemd-analyze security --offline=yes --threshold=20 "$unit" | tail -n 1
done

echo "deb: built:"
ls -1 "$out"/*.deb
