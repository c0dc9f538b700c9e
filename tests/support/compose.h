/* compose.h - docker/docker-compose.yml as the Docker suites read it
 * (test_docker checks the files, test_docker_run runs the services as
 * processes): its services and the templates they merge, the x-stockd
 * template's environment and every image. Test helpers only. */
#ifndef TEST_COMPOSE_H
#define TEST_COMPOSE_H

#include <stddef.h>

#include <jansson.h>

#define TH_COMPOSE_FILE "docker/docker-compose.yml"
#define TH_COMPOSE_SECRETS "/run/secrets/" /* where compose mounts a service's secrets */
#define TH_COMPOSE_STOCKD_PORT "8080"      /* the replicas' port inside their containers */
#define TH_COMPOSE_REDIS_PORT "6379"       /* redis.sh's port inside the Redis containers */
#define TH_COMPOSE_SENTINEL_PORT "26379"   /* redis.sh sentinel's, inside the Sentinels' */
#define TH_COMPOSE_PG_PORT "5432" /* PostgreSQL's port inside a Patroni node's container */
#define TH_COMPOSE_MAX_SERVICES 24
#define TH_COMPOSE_MAX_TEMPLATES 4
#define TH_COMPOSE_MAX_ENV 12

/* A service, or a template ("x-NAME: &ANCHOR") that services merge ("<<: *ANCHOR"). */
typedef struct th_service {
    char name[64];                /* the service's, or the template's anchor */
    char build[64];               /* "build: DIR": its image is docker/DIR/Dockerfile */
    char image[64];               /* "image: NAME", or "" */
    char uses[32];                /* the anchor of the template it merges, or "" */
    json_t *entrypoint, *command; /* JSON arrays, NULL when not given */
    char secrets[128];            /* "secrets: [a, b]" as written, or "" */
    char dns_opt[64];             /* "dns_opt: [a]" as written, or "" */
    char healthy[256];            /* ",dep,": depends_on dep with condition service_healthy */
    int volumes;                  /* has a "volumes:" key */
    char network_mode[16];        /* "network_mode: host", or "" */
    char ports[64];               /* "ports: [...]" as written, or "" */
    char env[8][2][64];           /* name, value of its own "environment:" (not a template's) */
    int nenv;
    int in_env;                   /* parsing: inside its environment block */
    int in_depends;               /* parsing: inside its depends_on block */
    char dep[64];                 /* parsing: the depends_on entry being read */
} th_service;

typedef struct th_compose {
    th_service services[TH_COMPOSE_MAX_SERVICES], templates[TH_COMPOSE_MAX_TEMPLATES];
    int nservices, ntemplates;
    char env[TH_COMPOSE_MAX_ENV][2][128]; /* name, value from the template's environment */
    int nenv;
    char images[TH_COMPOSE_MAX_SERVICES + 1][64]; /* every "image:" value */
    int nimages;
    char subnet[32], gateway[32]; /* the default network's ipam config, or "" */
} th_compose;

/* Reads the compose file (from the repository's root) into c, each service
 * with what it merges from its template already in. Its commands are one-line
 * JSON arrays by convention (the file says so). 0, or -1 when the file is
 * missing or has no service. th_compose_free frees the JSON it holds. */
int th_compose_load(th_compose *c);
void th_compose_free(th_compose *c);

/* The replicas merge the x-stockd template (its environment); the Redis
 * servers are built from docker/redis; the Sentinels run that Redis image as
 * "redis.sh sentinel"; the Patroni nodes are built from docker/patroni, whose
 * image runs etcd too ("patroni.sh etcd"). */
int th_compose_is_replica(const th_service *svc);
int th_compose_is_redis(const th_service *svc);
int th_compose_is_sentinel(const th_service *svc);
int th_compose_is_patroni(const th_service *svc);
int th_compose_is_etcd(const th_service *svc);

/* The service called name, or NULL. */
const th_service *th_compose_service(const th_compose *c, const char *name);

/* The value of name in a service's own environment, or NULL. */
const char *th_compose_svc_env(const th_service *svc, const char *name);

/* The value after flag in a service's command ("--replicaof" gives
 * "redis-1"), the next of them with next > 0 ("--replicaof", 1 gives "6379"),
 * or NULL when the command has no such flag. */
const char *th_compose_arg(const th_service *svc, const char *flag, int next);

/* The value of name in the x-stockd template's environment, or NULL. */
const char *th_compose_env(const th_compose *c, const char *name);

/* Replaces every whole "name:port" in buf (not part of a longer host or
 * port) with 127.0.0.1:local: a service's address inside compose's network
 * as it is when the service runs here. */
void th_compose_local_addr(char *buf, size_t size, const char *name, const char *port, int local);

/* The JSON array after `key` in a Dockerfile (e.g. "ENTRYPOINT [", or "CMD ["
 * after "HEALTHCHECK"), or NULL. The caller owns it. */
json_t *th_dockerfile_array(const char *path, const char *after, const char *key);

#endif
