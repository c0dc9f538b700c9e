/* store_postgres_tx.c - the PostgreSQL backend's transactions (for
 * store_postgres.c): BEGIN with the transaction's id, savepoints, and
 * COMMIT - one whose answer was lost resolved by the transaction's status
 * (pg_xact_status) once the old session is surely gone. On a session of the
 * pool (store_postgres_pool.h), through the session layer alone. */
#include <string.h>
#include <time.h>

#include "server/store_postgres_tx.h"

#define IN_DOUBT_MS 10000 /* how long a lost COMMIT's outcome is looked for */
#define IN_DOUBT_TEXT "10 s"

/* The transaction's id is taken in the same round trip: should its COMMIT
 * get no answer, what became of it can be looked up (commit_in_doubt),
 * whatever it wrote. */
int pg_tx_begin(store_conn *conn)
{
    pg_session *c = SESSION(conn);
    PGresult *r;
    int rc = pg_query(c, "BEGIN; SELECT pg_current_xact_id()", &r);
    c->tx_xid = rc == STORE_OK ? col_int(r, 0, 0) : 0;
    PQclear(r);
    c->savepoint = 0;
    c->tx_rc = 0;
    c->in_tx = 1;
    if (rc != STORE_OK) { /* BEGIN may have run: not left open on a pooled session */
        char why[sizeof(c->err)]; /* what the answer says: why BEGIN failed */
        memcpy(why, c->err, sizeof(why));
        pg_rollback(c);
        memcpy(c->err, why, sizeof(why));
    }
    return rc;
}

/* The one before is released in the same round trip: savepoints would
 * otherwise pile up, one per order of a transaction. */
int pg_tx_savepoint(store_conn *conn)
{
    pg_session *c = SESSION(conn);
    if (!pg_in_transaction(c))
        return STORE_ERR_IO;
    int rc = pg_command(c, c->savepoint ? "RELEASE SAVEPOINT part; SAVEPOINT part"
                                        : "SAVEPOINT part");
    c->savepoint = rc == STORE_OK;
    return rc;
}

int pg_tx_rollback_to_savepoint(store_conn *conn)
{
    pg_session *c = SESSION(conn);
    if (!pg_in_transaction(c))
        return STORE_ERR_IO;
    if (!c->savepoint)
        snprintf(c->err, sizeof(c->err), "no savepoint to roll back to");
    int rc = c->savepoint ? pg_command(c, "ROLLBACK TO SAVEPOINT part") : STORE_ERR_IO;
    if (rc == STORE_OK) /* the transaction is whole again */
        c->tx_rc = 0;
    return rc;
}

void pg_tx_abort(store_conn *conn) { pg_rollback(SESSION(conn)); }

/* What became of transaction xid (committed, aborted, or in progress): 1
 * committed, 0 rolled back or never committed (a crash), -1 not yet known
 * (still running) or not asked (the session failed). */
static int xact_status(pg_session *c, int64_t xid)
{
    char sql[64];
    PGresult *r;
    snprintf(sql, sizeof(sql), "SELECT pg_xact_status('%lld'::xid8)", (long long)xid);
    if (pg_query(c, sql, &r) != STORE_OK || PQntuples(r) != 1) {
        PQclear(r);
        return -1;
    }
    const char *st = PQgetisnull(r, 0, 0) ? "" : PQgetvalue(r, 0, 0);
    int known = strcmp(st, "committed") == 0 ? 1 : strcmp(st, "aborted") == 0 ? 0 : -1;
    PQclear(r);
    return known;
}

/* A COMMIT whose answer never came: it may or may not have happened. Once
 * the old session is surely gone - terminated, and no longer in
 * pg_stat_activity, which a backend leaves only after its transaction has
 * ended - the transaction is committed or aborted for good, and
 * pg_xact_status says which (whatever it wrote: orders, an item, a stock).
 * Until then (a backend stopped, or slow to die mid-commit) nothing can be
 * told: a commit not visible yet may still land. Looked into on a fresh
 * session until IN_DOUBT_MS - a server that is restarting comes back
 * meanwhile. */
static int commit_in_doubt(pg_session *c)
{
    char lost[sizeof(c->err)], sql[200]; /* lost: why COMMIT failed, for the message */
    int64_t xid = c->tx_xid; /* now: opening a session forgets it */
    snprintf(lost, sizeof(lost), "%s", c->err);
    snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
             "WHERE pid = %d AND backend_start::text = '%s'", c->pid, c->started);
    int fresh = 0, there = 0; /* there: the old session, when last looked for */
    for (int64_t end = pg_now_ms() + IN_DOUBT_MS; pg_now_ms() < end;) {
        PGresult *r = NULL;
        if (!fresh || c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK)
            fresh = pg_session_open(c) == STORE_OK; /* never the old session: it's in doubt */
        int known = -1;
        if (fresh && pg_query(c, sql, &r) == STORE_OK && !(there = PQntuples(r) > 0))
            known = xact_status(c, xid);
        PQclear(r);
        if (known == 1)
            return STORE_OK;
        if (known == 0) {
            snprintf(c->err, sizeof(c->err), "%.180s; nothing was written", lost);
            return STORE_ERR_UNAVAILABLE;
        }
        struct timespec pause = {0, 100 * 1000000L};
        nanosleep(&pause, NULL);
    }
    snprintf(c->err, sizeof(c->err), "%.140s; %s: whether it committed is unknown", lost,
             there ? "its session still ran on PostgreSQL after " IN_DOUBT_TEXT
                     " and may yet commit" : "PostgreSQL stayed away");
    return STORE_ERR_IN_DOUBT;
}

int pg_tx_commit(store_conn *conn, const store_commit_check *check)
{
    pg_session *c = SESSION(conn);
    if (!pg_in_transaction(c))
        return STORE_ERR_IO;
    if (check && !check->ok(check->arg)) {
        snprintf(c->err, sizeof(c->err), "commit vetoed by the caller");
        pg_rollback(c);
        return STORE_ERR_VETOED;
    }
    PGresult *r;
    int rc = pg_query(c, "COMMIT", &r);
    /* COMMIT of a transaction that failed earlier answers ROLLBACK */
    if (rc == STORE_OK && strcmp(PQcmdStatus(r), "COMMIT") != 0)
        rc = pg_rolled_back(c);
    PQclear(r);
    c->in_tx = 0;
    c->tx_rc = 0;
    if (rc == STORE_ERR_UNAVAILABLE)
        rc = commit_in_doubt(c);
    c->tx_xid = 0;
    return rc;
}
