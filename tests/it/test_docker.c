/* test_docker.c - the Docker files, checked without a Docker engine (make
 * docker-demo runs them in one): the compose file validates (docker-compose
 * config -q, when installed); every image is ours and built FROM
 * debian:bookworm-slim; the replicas use every Redis service, which are
 * independent, and keep their stock in the PostgreSQL service (its password a
 * secret, waiting for its health check, no shared volume); the compose
 * services run here as plain processes with their own commands, environment
 * and secrets: each Redis through its image's entrypoint (password required,
 * protected mode on, the password on no command line, its health check
 * passing), PostgreSQL through its image's (a cluster made on first start,
 * role stock admitted only with the secret's password by scram-sha-256, the
 * superuser not over TCP, data kept across a restart), the replicas healthy
 * against all of them, the loadgen service's command passing against them,
 * also with one Redis killed (no redis_unavailable, /health degraded naming
 * it); and each runtime image installs what its binaries link and what its
 * health check runs. */
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

#include "tests/support/harness.h"
#include "tests/support/pg.h"

#define COMPOSE "docker/docker-compose.yml"
#define DOCKERFILE "docker/Dockerfile"
#define SECRETS "/run/secrets/" /* where compose mounts a service's secrets */
#define STOCKD_PORT "8080"      /* the replicas' port inside their containers */
#define REDIS_PORT_IN "6379"    /* redis.sh's port inside the Redis containers */
#define PG_PORT_IN "5432"       /* postgres.sh's port inside the PostgreSQL container */
#define PG_START_MS 60000       /* initdb included, on a busy machine: only a hang bound */
#define MAX_SERVICES 16
#define MAX_TEMPLATES 4
#define MAX_REDIS 7 /* stockd's limit on --redis servers */
#define MAX_ARGS 32
#define MAX_ENV 8

/* A service, or a template ("x-NAME: &ANCHOR") that services merge ("<<: *ANCHOR"). */
struct service {
    char name[64];                /* the service's, or the template's anchor */
    char build[64];               /* "build: DIR": its image is docker/DIR/Dockerfile */
    char uses[32];                /* the anchor of the template it merges, or "" */
    json_t *entrypoint, *command; /* JSON arrays, NULL when not given */
    char secrets[128];            /* "secrets: [a, b]" as written, or "" */
    char healthy[256];            /* ",dep,": depends_on dep with condition service_healthy */
    int volumes;                  /* has a "volumes:" key */
    int in_depends;               /* parsing: inside its depends_on block */
    char dep[64];                 /* parsing: the depends_on entry being read */
};

static struct service services[MAX_SERVICES], templates[MAX_TEMPLATES];
static int nservices, ntemplates;
static char template_env[MAX_ENV][2][128]; /* name, value from the template's environment */
static int nenv;
static char images[MAX_SERVICES + 1][64]; /* every "image:" value */
static int nimages;

/* A line below a key: an entry of depends_on ("  name:") and its condition. */
static void parse_nested(struct service *cur, const char *key)
{
    char name[64];
    if (!cur->in_depends)
        return;
    if (key[2] != ' ' && sscanf(key, "  %63[a-z0-9-]:", name) == 1)
        snprintf(cur->dep, sizeof(cur->dep), "%s", name);
    else if (strstr(key, "condition: service_healthy") && cur->dep[0] &&
             strlen(cur->healthy) + strlen(cur->dep) + 3 < sizeof(cur->healthy))
        snprintf(cur->healthy + strlen(cur->healthy), sizeof(cur->healthy) - strlen(cur->healthy),
                 "%s%s,", cur->healthy[0] ? "" : ",", cur->dep);
}

/* One line of a service's (indent 4) or a template's (indent 2) own keys. */
static void parse_key(struct service *cur, const char *line, int indent)
{
    for (int i = 0; i < indent; i++)
        if (line[i] != ' ')
            return;
    const char *key = line + indent, *array = strchr(key, '[');
    if (key[0] == ' ') {
        parse_nested(cur, key);
        return;
    }
    cur->in_depends = strncmp(key, "depends_on:", 11) == 0;
    if (strncmp(key, "volumes:", 8) == 0)
        cur->volumes = 1;
    else if (strncmp(key, "secrets: ", 9) == 0)
        sscanf(key + 9, "%127[^\n]", cur->secrets);
    else if (strncmp(key, "<<: *", 5) == 0)
        sscanf(key + 5, "%31s", cur->uses);
    else if (strncmp(key, "build: ", 7) == 0)
        sscanf(key + 7, "%63s", cur->build);
    else if (strncmp(key, "command: ", 9) == 0 && array)
        cur->command = json_loads(array, 0, NULL);
    else if (strncmp(key, "entrypoint: ", 12) == 0 && array)
        cur->entrypoint = json_loads(array, 0, NULL);
}

/* What a service takes from the template it merges, unless it sets it itself. */
static void merge_template(struct service *svc)
{
    for (int t = 0; svc->uses[0] && t < ntemplates; t++) {
        const struct service *from = &templates[t];
        if (strcmp(from->name, svc->uses) != 0)
            continue;
        if (!svc->build[0])
            snprintf(svc->build, sizeof(svc->build), "%s", from->build);
        if (!svc->command && from->command)
            svc->command = json_incref(from->command);
        if (!svc->entrypoint && from->entrypoint)
            svc->entrypoint = json_incref(from->entrypoint);
        if (!svc->secrets[0])
            snprintf(svc->secrets, sizeof(svc->secrets), "%s", from->secrets);
        if (!svc->healthy[0])
            snprintf(svc->healthy, sizeof(svc->healthy), "%s", from->healthy);
        svc->volumes |= from->volumes;
    }
}

/* Reads the parts of the compose file the checks need. Its commands are
 * one-line JSON arrays by convention (the file says so). */
static int load_compose(void **state)
{
    (void)state;
    FILE *f = fopen(COMPOSE, "r");
    if (f == NULL)
        return -1;
    char line[512];
    int in_services = 0, indent = 0;
    struct service *cur = NULL;
    while (fgets(line, sizeof(line), f)) {
        char name[64], value[128];
        if (line[0] != ' ' && line[0] != '#' && line[0] != '\n') /* a top-level key */
            in_services = strncmp(line, "services:", 9) == 0, cur = NULL;
        if (sscanf(line, "x-%*[a-z0-9-]: &%63[a-z0-9-]", name) == 1 &&
            ntemplates < MAX_TEMPLATES) {
            cur = &templates[ntemplates++], indent = 2;
            snprintf(cur->name, sizeof(cur->name), "%s", name);
        }
        if (in_services && line[2] != ' ' && sscanf(line, "  %63[a-z0-9-]:", name) == 1 &&
            nservices < MAX_SERVICES) {
            cur = &services[nservices++], indent = 4;
            snprintf(cur->name, sizeof(cur->name), "%s", name);
        }
        /* the template's environment: "    STOCKD_NAME: value" before services: */
        if (!in_services && sscanf(line, "    %47[A-Z_]: %127s", name, value) == 2 &&
            strncmp(name, "STOCKD_", 7) == 0 && nenv < MAX_ENV) {
            snprintf(template_env[nenv][0], sizeof(template_env[0][0]), "%s", name);
            snprintf(template_env[nenv++][1], sizeof(template_env[0][1]), "%s", value);
        }
        if (strstr(line, " image: ") && nimages <= MAX_SERVICES)
            sscanf(strstr(line, " image: "), " image: %63s", images[nimages++]);
        if (cur)
            parse_key(cur, line, indent);
    }
    fclose(f);
    for (int i = 0; i < nservices; i++)
        merge_template(&services[i]);
    return nservices > 0 ? 0 : -1;
}

static int free_compose(void **state)
{
    (void)state;
    for (int i = 0; i < nservices; i++) {
        json_decref(services[i].command);
        json_decref(services[i].entrypoint);
    }
    for (int i = 0; i < ntemplates; i++) {
        json_decref(templates[i].command);
        json_decref(templates[i].entrypoint);
    }
    return 0;
}

/* The replicas merge the x-stockd template (its environment); the Redis
 * servers are built from docker/redis, PostgreSQL from docker/postgres. */
static int is_replica(const struct service *svc) { return strcmp(svc->uses, "stockd") == 0; }
static int is_redis(const struct service *svc) { return strcmp(svc->build, "redis") == 0; }
static int is_postgres(const struct service *svc) { return strcmp(svc->build, "postgres") == 0; }

/* The one PostgreSQL service; fails the test unless there is exactly one. */
static const struct service *postgres_service(void)
{
    const struct service *found = NULL;
    for (int i = 0; i < nservices; i++)
        if (is_postgres(&services[i])) {
            if (found)
                fail_msg("services %s and %s both build docker/postgres", found->name,
                         services[i].name);
            found = &services[i];
        }
    if (found == NULL)
        fail_msg("no service builds docker/postgres");
    return found;
}

/* Whether a "[a, b]" list names name. */
static int list_has(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = strstr(list, name); p; p = strstr(p + 1, name))
        if (strchr("[, ", p == list ? ' ' : p[-1]) && strchr("], ", p[len]) && p[len])
            return 1;
    return 0;
}

static const char *template_value(const char *name)
{
    for (int e = 0; e < nenv; e++)
        if (strcmp(template_env[e][0], name) == 0)
            return template_env[e][1];
    return NULL;
}

/* The JSON array after `key` in a Dockerfile (e.g. "ENTRYPOINT [", or "CMD ["
 * after "HEALTHCHECK"), or NULL. The caller owns it. */
static json_t *dockerfile_array(const char *path, const char *after, const char *key)
{
    char *text = th_read_file(path);
    const char *p = text ? strstr(text, after) : NULL;
    p = p ? strstr(p, key) : NULL;
    json_t *a = p ? json_loads(strchr(p, '['), JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    free(text);
    return a;
}

static void test_compose_file_validates(void **state)
{
    (void)state;
    if (!th_have("docker-compose"))
        th_skip("docker-compose is not installed (make docker-demo installs Debian's package)");
    const char *argv[] = {"docker-compose", "-f", COMPOSE, "config", "-q", NULL};
    assert_int_equal(th_run(argv, NULL, 60000), 0);
    const char *with_profile[] = {"docker-compose", "-f", COMPOSE, "--profile", "loadgen",
                                  "config", "-q", NULL};
    assert_int_equal(th_run(with_profile, NULL, 60000), 0);
}

/* Every FROM in a Dockerfile names debian:bookworm-slim or an earlier stage. */
static void assert_from_bookworm_slim(const char *path)
{
    char *text = th_read_file(path);
    assert_non_null(text);
    char stages[8][64];
    int nstages = 0, froms = 0;
    for (const char *p = text; (p = strstr(p, "\nFROM ")) != NULL; p++, froms++) {
        char image[64] = "", stage[64] = "";
        sscanf(p, "\nFROM %63s AS %63s", image, stage);
        int known = strcmp(image, "debian:bookworm-slim") == 0;
        for (int i = 0; i < nstages; i++)
            known |= strcmp(image, stages[i]) == 0;
        if (!known)
            fail_msg("%s: FROM %s: the demo's images need nothing but Debian's", path, image);
        if (stage[0] && nstages < 8)
            snprintf(stages[nstages++], sizeof(stages[0]), "%s", stage);
    }
    assert_true(froms > 0);
    free(text);
}

static void test_every_image_is_ours_and_built_from_debian_bookworm_slim(void **state)
{
    (void)state;
    assert_true(nimages >= 2);
    for (int i = 0; i < nimages; i++)
        if (strncmp(images[i], "stocklock", 9) != 0)
            fail_msg("image %s is not one the demo builds (stocklock*)", images[i]);
    assert_from_bookworm_slim(DOCKERFILE);
    for (int i = 0; i < nservices; i++)
        if (services[i].build[0]) {
            char path[160];
            snprintf(path, sizeof(path), "docker/%s/Dockerfile", services[i].build);
            assert_from_bookworm_slim(path);
        }
}

/* Each replica holds its locks on a majority of the Redis services: its
 * STOCKD_REDIS names every one once (an odd number, at least three), and no
 * Redis replicates another (Redlock needs independent servers). */
static void test_replicas_use_every_redis_service_and_each_redis_stands_alone(void **state)
{
    (void)state;
    const char *list = template_value("STOCKD_REDIS");
    if (list == NULL)
        fail_msg("the x-stockd template sets no STOCKD_REDIS");
    char node[80], padded[160];
    int nredis = 0;
    snprintf(padded, sizeof(padded), ",%s,", list); /* every element between commas */
    for (int i = 0; i < nservices; i++) {
        if (!is_redis(&services[i]))
            continue;
        nredis++;
        snprintf(node, sizeof(node), ",%.63s:%s,", services[i].name, REDIS_PORT_IN);
        char *text = json_dumps(services[i].command, 0);
        if (strstr(padded, node) == NULL)
            fail_msg("STOCKD_REDIS %s leaves out service %s", list, services[i].name);
        if (strstr(text, "replicaof") || strstr(text, "slaveof"))
            fail_msg("service %s replicates another Redis: %s", services[i].name, text);
        free(text);
    }
    int listed = 1;
    for (const char *p = list; *p; p++)
        listed += *p == ',';
    assert_int_equal(listed, nredis); /* and nothing else, none twice */
    assert_true(nredis >= 3 && nredis % 2 == 1);
}

/* The replicas keep stock and ledger in the PostgreSQL service, as role
 * stock with the password from the secret the server takes too, start only
 * once its health check passes, and share no volume: the database is the one
 * thing they share. */
static void test_replicas_keep_their_stock_in_the_postgres_service_and_share_no_volume(void **state)
{
    (void)state;
    const struct service *pg = postgres_service();
    char want[160];
    snprintf(want, sizeof(want), "postgresql://stock@%s:%s/stock", pg->name, PG_PORT_IN);
    const char *db = template_value("STOCKD_DB"), *file = template_value("STOCKD_DB_PASSWORD_FILE");
    if (db == NULL || strcmp(db, want) != 0)
        fail_msg("the x-stockd template's STOCKD_DB is %s, want %s", db ? db : "unset", want);
    if (file == NULL || strncmp(file, SECRETS, strlen(SECRETS)) != 0)
        fail_msg("the x-stockd template's STOCKD_DB_PASSWORD_FILE is %s, want a secret in %s",
                 file ? file : "unset", SECRETS);
    const char *secret = file + strlen(SECRETS);
    if (!list_has(pg->secrets, secret))
        fail_msg("service %s does not take the secret %s (secrets: %s)", pg->name, secret,
                 pg->secrets);
    assert_true(pg->volumes); /* its data outlives the container */
    char dep[80];
    snprintf(dep, sizeof(dep), ",%s,", pg->name);
    int nreplicas = 0;
    for (int i = 0; i < nservices; i++) {
        const struct service *svc = &services[i];
        if (!is_replica(svc))
            continue;
        nreplicas++;
        if (!list_has(svc->secrets, secret))
            fail_msg("service %s does not take the secret %s (secrets: %s)", svc->name, secret,
                     svc->secrets);
        if (strstr(svc->healthy, dep) == NULL)
            fail_msg("service %s does not wait for %s to be healthy (healthy: %s)", svc->name,
                     pg->name, svc->healthy);
        if (svc->volumes)
            fail_msg("service %s mounts a volume: the replicas share only the database",
                     svc->name);
    }
    assert_int_equal(nreplicas, 3);
}

/* The compose file's services, run here: secret files, the Redis servers and
 * PostgreSQL. */
struct local_redis {
    const struct service *svc;
    th_redis redis; /* port and password, for checks; started through redis.sh */
    pid_t pid;      /* 0 once stopped */
};

/* The PostgreSQL service, started through postgres.sh as the server's user. */
struct local_pg {
    const struct service *svc;
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

/* Replaces every whole "name:port" in buf (not part of a longer host or
 * port) with 127.0.0.1:local. */
static void replace_host(char *buf, size_t size, const char *name, const char *port, int local)
{
    char from[80], to[32], rest[512];
    snprintf(from, sizeof(from), "%.63s:%s", name, port);
    snprintf(to, sizeof(to), "127.0.0.1:%d", local);
    size_t len = strlen(from);
    for (char *p = strstr(buf, from); p; p = strstr(p + 1, from)) {
        if ((p > buf && strchr(",@/", p[-1]) == NULL) || (p[len] >= '0' && p[len] <= '9'))
            continue;
        snprintf(rest, sizeof(rest), "%s", p + len);
        snprintf(p, size - (size_t)(p - buf), "%s%s", to, rest);
    }
}

/* A value of the template's environment as it is here: a secret lives in the
 * stack's dir, and each service's "name:port" (the Redis servers in
 * STOCKD_REDIS, PostgreSQL in STOCKD_DB's URL) is its local port. */
static const char *local_value(const struct local_stack *s, const char *value, char *buf,
                               size_t size)
{
    if (strncmp(value, SECRETS, strlen(SECRETS)) == 0) {
        snprintf(buf, size, "%s/%s", s->dir, value + strlen(SECRETS));
        return buf;
    }
    snprintf(buf, size, "%s", value);
    for (int i = 0; i < s->nredis; i++)
        replace_host(buf, size, s->redis[i].svc->name, REDIS_PORT_IN, s->redis[i].redis.port);
    if (s->pg.svc)
        replace_host(buf, size, s->pg.svc->name, PG_PORT_IN, s->pg.port);
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
    local_value(s, SECRETS "redis-password", s->secret, sizeof(s->secret));
    write_secret_file(s->secret, s->password);
    const char *file = template_value("STOCKD_DB_PASSWORD_FILE");
    assert_non_null(file);
    local_value(s, file, s->pg_secret, sizeof(s->pg_secret));
    write_secret_file(s->pg_secret, s->pg_password);
}

/* The Redis image's ENTRYPOINT (into script) and HEALTHCHECK (into s->health),
 * as the files in docker/redis/ they are copied from. */
static void redis_image_commands(struct local_stack *s, char *script, size_t size)
{
    json_t *entry = dockerfile_array("docker/redis/Dockerfile", "\nENTRYPOINT", "ENTRYPOINT [");
    json_t *health = dockerfile_array("docker/redis/Dockerfile", "\nHEALTHCHECK", "CMD [");
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
static void start_redis(struct local_stack *s, const struct service *svc, const char *script)
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
    for (int i = 0; i < nservices; i++)
        if (is_redis(&services[i]) && s->nredis < MAX_REDIS)
            start_redis(s, &services[i], script);
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

/* Whether /proc/<pid>/<file> (NUL-separated) contains text. */
static int proc_file_has(pid_t pid, const char *file, const char *text)
{
    char path[64], buf[16384];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    return memmem(buf, n, text, strlen(text)) != NULL;
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

        assert_false(proc_file_has(r->pid, "cmdline", s.password)); /* ps shows it */
        assert_false(proc_file_has(r->pid, "environ", s.password));
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
    json_t *entry = dockerfile_array("docker/postgres/Dockerfile", "\nENTRYPOINT", "ENTRYPOINT [");
    json_t *health = dockerfile_array("docker/postgres/Dockerfile", "\nHEALTHCHECK", "CMD [");
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
    p->svc = postgres_service();
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
    assert_false(proc_file_has(s.pg.pid, "cmdline", s.pg_password));
    assert_false(proc_file_has(s.pg.pid, "environ", s.pg_password));

    stop_postgres_service(&s);
    run_postgres(&s);
    assert_string_equal(pg_value(&s, "SELECT n FROM kept", v, sizeof(v)), "42");
    stop_postgres_service(&s);
}

/* Starts one replica service: its command and the template's environment,
 * against the local Redis and PostgreSQL services. */
static void start_replica(const struct local_stack *s, const struct service *svc, th_stockd *out)
{
    const char *extra[MAX_ARGS + 1];
    int n = 0;
    json_t *v;
    size_t i;
    json_array_foreach(svc->command, i, v)
        if (n < MAX_ARGS)
            extra[n++] = json_string_value(v);
    extra[n] = NULL;
    for (int e = 0; e < nenv; e++) {
        char buf[192];
        setenv(template_env[e][0], local_value(s, template_env[e][1], buf, sizeof(buf)), 1);
    }
    char db[192]; /* the harness passes --db, which must say what STOCKD_DB says */
    local_value(s, template_value("STOCKD_DB"), db, sizeof(db));
    if (th_stockd_start(out, &s->redis[0].redis, db, s->dir, extra) != 0) {
        char *log = th_read_file(out->log);
        fail_msg("service %s did not start:\n%s", svc->name, log ? log : "");
    }
    for (int e = 0; e < nenv; e++)
        unsetenv(template_env[e][0]);
}

/* The replica services, and the loadgen service that runs against them. */
struct local_replicas {
    th_stockd replica[MAX_SERVICES];
    struct service *names[MAX_SERVICES];
    int n;
    const struct service *loadgen;
};

static void start_replicas(const struct local_stack *s, struct local_replicas *rs)
{
    for (int i = 0; i < nservices; i++) {
        if (is_replica(&services[i])) {
            start_replica(s, &services[i], &rs->replica[rs->n]);
            rs->names[rs->n++] = &services[i];
        }
        if (strcmp(services[i].name, "loadgen") == 0)
            rs->loadgen = &services[i];
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

/* The loadgen service's command, its targets (http://<service>:8080) pointed
 * at the local replicas. */
static int run_loadgen_service(const struct service *svc, struct service *const names[],
                               const th_stockd *replicas, int nreplicas, const char *out)
{
    char bin[256], args[MAX_ARGS][512];
    const char *argv[MAX_ARGS + 1] = {bin};
    int n = 0;
    snprintf(bin, sizeof(bin), "%s/%s", th_build_dir(),
             json_string_value(json_array_get(svc->entrypoint, 0)));
    json_t *v;
    size_t i;
    json_array_foreach(svc->command, i, v) {
        if (n + 1 >= MAX_ARGS)
            break;
        char *a = args[n];
        snprintf(a, sizeof(args[0]), "%s", json_string_value(v));
        for (int r = 0; r < nreplicas; r++) {
            char from[96], rest[512], *p;
            snprintf(from, sizeof(from), "http://%s:%s", names[r]->name, STOCKD_PORT);
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
    int status = run_loadgen_service(rs->loadgen, rs->names, rs->replica, rs->n, out);
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

/* The package that ships a shared library, e.g. libhiredis0.14, or "". */
static void package_of(const char *lib, char *pkg, size_t size)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "dpkg -S '*/%s' 2>/dev/null | head -n 1 | cut -d: -f1", lib);
    FILE *p = popen(cmd, "r");
    pkg[0] = '\0';
    if (p && fgets(pkg, (int)size, p))
        pkg[strcspn(pkg, "\n")] = '\0';
    if (p)
        pclose(p);
}

/* Whether pkg is one of the libraries the runtime stage installs by name:
 * what stockd and loadgen link, not what those pull in. */
static int named_library(const char *pkg)
{
    static const char *const ours[] = {"libhiredis", "libmicrohttpd", "libsqlite3", "libpq",
                                       "libjansson", "libhttp-parser", NULL};
    for (int i = 0; ours[i]; i++)
        if (strncmp(pkg, ours[i], strlen(ours[i])) == 0)
            return 1;
    return 0;
}

/* Every lib* package the runtime stage's apt-get line names must be one that
 * a binary needs (in needed, " pkg " words): none left behind by a binary
 * that stopped linking it (libcurl4 when loadgen dropped libcurl). */
static void assert_no_library_unneeded(const char *runtime, const char *needed)
{
    const char *install = strstr(runtime, "apt-get install");
    assert_non_null(install);
    const char *end = strstr(install, "&&");
    for (const char *p = strstr(install, " lib"); p && (!end || p < end);
         p = strstr(p + 1, " lib")) {
        char word[140];
        snprintf(word, sizeof(word), " %.*s ", (int)strcspn(p + 1, " \\\n"), p + 1);
        if (strstr(needed, word) == NULL)
            fail_msg("the runtime stage installs%sbut neither stockd nor loadgen links it", word);
    }
}

static void test_runtime_images_install_their_libraries_and_health_check_tools(void **state)
{
    (void)state;
    if (!th_have("dpkg") || !th_have("ldd"))
        th_skip("needs dpkg and ldd to map libraries to Debian packages");
    char *dockerfile = th_read_file(DOCKERFILE);
    const char *runtime = strstr(dockerfile, "\nFROM debian:bookworm-slim\n");
    assert_non_null(runtime); /* the second, unnamed stage */
    const char *bins[] = {"stockd", "loadgen"};
    char needed[2048] = " ";
    for (int b = 0; b < 2; b++) {
        char cmd[256], line[512];
        snprintf(cmd, sizeof(cmd), "ldd %s/%s", th_build_dir(), bins[b]);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        while (fgets(line, sizeof(line), p)) {
            char lib[128], pkg[128];
            if (sscanf(line, " %127s =>", lib) != 1 || strstr(lib, "libc.so") ||
                strstr(lib, "linux-vdso") || strstr(lib, "libm.so") || strstr(lib, "ld-linux"))
                continue;
            package_of(lib, pkg, sizeof(pkg));
            if (!pkg[0] || strstr(line, "libasan") || strstr(line, "libtsan") ||
                strstr(line, "libubsan"))
                continue; /* not from a package we ship, or a sanitizer build's runtime */
            if (!named_library(pkg))
                continue; /* pulled in by those (the image installs them with their deps) */
            char word[140];
            snprintf(word, sizeof(word), " %s ", pkg);
            if (strstr(needed, word) == NULL && strlen(needed) + strlen(pkg) + 2 < sizeof(needed))
                strcat(strcat(needed, pkg), " ");
            if (strstr(runtime, word) == NULL)
                fail_msg("%s needs %s (package %s), which the runtime stage does not install",
                         bins[b], lib, pkg);
        }
        pclose(p);
    }
    assert_non_null(strstr(needed, " libhttp-parser2.9 ")); /* loadgen's, so ldd was read */
    assert_no_library_unneeded(runtime, needed);
    assert_non_null(strstr(runtime, " curl ")); /* the HEALTHCHECK's tool */
    assert_non_null(strstr(runtime, "USER stockd"));
    free(dockerfile);

    char *redis = th_read_file("docker/redis/Dockerfile");
    assert_non_null(redis);
    assert_non_null(strstr(redis, " redis-server "));
    assert_non_null(strstr(redis, " redis-tools ")); /* redis-cli, for redis.sh --health */
    assert_non_null(strstr(redis, "USER redis"));
    free(redis);

    char *pg = th_read_file("docker/postgres/Dockerfile");
    assert_non_null(pg);
    assert_non_null(strstr(pg, " postgresql-15 ")); /* initdb, postgres, pg_isready */
    assert_non_null(strstr(pg, "USER postgres"));
    assert_non_null(strstr(pg, "STOPSIGNAL SIGINT")); /* docker stop: fast, not smart */
    free(pg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compose_file_validates),
        cmocka_unit_test(test_every_image_is_ours_and_built_from_debian_bookworm_slim),
        cmocka_unit_test(test_replicas_use_every_redis_service_and_each_redis_stands_alone),
        cmocka_unit_test(test_replicas_keep_their_stock_in_the_postgres_service_and_share_no_volume),
        cmocka_unit_test(test_redis_services_require_their_secret_password_with_protected_mode_on),
        cmocka_unit_test(test_postgres_service_admits_stock_only_with_its_secret_password_by_scram),
        cmocka_unit_test(test_replicas_and_loadgen_pass_with_the_compose_commands_and_secret),
        cmocka_unit_test(test_one_redis_service_killed_leaves_replicas_degraded_and_loadgen_passing),
        cmocka_unit_test(test_runtime_images_install_their_libraries_and_health_check_tools),
    };
    return cmocka_run_group_tests_name("docker", tests, load_compose, free_compose);
}
