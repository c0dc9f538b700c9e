/* test_docker_run.c - the compose services run here as plain processes with
 * their own commands, environment and secrets, without a Docker engine
 * (test_docker.c checks the files themselves): each Redis through its
 * image's entrypoint (password required, protected mode on, the password on
 * no command line, its health check passing), PostgreSQL through its image's
 * (a cluster made on first start, role stock admitted only with the secret's
 * password by scram-sha-256, the superuser not over TCP, data kept across a
 * restart), the replicas healthy against all of them, the loadgen service's
 * command passing against them, also with one Redis killed (no
 * redis_unavailable, /health degraded naming it). */
#include <jansson.h>
#include <libpq-fe.h>
#include <limits.h>
#include <pwd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <gnutls/crypto.h>

#include "tests/support/compose.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"

#define PG_START_MS 60000 /* initdb included, on a busy machine: only a hang bound */
#define MAX_REDIS 7       /* stockd's limit on --redis servers */
#define MAX_ARGS 32

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

/* The compose file's services, run here: secret files, the Redis servers and
 * PostgreSQL. */
struct local_redis {
    const th_service *svc;
    th_redis redis; /* port and password, for checks; started through redis.sh */
    pid_t pid;      /* 0 once stopped */
};

/* The PostgreSQL service, started through postgres.sh as the server's user. */
struct local_pg {
    const th_service *svc;
    int port;
    pid_t pid;                /* the postmaster (postgres.sh execs it); 0 once stopped */
    char dir[96];             /* the server user's: data/ and the socket */
    char log[128];
    char script[PATH_MAX];    /* the image's ENTRYPOINT, absolute: it starts in "/" */
    char health[2][PATH_MAX]; /* the image's HEALTHCHECK, as a local command */
};

struct local_stack {
    char dir[64];
    char secret[128]; /* the redis-password secret, as make docker-demo writes it */
    char password[64];
    char pg_secret[128]; /* the secret STOCKD_DB_PASSWORD_FILE names */
    char pg_password[64];
    struct local_redis redis[MAX_REDIS];
    int nredis;
    char health[2][128]; /* the Redis image's HEALTHCHECK, as a local command */
    struct local_pg pg;
};

/* A value of the template's environment as it is here: a secret lives in the
 * stack's dir, and each service's "name:port" (the Redis servers in
 * STOCKD_REDIS, PostgreSQL in STOCKD_DB's URL) is its local port. */
static const char *local_value(const struct local_stack *s, const char *value, char *buf,
                               size_t size)
{
    if (strncmp(value, TH_COMPOSE_SECRETS, strlen(TH_COMPOSE_SECRETS)) == 0) {
        snprintf(buf, size, "%s/%s", s->dir, value + strlen(TH_COMPOSE_SECRETS));
        return buf;
    }
    snprintf(buf, size, "%s", value);
    for (int i = 0; i < s->nredis; i++)
        th_compose_local_addr(buf, size, s->redis[i].svc->name, TH_COMPOSE_REDIS_PORT,
                              s->redis[i].redis.port);
    if (s->pg.svc)
        th_compose_local_addr(buf, size, s->pg.svc->name, TH_COMPOSE_PG_PORT, s->pg.port);
    return buf;
}

/* The image's health check of one Redis (it reads REDIS_PORT). */
static int redis_healthy(const struct local_stack *s, const struct local_redis *r)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", r->redis.port);
    setenv("REDIS_PORT", port, 1);
    const char *argv[] = {s->health[0], s->health[1], NULL};
    return th_run(argv, "/dev/null", 5000) == 0;
}

/* One secret as make docker-demo writes it: a password on one line, readable
 * by the servers' users (the stack's dir lets them through). */
static void write_secret_file(const char *path, const char *password)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", password);
    fclose(f);
    assert_int_equal(chmod(path, 0644), 0);
}

/* The operator token loadgen's entrypoint reads, and the replicas' tokens
 * file (STOCKD_API_TOKENS_FILE) with its sha256, as make docker-demo writes
 * them. */
static void write_tokens(const struct local_stack *s)
{
    char path[256], token[64], line[128];
    snprintf(token, sizeof(token), "op-%d-%lld-token", (int)getpid(), (long long)th_now_ms());
    write_secret_file(local_value(s, TH_COMPOSE_SECRETS "operator-token", path, sizeof(path)),
                      token);
    unsigned char d[32];
    assert_int_equal(gnutls_hash_fast(GNUTLS_DIG_SHA256, token, strlen(token), d), 0);
    int n = snprintf(line, sizeof(line), "operator demo sha256:");
    for (int i = 0; i < 32; i++)
        n += snprintf(line + n, sizeof(line) - (size_t)n, "%02x", d[i]);
    const char *file = th_compose_env(&compose, "STOCKD_API_TOKENS_FILE");
    assert_non_null(file);
    write_secret_file(local_value(s, file, path, sizeof(path)), line);
}

/* The stack's dir with both secrets: redis-password and the one the
 * replicas' STOCKD_DB_PASSWORD_FILE names, each its own password. */
static void write_secrets(struct local_stack *s)
{
    assert_int_equal(th_tempdir("compose", s->dir, sizeof(s->dir)), 0);
    assert_int_equal(chmod(s->dir, 0711), 0);
    snprintf(s->password, sizeof(s->password), "test-%d-%lld", (int)getpid(),
             (long long)th_now_ms());
    snprintf(s->pg_password, sizeof(s->pg_password), "pg-%d-%lld", (int)getpid(),
             (long long)th_now_ms());
    local_value(s, TH_COMPOSE_SECRETS "redis-password", s->secret, sizeof(s->secret));
    write_secret_file(s->secret, s->password);
    const char *file = th_compose_env(&compose, "STOCKD_DB_PASSWORD_FILE");
    assert_non_null(file);
    local_value(s, file, s->pg_secret, sizeof(s->pg_secret));
    write_secret_file(s->pg_secret, s->pg_password);
    write_tokens(s);
}

/* The Redis image's ENTRYPOINT (into script) and HEALTHCHECK (into s->health),
 * as the files in docker/redis/ they are copied from. */
static void redis_image_commands(struct local_stack *s, char *script, size_t size)
{
    json_t *entry = th_dockerfile_array("docker/redis/Dockerfile", "\nENTRYPOINT", "ENTRYPOINT [");
    json_t *health = th_dockerfile_array("docker/redis/Dockerfile", "\nHEALTHCHECK", "CMD [");
    assert_non_null(entry);
    assert_non_null(health);
    assert_int_equal(json_array_size(health), 2);
    snprintf(script, size, "docker/redis/%s", json_string_value(json_array_get(entry, 0)));
    snprintf(s->health[0], sizeof(s->health[0]), "docker/redis/%s",
             json_string_value(json_array_get(health, 0)));
    snprintf(s->health[1], sizeof(s->health[1]), "%s",
             json_string_value(json_array_get(health, 1)));
    json_decref(entry);
    json_decref(health);
}

/* Starts one Redis service's command through the image's entrypoint on a
 * port of its own, and waits for the image's health check. */
static void start_redis(struct local_stack *s, const th_service *svc, const char *script)
{
    struct local_redis *r = &s->redis[s->nredis++];
    char port[16], log[128];
    r->svc = svc;
    r->redis.port = th_free_port();
    snprintf(r->redis.password, sizeof(r->redis.password), "%s", s->password);
    snprintf(port, sizeof(port), "%d", r->redis.port);
    setenv("REDIS_PORT", port, 1);

    const char *argv[MAX_ARGS + 6] = {script};
    int n = 1;
    json_t *v;
    size_t i;
    json_array_foreach(svc->command, i, v)
        if (n < MAX_ARGS)
            argv[n++] = json_string_value(v);
    const char *local[] = {"--bind", "127.0.0.1", "--dir", s->dir}; /* only these are ours */
    for (size_t k = 0; k < 4; k++)
        argv[n++] = local[k];
    argv[n] = NULL;
    snprintf(log, sizeof(log), "%s/%s.log", s->dir, svc->name);
    r->pid = th_spawn(argv, log);
    assert_true(r->pid > 0);
    int64_t end = th_now_ms() + 10000;
    while (!redis_healthy(s, r) && th_now_ms() < end)
        th_sleep_ms(50);
    if (!redis_healthy(s, r)) {
        char *text = th_read_file(log);
        fail_msg("service %s never passed its health check:\n%s", svc->name, text ? text : "");
    }
}

/* Every Redis service, each with the secret at REDIS_PASSWORD_FILE. One at a
 * time: th_free_port's port is only free until someone binds it. */
static void start_redis_services(struct local_stack *s)
{
    char script[128];
    write_secrets(s);
    redis_image_commands(s, script, sizeof(script));
    setenv("REDIS_PASSWORD_FILE", s->secret, 1);
    for (int i = 0; i < compose.nservices; i++)
        if (th_compose_is_redis(&compose.services[i]) && s->nredis < MAX_REDIS)
            start_redis(s, &compose.services[i], script);
    assert_true(s->nredis >= 1);
}

static void stop_redis_services(struct local_stack *s)
{
    for (int i = 0; i < s->nredis; i++)
        if (s->redis[i].pid > 0)
            th_signal(s->redis[i].pid, SIGTERM, 5000);
    unsetenv("REDIS_PASSWORD_FILE");
    unsetenv("REDIS_PORT");
}

static void test_redis_services_require_their_secret_password_with_protected_mode_on(void **state)
{
    (void)state;
    struct local_stack s = {0};
    start_redis_services(&s);
    for (int i = 0; i < s.nredis; i++) {
        const struct local_redis *r = &s.redis[i];
        redisContext *c = redisConnect("127.0.0.1", r->redis.port); /* without the password */
        assert_true(c && !c->err);
        redisReply *rep = redisCommand(c, "PING");
        assert_non_null(rep);
        assert_int_equal(rep->type, REDIS_REPLY_ERROR);
        assert_non_null(strstr(rep->str, "NOAUTH"));
        freeReplyObject(rep);
        redisFree(c);

        c = th_redis_connect(&r->redis);
        assert_true(c && !c->err);
        rep = redisCommand(c, "CONFIG GET protected-mode");
        assert_true(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
        assert_string_equal(rep->element[1]->str, "yes");
        freeReplyObject(rep);
        redisFree(c);

        assert_false(th_proc_has(r->pid, "cmdline", s.password)); /* ps shows it */
        assert_false(th_proc_has(r->pid, "environ", s.password));
    }
    stop_redis_services(&s);
}

/* The user the PostgreSQL service runs as here: postgres when we are root
 * (the server refuses root, as in its image), else the caller. */
static const char *pg_user(void) { return getuid() == 0 ? "postgres" : NULL; }

/* The PostgreSQL image's ENTRYPOINT and HEALTHCHECK, as the files in
 * docker/postgres/ they are copied from (absolute: the server starts in "/"). */
static void postgres_image_commands(struct local_pg *p)
{
    const char *file = "docker/postgres/Dockerfile";
    json_t *entry = th_dockerfile_array(file, "\nENTRYPOINT", "ENTRYPOINT [");
    json_t *health = th_dockerfile_array(file, "\nHEALTHCHECK", "CMD [");
    assert_non_null(entry);
    assert_non_null(health);
    assert_int_equal(json_array_size(health), 2);
    char rel[PATH_MAX];
    snprintf(rel, sizeof(rel), "docker/postgres/%s", json_string_value(json_array_get(entry, 0)));
    assert_non_null(realpath(rel, p->script));
    snprintf(rel, sizeof(rel), "docker/postgres/%s", json_string_value(json_array_get(health, 0)));
    assert_non_null(realpath(rel, p->health[0]));
    snprintf(p->health[1], sizeof(p->health[1]), "%s",
             json_string_value(json_array_get(health, 1)));
    json_decref(entry);
    json_decref(health);
}

/* The image's health check (it reads PGPORT, set by run_postgres). */
static int postgres_healthy(const struct local_pg *p)
{
    const char *argv[] = {p->health[0], p->health[1], NULL};
    return th_run(argv, "/dev/null", 5000) == 0;
}

/* Starts the service's command through the image's entrypoint on its data
 * (made on the first start) and waits for the image's health check. Only the
 * address, the socket's dir, where dynamic shared memory lives (nothing left
 * in /dev/shm if killed) and connection logging are ours. */
static void run_postgres(struct local_stack *s)
{
    struct local_pg *p = &s->pg;
    char data[128], port[16];
    snprintf(data, sizeof(data), "%s/data", p->dir);
    snprintf(port, sizeof(port), "%d", p->port);
    setenv("PGDATA", data, 1);
    setenv("PGPORT", port, 1);
    setenv("POSTGRES_PASSWORD_FILE", s->pg_secret, 1);
    const char *argv[MAX_ARGS + 10] = {p->script};
    int n = 1;
    json_t *v;
    size_t i;
    json_array_foreach(p->svc->command, i, v)
        if (n < MAX_ARGS)
            argv[n++] = json_string_value(v);
    const char *local[] = {"-c", "listen_addresses=127.0.0.1", "-k", p->dir,
                           "-c", "dynamic_shared_memory_type=mmap", "-c", "log_connections=on"};
    for (size_t k = 0; k < sizeof(local) / sizeof(local[0]); k++)
        argv[n++] = local[k];
    argv[n] = NULL;
    p->pid = th_spawn_as(argv, p->log, pg_user());
    assert_true(p->pid > 0);
    th_exit_signal(p->pid, SIGQUIT); /* frees its shared memory, unlike SIGKILL */
    for (int64_t end = th_now_ms() + PG_START_MS; th_now_ms() < end; th_sleep_ms(100)) {
        char state = th_proc_state(p->pid);
        if (state == 0 || state == 'Z' || postgres_healthy(p))
            break;
    }
    if (th_proc_state(p->pid) == 'Z' || !postgres_healthy(p)) {
        char *text = th_read_file(p->log);
        fail_msg("service %s never passed its health check:\n%s", p->svc->name, text ? text : "");
    }
}

/* The PostgreSQL service in <stack dir>/pg, owned by the server's user. */
static void start_postgres_service(struct local_stack *s)
{
    struct local_pg *p = &s->pg;
    if (!th_pg_available())
        fail_msg("no PostgreSQL server installed (make deps installs postgresql-15)");
    p->svc = th_compose_postgres(&compose);
    p->port = th_free_port();
    snprintf(p->dir, sizeof(p->dir), "%s/pg", s->dir);
    snprintf(p->log, sizeof(p->log), "%s/%.40s.log", s->dir, p->svc->name);
    assert_int_equal(mkdir(p->dir, 0700), 0);
    if (pg_user()) {
        struct passwd *pw = getpwnam(pg_user());
        assert_non_null(pw);
        assert_int_equal(chown(p->dir, pw->pw_uid, pw->pw_gid), 0);
    }
    postgres_image_commands(p);
    run_postgres(s);
}

/* SIGINT: the fast shutdown the image's STOPSIGNAL asks for. Keeps the data. */
static void stop_postgres_service(struct local_stack *s)
{
    if (s->pg.pid > 0)
        assert_int_equal(th_signal(s->pg.pid, SIGINT, 15000), 0);
    s->pg.pid = 0;
    unsetenv("PGDATA");
    unsetenv("PGPORT");
    unsetenv("POSTGRES_PASSWORD_FILE");
}

/* A connection to the service's database stock as user, with password
 * (NULL: none; no password file either). The caller owns it, also when it
 * failed (PQstatus). */
static PGconn *pg_connect(const struct local_stack *s, const char *user, const char *password)
{
    char port[16], passfile[96];
    snprintf(port, sizeof(port), "%d", s->pg.port);
    snprintf(passfile, sizeof(passfile), "%s/no-pgpass", s->dir); /* not ~/.pgpass */
    const char *keys[] = {"host", "port", "dbname", "user", "passfile", "connect_timeout",
                          "password", NULL};
    const char *values[] = {"127.0.0.1", port, "stock", user, passfile, "10", password, NULL};
    return PQconnectdbParams(keys, values, 0);
}

static void assert_pg_refuses(const struct local_stack *s, const char *user, const char *password,
                              const char *why)
{
    PGconn *c = pg_connect(s, user, password);
    if (PQstatus(c) == CONNECTION_OK || strstr(PQerrorMessage(c), why) == NULL)
        fail_msg("user %s with %s password: %s, want a refusal saying \"%s\"", user,
                 password ? "a wrong" : "no", PQstatus(c) == CONNECTION_OK ? "connected"
                 : PQerrorMessage(c), why);
    PQfinish(c);
}

/* The first column of sql's first row on the service as stock with the
 * secret's password, into buf; fails the test on an error. */
static const char *pg_value(const struct local_stack *s, const char *sql, char *buf, size_t size)
{
    PGconn *c = pg_connect(s, "stock", s->pg_password);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("stock with the secret's password: %s", PQerrorMessage(c));
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    snprintf(buf, size, "%s", PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
    PQclear(r);
    PQfinish(c);
    return buf;
}

/* The replicas' role needs the secret's password, sent by scram-sha-256; the
 * superuser has no way in over TCP; a restart keeps the data and the role's
 * password (postgres.sh sets it again); the password is on no command line
 * and in no environment of the server. */
static void test_postgres_service_admits_stock_only_with_its_secret_password_by_scram(void **state)
{
    (void)state;
    struct local_stack s = {0};
    char v[64];
    write_secrets(&s);
    start_postgres_service(&s);
    assert_pg_refuses(&s, "stock", NULL, "no password supplied");
    assert_pg_refuses(&s, "stock", "wrong", "password authentication failed");
    assert_pg_refuses(&s, "postgres", s.pg_password, "no pg_hba.conf entry");
    assert_string_equal(pg_value(&s, "SELECT NOT rolsuper AND datdba = r.oid FROM pg_roles r, "
                                     "pg_database WHERE rolname = current_user AND datname = "
                                     "current_database() AND current_user = 'stock'",
                                 v, sizeof(v)),
                        "t"); /* owns its database, and nothing more */
    pg_value(&s, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (42)", v, sizeof(v));
    char *log = th_read_file(s.pg.log);
    assert_non_null(log);
    if (strstr(log, "identity=\"stock\" method=scram-sha-256") == NULL)
        fail_msg("no scram-sha-256 authentication of stock in the server's log:\n%s", log);
    assert_null(strstr(log, s.pg_password));
    free(log);
    assert_false(th_proc_has(s.pg.pid, "cmdline", s.pg_password));
    assert_false(th_proc_has(s.pg.pid, "environ", s.pg_password));

    stop_postgres_service(&s);
    run_postgres(&s);
    assert_string_equal(pg_value(&s, "SELECT n FROM kept", v, sizeof(v)), "42");
    stop_postgres_service(&s);
}

/* Starts one replica service: its command and the template's environment,
 * against the local Redis and PostgreSQL services. */
static void start_replica(const struct local_stack *s, const th_service *svc, th_stockd *out)
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
        setenv(compose.env[e][0], local_value(s, compose.env[e][1], buf, sizeof(buf)), 1);
    }
    char db[192]; /* the harness passes --db, which must say what STOCKD_DB says */
    local_value(s, th_compose_env(&compose, "STOCKD_DB"), db, sizeof(db));
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

static void start_replicas(const struct local_stack *s, struct local_replicas *rs)
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
 * targets (http://<service>:8080) pointed at the local replicas. */
static int run_loadgen_service(const struct local_stack *s, const th_service *svc,
                               th_service *const names[], const th_stockd *replicas,
                               int nreplicas, const char *out)
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
            argv[n + 1] = local_value(s, json_string_value(v), args[n], sizeof(args[0]));
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
        argv[++n] = a;
    }
    argv[n + 1] = NULL;
    return th_run(argv, out, 120000);
}

/* Runs the loadgen service's command against the replicas: it must end
 * VERDICT: PASS with no redis_unavailable answer. */
static void assert_loadgen_service_passes(const struct local_stack *s,
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
    struct local_stack s = {0};
    struct local_replicas rs = {0};
    start_redis_services(&s);
    start_postgres_service(&s);
    start_replicas(&s, &rs);
    for (int r = 0; r < rs.n; r++) { /* PostgreSQL, and every Redis with the password */
        json_t *health = replica_health(&rs, r, "ok");
        assert_string_equal(json_string_value(json_object_get(health, "storageBackend")),
                            "postgres");
        json_t *nodes = json_object_get(health, "redisNodes"), *node;
        size_t i;
        assert_int_equal(json_array_size(nodes), s.nredis);
        json_array_foreach(nodes, i, node)
            assert_true(json_is_true(json_object_get(node, "up")));
        json_decref(health);
    }
    assert_loadgen_service_passes(&s, &rs, "all-up");
    stop_replicas(&rs);
    stop_postgres_service(&s);
    stop_redis_services(&s);
}

/* What make docker-demo shows with docker kill: one Redis of three gone, the
 * lock still held on the other two. */
static void test_one_redis_service_killed_leaves_replicas_degraded_and_loadgen_passing(void **state)
{
    (void)state;
    struct local_stack s = {0};
    struct local_replicas rs = {0};
    start_redis_services(&s);
    start_postgres_service(&s);
    start_replicas(&s, &rs);
    struct local_redis *victim = &s.redis[s.nredis / 2];
    th_signal(victim->pid, SIGKILL, 5000);
    victim->pid = 0;
    char name[64];
    snprintf(name, sizeof(name), "127.0.0.1:%d", victim->redis.port);
    for (int r = 0; r < rs.n; r++) {
        json_t *health = replica_health(&rs, r, "degraded");
        const char *redis = json_string_value(json_object_get(health, "redis"));
        if (!redis || !strstr(redis, name))
            fail_msg("service %s: /health does not name %s (service %s): %s", rs.names[r]->name,
                     name, victim->svc->name, redis ? redis : "(no redis field)");
        json_decref(health);
    }
    assert_loadgen_service_passes(&s, &rs, "one-redis-down");
    stop_replicas(&rs);
    stop_postgres_service(&s);
    stop_redis_services(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redis_services_require_their_secret_password_with_protected_mode_on),
        cmocka_unit_test(test_postgres_service_admits_stock_only_with_its_secret_password_by_scram),
        cmocka_unit_test(test_replicas_and_loadgen_pass_with_the_compose_commands_and_secret),
        cmocka_unit_test(test_one_redis_service_killed_leaves_replicas_degraded_and_loadgen_passing),
    };
    return cmocka_run_group_tests_name("docker_run", tests, load_compose, free_compose);
}
