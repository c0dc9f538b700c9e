/* compose_run.h - the compose file's Redis and Sentinel services run here as
 * plain processes (test_docker_run.c): each through its image's entrypoint
 * and health check, with the command and secrets of the compose file, a
 * service's name and in-container port turned into 127.0.0.1 and a free port
 * of its own; and one PostgreSQL server standing in for the Patroni nodes. Test helpers only: they fail the running cmocka test
 * on an error. Not thread-safe (they set the environment the scripts read). */
#ifndef TEST_COMPOSE_RUN_H
#define TEST_COMPOSE_RUN_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "tests/support/compose.h"
#include "tests/support/harness.h"
#include "tests/support/pg.h"

#define TH_STACK_MAX_REDIS 8       /* Redis and Sentinel services */
#define TH_STACK_MAX_ARGS 32

/* The compose file's services, run here: secret files, the Redis servers and
 * Sentinels, and PostgreSQL. */
typedef struct th_local_redis {
    const th_service *svc;
    th_redis redis;      /* port and password, for checks; started through redis.sh */
    pid_t pid;           /* 0 once stopped */
    char conf[192];      /* SENTINEL_CONF: a Sentinel's config (never made for a server) */
} th_local_redis;

/* A PostgreSQL server standing in for the Patroni nodes: the replicas'
 * STOCKD_DB names every node, each pointed at it (one server, which takes
 * writes, as a leader does). Patroni itself is not run here: test_patroni
 * runs Debian's Patroni and etcd on loopback under three replicas. */
typedef struct th_local_pg {
    th_pg pg; /* tests/support/pg.h: role stock, database stock */
} th_local_pg;

typedef struct th_local_stack {
    const th_compose *c; /* the compose file it runs */
    char dir[64];
    char secret[128]; /* the redis-password secret, as make docker-demo writes it */
    char password[64];
    char pg_secret[128]; /* the secret STOCKD_DB_PASSWORD_FILE names */
    char pg_password[64];
    th_local_redis redis[TH_STACK_MAX_REDIS];
    int nredis;
    char health[2][128]; /* the Redis image's HEALTHCHECK, as a local command */
    char master[64];     /* the name the Sentinels monitor */
    th_local_pg pg;
} th_local_stack;

/* Empties s for the compose file c and writes both secrets in a temporary
 * dir of its own: redis-password and the one the replicas'
 * STOCKD_DB_PASSWORD_FILE names, each its own password, as make docker-demo
 * writes them. */
void th_stack_init(th_local_stack *s, const th_compose *c);

/* A value of the template's environment as it is here, into buf: a secret
 * lives in the stack's dir, and each started service's "name:port" (the
 * Sentinels in STOCKD_REDIS_SENTINEL, PostgreSQL in STOCKD_DB's URL) is its
 * local port. Returns buf. */
const char *th_stack_value(const th_local_stack *s, const char *value, char *buf, size_t size);

/* Starts every Redis service (the primary first), then every Sentinel, and
 * waits for each one's health check (a Sentinel's: they know each other). */
void th_stack_start_redis(th_local_stack *s);
void th_stack_stop_redis(th_local_stack *s);

/* A command's answer on r (with the password), into buf: a status or
 * string, or an array's first two elements as "a b" (ROLE: "slave
 * 127.0.0.1"); "" when it failed. Returns buf. */
const char *th_stack_redis_ask(const th_local_redis *r, char *buf, size_t size,
                               const char *fmt, ...);

/* The primary the Sentinel r names, "127.0.0.1 <port>", into buf. */
const char *th_stack_sentinel_names(const th_local_stack *s, const th_local_redis *r, char *buf,
                                    size_t size);

/* The PostgreSQL server standing in for the Patroni nodes (th_local_pg):
 * started, each node's "name:5432" in th_stack_value then its port; stopped
 * (SIGINT, fast) by its PID. */
void th_stack_start_pg(th_local_stack *s);
void th_stack_stop_pg(th_local_stack *s);

#endif
