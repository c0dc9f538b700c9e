#!/bin/sh
# front-door.sh - runs haproxy as the front door (docker/haproxy/haproxy.cfg):
# makes, if DIR lacks them, a CA of its own (DIR/ca.pem, whose key stays in
# DIR, 0600) and the front door's certificate from it for the names in
# FRONT_NAMES (default localhost,127.0.0.1), then replaces itself by haproxy in
# the foreground. Buyers trust DIR/ca.pem (curl --cacert, loadgen --cacert).
#   scripts/front-door.sh DIR [CONFIG]
# The environment the config reads (FRONT_BIND, FRONT_S1..3, FRONT_CONN_MAX,
# FRONT_CONN_HARD, FRONT_RATE_MAX, FRONT_SERVER_MAXCONN, FRONT_SOURCE) passes
# through, the unset ones given their defaults here; FRONT_CERT is set here to
# DIR/front.pem. The certificate is made once: to change FRONT_NAMES, delete
# DIR/front.pem. openssl's messages go to DIR/openssl.log, shown if it fails.
set -eu
# Debian installs haproxy in /usr/sbin, which is not on a user's PATH.
PATH=$PATH:/usr/sbin
dir=${1:?usage: front-door.sh DIR [CONFIG]}
config=${2:-$(dirname "$0")/../docker/haproxy/haproxy.cfg}
names=${FRONT_NAMES:-localhost,127.0.0.1}

mkdir -p "$dir"
umask 077
# openssl, its messages kept and shown when it fails (set -e alone would exit
# without a word)
ssl() {
    openssl "$@" 2>"$dir/openssl.log" || {
        echo "front-door.sh: openssl $1 failed:" >&2
        cat "$dir/openssl.log" >&2
        exit 1
    }
}
if [ ! -s "$dir/ca.pem" ] || [ ! -s "$dir/ca.key" ]; then
    ssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 825 -subj "/CN=stock front door CA"
    rm -f "$dir/front.pem"
fi
if [ ! -s "$dir/front.pem" ]; then
    san=""
    for name in $(echo "$names" | tr ',' ' '); do
        case $name in
        *:*) san="$san${san:+,}IP:$name" ;; # IPv6
        *[!0-9.]*) san="$san${san:+,}DNS:$name" ;;
        *) san="$san${san:+,}IP:$name" ;;
        esac
    done
    first=$(echo "$names" | cut -d, -f1)
    ssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$dir/front.key" -out "$dir/front.csr" -subj "/CN=$first"
    printf 'subjectAltName=%s\n' "$san" >"$dir/san.ext"
    ssl x509 -req -in "$dir/front.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -out "$dir/front.crt" -days 825 -extfile "$dir/san.ext"
    cat "$dir/front.crt" "$dir/front.key" >"$dir/front.pem"
    rm -f "$dir/front.csr" "$dir/front.crt" "$dir/front.key" "$dir/san.ext"
fi
chmod 644 "$dir/ca.pem"

export FRONT_CERT="$dir/front.pem"
: "${FRONT_CONN_MAX:=256}" "${FRONT_RATE_MAX:=100000}"
# the hard cap leaves room for a small overshoot that is answered, not reset
: "${FRONT_CONN_HARD:=$((2 * FRONT_CONN_MAX))}"
# below a replica's --max-connections, even one that a 1024 open-files limit
# sized (760): docs/operations.md, "The front door"
: "${FRONT_SERVER_MAXCONN:=512}"
# 0.0.0.0: the system picks the address, as with no source line at all
: "${FRONT_SOURCE:=0.0.0.0}"
export FRONT_CONN_MAX FRONT_CONN_HARD FRONT_RATE_MAX FRONT_SERVER_MAXCONN FRONT_SOURCE
exec haproxy -W -db -f "$config"
