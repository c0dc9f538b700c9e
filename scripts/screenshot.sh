#!/bin/sh
# screenshot.sh - renders a page (loadgen --html's report) in headless
# Chromium to a PNG exactly the window's size, the browser's log on stderr:
# its lines with ":CONSOLE" are console messages, and a report page should
# cause none. tests/it/test_report.c runs it on reports of its own; the README's
# picture (docs/loadgen-report.png) was made with it.
#   scripts/screenshot.sh PAGE.html OUT.png [WIDTH HEIGHT]    (default 1200 x 1400)
# Chromium is bounded by SCREENSHOT_TIMEOUT seconds (default 60), then killed.
set -eu
if [ $# -lt 2 ]; then
    echo "usage: scripts/screenshot.sh PAGE.html OUT.png [WIDTH HEIGHT]" >&2
    exit 2
fi
page=$(realpath "$1") # a file:// URL needs the absolute path
out=$(realpath -m "$2")
# A profile (and home) of its own, removed after: nothing is left in ~.
profile=$(mktemp -d "${TMPDIR:-/tmp}/screenshot.XXXXXX")
trap 'rm -rf "$profile"' EXIT
# --no-sandbox: the sandbox refuses to start as root (CI) and cannot start in
# a chroot (make test-fresh: no user namespaces there); the page is a local
# file without a script.
HOME=$profile XDG_CONFIG_HOME=$profile XDG_CACHE_HOME=$profile \
    timeout --kill-after=5 "${SCREENSHOT_TIMEOUT:-60}" chromium --headless --no-sandbox --disable-gpu \
    --hide-scrollbars --force-device-scale-factor=1 --user-data-dir="$profile" \
    --window-size="${3:-1200},${4:-1400}" --screenshot="$out" --enable-logging=stderr --v=0 \
    "file://$page"
