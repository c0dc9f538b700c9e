#!/bin/sh
# front-door.sh - runs haproxy as the front door (docker/haproxy/haproxy.cfg):
# makes, if DIR lacks them, a CA of its own (DIR/ca.pem, whose key stays in
# DIR, 0600) and the front door's certificate from it for the names in
# FRONT_NAMES (default localhost,127.0.0.1), then replaces itself by haproxy in
# the foreground. Buyers trust DIR/ca.pem (curl --cacert, loadgen --cacert).
#   scripts/front-door.sh DIR [CONFIG]
# The environment the config reads (FRONT_BIND, FRONT_S1..3, FRONT_CONN_MAX,
# FRONT_RATE_MAX) passes through; FRONT_CERT is set here to DIR/front.pem.
set -eu
dir=${1:?usage: front-door.sh DIR [CONFIG]}
config=${2:-$(dirname "$0")/../docker/haproxy/haproxy.cfg}
names=${FRONT_NAMES:-localhost,127.0.0.1}

mkdir -p "$dir"
umask 077
if [ ! -s "$dir/ca.pem" ] || [ ! -s "$dir/ca.key" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 825 -subj "/CN=stock front door CA" \
        2>/dev/null
    rm -f "$dir/front.pem"
fi
if [ ! -s "$dir/front.pem" ]; then
    san=""
    for name in $(echo "$names" | tr ',' ' '); do
        case $name in
        *[!0-9.]*) san="$san${san:+,}DNS:$name" ;;
        *) san="$san${san:+,}IP:$name" ;;
        esac
    done
    first=$(echo "$names" | cut -d, -f1)
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$dir/front.key" -out "$dir/front.csr" -subj "/CN=$first" 2>/dev/null
    printf 'subjectAltName=%s\n' "$san" >"$dir/san.ext"
    openssl x509 -req -in "$dir/front.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -out "$dir/front.crt" -days 825 -extfile "$dir/san.ext" 2>/dev/null
    cat "$dir/front.crt" "$dir/front.key" >"$dir/front.pem"
    rm -f "$dir/front.csr" "$dir/front.crt" "$dir/front.key" "$dir/san.ext"
fi
chmod 644 "$dir/ca.pem"

export FRONT_CERT="$dir/front.pem"
: "${FRONT_CONN_MAX:=256}" "${FRONT_RATE_MAX:=100000}"
export FRONT_CONN_MAX FRONT_RATE_MAX
exec haproxy -W -db -f "$config"
