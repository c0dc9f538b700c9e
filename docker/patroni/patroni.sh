#!/bin/sh
# patroni.sh - entrypoint and health check of the demo's Patroni image:
#   patroni.sh NAME       a Patroni node called NAME (its service name, which the
#                         others and stockd resolve): writes its config, then
#                         runs Patroni, which bootstraps the cluster "stock" or
#                         joins it as a replica (pg_basebackup)
#   patroni.sh etcd       the one etcd of the demo (v2 API, what Debian's
#                         Patroni speaks); its data in the container
#   patroni.sh --health   a node: its REST API says PostgreSQL runs (GET
#                         /health); etcd: GET /health answers
#   patroni.sh --bootstrap URL   (Patroni's post_bootstrap, on the first
#                         leader only) role and database "stock"
# PATRONI_PASSWORD_FILE (default /run/secrets/patroni-password): the
# superuser's and the replication role's password; POSTGRES_PASSWORD_FILE
# (default /run/secrets/postgres-password): role stock's, what the replicas
# read. Each on its first line, without quotes or backslashes. ETCD_HOST
# (default etcd:2379). Passwords go to files of mode 600, never a command line.
# The timings (DCS ttl 10 s, loop_wait 2 s, retry_timeout 4 s: loop_wait +
# 2 x retry_timeout <= ttl, as Patroni requires) make a killed leader's key
# expire within 10 s, when the synchronous standby takes over.
set -eu
home=/var/lib/postgresql
data=$home/data
bin=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)

secret() {
    value=
    IFS= read -r value <"$1" || [ -n "$value" ]
    case $value in
    "" | *[\'\"\\]*)
        echo "patroni.sh: $1 must hold a password without quotes or backslashes" >&2
        exit 1
        ;;
    esac
    printf '%s' "$value"
}

case ${1:-} in
--health)
    if [ -f "$home/etcd.role" ]; then
        exec curl -fsS -o /dev/null --max-time 2 http://127.0.0.1:2379/health
    fi
    exec curl -fsS -o /dev/null --max-time 2 http://127.0.0.1:8008/health
    ;;
--bootstrap)
    # Patroni passes the superuser's connection URL. The statements on stdin:
    # the password on no command line.
    password=$(secret "${POSTGRES_PASSWORD_FILE:-/run/secrets/postgres-password}")
    psql -X -q -v ON_ERROR_STOP=1 "$2" <<SQL
CREATE ROLE stock LOGIN PASSWORD '$password';
CREATE DATABASE stock OWNER stock;
SQL
    exit
    ;;
etcd)
    touch "$home/etcd.role"
    exec etcd --name etcd --data-dir "$home/etcd" --enable-v2=true \
        --listen-client-urls http://0.0.0.0:2379 --advertise-client-urls http://etcd:2379 \
        --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
        --initial-cluster etcd=http://127.0.0.1:2380
    ;;
"" | -*)
    echo "usage: patroni.sh NAME | etcd | --health" >&2
    exit 2
    ;;
esac

name=$1
admin=$(secret "${PATRONI_PASSWORD_FILE:-/run/secrets/patroni-password}")
umask 077
# Replicas authenticate to the leader as "replicator", stockd as "stock", both
# with scram-sha-256 from any address (the compose network's is not known in
# advance); the superuser too (pg_rewind, when an old leader rejoins).
cat >"$home/patroni.yml" <<YML
scope: stock
name: $name
restapi:
  listen: 0.0.0.0:8008
  connect_address: $name:8008
etcd:
  host: ${ETCD_HOST:-etcd:2379}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 2
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_log_hints: "on"
        max_connections: 200
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
    - auth-local: peer
    - auth-host: scram-sha-256
  pg_hba:
    - local all postgres peer
    - host all postgres all scram-sha-256
    - host replication replicator all scram-sha-256
    - host stock stock all scram-sha-256
  post_bootstrap: /usr/local/bin/patroni.sh --bootstrap
postgresql:
  listen: 0.0.0.0:5432
  connect_address: $name:5432
  data_dir: $data
  bin_dir: $bin
  pgpass: $home/.pgpass.patroni
  authentication:
    superuser:
      username: postgres
      password: '$admin'
    replication:
      username: replicator
      password: '$admin'
    rewind:
      username: postgres
      password: '$admin'
  parameters:
    unix_socket_directories: /var/run/postgresql
YML
unset admin
exec patroni "$home/patroni.yml"
