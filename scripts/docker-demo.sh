#!/usr/bin/env bash
# docker-demo.sh - make docker-demo: the compose demo for real. Builds the
# images, starts a Redis primary, two replicas and three Sentinels, etcd and
# three PostgreSQL nodes under Patroni, three stockd replicas (each asking the
# Sentinels for the primary, all writing to whichever Patroni node leads) and
# haproxy in front of them (HTTPS on 127.0.0.1:8443, its CA copied out to
# docker/secrets/front-ca.pem), waits for every health check, runs loadgen's
# hot and renew scenarios across the replicas, a buyer's sale through haproxy
# over HTTPS, the same while stockd-2 is stopped (docker stop: it answers
# /health 503 for its drain notice, haproxy takes it out of the pool, and no
# buyer may see an error), a flash sale of 3000 buyers through haproxy (the
# compose file's flash service), then hot while the Redis primary is killed
# (docker kill; the Sentinels must promote a replica, the time deductions
# answered 503 is printed, the old primary must rejoin as a replica), then hot
# while the PostgreSQL leader is killed (docker kill of the node Patroni's
# REST API names; the synchronous standby must take over, 503
# storage_unavailable answers expected and counted, how long orders stopped
# printed; the old leader must rejoin as a replica), then hot while one
# replica is killed; every verdict must PASS. Prometheus (127.0.0.1:9090)
# must scrape the three replicas and the three Patroni nodes, evaluate its
# recording rules on the replicas, and see the killed replica down and fire
# its alert. Containers, network and volume are removed on every exit,
# also on failure and Ctrl-C.
# Starts dockerd when no engine answers, and then stops that one by PID.
# Needs nothing but Debian's packages: a missing debian:bookworm-slim that
# can't be pulled is imported from a debootstrap root (scripts/debian-root.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/debian-root.sh
. scripts/docker-engine.sh

state=var/docker-demo # logs: the image builds, and dockerd when started here
ENGINE_WHO=docker-demo ENGINE_LOG=$state/dockerd.log
secrets=(docker/secrets/redis-password docker/secrets/postgres-password
    docker/secrets/patroni-password docker/secrets/operator-token)
targets=http://stockd-1:8080,http://stockd-2:8080,http://stockd-3:8080
project=stocklock # also COMPOSE_PROJECT_NAME in docker/.env, for commands by hand
status=0

mkdir -p "$state"
scripts/deps.sh docker
# Compose v2 when the engine has it; Debian bookworm ships only docker-compose 1.29.
if docker compose version >/dev/null 2>&1; then compose_cmd=(docker compose)
else compose_cmd=(docker-compose); fi
# -p as in docker/.env, so that the leftovers check below can't miss the stack.
compose() { "${compose_cmd[@]}" -p "$project" -f docker/docker-compose.yml "$@"; }

# Whatever of the project is left: containers (one-off runs too), network, volume.
leftovers() {
    local f=label=com.docker.compose.project=$project
    docker ps -aq --filter "$f"
    docker network ls -q --filter "$f"
    docker volume ls -q --filter "$f"
}

cleanup() {
    local f=label=com.docker.compose.project=$project
    if [ -n "$(leftovers 2>/dev/null)" ]; then
        echo "docker-demo: taking the stack down"
        compose down -v >/dev/null 2>&1 || true
        # A one-off loadgen interrupted mid-run can outlive down: by ID then.
        # shellcheck disable=SC2046 # one ID per word
        {
            docker rm -f $(docker ps -aq --filter "$f")
            docker network rm $(docker network ls -q --filter "$f")
            docker volume rm $(docker volume ls -q --filter "$f")
        } >/dev/null 2>&1 || true
    fi
    stop_dockerd
}

# debian:bookworm-slim, the base of every image: from Docker Hub when it
# answers (briefly), else a debootstrap root imported under that name.
base_image() {
    docker image inspect debian:bookworm-slim >/dev/null 2>&1 && return 0
    if timeout 30 docker pull -q debian:bookworm-slim >/dev/null 2>&1; then
        echo "docker-demo: pulled debian:bookworm-slim"
        return 0
    fi
    need_root "building a Debian root"
    echo "docker-demo: debian:bookworm-slim can't be pulled; importing a debootstrap root as it"
    docker import -c 'CMD ["bash"]' \
        -m "bookworm minbase made by debootstrap (scripts/debian-root.sh), not Docker Hub's image" \
        "$(debian_root_tar)" debian:bookworm-slim >/dev/null
}

# Generated once, never committed. The files are world-readable so the
# containers' users (stockd, redis, postgres) can read them where they are
# bind-mounted; their directory keeps the host's other users out.
make_secrets() {
    local secret
    mkdir -p docker/secrets
    chmod 700 docker/secrets
    for secret in "${secrets[@]}"; do
        if [ ! -s "$secret" ]; then
            od -An -tx1 -N24 /dev/urandom | tr -d ' \n' >"$secret"
            echo >>"$secret"
        fi
        chmod 644 "$secret"
    done
    # the replicas' tokens file: the operator token's sha256 only
    printf 'operator demo sha256:%s\n' \
        "$(tr -d '\n' <docker/secrets/operator-token | sha256sum | cut -d' ' -f1)" \
        >docker/secrets/api-tokens
    chmod 644 docker/secrets/api-tokens
    # haproxy's CA, made at its start: the buyers' loadgens read it here
    # (copied out of its volume once it is up); a placeholder until then
    [ -e docker/secrets/front-ca.pem ] || : >docker/secrets/front-ca.pem
    chmod 644 docker/secrets/front-ca.pem
}

# Prometheus, as the compose file publishes it on the host.
prometheus=http://127.0.0.1:9090

# prom_series EXPR: one line per series of an instant query, its labels but
# the name and its value: "instance=stockd-1:8080 job=stockd 1".
prom_series() {
    curl -s --max-time 5 -G "$prometheus/api/v1/query" --data-urlencode "query=$1" |
        grep -o '"metric":{[^}]*},"value":\[[^]]*\]' |
        sed -E -e 's/"metric":\{([^}]*)\},"value":\[[^,]*,"([^"]*)"\]/\1 \2/' \
            -e 's/"__name__":"[^"]*",?//' -e 's/"([^"]+)":"([^"]*)",?/\1=\2 /g' -e 's/  +/ /g'
}

# wait_prom WHAT N EXPR: waits (bounded) until the query has N series and
# prints them; fails saying WHAT when it never does.
wait_prom() {
    local out=""
    for _ in $(seq 120); do
        out=$(prom_series "$3") || true
        [ "$(grep -c . <<<"$out")" -ge "$2" ] && break
        sleep 1
    done
    echo "docker-demo: Prometheus: $1: ${out:-nothing}" | sed '2,$s/^/    /'
    [ "$(grep -c . <<<"$out")" -ge "$2" ] && return 0
    echo "docker-demo: FAILED: Prometheus: $1: $3 has no $2 series in 120 s" >&2
    return 1
}

# A replica's GET /health, through the curl of its image.
health_of() {
    docker exec "$(compose ps -q "$1")" curl -s --max-time 15 http://127.0.0.1:8080/health
}

# Waits (bounded) until a replica's /health says status, then prints it.
wait_health() {
    local body=""
    for _ in $(seq 60); do
        body=$(health_of "$1") || true
        case $body in *"\"status\":\"$2\""*) break ;; esac
        sleep 0.5
    done
    echo "docker-demo: $1 /health: $body"
    case $body in *"\"status\":\"$2\""*) return 0 ;; esac
    echo "docker-demo: FAILED: $1 /health does not say $2" >&2
    return 1
}

# Every replica's answers to /reduceStock so far, summed by outcome (their
# /metrics), one "outcome count" a line: loadgen's report counts 503
# storage_unavailable and storage_busy and 500 storage_error alike as other_5xx.
reduce_outcomes() {
    local svc
    for svc in stockd-1 stockd-2 stockd-3; do
        docker exec "$(compose ps -q "$svc")" curl -s --max-time 15 http://127.0.0.1:8080/metrics
    done | awk -F '[{}" ]+' '$1 == "stockd_reduce_total" { n[$3] += $NF }
        END { for (o in n) print o, n[o] }'
}

# The storage_* and commit_unknown answers between two reduce_outcomes.
storage_answers() {
    awk 'NR == FNR { before[$1] = $2; next }
        $1 ~ /^(storage_|commit_unknown)/ && $2 > before[$1] { print $1, $2 - before[$1] }' \
        "$1" "$2" | sort
}

# new_item NAME STOCK: creates an item through stockd-2 (as the operator)
# and prints its id,
# trying up to 5 times and saying each answer that was not one.
new_item() {
    local answer id
    for _ in 1 2 3 4 5; do
        answer=$(docker exec "$(compose ps -q stockd-2)" curl -s --max-time 15 \
            -H "Authorization: Bearer $(tr -d '\n' <docker/secrets/operator-token)" \
            -H 'Content-Type: application/json' -d "{\"name\":\"$1\",\"stock\":$2}" \
            http://127.0.0.1:8080/items)
        id=$(printf '%s' "$answer" | sed -n 's/^{"id":\([0-9]*\),.*/\1/p')
        [ -n "$id" ] && { echo "$id"; return 0; }
        echo "docker-demo: creating item $1 answered: ${answer:-nothing}; again in 1 s" >&2
        sleep 1
    done
    return 1
}

# The front door, as the compose file binds it on the host, and its CA.
front=https://127.0.0.1:8443
front_ca=docker/secrets/front-ca.pem

# stock_of ID: the item's stock, read through haproxy (a docker exec takes
# seconds on a loaded host); "" when unanswered.
stock_of() {
    curl -s --max-time 5 --cacert "$front_ca" "$front/items/$1?limit=0" |
        sed -n 's/.*"stock":\([0-9]*\).*/\1/p'
}

# patroni_leader: the Patroni node that leads, as a node's REST API says
# (GET /cluster, asked of each node until one answers); "" when none does.
patroni_leader() {
    local svc
    for svc in patroni-1 patroni-2 patroni-3; do
        docker exec "$(compose ps -q "$svc")" curl -s --max-time 3 http://127.0.0.1:8008/cluster \
            2>/dev/null | grep -o '"name": "[^"]*", "role": "leader"' | cut -d'"' -f4 | grep . &&
            return 0
    done
    return 0
}

# patroni_members: "name role state" of each node, one a line, from the leader's view.
patroni_members() {
    docker exec "$(compose ps -q "$1")" curl -s --max-time 3 http://127.0.0.1:8008/cluster |
        grep -o '"name": "[^"]*", "role": "[^"]*", "state": "[^"]*"' | cut -d'"' -f4,8,12 | tr '"' ' '
}

# buyer_errors OUT: the rows of a loadgen report that count an answer a buyer
# would see as an error (all but ok and insufficient_stock), when not 0.
buyer_errors() {
    awk '$1 ~ /^(lock_timeout|lock_interrupted|lock_lost|redis_unavailable|other_4xx|other_5xx|commit_unknown|transport_error|malformed|retry_later|refused|unknown)$/ && $2 + 0 > 0 { print $1, $2 }' "$1"
}

# wait_stock ID WHAT TEST: waits (bounded) until the item's stock passes
# TEST (an arithmetic test on $stock, e.g. "stock < 1500"), saying WHAT.
# A paced run's fault starts once its sale has begun: a loaded host may
# take seconds to start loadgen's container, and `compose run` would start
# a stopped dependency again.
wait_stock() {
    local stock=""
    for _ in $(seq 1200); do
        stock=$(stock_of "$1") || true
        if [ -n "$stock" ] && (($3)); then
            echo "docker-demo: item $1 $2 (stock $stock)"
            return 0
        fi
        sleep 0.1
    done
    echo "docker-demo: FAILED: item $1 not $2 within 120 s (stock ${stock:-unknown})" >&2
    return 1
}

# stop_loadgen: SIGINT to the running one-off loadgen: it starts no more
# requests, finishes those in flight, and reads back and judges what ran.
stop_loadgen() {
    docker ps -q --filter "label=com.docker.compose.project=$project" \
        --filter label=com.docker.compose.oneoff=True \
        --filter label=com.docker.compose.service=loadgen | xargs -r docker kill -s INT >/dev/null
}

# redis_cli SERVICE PORT ARGS...: redis-cli in a Redis or Sentinel container,
# with the password from its secret (on no command line).
redis_cli() {
    docker exec "$(compose ps -q "$1")" sh -c \
        'REDISCLI_AUTH=$(cat /run/secrets/redis-password) exec redis-cli -p "$0" "$@"' "$2" "${@:3}"
}

# The service the Sentinels name as the primary of stock (sentinel-1 asked),
# e.g. redis-1; "" when unanswered.
sentinel_master() {
    # sed reads to the end: `| head -n 1` left redis-cli to die of SIGPIPE (141)
    redis_cli sentinel-1 26379 sentinel get-master-addr-by-name stock 2>/dev/null | sed -n 1p
}

# unavailable_window JSON: from a loadgen --json report, how long deductions
# answered 503 (lock_timeout, lock_interrupted, lock_lost, redis_unavailable,
# other_5xx): from the first time bucket with one to the last, e.g. "3.456 s
# (1234 answers, 64 ms buckets)"; "" when none. Reads the timeline as loadgen
# indents it: one value a line, the timeline's keys at 4 and 6 spaces.
unavailable_window() {
    awk 'BEGIN { split("lock_timeout lock_interrupted lock_lost redis_unavailable other_5xx", w)
            for (k in w) is503[w[k]] = 1 }
        /^  "timeline": \{/ { tl = 1; next }
        tl && /^  \}/ { tl = 0 }
        tl && /^    "bucketMs":/ { ms = $2 + 0 }
        tl && /^      "[a-z_0-9]+": \[/ { name = $1; gsub(/[":]/, "", name); i = 0; next }
        tl && /^        [0-9]+,?$/ { i++
            if (is503[name] && $1 + 0 > 0) {
                n += $1; if (!first || i < first) first = i; if (i > last) last = i } }
        END { if (n > 0) printf "%.3f s (%d answers, %g ms buckets)\n",
                (last - first + 1) * ms / 1000, n, ms }' "$1"
}

wait_healthy() {
    local ids
    mapfile -t ids < <(compose ps -q)
    local states
    for _ in $(seq 120); do
        # read whole, then looked at: `docker inspect | grep -q` under pipefail
        # let grep's early exit kill docker inspect with SIGPIPE (status 141),
        # which `!` took for "every container healthy"
        states=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "${ids[@]}")
        if ! grep -qv '^healthy$' <<<"$states"; then
            echo "docker-demo: healthy: $(docker inspect -f '{{.Name}}' "${ids[@]}" | tr -d / | xargs)"
            return 0
        fi
        sleep 1
    done
    docker inspect -f '{{.Name}} {{.State.Status}} {{.State.Health.Status}}' "${ids[@]}" >&2
    compose logs --tail 20 >&2
    echo "docker-demo: not every container became healthy" >&2
    return 1
}

trap cleanup EXIT
trap 'exit 130' INT TERM
start_dockerd
base_image
make_secrets
echo "docker-demo: ${compose_cmd[*]} $("${compose_cmd[@]}" version --short 2>/dev/null || true)," \
    "engine $(docker version -f '{{.Server.Version}}')"

echo "docker-demo: building the images and starting the stack (log: $state/up.log)"
start=$SECONDS
# --force-rm: a failed build step must not leave its container behind.
{ compose build --force-rm && compose up -d; } >"$state/up.log" 2>&1 ||
    { tail -n 40 "$state/up.log" >&2; exit 1; }
wait_healthy
echo "docker-demo: up and healthy in $((SECONDS - start)) s"
# haproxy made its CA at start, in its volume: the buyers' loadgens trust it.
docker cp "$(compose ps -q haproxy):/var/lib/front/ca.pem" "$front_ca"
chmod 644 "$front_ca"
echo "docker-demo: haproxy's CA copied to $front_ca; $front/health:" \
    "$(curl -s --max-time 5 --cacert "$front_ca" "$front/health")"
echo "docker-demo: Patroni: $(patroni_members patroni-1 | paste -sd , - | sed 's/,/, /g')"
wait_prom "every replica scraped" 3 'up{job="stockd"} == 1' || status=1
wait_prom "every Patroni node scraped" 3 'patroni_postgres_running == 1' || status=1
health=$(wait_health stockd-1 ok) || status=1
echo "$health"
case $health in
*'"storageBackend":"postgres"'*) ;;
*) echo "docker-demo: FAILED: stockd-1 does not keep its stock in PostgreSQL" >&2; exit 1 ;;
esac

echo
echo "=== loadgen --scenario hot (the compose file's loadgen: all three replicas)"
# Every loadgen run is --no-deps: the stack is up, and compose would refuse the
# run over one health check of its dependencies' tree failed (on a loaded host
# checks time out for a minute) or start a stopped dependency again.
compose --profile loadgen run --rm --no-deps loadgen </dev/null || status=1
echo
echo "=== loadgen --scenario renew (all three replicas)"
compose --profile loadgen run --rm --no-deps loadgen --scenario renew --target "$targets" </dev/null ||
    status=1
# The recording rules on what the two runs left: one series per replica.
wait_prom "lock wait p99 over 1 min (s)" 3 'instance:stockd_lock_wait_seconds:p99_1m' ||
    status=1
wait_prom "acknowledged deductions/s over 1 min" 3 'instance:stockd_orders_ok:rate1m' ||
    status=1
echo
echo "=== loadgen --scenario hot through haproxy over HTTPS (the compose file's buyer)"
compose --profile loadgen run --rm --no-deps buyer </dev/null || status=1

echo
echo "=== loadgen --scenario hot through haproxy at 500 requests/s for 6 s; stockd-2 is stopped once the sale has begun"
# docker stop sends SIGTERM: stockd-2 answers /health 503 for its drain notice
# (2 s) while it serves on, haproxy's checks (500 ms, fall 2) take it out of
# the pool, and only then does it stop. No retry: a buyer must see no error.
item=$(new_item replica-stop 1500)
out=$state/replica-stop.out
compose --profile loadgen run --rm --no-deps buyer --scenario hot -n 3000 --rate 500 --item "$item" \
    --target "$front" </dev/null >"$out" &
run=$!
wait_stock "$item" "on sale" "stock < 1500" || status=1
stop_start=$SECONDS
compose stop stockd-2 >/dev/null 2>&1
echo "docker-demo: stopped stockd-2 (docker stop) in $((SECONDS - stop_start)) s"
wait "$run" || status=1
cat "$out"
errors=$(buyer_errors "$out")
if [ -n "$errors" ]; then
    echo "docker-demo: FAILED: buyers saw errors while stockd-2 stopped: $(echo "$errors" | paste -sd , -)" >&2
    status=1
fi
compose start stockd-2 >/dev/null 2>&1
wait_health stockd-2 ok || status=1

echo
echo "=== loadgen --scenario flash: 3000 buyers through haproxy, all fired at once"
# The flash service runs in the host's network namespace: each buyer's own
# 127.x.y.z reaches haproxy only there, which names it to the replicas in
# X-Forwarded-For.
flash_start=$SECONDS
compose --profile loadgen run --rm --no-deps flash </dev/null || status=1
echo "docker-demo: flash sale done in $((SECONDS - flash_start)) s"
echo
echo "=== loadgen --scenario hot at 500 requests/s until sold out; the Redis primary is killed once the sale has begun"
# The Sentinels find the primary down (2 s without an answer), agree, and
# promote a replica; the replicas follow them there without a restart. Until
# then deductions answer 503 (nothing deducted: the verdict checks the ledger);
# the script prints for how long, from loadgen's timeline (--json). The old
# primary is started again (empty: no persistence) and must rejoin as a replica.
primary=$(sentinel_master)
primary_id=$(compose ps -q "$primary") # now: the kill must come while the sale runs
echo "docker-demo: the Sentinels name $primary as the primary of stock"
item=$(new_item failover 2500)
out=$state/failover.out
json=$state/failover.json # written by loadgen's container user: bind-mounted, made writable
: >"$json"
chmod 666 "$json"
compose --profile loadgen run --rm --no-deps -v "$PWD/$json:/tmp/failover.json" loadgen --scenario hot \
    -n 0 -d 300s --rate 500 --item "$item" --json /tmp/failover.json --target "$targets" \
    </dev/null >"$out" &
run=$!
wait_stock "$item" "on sale" "stock < 2500" || status=1
docker kill "$primary_id" >/dev/null
echo "docker-demo: killed $primary (docker kill)"
wait_stock "$item" "sold out" "stock == 0" || status=1
sleep 1 # refusals, now that it is sold out: hot expects them
stop_loadgen
wait "$run" || status=1
cat "$out"
promoted=$(sentinel_master)
echo "docker-demo: the Sentinels promoted $promoted"
if [ -z "$promoted" ] || [ "$promoted" = "$primary" ]; then
    echo "docker-demo: FAILED: no replica promoted after $primary was killed" >&2
    status=1
fi
outage=$(unavailable_window "$json")
echo "docker-demo: 503 answers while the primary failed over: ${outage:-none}"
health=$(wait_health stockd-2 ok) || status=1
echo "$health"
docker start "$primary_id" >/dev/null
echo "docker-demo: started $primary again (empty: no persistence; the Sentinels make it a replica)"
wait_healthy

echo
echo "=== loadgen --scenario hot at 500 requests/s until sold out; the PostgreSQL leader is killed once the sale has begun"
# docker kill of the node Patroni names the leader: its PostgreSQL and its
# Patroni die at once, the leader key expires (ttl 10 s), and the synchronous
# standby, which has every acknowledged commit, takes over. Meanwhile
# deductions answer 503 storage_unavailable (nothing deducted: the verdict
# checks the ledger) and /health says unavailable; the replicas' next
# connection (the multi-host conninfo, target_session_attrs=read-write) finds
# the new leader. The sale runs until sold out; the script prints how long
# orders were refused (loadgen's timeline). Straight to the replicas, not
# through haproxy: with the database away every replica fails its health
# check, and haproxy would answer the 503s itself. The old leader is started
# again and must rejoin as a replica.
leader=$(patroni_leader)
leader_id=$(compose ps -q "${leader:-patroni-1}")
echo "docker-demo: Patroni names ${leader:-no node} the leader"
[ -n "$leader" ] || status=1
item=$(new_item pg-leader 5000)
reduce_outcomes >"$state/outcomes-before"
out=$state/pg-leader.out
json=$state/pg-leader.json
: >"$json"
chmod 666 "$json"
compose --profile loadgen run --rm --no-deps -v "$PWD/$json:/tmp/pg-leader.json" loadgen \
    --scenario hot -n 0 -d 300s --rate 500 --item "$item" --retry --json /tmp/pg-leader.json \
    --target "$targets" </dev/null >"$out" &
run=$!
wait_stock "$item" "on sale" "stock < 5000" || status=1
docker kill "$leader_id" >/dev/null
kill_at=$SECONDS
echo "docker-demo: killed $leader (docker kill)"
for _ in $(seq 120); do
    new_leader=$(patroni_leader)
    [ -n "$new_leader" ] && [ "$new_leader" != "$leader" ] && break
    sleep 0.5
done
echo "docker-demo: Patroni promoted ${new_leader:-nothing} $((SECONDS - kill_at)) s after the kill"
if [ -z "$new_leader" ] || [ "$new_leader" = "$leader" ]; then
    echo "docker-demo: FAILED: no PostgreSQL node promoted after $leader was killed" >&2
    status=1
fi
wait_stock "$item" "sold out" "stock == 0" || status=1
sleep 1 # refusals, now that it is sold out: hot expects them
stop_loadgen
wait "$run" || status=1
cat "$out"
reduce_outcomes >"$state/outcomes-after"
answers=$(storage_answers "$state/outcomes-before" "$state/outcomes-after")
echo "docker-demo: storage answers while the leader failed over (the replicas' /metrics):" \
    "$(echo "${answers:-none}" | paste -sd , - | sed 's/,/, /g')"
outage=$(unavailable_window "$json")
echo "docker-demo: orders refused (503) while the PostgreSQL leader failed over: ${outage:-none}"
docker start "$leader_id" >/dev/null
echo "docker-demo: started $leader again (Patroni makes it a replica of $new_leader)"
wait_healthy
echo "docker-demo: Patroni: $(patroni_members "${new_leader:-patroni-1}" | paste -sd , - | sed 's/,/, /g')"

echo
echo "=== loadgen --scenario hot at 500 requests/s for 6 s; stockd-1 is killed once the sale has begun"
# Paced so that the kill lands mid-run. Requests on stockd-1's connections then
# fail in transport (noted, not violations; --retry resends them, each attempt
# given 2 s) and the verdict reads the item back from stockd-2.
item=$(new_item replica-down 1500)
compose --profile loadgen run --rm --no-deps loadgen --scenario hot -n 3000 --rate 500 --item "$item" \
    --retry --timeout-ms 2000 --target "$targets" </dev/null &
run=$!
wait_stock "$item" "on sale" "stock < 1500" || status=1
docker kill "$(compose ps -q stockd-1)" >/dev/null
echo "docker-demo: killed stockd-1"
wait "$run" || status=1
wait_prom "stockd-1 down" 1 'up{instance="stockd-1:8080"} == 0' || status=1
# It fires once the replica has been down for the rule's 30 s.
wait_prom "the replica-down alert" 1 \
    'ALERTS{alertname="StockdReplicaDown",alertstate="firing",instance="stockd-1:8080"}' ||
    status=1

# Minutes after its restart, the old primary follows the promoted one.
role=$(redis_cli "$primary" 6379 role | sed -n 1,2p | paste -sd ' ' -)
echo "docker-demo: $primary's ROLE: ${role:-unanswered}"
if [ "$role" != "slave $promoted" ]; then
    echo "docker-demo: FAILED: $primary did not rejoin as a replica of $promoted" >&2
    status=1
fi

echo
compose down -v
if [ -n "$(leftovers)" ]; then
    echo "docker-demo: FAILED: left behind after down -v: $(leftovers | xargs)" >&2
    exit 1
fi
if [ "$status" -ne 0 ]; then
    echo "docker-demo: FAILED: a verdict or a check was not PASS (above)" >&2
    exit 1
fi
echo "docker-demo: PASS (every verdict PASS, Prometheus saw it all; containers, network and volume removed)"
