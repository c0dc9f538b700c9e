#!/bin/sh
# deps.sh - installs the Debian packages that building, testing and the demo
# need (plus clang with "fuzz", valgrind with "valgrind", the benchmark tools
# with "bench"); does nothing when all are there. Three purposes build nothing
# here and need only their own: "docker" (make docker-demo: the engine, Debian's
# docker-compose, debootstrap for a base image), "fresh" (make test-fresh) and
# "deb" (make deb: the packaging tools and debian/control's Build-Depends).
set -eu

need=""
# Adds a package once, however many of its files are missing.
add() {
    case " $need " in
    *" $1 "*) ;;
    *) need="$need $1" ;;
    esac
}
want_cmd() { command -v "$1" >/dev/null 2>&1 || add "$2"; }
want_pc() { pkg-config --exists "$1" 2>/dev/null || add "$2"; }
# For a -dev package without a pkg-config file: one file it installs.
want_file() { [ -e "$1" ] || add "$2"; }
# The PostgreSQL server, looked for where tests/support/pg.c looks: Debian keeps
# initdb and postgres off PATH.
want_pg_server() {
    for f in /usr/lib/postgresql/*/bin/initdb; do
        [ -x "$f" ] && return 0
    done
    add postgresql-15
}

# What building, testing and the demo need.
want_base() {
    want_cmd cc gcc
    want_cmd make make
    want_cmd pkg-config pkg-config
    want_pc hiredis libhiredis-dev
    want_pc libmicrohttpd libmicrohttpd-dev
    want_pc gnutls libgnutls28-dev # HTTPS: stockd checks its key with it, loadgen's client
    want_pc sqlite3 libsqlite3-dev
    want_pc libpq libpq-dev
    want_pg_server
    want_pc jansson libjansson-dev
    want_pc libsystemd libsystemd-dev # stockd's sd_notify: readiness under systemd
    want_pc cmocka libcmocka-dev
    want_pc libcurl libcurl4-openssl-dev # the tests' own HTTP calls; loadgen does without
    want_file /usr/include/http_parser.h libhttp-parser-dev # loadgen's HTTP answers
    want_cmd redis-server redis-server
    want_cmd redis-sentinel redis-sentinel
    want_cmd redis-cli redis-tools
    want_cmd curl curl
    want_cmd openssl openssl # tests/it/test_tls.c makes its CA and certificates at run time
    # the front door: make demo-up FRONT=haproxy, test_front_door (in /usr/sbin,
    # off a user's PATH: scripts/front-door.sh looks there)
    want_file /usr/sbin/haproxy haproxy
    # promtool lints /metrics and the alert rules; prometheus scrapes replicas
    # in a test. One package ships both.
    want_cmd promtool prometheus
    want_cmd prometheus prometheus
    # The report test renders loadgen's page in Chromium and reads the PNG.
    want_cmd chromium chromium
    want_pc zlib zlib1g-dev
    # The man pages' test renders each as a reader would (man -l) and with
    # every groff warning on; a minbase root has neither.
    want_cmd man man-db
    want_cmd groff groff-base
    # tests/it/test_examples.c runs the Python services of examples/ with
    # Debian's interpreter and its redis module; stockd and loadgen need neither.
    want_file /usr/bin/python3 python3
    want_file /usr/lib/python3/dist-packages/redis/__init__.py python3-redis
    # tests/it/test_patroni.c: three Patroni-managed PostgreSQL nodes on one etcd;
    # Patroni's etcd3 client is built on python3-etcd (its first alternative).
    want_cmd patroni patroni; want_cmd etcd etcd-server
    want_file /usr/lib/python3/dist-packages/etcd/__init__.py python3-etcd
}

case "${1:-}" in
"") want_base ;;
fuzz) want_base; want_cmd clang clang ;;
valgrind) want_base; want_cmd valgrind valgrind ;;
bench)
    want_base
    want_cmd wrk wrk
    want_cmd redis-benchmark redis-tools
    want_cmd bc bc
    want_cmd sqlite3 sqlite3 # bench/item_read.sh writes millions of orders straight in
    want_cmd perf linux-perf # bench/share.sh: the replicas' CPU and context switches
    [ -x /usr/bin/time ] || add time
    ;;
docker)
    # dockerd, not docker: a docker client alone may come from elsewhere.
    want_cmd dockerd docker.io
    want_cmd docker-compose docker-compose
    want_cmd debootstrap debootstrap
    want_cmd curl curl # the demo asks Prometheus's API on its published port
    ;;
fresh) want_cmd debootstrap debootstrap ;;
deb)
    # What dpkg-buildpackage checks against debian/control's Build-Depends
    # (it refuses to start when one is missing, so a list that drifts from
    # the control file shows at once), and lintian after it.
    want_cmd dpkg-buildpackage dpkg-dev
    want_cmd dh debhelper
    want_cmd lintian lintian
    want_cmd systemd-analyze systemd # the units' exposure
    want_cmd pkg-config pkg-config
    want_pc hiredis libhiredis-dev
    want_pc libmicrohttpd libmicrohttpd-dev
    want_pc gnutls libgnutls28-dev
    want_pc sqlite3 libsqlite3-dev
    want_pc libpq libpq-dev
    want_pc jansson libjansson-dev
    want_pc libsystemd libsystemd-dev # stockd's sd_notify (Type=notify)
    want_file /usr/include/http_parser.h libhttp-parser-dev
    # the unit tests dh_auto_test runs (<!nocheck> in the control file)
    want_pc cmocka libcmocka-dev
    want_pc libcurl libcurl4-openssl-dev
    want_pc zlib zlib1g-dev
    ;;
*)
    echo "usage: scripts/deps.sh [fuzz|valgrind|bench|docker|fresh|deb]" >&2
    exit 2
    ;;
esac

if [ -z "$need" ]; then
    echo "deps: everything is installed"
    exit 0
fi
echo "deps: installing:$need"
if [ "$(id -u)" -eq 0 ]; then
    sudo=""
elif command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
else
    echo "deps: not root and no sudo; install as root: apt-get install$need" >&2
    exit 1
fi
# Installing the server must not create and start Debian's default cluster
# "main": tests and benchmarks start private ones, and a running main would
# hold the fresh root's /proc (make test-fresh) and memory. postgresql-common
# skips it when createcluster.conf says so; a file already there is kept
# (--force-confold, and UCF_FORCE_CONFFOLD for the ucf-managed one).
case " $need " in
*" postgresql-15 "*)
    cc=/etc/postgresql-common/createcluster.conf
    if [ ! -e "$cc" ]; then
        echo "deps: $cc: create_main_cluster = false (no default cluster)"
        $sudo mkdir -p /etc/postgresql-common
        printf '# Written by scripts/deps.sh: no default cluster at install.\n%s\n' \
            'create_main_cluster = false' | $sudo tee "$cc" >/dev/null
    fi
    ;;
esac
# Packages must start no daemon: prometheus's postinst starts one on :9090
# (invoke-rc.d, or deb-systemd-invoke under systemd), redis-server's one on
# :6379, and tests and demos start private ones on free ports; a daemon left
# in make test-fresh's root would hold it. Both ask policy-rc.d first, and
# 101 means "not allowed". A policy already there (Docker's images, the
# fresh root) is kept; ours is removed after apt, also when apt fails. Under
# systemd the units stay enabled: they start at the next boot.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    echo "deps: $policy: no service starts while apt-get runs (removed after)"
    printf '#!/bin/sh\n# Written by scripts/deps.sh while apt-get runs.\nexit 101\n' |
        $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
    trap '$sudo rm -f "$policy"' EXIT
    trap 'exit 130' INT TERM
fi
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
# shellcheck disable=SC2086 # word splitting of the package list is intended
$sudo env DEBIAN_FRONTEND=noninteractive UCF_FORCE_CONFFOLD=1 apt-get install -y -q \
    --no-install-recommends -o Dpkg::Options::=--force-confold $need
