#!/bin/sh
# postgres.sh - entrypoint and health check of the demo's PostgreSQL image
# (Debian's postgresql-15): a cluster made on first start, the role "stock"
# given the secret file's password on every start, then the server. The
# password never appears on a command line (ps) or in the server's environment.
#   postgres.sh [postgres flags]   initdb when PGDATA is empty, role and database stock, postgres
#   postgres.sh --health           pg_isready over TCP; 0 when the server accepts connections
# POSTGRES_PASSWORD_FILE (default /run/secrets/postgres-password): the
# password on its first line, without quotes or backslashes. PGDATA (default
# /var/lib/postgresql/data), PGPORT (default 5432). Runs as the postgres user.
set -eu
file=${POSTGRES_PASSWORD_FILE:-/run/secrets/postgres-password}
data=${PGDATA:-/var/lib/postgresql/data}
port=${PGPORT:-5432}
# The highest installed version's binaries: Debian keeps them off PATH.
bin=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)

# As stock, which the server asks for its password and pg_isready then hangs
# up: quietly. As any other user it would log "no pg_hba.conf entry" each time.
if [ "${1:-}" = --health ]; then
    exec "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U stock -d stock
fi

password=
IFS= read -r password <"$file" || [ -n "$password" ]
case $password in
"" | *[\'\"\\]*)
    echo "postgres.sh: $file must hold a password without quotes or backslashes" >&2
    exit 1
    ;;
esac

# First start: the superuser postgres reaches the server only on its Unix
# socket as the OS user postgres (peer); the replicas, as role stock with the
# password (scram-sha-256), from any address: the compose network's is not
# known in advance.
if [ ! -s "$data/PG_VERSION" ]; then
    echo "postgres.sh: no cluster in $data; initdb"
    "$bin/initdb" -D "$data" -U postgres -E UTF8 --locale=C.UTF-8 \
        --auth-local=peer --auth-host=scram-sha-256 >/dev/null
    cat >"$data/pg_hba.conf" <<HBA
# Written by postgres.sh on first start.
local all    postgres peer
host  stock  stock    all scram-sha-256
HBA
    bootstrap="CREATE ROLE stock LOGIN
CREATE DATABASE stock OWNER stock"
fi

# In single-user mode, before the server listens: once it is healthy, the role
# and database exist. One statement a line; a failed statement is not logged
# with its text (it may hold the password), and any error stops the start.
out=$("$bin/postgres" --single -D "$data" -c log_min_error_statement=panic postgres 2>&1 <<SQL
${bootstrap:-}
ALTER ROLE stock PASSWORD '$password'
SQL
) || { echo "$out" >&2; exit 1; }
case $out in
*ERROR:* | *FATAL:*)
    echo "$out" >&2
    exit 1
    ;;
esac
unset password out
echo "postgres.sh: role stock has the password of $file"
exec "$bin/postgres" -D "$data" -p "$port" "$@"
