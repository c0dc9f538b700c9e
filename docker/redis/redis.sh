#!/bin/sh
# redis.sh - entrypoint and health check of the demo's Redis image (Debian's
# redis-server): the password comes from a secret file and never appears on a
# command line (ps) or in redis-server's environment.
#   redis.sh [redis-server flags]   start redis-server, requiring the password
#   redis.sh --health               PING with the password; 0 when it answers PONG
# REDIS_PASSWORD_FILE (default /run/secrets/redis-password): the password on
# its first line, without quotes or backslashes. REDIS_PORT (default 6379).
set -eu
file=${REDIS_PASSWORD_FILE:-/run/secrets/redis-password}
port=${REDIS_PORT:-6379}
password=
IFS= read -r password <"$file" || [ -n "$password" ]
case $password in
"" | *[\"\\]*)
    echo "redis.sh: $file must hold a password without quotes or backslashes" >&2
    exit 1
    ;;
esac

if [ "${1:-}" = --health ]; then
    # redis-cli exits 0 on NOAUTH too: only PONG means healthy.
    [ "$(REDISCLI_AUTH=$password redis-cli -p "$port" ping)" = PONG ]
    exit
fi
# The password as a config line on stdin ("-", which must come last), not as
# --requirepass; protected mode stays as the flags say (the image: on).
exec redis-server --port "$port" "$@" - <<CONF
requirepass "$password"
CONF
