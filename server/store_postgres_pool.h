/* store_postgres_pool.h - the PostgreSQL backend's store (store_postgres_pool.c):
 * a bounded pool of sessions (store_postgres_session.h), and outages. Its
 * user, store_postgres.c, passes in the backend table its store and
 * connections answer to and the statements their sessions run: the pool
 * names nothing above it. */
#ifndef STORE_POSTGRES_POOL_H
#define STORE_POSTGRES_POOL_H

#include <pthread.h>

#include "server/store_backend.h"
#include "server/store_postgres_session.h"

#define POOL_MAX 256

/* A connection as store.c sees it, and its session. */
typedef struct pg_conn {
    struct store_conn base;
    pg_session ses;
} pg_conn;

typedef struct pg_store {
    struct store base;
    store_config cfg;
    pg_session_cfg session; /* what every session of the pool is opened with */
    char *db, *password;
    pthread_mutex_t mu; /* guards the fields below */
    pthread_cond_t freed;
    pg_conn *idle[POOL_MAX];
    int nidle, open; /* pooled, and in all (pooled or in use) */
    /* An outage: since a new session failed to open, requests that need
     * one are answered at once while one thread (reconnector) tries again */
    int64_t down_since;   /* pg_now_ms(), 0 while up */
    char down_err[256];   /* the last attempt's failure */
    char node[80];        /* store_node's: the last session given back's; "" while down */
    int reconnecting, closing, started; /* started: reconnector is to be joined */
    int asked;            /* a request came during the reconnector's pause */
    pthread_t reconnector;
    pthread_cond_t wake;  /* the reconnector's pause, cut short by pg_close */
} pg_store;

#define CONN(c) ((pg_conn *)(c))
#define SESSION(c) (&CONN(c)->ses)

/* 1 when db is PostgreSQL's: a URL (postgresql://, postgres://) or a
 * conninfo (keyword=value ...). */
int pg_serves(const char *db);

/* Opens the store cfg->db names for backend be (its store and connections
 * answer to be): one session, the migrations run on it, and the pool it
 * starts. Sessions run the nstmts statements of stmts, which outlive the
 * store. store_backend.h's open, with its codes. */
int pg_pool_open(const store_config *cfg, const store_backend *be, const struct pg_stmt *stmts,
                 int nstmts, store **out, char *err, size_t errlen);

/* The backend's entries for the pool (store_backend.h). */
void pg_close(store *st);
int pg_get(store *st, store_conn **out, char *err, size_t errlen);
void pg_put(store *st, store_conn *conn);
const char *pg_errstr(const store_conn *c);
void pg_node(store *st, char *buf, size_t size);

#endif
