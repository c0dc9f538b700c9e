/* test_docker_run.c - the compose services run here as plain processes with
 * their own commands, environment and secrets, without a Docker engine
 * (test_docker.c checks the files themselves): each Redis and Sentinel
 * through its image's entrypoint (password required, protected mode on, the
 * password on no command line, its health check passing; the replicas
 * replicate the primary the Sentinels name), the replicas healthy against
 * them and a PostgreSQL server, the loadgen service's command passing against
 * them, also once the primary was killed and the Sentinels promoted a replica
 * (the replicas follow it without a restart), and haproxy through
 * scripts/front-door.sh with its service's environment in front of them, the
 * buyer service's command passing through it over HTTPS with its CA.
 * The Patroni nodes and etcd are not run here: one PostgreSQL server stands
 * in for them (every node's name in STOCKD_DB pointed at it), and
 * test_patroni runs Debian's Patroni and etcd on loopback under three
 * replicas, the leader killed mid-sale. */
#include <jansson.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/compose.h"
#include "tests/support/compose_run.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"

#define MAX_ARGS TH_STACK_MAX_ARGS

static th_compose compose;

static int load_compose(void **state)
{
    (void)state;
    return th_compose_load(&compose);
}

static int free_compose(void **state)
{
    (void)state;
    th_compose_free(&compose);
    return 0;
}

static void test_redis_services_require_their_secret_password_with_protected_mode_on(void **state)
{
    (void)state;
    th_local_stack s;
    char v[64];
    th_stack_init(&s, &compose);
    th_stack_start_redis(&s);
    for (int i = 0; i < s.nredis; i++) {
        const th_local_redis *r = &s.redis[i];
        redisContext *c = redisConnect("127.0.0.1", r->redis.port); /* without the password */
        assert_true(c && !c->err);
        redisReply *rep = redisCommand(c, "PING");
        assert_non_null(rep);
        assert_int_equal(rep->type, REDIS_REPLY_ERROR);
        assert_non_null(strstr(rep->str, "NOAUTH"));
        freeReplyObject(rep);
        redisFree(c);
        if (!th_compose_is_sentinel(r->svc)) /* a Sentinel has no CONFIG: the password is it */
            assert_string_equal(th_stack_redis_ask(r, v, sizeof(v), "CONFIG GET protected-mode"),
                                "protected-mode yes");
        assert_false(th_proc_has(r->pid, "cmdline", s.password)); /* ps shows it */
        assert_false(th_proc_has(r->pid, "environ", s.password));
    }
    th_stack_stop_redis(&s);
}

/* The Sentinels name the primary (the one Redis service that replicates
 * none), and the other Redis services replicate it, with the password. */
static void test_redis_replicas_replicate_the_primary_the_sentinels_name(void **state)
{
    (void)state;
    th_local_stack s;
    char v[64], want[64], got[512];
    th_stack_init(&s, &compose);
    th_stack_start_redis(&s);
    const th_local_redis *primary = &s.redis[0]; /* started first: the one without replicaof */
    assert_null(th_compose_arg(primary->svc, "--replicaof", 0));
    snprintf(want, sizeof(want), "127.0.0.1 %d", primary->redis.port);
    int nsentinels = 0;
    for (int i = 0; i < s.nredis; i++) {
        const th_local_redis *r = &s.redis[i];
        if (th_compose_is_sentinel(r->svc)) {
            nsentinels++;
            assert_string_equal(th_stack_sentinel_names(&s, r, v, sizeof(v)), want);
        } else if (r != primary) {
            int64_t end = th_now_ms() + 15000; /* a full sync on a busy machine */
            while (!strstr(th_stack_redis_ask(r, got, sizeof(got), "INFO replication"),
                           "master_link_status:up") && th_now_ms() < end)
                th_sleep_ms(100);
            if (!strstr(got, "master_link_status:up"))
                fail_msg("service %s does not replicate %s", r->svc->name, primary->svc->name);
            assert_string_equal(th_stack_redis_ask(r, v, sizeof(v), "ROLE"), "slave 127.0.0.1");
        }
    }
    assert_int_equal(nsentinels, 3);
    th_stack_stop_redis(&s);
}

/* Starts one replica service: its command and the template's environment,
 * against the local Redis and PostgreSQL services. */
static void start_replica(const th_local_stack *s, const th_service *svc, th_stockd *out)
{
    const char *extra[MAX_ARGS + 1];
    int n = 0;
    json_t *v;
    size_t i;
    json_array_foreach(svc->command, i, v)
        if (n < MAX_ARGS)
            extra[n++] = json_string_value(v);
    extra[n] = NULL;
    for (int e = 0; e < compose.nenv; e++) {
        char buf[192];
        setenv(compose.env[e][0], th_stack_value(s, compose.env[e][1], buf, sizeof(buf)), 1);
    }
    char db[192]; /* the harness passes --db, which must say what STOCKD_DB says */
    th_stack_value(s, th_compose_env(&compose, "STOCKD_DB"), db, sizeof(db));
    if (th_stockd_start(out, &s->redis[0].redis, db, s->dir, extra) != 0) {
        char *log = th_read_file(out->log);
        fail_msg("service %s did not start:\n%s", svc->name, log ? log : "");
    }
    for (int e = 0; e < compose.nenv; e++)
        unsetenv(compose.env[e][0]);
}

/* The replica services, and the loadgen service that runs against them. */
struct local_replicas {
    th_stockd replica[TH_COMPOSE_MAX_SERVICES];
    th_service *names[TH_COMPOSE_MAX_SERVICES];
    int n;
    const th_service *loadgen;
};

static void start_replicas(const th_local_stack *s, struct local_replicas *rs)
{
    for (int i = 0; i < compose.nservices; i++) {
        if (th_compose_is_replica(&compose.services[i])) {
            start_replica(s, &compose.services[i], &rs->replica[rs->n]);
            rs->names[rs->n++] = &compose.services[i];
        }
        if (strcmp(compose.services[i].name, "loadgen") == 0)
            rs->loadgen = &compose.services[i];
    }
    assert_int_equal(rs->n, 3);
    assert_non_null(rs->loadgen);
}

static void stop_replicas(struct local_replicas *rs)
{
    for (int r = 0; r < rs->n; r++)
        assert_int_equal(th_stockd_stop_clean(&rs->replica[r]), 0);
}

/* A replica's GET /health, which must answer 200 with the given status; its
 * JSON body (the caller owns it). */
static json_t *replica_health(const struct local_replicas *rs, int r, const char *want)
{
    char url[96];
    th_resp resp;
    snprintf(url, sizeof(url), "%s/health", rs->replica[r].url);
    assert_int_equal(th_http("GET", url, NULL, &resp), 0);
    json_t *body = json_loads(resp.body, 0, NULL);
    const char *status = json_string_value(json_object_get(body, "status"));
    if (resp.status != 200 || !status || strcmp(status, want) != 0)
        fail_msg("service %s: /health %ld %s, want 200 %s", rs->names[r]->name, resp.status,
                 resp.body, want);
    th_resp_free(&resp);
    return body;
}

/* The loadgen service's entrypoint (its secrets in s's dir) and command, its
 * targets (http://<service>:8080) pointed at the local replicas, and the
 * front door's address (front, "host:port" in the compose file) at
 * front_here when given. */
static int run_loadgen_service_via(const th_local_stack *s, const th_service *svc,
                                   th_service *const names[], const th_stockd *replicas,
                                   int nreplicas, const char *front, const char *front_here,
                                   const char *out)
{
    char bin[256], args[MAX_ARGS][512];
    const char *argv[MAX_ARGS + 1] = {bin};
    int n = 0;
    snprintf(bin, sizeof(bin), "%s/%s", th_build_dir(),
             json_string_value(json_array_get(svc->entrypoint, 0)));
    json_t *v;
    size_t i;
    json_array_foreach(svc->entrypoint, i, v) {
        if (i > 0 && n + 1 < MAX_ARGS) {
            argv[n + 1] = th_stack_value(s, json_string_value(v), args[n], sizeof(args[0]));
            n++;
        }
    }
    json_array_foreach(svc->command, i, v) {
        if (n + 1 >= MAX_ARGS)
            break;
        char *a = args[n];
        snprintf(a, sizeof(args[0]), "%s", json_string_value(v));
        for (int r = 0; r < nreplicas; r++) {
            char from[96], rest[512], *p;
            snprintf(from, sizeof(from), "http://%s:%s", names[r]->name, TH_COMPOSE_STOCKD_PORT);
            while ((p = strstr(a, from)) != NULL) {
                snprintf(rest, sizeof(rest), "%s", p + strlen(from));
                snprintf(p, sizeof(args[0]) - (size_t)(p - a), "%s%s", replicas[r].url, rest);
            }
        }
        char *p, rest[512];
        if (front && (p = strstr(a, front)) != NULL) {
            snprintf(rest, sizeof(rest), "%s", p + strlen(front));
            snprintf(p, sizeof(args[0]) - (size_t)(p - a), "%s%s", front_here, rest);
        }
        argv[++n] = a;
    }
    argv[n + 1] = NULL;
    return th_run(argv, out, 120000);
}

static int run_loadgen_service(const th_local_stack *s, const th_service *svc,
                               th_service *const names[], const th_stockd *replicas,
                               int nreplicas, const char *out)
{
    return run_loadgen_service_via(s, svc, names, replicas, nreplicas, NULL, NULL, out);
}

/* Runs the loadgen service's command against the replicas: it must end
 * VERDICT: PASS with no redis_unavailable answer. */
static void assert_loadgen_service_passes(const th_local_stack *s,
                                          const struct local_replicas *rs, const char *run)
{
    char out[128];
    snprintf(out, sizeof(out), "%s/loadgen-%s.out", s->dir, run);
    int status = run_loadgen_service(s, rs->loadgen, rs->names, rs->replica, rs->n, out);
    char *text = th_read_file(out);
    const char *row = text ? strstr(text, "\nredis_unavailable ") : NULL;
    long long unavailable = -1;
    if (row)
        sscanf(row, "\nredis_unavailable %lld", &unavailable);
    if (status != 0 || !strstr(text, "VERDICT: PASS") || unavailable != 0)
        fail_msg("the loadgen service (%s) exited %d, redis_unavailable %lld:\n%s", run, status,
                 unavailable, text ? text : "");
    free(text);
}

static void test_replicas_and_loadgen_pass_with_the_compose_commands_and_secret(void **state)
{
    (void)state;
    th_local_stack s;
    struct local_replicas rs = {0};
    th_stack_init(&s, &compose);
    th_stack_start_redis(&s);
    th_stack_start_pg(&s);
    start_replicas(&s, &rs);
    for (int r = 0; r < rs.n; r++) { /* PostgreSQL, and the primary with the password */
        json_t *health = replica_health(&rs, r, "ok");
        assert_string_equal(json_string_value(json_object_get(health, "storageBackend")),
                            "postgres");
        json_t *nodes = json_object_get(health, "redisNodes"), *node;
        size_t i;
        assert_true(json_array_size(nodes) >= 1);
        json_array_foreach(nodes, i, node)
            assert_true(json_is_true(json_object_get(node, "up")));
        json_decref(health);
    }
    assert_loadgen_service_passes(&s, &rs, "all-up");
    stop_replicas(&rs);
    th_stack_stop_pg(&s);
    th_stack_stop_redis(&s);
}

/* Waits (bounded) until every Sentinel names the same primary, other than
 * was; into now. */
static void wait_sentinels_agree(const th_local_stack *s, const char *was, char *now,
                                 size_t size)
{
    char v[64];
    for (int i = 0; i < s->nredis; i++) {
        const th_local_redis *r = &s->redis[i];
        if (!th_compose_is_sentinel(r->svc))
            continue;
        int64_t end = th_now_ms() + 60000; /* only a hang bound: about 3 s here */
        while ((!th_stack_sentinel_names(s, r, v, sizeof(v))[0] || strcmp(v, was) == 0) &&
               th_now_ms() < end)
            th_sleep_ms(100);
        if (!v[0] || strcmp(v, was) == 0 || (now[0] && strcmp(v, now) != 0))
            fail_msg("service %s names %s as the primary: was %s, others %s", r->svc->name,
                     v[0] ? v : "none", was, now[0] ? now : "none yet");
        snprintf(now, size, "%s", v);
    }
}

/* What make docker-demo shows with docker kill: the primary gone, the
 * Sentinels promote a replica, and the replicas follow it without a
 * restart: their /health ok again, the loadgen service passing. */
static void test_primary_killed_sentinels_promote_a_replica_the_replicas_follow(void **state)
{
    (void)state;
    th_local_stack s;
    struct local_replicas rs = {0};
    th_stack_init(&s, &compose);
    th_stack_start_redis(&s);
    th_stack_start_pg(&s);
    start_replicas(&s, &rs);
    th_local_redis *primary = &s.redis[0];
    char was[64], now[64] = "";
    snprintf(was, sizeof(was), "127.0.0.1 %d", primary->redis.port);
    th_signal(primary->pid, SIGKILL, 5000);
    primary->pid = 0;
    wait_sentinels_agree(&s, was, now, sizeof(now));
    print_message("the Sentinels promoted %s (was %s)\n", now, was);
    for (int r = 0; r < rs.n; r++) {
        char url[96];
        th_resp resp = {0};
        snprintf(url, sizeof(url), "%s/health", rs.replica[r].url);
        for (int64_t end = th_now_ms() + 30000; th_now_ms() < end; th_sleep_ms(100)) {
            th_resp_free(&resp);
            if (th_http("GET", url, NULL, &resp) == 0 && resp.status == 200 &&
                strstr(resp.body, "\"status\":\"ok\""))
                break;
        }
        th_resp_free(&resp);
        json_decref(replica_health(&rs, r, "ok"));
    }
    assert_loadgen_service_passes(&s, &rs, "failed-over");
    stop_replicas(&rs);
    th_stack_stop_pg(&s);
    th_stack_stop_redis(&s);
}

/* Starts the haproxy service as its image runs it: scripts/front-door.sh on
 * dir (the CA and the certificate made there) and docker/haproxy/haproxy.cfg,
 * with the service's environment but its FRONT_BIND here (a free loopback
 * port) and FRONT_S1..3 the local replicas (in the compose file, their
 * published ports). Waits (bounded) until it listens; its PID, killed at exit
 * if the test fails first. */
static pid_t start_front_door(const th_local_stack *s, const struct local_replicas *rs,
                              const th_service *front, const char *here, int port,
                              const char *dir)
{
    char log[128], var[16], value[32];
    for (int e = 0; e < front->nenv; e++)
        setenv(front->env[e][0], front->env[e][1], 1);
    setenv("FRONT_BIND", here, 1);
    for (int r = 0; r < rs->n; r++) {
        snprintf(var, sizeof(var), "FRONT_S%d", r + 1);
        snprintf(value, sizeof(value), "127.0.0.1:%d", rs->replica[r].port);
        setenv(var, value, 1);
    }
    snprintf(log, sizeof(log), "%s/haproxy.log", s->dir);
    const char *argv[] = {"scripts/front-door.sh", dir, "docker/haproxy/haproxy.cfg", NULL};
    pid_t pid = th_spawn(argv, log);
    assert_true(pid > 0);
    th_exit_signal(pid, SIGKILL);
    for (int e = 0; e < front->nenv; e++)
        unsetenv(front->env[e][0]);
    int fd = -1;
    for (int64_t end = th_now_ms() + 30000 * TH_SLOWER; th_now_ms() < end && fd < 0;
         th_sleep_ms(100))
        fd = th_connect(port);
    if (fd < 0) {
        char *text = th_read_file(log);
        fail_msg("haproxy never listened on %s:\n%s", here, text ? text : "");
    }
    close(fd);
    return pid;
}

/* Copies the CA front-door.sh made in dir to where the service's --cacert
 * secret is in the stack's dir, as make docker-demo copies it out of haproxy's
 * volume. */
static void give_ca_to(const th_local_stack *s, const th_service *svc, const char *dir)
{
    char ca[128], file[128], name[64] = "";
    snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
    char *pem = th_read_file(ca);
    assert_non_null(pem);
    char *entry = json_dumps(svc->entrypoint, 0);
    const char *flag = "\"--cacert\", \"" TH_COMPOSE_SECRETS;
    const char *secret = entry ? strstr(entry, flag) : NULL;
    assert_non_null(secret);
    sscanf(secret + strlen(flag), "%63[^\"]", name);
    snprintf(file, sizeof(file), "%s/%s", s->dir, name);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs(pem, f);
    fclose(f);
    free(pem);
    free(entry);
}

/* The haproxy service in front of the replicas (start_front_door): the buyer
 * service's command, trusting the CA front-door.sh made, must PASS through it
 * over HTTPS. haproxy is stopped by its PID. */
static void test_buyer_service_passes_through_haproxy_with_its_environment(void **state)
{
    (void)state;
    if (access("/usr/sbin/haproxy", X_OK) != 0 || !th_have("openssl")) /* off a user's PATH */
        th_skip("needs haproxy and openssl (make deps installs them)");
    const th_service *front = th_compose_service(&compose, "haproxy");
    const th_service *buyer = th_compose_service(&compose, "buyer");
    assert_non_null(front);
    assert_non_null(buyer);
    const char *bind = th_compose_svc_env(front, "FRONT_BIND");
    assert_non_null(bind);
    th_local_stack s;
    struct local_replicas rs = {0};
    th_stack_init(&s, &compose);
    th_stack_start_redis(&s);
    th_stack_start_pg(&s);
    start_replicas(&s, &rs);

    char here[32], dir[96], out[128];
    int port = th_free_port();
    snprintf(here, sizeof(here), "127.0.0.1:%d", port);
    snprintf(dir, sizeof(dir), "%s/front", s.dir);
    pid_t pid = start_front_door(&s, &rs, front, here, port, dir);
    give_ca_to(&s, buyer, dir);
    snprintf(out, sizeof(out), "%s/loadgen-front.out", s.dir);
    int status = run_loadgen_service_via(&s, buyer, rs.names, rs.replica, rs.n, bind, here, out);
    char *text = th_read_file(out);
    if (status != 0 || !text || !strstr(text, "VERDICT: PASS") ||
        !strstr(text, "https://127.0.0.1:"))
        fail_msg("the buyer service through haproxy exited %d:\n%s", status, text ? text : "");
    free(text);
    assert_int_equal(th_signal(pid, SIGTERM, 15000), 0);
    stop_replicas(&rs);
    th_stack_stop_pg(&s);
    th_stack_stop_redis(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_services_require_their_secret_password_with_protected_mode_on),
        cmocka_unit_test(test_redis_replicas_replicate_the_primary_the_sentinels_name),
        cmocka_unit_test(test_replicas_and_loadgen_pass_with_the_compose_commands_and_secret),
        cmocka_unit_test(test_primary_killed_sentinels_promote_a_replica_the_replicas_follow),
        cmocka_unit_test(test_buyer_service_passes_through_haproxy_with_its_environment),
    };
    return cmocka_run_group_tests_name("docker_run", tests, load_compose, free_compose);
}
