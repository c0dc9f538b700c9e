/* store_postgres_session.h - the PostgreSQL backend's sessions
 * (store_postgres_session.c): one libpq connection each, the statements of
 * a table its user passes in prepared once, every answer awaited within a
 * bound (store_postgres_io.h), failures mapped to store.h's codes, and the
 * embedded migrations. It names nothing above it: not the pool, not the
 * backend, not the statements' SQL. Every function is for one thread at a
 * time on a session. */
#ifndef STORE_POSTGRES_SESSION_H
#define STORE_POSTGRES_SESSION_H

#include <stdio.h>
#include <stdlib.h>

#include "server/store.h"
#include "server/store_postgres_io.h"

#define PARAMS_MAX 9
#define PG_STMTS_MAX 64 /* statements of a table, at most */

/* A statement: a name for errors, its SQL, its parameters' types (i =
 * bigint, t = text). Typed up front, so that a statement may leave one
 * unused (update_item binds (id, value, fence, seq) to all of its kind). */
struct pg_stmt {
    const char *what, *sql, *types;
};

/* What sessions are opened with: owned by their user, and outliving them. */
typedef struct pg_session_cfg {
    const char *db;              /* --db: a URL or a conninfo */
    const char *password;        /* or NULL; never logged */
    int timeout_ms;              /* --db-timeout-ms: statement_timeout, and our bound */
    int sync_full;               /* synchronous_commit on (1) or off */
    const struct pg_stmt *stmts; /* what pg_exec runs, by index... */
    int nstmts;                  /* ...up to PG_STMTS_MAX */
} pg_session_cfg;

/* Where a transaction ran, and its marker row (schema/postgres/005): what
 * store_postgres_tx.c needs to resolve a COMMIT in doubt, as the server
 * wrote it (times in UTC, to the microsecond). */
struct pg_tx_marker {
    char at[40], token[40]; /* the row's key: written_at and a random uuid */
    char sysid[24];         /* the cluster: pg_control_system()'s system_identifier */
    char started[40];       /* its postmaster's start */
    int timeline;           /* the timeline its WAL was written on */
};

/* One session (pg NULL when it has none), and the transaction it runs. */
typedef struct pg_session {
    const pg_session_cfg *cfg;
    PGconn *pg;
    int prepared[PG_STMTS_MAX];
    int in_tx;
    int pid;                /* the server's process for this session... */
    char started[48];       /* ...and when it started: together, this session */
    struct pg_tx_marker tx_marker; /* the open transaction's (at[0] 0: none) */
    int sweep_in;           /* transactions until this session deletes old markers */
    int savepoint;          /* the open transaction has one */
    int tx_rc;              /* the first failure in the open transaction, which aborted it */
    int unreachable;        /* the last pg_session_open failed to connect... */
    int refused;            /* ...on a refusal waiting can't mend */
    char err[256], tx_err[256]; /* tx_err: that failure's text */
} pg_session;

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

/* Records a failed result (NULL: the connection failed) in c->err and maps
 * it to a store code. */
int pg_fail(pg_session *c, const char *what, const PGresult *r);

/* Runs statement id of c->cfg->stmts (prepared on the session's first
 * use): STORE_OK with *out the result (PQclear it), or the failure. Its
 * answer is awaited for --db-timeout-ms (the server's statement_timeout)
 * and a grace for the server's own timeout to arrive; none in that time is
 * STORE_ERR_UNAVAILABLE, and the session is dropped. pg_exec_waiting: a
 * statement that may also wait wait_ms for a row lock. pg_exec_row: a
 * statement of one row at most, STORE_ERR_NOT_FOUND when there is none. */
int pg_exec(pg_session *c, int id, const struct params *p, PGresult **out);
int pg_exec_waiting(pg_session *c, int id, const struct params *p, int wait_ms,
                    PGresult **out);
int pg_exec_row(pg_session *c, int id, const struct params *p, PGresult **out);

/* The open transaction was aborted by a failure (c->tx_rc): that failure's
 * code (a full disk is still FULL), with c->err saying so; STORE_ERR_IO when
 * none was seen. */
int pg_rolled_back(pg_session *c);

/* A statement run as plain text (BEGIN, SET, COMMIT, a migration), bounded
 * as pg_exec; pg_query also hands over its result (PQclear it). */
int pg_command(pg_session *c, const char *sql);
int pg_query(pg_session *c, const char *sql, PGresult **out);

/* 1 inside a transaction; else 0 with c->err saying so. */
int pg_in_transaction(pg_session *c);

/* Ends the open transaction, if any, by ROLLBACK. */
void pg_rollback(pg_session *c);

/* Opens c's session (closing any it had): STORE_OK, or the failure in
 * c->err, c->unreachable set when the connect itself failed, c->refused
 * too when waiting can't mend it. */
int pg_session_open(pg_session *c);

/* Whether c's session looks usable: open, and nothing unasked to read. */
int pg_session_alive(pg_session *c);

/* Closes c's session; c stays, with no session. */
void pg_session_close(pg_session *c);

/* Applies the schema files the database has not seen (c's first session). */
int pg_migrate(pg_session *c, char *err, size_t errlen);

#endif
