/* config.h - stockd's settings: defaults (each module's own), then STOCKD_*
 * environment variables, then command-line flags. Filled once at start-up,
 * read-only afterwards. */
#ifndef CONFIG_H
#define CONFIG_H

#include <stdio.h>

#include "server/http.h"
#include "server/service.h"

#define CFG_SECRET_MAX 1024 /* longest password read from a file or the environment */

/* A Redis command may take at most lease / CFG_RENEWAL_ROOM: a renewal is due
 * at lease/3, and one that times out must leave room for another. */
#define CFG_RENEWAL_ROOM 6

typedef struct stockd_config {
    service_config service;
    http_config http;
    int probe_port;                  /* a listener of its own for /health and /metrics; 0: none */
    int drain_ms;                    /* on SIGTERM, wait this long for in-flight requests */
    int drain_notice_ms;             /* ...after serving this long with /health at 503 */
    int db_wait_s;                   /* at start-up, wait this long for a database server */
    int log_level;                   /* enum log_level */
    int log_format;                  /* enum log_format */
    int no_fencing;                  /* test only: service.fencing = 0 */
    const char *redis_password_file; /* the password's file; else STOCKD_REDIS_PASSWORD */
    const char *redis_servers;       /* --redis host:port[,...]: one, or a quorum of them */
    const char *redis_cluster;       /* --redis-cluster host:port[,...]: a cluster's seeds */
    const char *db_password_file;    /* a database server's password's file */
    const char *redis_sentinels;     /* --redis-sentinel host:port[,...] */
    const char *sentinel_password_file; /* the Sentinels' own password's file */
    const char *api_tokens_file;     /* who may do what (auth.h); NULL: every route open */
    const char *trusted_proxies;     /* --trusted-proxies' text; cfg_load parses it into
                                      * proxies (http.trusted then points at it) */
    proxies proxies;
    char instance_buf[300];          /* storage for the default instance id */
    char redis_password[CFG_SECRET_MAX + 1]; /* "" when none; never logged or shown */
    char db_password[CFG_SECRET_MAX + 1];    /* likewise */
    char sentinel_password[CFG_SECRET_MAX + 1]; /* likewise */
    /* HTTPS: both files or neither; cfg_load reads and checks them into tls
     * (http.tls then points at it), which the caller frees (tls_pem_free) */
    const char *tls_cert_file, *tls_key_file;
    tls_pem tls;
} stockd_config;

/* Sets every field to its default. */
void cfg_defaults(stockd_config *c);

/* Applies STOCKD_* variables, then flags (argv[1..]), then reads the Redis
 * password from redis_password_file or, without one, STOCKD_REDIS_PASSWORD
 * (which is then removed from the environment), and checks the whole; with
 * --tls-cert and --tls-key, reads them into c->tls (tls.h's checks). argv
 * and the environment must outlive c (strings are referenced, not copied).
 * Returns 0, 1 when --help was asked (nothing else done), or -1 with err set. */
int cfg_load(stockd_config *c, int argc, char **argv, char *err, size_t errlen);

/* Prints every flag with its variable, default and meaning. */
void cfg_usage(FILE *out);

/* One flag as --help and the man page (man/mangen.c) show it. */
typedef struct cfg_flag_doc {
    const char *flag;  /* without the leading "--" */
    const char *arg;   /* the value's name ("N", "VALUE"), or "" for a switch */
    const char *env;   /* its STOCKD_* variable */
    const char *help;  /* what it does, one paragraph */
    char def[64];      /* its default, as text ("(unset)" for none) */
    char choices[128]; /* "a|b|c" when it takes one of a list, else "" */
} cfg_flag_doc;

/* How many flags there are; cfg_flag_describe fills d for flag i
 * (0 <= i < cfg_flag_count()), in --help's order. Strings other than def
 * and choices are static. */
size_t cfg_flag_count(void);
void cfg_flag_describe(size_t i, cfg_flag_doc *d);

#endif
