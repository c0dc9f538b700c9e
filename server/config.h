/* config.h - stockd's settings: defaults, then STOCKD_* environment variables,
 * then command-line flags. Filled once at start-up, read-only afterwards. */
#ifndef CONFIG_H
#define CONFIG_H

#include <stdio.h>

enum cfg_lock_mode { CFG_LOCK_REDIS, CFG_LOCK_NONE, CFG_LOCK_ATOMIC };
enum cfg_sync { CFG_SYNC_FULL, CFG_SYNC_NORMAL };

#define CFG_SECRET_MAX 1024 /* longest password read from a file or the environment */

/* A Redis command may take at most lease / CFG_RENEWAL_ROOM: a renewal is due
 * at lease/3, and one that times out must leave room for another. */
#define CFG_RENEWAL_ROOM 6

typedef struct stockd_config {
    const char *bind;        /* listen address */
    int port;
    const char *db;          /* SQLite file, shared by replicas */
    int sync;                /* enum cfg_sync */
    int busy_timeout_ms;     /* SQLite waits this long for a locked database */
    const char *redis_host;
    int redis_port;
    const char *redis_user;          /* ACL user; NULL: Redis's default user */
    const char *redis_password_file; /* the password's file; else STOCKD_REDIS_PASSWORD */
    int redis_timeout_ms;    /* per Redis command; connects get half of it */
    int lock_mode;           /* enum cfg_lock_mode */
    const char *lock_prefix; /* key = prefix + "{" + itemId + "}" */
    int lease_ms, wait_ms, retry_ms, max_renewals;
    int wait_mode;           /* 0 notify, 1 spin: enum dlock_wait_mode */
    int handoff_max, handoff_ms;
    int batch;               /* group commit per hot item (redis mode) */
    int no_fencing;          /* test-only: write without the fencing check */
    int stop_before_write;   /* test-only: SIGSTOP itself once between check and write */
    int allow_work_ms;       /* honour the request's workMs */
    int max_work_ms;         /* cap on workMs */
    const char *instance_id; /* recorded in the ledger; default host:port */
    int max_connections;     /* concurrent HTTP connections (one thread each) */
    int max_per_ip;          /* of which from one client address; 0 = no limit */
    int idle_timeout_s;      /* close a connection idle this long */
    int request_timeout_ms;  /* a request's headers and body must arrive within this */
    int drain_ms;            /* on SIGTERM, wait this long for in-flight requests */
    int log_level;           /* enum log_level */
    char instance_buf[300];  /* storage for the default instance_id */
    char redis_password[CFG_SECRET_MAX + 1]; /* "" when none; never logged or shown */
} stockd_config;

/* Sets every field to its default. */
void cfg_defaults(stockd_config *c);

/* Applies STOCKD_* variables, then flags (argv[1..]), then reads the Redis
 * password from redis_password_file or, without one, STOCKD_REDIS_PASSWORD
 * (which is then removed from the environment). argv and the environment
 * must outlive c (strings are referenced, not copied).
 * Returns 0, 1 when --help was asked (nothing else done), or -1 with err set. */
int cfg_load(stockd_config *c, int argc, char **argv, char *err, size_t errlen);

/* Prints every flag with its variable, default and meaning. */
void cfg_usage(FILE *out);

const char *cfg_lock_mode_name(int mode);

#endif
