/* store_postgres_internal.h - what the PostgreSQL backend's files share:
 * store_postgres.c (the store's operations in SQL) over
 * store_postgres_pool.c (the store, its pool, outages) over
 * store_postgres_session.c (sessions, migrations, errors, statements run, a
 * COMMIT in doubt) over store_postgres_io.c (libpq's exchanges, bounded).
 * Not for other modules: the store's interface is store.h. */
#ifndef STORE_POSTGRES_INTERNAL_H
#define STORE_POSTGRES_INTERNAL_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "store_backend.h"

#define POOL_MAX 256
#define PARAMS_MAX 7

enum stmt_id {
    ST_PING, ST_ITEM_INSERT, ST_ITEM_GET, ST_ITEM_LIST,
    ST_SET_STOCK, ST_SET_STOCK_FENCED, ST_STOCK_READ, ST_ROW_FENCE, ST_STOCK_CLAIM,
    ST_STOCK_WRITE_CLAIMED,
    ST_STOCK_TAKE, ST_STOCK_LOCK, ST_ORDER_INSERT, ST_LINE_INSERT, ST_ORDER_BY_REQUEST,
    ST_ORDER_GET, ST_XACT_STATUS, ST_LINES_OF_ORDER, ST_LINES_OF_ITEM,
    ST_COUNT
};

/* Each statement with its parameters' types: i = bigint, t = text. Typed
 * up front, so that a statement may leave one unused (update_item binds
 * (id, value, fence, seq) to all of its kind). */

/* A statement: a name for errors, its SQL, its parameters' types (i =
 * bigint, t = text). Typed up front, so that a statement may leave one
 * unused (update_item binds (id, value, fence, seq) to all of its kind). */
struct pg_stmt {
    const char *what, *sql, *types;
};

extern const struct pg_stmt pg_stmts[ST_COUNT]; /* store_postgres.c */

typedef struct pg_store pg_store;

typedef struct pg_conn {
    struct store_conn base;
    pg_store *s;
    PGconn *pg;
    int prepared[ST_COUNT];
    int in_tx;
    int pid;                /* the server's process for this session... */
    char started[48];       /* ...and when it started: together, this session */
    int64_t tx_xid;         /* the open transaction's id (xid8), or 0 */
    int savepoint;          /* the open transaction has one */
    int tx_rc;              /* the first failure in the open transaction, which aborted it */
    int unreachable;        /* the last session_open failed to connect... */
    int refused;            /* ...on a refusal waiting can't mend */
    char err[256], tx_err[256]; /* tx_err: that failure's text */
} pg_conn;

struct pg_store {
    struct store base;
    store_config cfg;
    char *db, *password;
    pthread_mutex_t mu; /* guards the fields below */
    pthread_cond_t freed;
    pg_conn *idle[POOL_MAX];
    int nidle, open; /* pooled, and in all (pooled or in use) */
    /* An outage: since a new session failed to open, requests that need
     * one are answered at once while one thread (reconnector) tries again */
    int64_t down_since;   /* pg_now_ms(), 0 while up */
    char down_err[256];   /* the last attempt's failure */
    int reconnecting, closing, started; /* started: reconnector is to be joined */
    int asked;            /* a request came during the reconnector's pause */
    pthread_t reconnector;
    pthread_cond_t wake;  /* the reconnector's pause, cut short by pg_close */
};

#define CONN(c) ((pg_conn *)(c))

/* Text parameters of one statement (NULL for SQL NULL). */
struct params {
    int n;
    const char *v[PARAMS_MAX];
    char num[PARAMS_MAX][24];
};

static inline void p_int(struct params *p, int64_t v)
{
    snprintf(p->num[p->n], sizeof(p->num[0]), "%lld", (long long)v);
    p->v[p->n] = p->num[p->n];
    p->n++;
}

static inline void p_text(struct params *p, const char *text) { p->v[p->n++] = text; }

static inline int64_t col_int(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static inline void col_text(char *dst, size_t size, const PGresult *r, int row, int col)
{
    snprintf(dst, size, "%s", PQgetvalue(r, row, col));
}

/* ---- store_postgres_io.c: libpq's exchanges, each bounded by a deadline ---- */

/* Monotonic milliseconds: the clock deadlines are on. */
int64_t pg_now_ms(void);

/* Connects (keys and values as PQconnectdbParams takes them, dbname
 * expanded) by libpq's non-blocking calls, waiting for the server until
 * deadline at most (only a host name's lookup, in libpq, may outlast it).
 * Returns the connection, in non-blocking mode when CONNECTION_OK, else
 * failed (PQerrorMessage says why) and *timed_out set when the deadline
 * passed; NULL when out of memory. PQfinish it in every case. */
PGconn *pg_io_connect(const char *const *keys, const char *const *values, int64_t deadline,
                      int *timed_out);

/* A failed connect's message: takes the SQLSTATEs the connect's refusals
 * carry out of msg (FATAL:  28P01: password... becomes FATAL:  password...),
 * and returns 1 when the server refused us in a way waiting can't mend
 * (authentication, no such database, no right to connect), 0 otherwise
 * (unreachable, starting up, shutting down, too many connections). */
int pg_io_refused(char *msg);

/* The answer to what PQsend* just queued on pg (non-blocking), read until
 * deadline at most: the first failed result, else the last one (PQclear
 * it); NULL when the connection failed, or with *timed_out set when no
 * whole answer came in time - the session is then out of step: drop it. */
PGresult *pg_io_await(PGconn *pg, int64_t deadline, int *timed_out);

/* ---- store_postgres_session.c ---- */

/* Records a failed result (NULL: the connection failed) in c->err and maps
 * it to a store code. */
int pg_fail(pg_conn *c, const char *what, const PGresult *r);

/* Runs statement id (prepared on the session's first use): STORE_OK with
 * *out the result (PQclear it), or the failure. Its answer is awaited for
 * --db-timeout-ms (the server's statement_timeout) and a grace for the
 * server's own timeout to arrive; none in that time is
 * STORE_ERR_UNAVAILABLE, and the session is dropped. pg_exec_waiting: a
 * statement that may also wait wait_ms for a row lock. pg_exec_row: a
 * statement of one row at most, STORE_ERR_NOT_FOUND when there is none. */
int pg_exec(pg_conn *c, enum stmt_id id, const struct params *p, PGresult **out);
int pg_exec_waiting(pg_conn *c, enum stmt_id id, const struct params *p, int wait_ms,
                    PGresult **out);
int pg_exec_row(pg_conn *c, enum stmt_id id, const struct params *p, PGresult **out);

/* The open transaction was aborted by a failure (c->tx_rc): that failure's
 * code (a full disk is still FULL), with c->err saying so; STORE_ERR_IO when
 * none was seen. */
int pg_rolled_back(pg_conn *c);

/* A statement run as plain text (BEGIN, SET, COMMIT, a migration), bounded
 * as pg_exec; pg_query also hands over its result (PQclear it). */
int pg_command(pg_conn *c, const char *sql);
int pg_query(pg_conn *c, const char *sql, PGresult **out);

/* 1 inside a transaction; else 0 with c->err saying so. */
int pg_in_transaction(pg_conn *c);

/* Ends the open transaction, if any, by ROLLBACK. */
void pg_rollback(pg_conn *c);

/* A COMMIT whose answer never came (of transaction c->tx_xid): STORE_OK
 * when it committed, STORE_ERR_UNAVAILABLE when it did not,
 * STORE_ERR_IN_DOUBT when that can't be told: the server stays away, or the
 * old session is still there (it may yet commit). */
int pg_commit_in_doubt(pg_conn *c);

/* Opens c's session (closing any it had): STORE_OK, or the failure in
 * c->err, c->unreachable set when the connect itself failed, c->refused
 * too when waiting can't mend it. */
int pg_session_open(pg_conn *c);

/* Whether c's session looks usable: open, and nothing unasked to read. */
int pg_session_alive(pg_conn *c);

/* Closes c's session (c stays, with no session), or c with it. */
void pg_session_close(pg_conn *c);
void pg_conn_free(pg_conn *c);

/* Applies the schema files the database has not seen (c's first session). */
int pg_migrate(pg_conn *c, char *err, size_t errlen);

/* ---- store_postgres_pool.c: the store, its pool and outages ---- */

/* The backend's entries for the pool (store_backend.h). */
int pg_serves(const char *db);
int pg_open(const store_config *cfg, store **out, char *err, size_t errlen);
void pg_close(store *st);
int pg_get(store *st, store_conn **out, char *err, size_t errlen);
void pg_put(store *st, store_conn *conn);
const char *pg_errstr(const store_conn *c);
int pg_ping(store_conn *conn);
int pg_probe_write(store_conn *conn);

#endif
