/* compose_run.c - the compose file's Redis and Sentinel services run here
 * as plain processes, through their images' entrypoints and health checks,
 * with their own commands and secrets, and a PostgreSQL server in place of
 * the Patroni nodes (see compose_run.h). */
#include "tests/support/compose_run.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"

#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <gnutls/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A Redis or Sentinel service's port inside its container. */
static const char *container_port(const th_service *svc)
{
    return th_compose_is_sentinel(svc) ? TH_COMPOSE_SENTINEL_PORT : TH_COMPOSE_REDIS_PORT;
}

/* A value of the template's environment as it is here: a secret lives in the
 * stack's dir, and each service's "name:port" (the Redis servers in
 * STOCKD_REDIS, PostgreSQL in STOCKD_DB's URL) is its local port. */
const char *th_stack_value(const th_local_stack *s, const char *value, char *buf,
                               size_t size)
{
    if (strncmp(value, TH_COMPOSE_SECRETS, strlen(TH_COMPOSE_SECRETS)) == 0) {
        snprintf(buf, size, "%s/%s", s->dir, value + strlen(TH_COMPOSE_SECRETS));
        return buf;
    }
    snprintf(buf, size, "%s", value);
    for (int i = 0; i < s->nredis; i++)
        th_compose_local_addr(buf, size, s->redis[i].svc->name, container_port(s->redis[i].svc),
                              s->redis[i].redis.port);
    for (int i = 0; s->pg.pg.port && i < s->c->nservices; i++)
        if (th_compose_is_patroni(&s->c->services[i]))
            th_compose_local_addr(buf, size, s->c->services[i].name, TH_COMPOSE_PG_PORT,
                                  s->pg.pg.port);
    return buf;
}

/* REDIS_PORT and SENTINEL_CONF, as redis.sh reads them for r. */
static void redis_env(const th_local_redis *r)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", r->redis.port);
    setenv("REDIS_PORT", port, 1);
    setenv("SENTINEL_CONF", r->conf, 1);
}

/* The image's health check of one Redis or Sentinel. */
static int redis_healthy(const th_local_stack *s, const th_local_redis *r)
{
    redis_env(r);
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
static void write_tokens(th_local_stack *s)
{
    char path[256], token[64], line[128];
    snprintf(token, sizeof(token), "op-%d-%lld-token", (int)getpid(), (long long)th_now_ms());
    write_secret_file(th_stack_value(s, TH_COMPOSE_SECRETS "operator-token", path, sizeof(path)),
                      token);
    unsigned char d[32];
    assert_int_equal(gnutls_hash_fast(GNUTLS_DIG_SHA256, token, strlen(token), d), 0);
    int n = snprintf(line, sizeof(line), "operator demo sha256:");
    for (int i = 0; i < 32; i++)
        n += snprintf(line + n, sizeof(line) - (size_t)n, "%02x", d[i]);
    const char *file = th_compose_env(s->c, "STOCKD_API_TOKENS_FILE");
    assert_non_null(file);
    write_secret_file(th_stack_value(s, file, path, sizeof(path)), line);
}

/* The stack's dir with its secrets: redis-password and the one the
 * replicas' STOCKD_DB_PASSWORD_FILE names, each its own password, and the
 * operator's token with the tokens file. */
void th_stack_init(th_local_stack *s, const th_compose *c)
{
    memset(s, 0, sizeof(*s));
    s->c = c;
    assert_int_equal(th_tempdir("compose", s->dir, sizeof(s->dir)), 0);
    assert_int_equal(chmod(s->dir, 0711), 0);
    snprintf(s->password, sizeof(s->password), "test-%d-%lld", (int)getpid(),
             (long long)th_now_ms());
    snprintf(s->pg_password, sizeof(s->pg_password), "pg-%d-%lld", (int)getpid(),
             (long long)th_now_ms());
    th_stack_value(s, TH_COMPOSE_SECRETS "redis-password", s->secret, sizeof(s->secret));
    write_secret_file(s->secret, s->password);
    const char *file = th_compose_env(s->c, "STOCKD_DB_PASSWORD_FILE");
    assert_non_null(file);
    th_stack_value(s, file, s->pg_secret, sizeof(s->pg_secret));
    write_secret_file(s->pg_secret, s->pg_password);
    write_tokens(s);
}

/* The Redis image's ENTRYPOINT (into script) and HEALTHCHECK (into s->health),
 * as the files in docker/redis/ they are copied from. */
static void redis_image_commands(th_local_stack *s, char *script, size_t size)
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

/* A Redis or Sentinel service's command as it runs here, after script in
 * argv: a service's name becomes 127.0.0.1, and its port inside its
 * container right after it, its local port (into ports). Its length. */
static int local_command(const th_local_stack *s, const th_service *svc, const char *argv[],
                         char ports[][16])
{
    const th_local_redis *named = NULL;
    int n = 1;
    json_t *v;
    size_t i;
    json_array_foreach(svc->command, i, v) {
        const char *a = json_string_value(v);
        if (named && strcmp(a, container_port(named->svc)) == 0 && i < TH_STACK_MAX_ARGS) {
            snprintf(ports[i], sizeof(ports[i]), "%d", named->redis.port);
            a = ports[i];
        }
        named = NULL;
        for (int r = 0; r < s->nredis; r++)
            if (strcmp(a, s->redis[r].svc->name) == 0)
                named = &s->redis[r], a = "127.0.0.1";
        if (n < TH_STACK_MAX_ARGS)
            argv[n++] = a;
    }
    return n;
}

/* Starts one Redis or Sentinel service's command through the image's
 * entrypoint on a port of its own, and waits until it answers PING (a
 * Sentinel's health check also needs the others: start_redis_services). */
static void start_redis(th_local_stack *s, const th_service *svc, const char *script)
{
    th_local_redis *r = &s->redis[s->nredis++];
    char log[sizeof(r->conf)], ports[TH_STACK_MAX_ARGS][16];
    r->svc = svc;
    r->redis.port = th_free_port();
    snprintf(r->redis.password, sizeof(r->redis.password), "%s", s->password);
    snprintf(log, sizeof(log), "%s/%s-sentinel.conf", s->dir, svc->name);
    memcpy(r->conf, log, sizeof(r->conf));
    redis_env(r);

    const char *argv[TH_STACK_MAX_ARGS + 6] = {script};
    int n = local_command(s, svc, argv, ports);
    const char *local[] = {"--bind", "127.0.0.1", "--dir", s->dir}; /* only these are ours */
    for (size_t k = 0; k < 4; k++)
        argv[n++] = local[k];
    argv[n] = NULL;
    snprintf(log, sizeof(log), "%s/%s.log", s->dir, svc->name);
    r->pid = th_spawn(argv, log);
    assert_true(r->pid > 0);
    for (int64_t end = th_now_ms() + 10000; th_now_ms() < end; th_sleep_ms(50)) {
        redisContext *c = th_redis_connect(&r->redis);
        redisReply *rep = c && !c->err ? redisCommand(c, "PING") : NULL;
        int up = rep && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;
        freeReplyObject(rep);
        redisFree(c);
        if (up)
            return;
    }
    char *text = th_read_file(log);
    fail_msg("service %s never answered PING:\n%s", svc->name, text ? text : "");
}

/* Every Redis service, the primary first, then every Sentinel, each with the
 * secret at REDIS_PASSWORD_FILE, then their health checks. One at a time:
 * th_free_port's port is only free until someone binds it. */
void th_stack_start_redis(th_local_stack *s)
{
    char script[128];
    redis_image_commands(s, script, sizeof(script));
    setenv("REDIS_PASSWORD_FILE", s->secret, 1);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->c->nservices; i++) {
            const th_service *svc = &s->c->services[i];
            if ((pass ? th_compose_is_sentinel(svc) : th_compose_is_redis(svc)) &&
                s->nredis < TH_STACK_MAX_REDIS)
                start_redis(s, svc, script);
        }
    assert_true(s->nredis >= 1);
    for (int i = 0; i < s->nredis; i++) {
        const th_local_redis *r = &s->redis[i];
        if (th_compose_is_sentinel(r->svc))
            snprintf(s->master, sizeof(s->master), "%s", th_compose_arg(r->svc, "monitor", 0));
        int64_t end = th_now_ms() + 30000; /* Sentinels: until they know each other */
        while (!redis_healthy(s, r) && th_now_ms() < end)
            th_sleep_ms(100);
        if (!redis_healthy(s, r)) {
            char log[sizeof(r->conf)];
            snprintf(log, sizeof(log), "%s/%s.log", s->dir, r->svc->name);
            char *text = th_read_file(log);
            fail_msg("service %s never passed its health check:\n%s", r->svc->name,
                     text ? text : "");
        }
    }
}

void th_stack_stop_redis(th_local_stack *s)
{
    for (int i = 0; i < s->nredis; i++)
        if (s->redis[i].pid > 0)
            th_signal(s->redis[i].pid, SIGTERM, 5000);
    unsetenv("REDIS_PASSWORD_FILE");
    unsetenv("REDIS_PORT");
    unsetenv("SENTINEL_CONF");
}

/* A command's answer on r (with the password), into buf: a status or
 * string, or an array's first two elements as "a b" (ROLE: "slave
 * 127.0.0.1"); "" when it failed. */
const char *th_stack_redis_ask(const th_local_redis *r, char *buf, size_t size,
                             const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisContext *c = th_redis_connect(&r->redis);
    redisReply *rep = c && !c->err ? redisvCommand(c, fmt, ap) : NULL;
    va_end(ap);
    buf[0] = '\0';
    if (rep && (rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_STRING))
        snprintf(buf, size, "%s", rep->str);
    else if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 &&
             rep->element[0]->type == REDIS_REPLY_STRING)
        snprintf(buf, size, "%s %s", rep->element[0]->str,
                 rep->element[1]->type == REDIS_REPLY_STRING ? rep->element[1]->str : "?");
    freeReplyObject(rep);
    redisFree(c);
    return buf;
}

/* The primary the Sentinel r names, "127.0.0.1 <port>", into buf. */
const char *th_stack_sentinel_names(const th_local_stack *s, const th_local_redis *r,
                                  char *buf, size_t size)
{
    return th_stack_redis_ask(r, buf, size, "SENTINEL get-master-addr-by-name %s", s->master);
}

void th_stack_start_pg(th_local_stack *s)
{
    if (!th_pg_available())
        fail_msg("no PostgreSQL server installed (make deps installs postgresql-15)");
    if (th_pg_start(&s->pg.pg) != 0)
        fail_msg("the PostgreSQL server standing in for the Patroni nodes did not start");
}

void th_stack_stop_pg(th_local_stack *s)
{
    th_pg_stop(&s->pg.pg, SIGINT);
}
