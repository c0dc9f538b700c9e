/* store_postgres_tx.c - the PostgreSQL backend's transactions (for
 * store_postgres.c): BEGIN, which writes the transaction's marker row,
 * savepoints, and COMMIT - one whose answer was lost resolved by looking
 * for that marker, on whichever server a fresh session reaches, once what
 * it can't see can be trusted to stay unseen. On a session of the pool
 * (store_postgres_pool.h), through the session layer alone. */
#include <string.h>
#include <time.h>

#include "server/store_postgres_tx.h"

#define IN_DOUBT_MS 10000 /* how long a lost COMMIT's outcome is looked for */
#define IN_DOUBT_TEXT "10 s"
/* A marker is looked for at most IN_DOUBT_MS after its transaction's
 * COMMIT, so it is kept for far longer than a transaction lasts and two
 * servers' clocks may differ (written_at is the writer's clock, the cut-off
 * the sweeper's). Every MARKER_SWEEP_EVERY transactions a session deletes
 * up to MARKER_SWEEP_MAX older ones, twice what it wrote meanwhile: the
 * sessions together delete faster than they write, and the table holds
 * about MARKER_KEEP's worth of transactions. */
#define MARKER_KEEP "10 minutes"
#define MARKER_SWEEP_EVERY 16
#define MARKER_SWEEP_MAX 32

/* A time as text that reads back the same on any server, whatever its
 * DateStyle or TimeZone: ISO 8601 in UTC, to the microsecond. */
#define UTC_US(t) "to_char((" t ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
/* The server a session is on: its cluster and its postmaster's start. */
#define SERVER_ID "(SELECT system_identifier::text FROM pg_control_system()), " \
                  UTC_US("pg_postmaster_start_time()")

/* The oldest markers past MARKER_KEEP, as many as MARKER_SWEEP_MAX; those
 * another transaction is deleting are skipped, never waited for. Inside the
 * transaction being begun: no commit of its own to wait for. */
#define SWEEP "DELETE FROM tx_marker WHERE (written_at, token) IN (SELECT written_at, token " \
              "FROM tx_marker WHERE written_at < now() - interval '" MARKER_KEEP "' " \
              "ORDER BY written_at LIMIT %d FOR UPDATE SKIP LOCKED); "

/* The timeline of a WAL file's name (its first 8 hex digits), 0 if none. */
static int timeline_of(const char *walfile)
{
    char tli[9];
    snprintf(tli, sizeof(tli), "%s", walfile);
    return strlen(tli) == 8 ? (int)strtol(tli, NULL, 16) : 0;
}

/* BEGIN, and the transaction's marker written in the same round trip, with
 * where it is written: should its COMMIT get no answer, what became of it
 * can be looked up (commit_in_doubt), whatever else it wrote. Its key comes
 * from the server (now(), gen_random_uuid()): one row per transaction,
 * one index entry at the index's newest end. */
int pg_tx_begin(store_conn *conn)
{
    pg_session *c = SESSION(conn);
    char sql[640], sweep[256] = "";
    PGresult *r;
    if (c->sweep_in-- <= 0) {
        snprintf(sweep, sizeof(sweep), SWEEP, MARKER_SWEEP_MAX);
        c->sweep_in = MARKER_SWEEP_EVERY - 1;
    }
    snprintf(sql, sizeof(sql), "BEGIN; %sINSERT INTO tx_marker DEFAULT VALUES RETURNING "
             UTC_US("written_at") ", token::text, " SERVER_ID ", "
             "pg_walfile_name(pg_current_wal_lsn())", sweep);
    int rc = pg_query(c, sql, &r);
    struct pg_tx_marker *m = &c->tx_marker;
    memset(m, 0, sizeof(*m));
    if (rc == STORE_OK && PQntuples(r) == 1) {
        col_text(m->at, sizeof(m->at), r, 0, 0);
        col_text(m->token, sizeof(m->token), r, 0, 1);
        col_text(m->sysid, sizeof(m->sysid), r, 0, 2);
        col_text(m->started, sizeof(m->started), r, 0, 3);
        m->timeline = timeline_of(PQgetvalue(r, 0, 4));
    }
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

/* The server a fresh session reached, for commit_in_doubt: its cluster,
 * its postmaster's start, whether it is a standby, its timeline (when it is
 * not), and whether the old session is still on it - and waits there for
 * its synchronous standbys (syncrep). */
struct reached {
    char sysid[24], started[40];
    int standby, timeline, there, syncrep;
};

/* Asks the server a fresh session is on who it is, and terminates the old
 * session if it is there (pid and start, so never another's session) -
 * unless it is running its COMMIT: a backend flushing its commit record
 * goes on to wait for its synchronous standbys, and a termination pending
 * then ends that wait at once, the commit being in the primary's WAL
 * already: visible there alone, which a failover to a standby that never
 * received it loses. Left to run, it lands when a standby confirms it (or
 * at once without standbys), then leaves, its client gone. 0, or -1 when
 * the session failed. */
#define COMMITTING "(state = 'active' AND query = 'COMMIT')" /* as pg_tx_commit sends it */

static int reach(pg_session *c, int pid, const char *backend_start, struct reached *w)
{
    char sql[700];
    PGresult *r;
    snprintf(sql, sizeof(sql), "SELECT count(*), count(*) FILTER (WHERE wait_event = 'SyncRep'), "
             "count(CASE WHEN NOT " COMMITTING " THEN "
             "pg_terminate_backend(pid) END), " SERVER_ID ", pg_is_in_recovery(), "
             "CASE WHEN pg_is_in_recovery() THEN '' ELSE pg_walfile_name(pg_current_wal_lsn()) "
             "END FROM pg_stat_activity WHERE pid = %d AND backend_start::text = '%s'",
             pid, backend_start);
    if (pg_query(c, sql, &r) != STORE_OK || PQntuples(r) != 1) {
        PQclear(r);
        return -1;
    }
    w->there = col_int(r, 0, 0) > 0;
    w->syncrep = col_int(r, 0, 1) > 0;
    col_text(w->sysid, sizeof(w->sysid), r, 0, 3);
    col_text(w->started, sizeof(w->started), r, 0, 4);
    w->standby = strcmp(PQgetvalue(r, 0, 5), "t") == 0;
    w->timeline = timeline_of(PQgetvalue(r, 0, 6));
    PQclear(r);
    return 0;
}

/* Whether marker m is on the server: 1, 0, or -1 when not asked. Its key
 * is text the server gave (digits, hex, '-', ':', '.', 'T', 'Z'), checked
 * so before it goes into SQL. */
static int marker_found(pg_session *c, const struct pg_tx_marker *m)
{
    static const char key_chars[] = "0123456789abcdefABCDEF-:.TZ";
    if (!m->at[0] || m->at[strspn(m->at, key_chars)] || m->token[strspn(m->token, key_chars)])
        return -1;
    char sql[200];
    PGresult *r;
    snprintf(sql, sizeof(sql), "SELECT 1 FROM tx_marker WHERE written_at = '%s'::timestamptz "
             "AND token = '%s'::uuid", m->at, m->token);
    if (pg_query(c, sql, &r) != STORE_OK) {
        PQclear(r);
        return -1;
    }
    int found = PQntuples(r) > 0;
    PQclear(r);
    return found;
}

/* Whether a marker that server w does not show was never committed, for
 * good: NULL when it was not, else why that can't be told yet. A marker
 * found is committed wherever it is found; its absence is only final when
 * nothing can bring it later:
 * - on the server it was written on, in the same run of its postmaster
 *   (same cluster, same start): once the old session is gone from
 *   pg_stat_activity, which a backend leaves only after its transaction has
 *   ended, and the lookup comes after that;
 * - on the same cluster's server restarted on the same timeline (a crash,
 *   a restart; not promoted, which makes a new timeline): the old session
 *   died with the old postmaster, and crash recovery replayed all the WAL
 *   that was flushed - a commit not in it is lost, and its transaction id
 *   may be handed out again, which is why the id can't be asked about;
 * - on a primary of the same cluster on a newer timeline (a standby
 *   promoted): its history left the old one at the promotion, it has
 *   every commit it received and will never receive another from the old
 *   primary - even one still running - so what it lacks is not in the
 *   database any more. Only a split brain, the old primary's timeline
 *   chosen again over this one by whoever manages failover, could undo it.
 * Not final: a standby (it may not have received it yet), another cluster
 * (it tells nothing), an older timeline (behind the one written on: a
 * stale primary, or a standby's past), or the old session still there (a
 * backend stopped or slow to die mid-commit, or waiting for its
 * synchronous standbys, whose commit may still land). */
static const char *absence_unsettled(const struct pg_tx_marker *m, const struct reached *w)
{
    if (w->standby)
        return "the server reached is a standby, which may not have received it";
    if (!m->sysid[0] || strcmp(w->sysid, m->sysid) != 0)
        return "the server reached is not of the cluster it ran on";
    if (strcmp(w->started, m->started) == 0 && !w->there)
        return NULL;
    if (strcmp(w->started, m->started) == 0)
        return w->syncrep ? "its COMMIT still waited for a synchronous standby after "
                            IN_DOUBT_TEXT " and may yet commit (lost if one without it is "
                            "promoted)"
                          : "its session still ran on PostgreSQL after " IN_DOUBT_TEXT
                            " and may yet commit";
    if (w->timeline > 0 && w->timeline >= m->timeline)
        return NULL;
    return "the server reached is on an older timeline than the one it ran on";
}

/* A COMMIT whose answer never came: it may or may not have happened. Its
 * marker says: found on a fresh session (which a multi-host conninfo may
 * take to a new primary), the transaction committed, whatever it wrote -
 * orders, an item, a stock; not found, it did not, once that absence is
 * final (absence_unsettled). Until then nothing can be told. Looked into
 * until IN_DOUBT_MS - a server restarting or a standby being promoted
 * comes back meanwhile. */
static int commit_in_doubt(pg_session *c)
{
    char lost[sizeof(c->err)], backend_start[sizeof(c->started)]; /* lost: why COMMIT failed */
    struct pg_tx_marker m = c->tx_marker; /* now: opening a session forgets it */
    int pid = c->pid;
    snprintf(lost, sizeof(lost), "%s", c->err);
    snprintf(backend_start, sizeof(backend_start), "%s", c->started);
    const char *why = "PostgreSQL stayed away"; /* unsettled, when last reached */
    int fresh = 0;
    for (int64_t end = pg_now_ms() + IN_DOUBT_MS; pg_now_ms() < end;) {
        struct reached w;
        if (!fresh || c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK)
            fresh = pg_session_open(c) == STORE_OK; /* never the old session: it's in doubt */
        int found = fresh && reach(c, pid, backend_start, &w) == 0 ? marker_found(c, &m) : -1;
        if (found == 1)
            return STORE_OK;
        if (found == 0 && (why = absence_unsettled(&m, &w)) == NULL) {
            snprintf(c->err, sizeof(c->err), "%.180s; nothing was written", lost);
            return STORE_ERR_UNAVAILABLE;
        }
        struct timespec pause = {0, 100 * 1000000L};
        nanosleep(&pause, NULL);
    }
    snprintf(c->err, sizeof(c->err), "%.100s; %s: whether it committed is unknown", lost, why);
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
    c->tx_marker.at[0] = '\0';
    return rc;
}
