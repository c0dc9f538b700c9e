#!/bin/sh
# redis.sh - entrypoint and health check of the demo's Redis image (Debian's
# redis-server and redis-sentinel): the password comes from a secret file and
# never appears on a command line (ps) or in the server's environment.
#   redis.sh [redis-server flags]   start redis-server, requiring the password
#                                   (and giving it to the primary as a replica)
#   redis.sh sentinel [directives]  start redis-sentinel, requiring the password
#                                   (and giving it to the monitored servers and
#                                   the other Sentinels); directives as redis-
#                                   server takes them: --sentinel monitor NAME ...
#   redis.sh --health               a server: PING answers PONG; a Sentinel:
#                                   SENTINEL CKQUORUM of its master answers OK
# REDIS_PASSWORD_FILE (default /run/secrets/redis-password): the password on
# its first line, without quotes or backslashes. SENTINEL_CONF (default
# ./sentinel.conf): a Sentinel's config, written on its first start only
# (Sentinel rewrites it as it learns, a failover's new primary, and a restart
# must keep that); where it is, redis.sh is a Sentinel's. REDIS_PORT (default
# 6379, a Sentinel's 26379).
set -eu
file=${REDIS_PASSWORD_FILE:-/run/secrets/redis-password}
conf=${SENTINEL_CONF:-./sentinel.conf}
password=
IFS= read -r password <"$file" || [ -n "$password" ]
case $password in
"" | *[\"\\]*)
    echo "redis.sh: $file must hold a password without quotes or backslashes" >&2
    exit 1
    ;;
esac
port=${REDIS_PORT:-6379}
if [ "${1:-}" = sentinel ] || [ -s "$conf" ]; then port=${REDIS_PORT:-26379}; fi
cli() { REDISCLI_AUTH=$password redis-cli -p "$port" "$@"; }
monitored() { sed -n 's/^sentinel monitor \([^ ]*\) .*/\1/p'; }

if [ "${1:-}" = --health ]; then
    # redis-cli exits 0 on NOAUTH too: only PONG (or OK) means healthy. A
    # Sentinel is healthy once enough Sentinels know each other to fail over.
    if [ -s "$conf" ]; then
        case $(cli sentinel ckquorum "$(monitored <"$conf")") in OK*) exit 0 ;; *) exit 1 ;; esac
    fi
    [ "$(cli ping)" = PONG ]
    exit
fi

if [ "${1:-}" = sentinel ]; then
    shift
    if [ ! -s "$conf" ]; then
        # Each "--word" starts a config line, as on redis-server's command line.
        lines=$(for arg in "$@"; do
            case $arg in --*) printf '\n%s' "${arg#--}" ;; *) printf ' %s' "$arg" ;; esac
        done)
        master=$(printf '%s\n' "$lines" | monitored)
        if [ -z "$master" ]; then
            echo "redis.sh: sentinel needs --sentinel monitor NAME HOST PORT QUORUM" >&2
            exit 1
        fi
        (umask 077 && cat >"$conf" <<CONF
port $port
requirepass "$password"
sentinel sentinel-pass "$password"
$lines
sentinel auth-pass $master "$password"
CONF
        )
    fi
    exec redis-sentinel "$conf"
fi

# The password as config lines on stdin ("-", which must come last), not as
# --requirepass; masterauth too, for when Sentinel makes this a replica.
# Protected mode stays as the flags say (the image: on).
exec redis-server --port "$port" "$@" - <<CONF
requirepass "$password"
masterauth "$password"
CONF
