/* store_postgres_session.c - the PostgreSQL backend's sessions: one libpq
 * connection each, with the statements of the table its user passes in
 * prepared once and every answer awaited within a bound
 * (store_postgres_io.c: a session that gives none in time is dropped);
 * errors mapped to store codes; the embedded migrations (schema/postgres/)
 * under an advisory lock, so replicas that start together apply each file
 * once. Above it: the pool (store_postgres_pool.c), and the statements and
 * transactions (store_postgres.c). */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "server/store_backend.h" /* struct store_migration */
#include "server/store_postgres_session.h"

#define MIGRATION_LOCK 0x73746f636bLL /* pg_advisory_xact_lock key: "stock" */
#define GRACE_MIN_MS 1000             /* an answer's grace past statement_timeout... */
#define GRACE_MAX_MS 2000             /* ...a quarter of it, within these */
#define CONNECT_MIN_MS 2000           /* a connect's least bound, a host */
#define MIGRATION_MS 300000           /* a migration's bound: it may wait for another's */

extern const struct store_migration store_postgres_migrations[];
extern const int store_postgres_migrations_count;

/* libpq's messages: the first line (the rest is advice such as "This
 * probably means..."), without "ERROR:  ". */
static void set_err(pg_session *c, const char *what, const char *msg)
{
    if (msg == NULL || *msg == '\0')
        msg = "unknown error";
    if (strncmp(msg, "ERROR:  ", 8) == 0 || strncmp(msg, "FATAL:  ", 8) == 0)
        msg += 8;
    snprintf(c->err, sizeof(c->err), "%s: %.*s", what, (int)strcspn(msg, "\n"), msg);
}

/* The store code of a failure with SQLSTATE state (NULL: none came, the
 * connection failed). Connection failures, a server shutting down and
 * too_many_connections (53300: sessions end, a retry soon may get one) are
 * UNAVAILABLE; waits cut short (lock_timeout, statement_timeout) and
 * conflicts the server resolved by cancelling us are BUSY or LOCK_TIMEOUT;
 * disk_full (53100: a table, an index or a temporary file could not grow) is
 * FULL. The rest of class 53 - out_of_memory (53200), a configuration limit
 * - is IO: neither a disk an operator can free nor anything a retry fixes. */
static int code_of(const pg_session *c, const char *state)
{
    if (PQstatus(c->pg) != CONNECTION_OK || state == NULL || strncmp(state, "08", 2) == 0 ||
        strncmp(state, "57P0", 4) == 0 || strcmp(state, "53300") == 0)
        return STORE_ERR_UNAVAILABLE;
    if (strcmp(state, "53100") == 0)
        return STORE_ERR_FULL;
    if (strcmp(state, "55P03") == 0)
        return STORE_ERR_LOCK_TIMEOUT;
    if (strcmp(state, "57014") == 0 || strcmp(state, "40P01") == 0 ||
        strcmp(state, "40001") == 0)
        return STORE_ERR_BUSY;
    return STORE_ERR_IO;
}

/* Maps a failed result (or none: the connection failed) to a store code.
 * The first failure inside a transaction is kept: it aborted the
 * transaction, and what comes after in it (in_failed_sql_transaction, then
 * COMMIT's ROLLBACK) fails with that reason. */
int pg_fail(pg_session *c, const char *what, const PGresult *r)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    set_err(c, what, r && *PQresultErrorMessage(r) ? PQresultErrorMessage(r)
                                                    : PQerrorMessage(c->pg));
    if (c->in_tx && c->tx_rc && state && strcmp(state, "25P02") == 0)
        return pg_rolled_back(c);
    int rc = code_of(c, state);
    if (c->in_tx && !c->tx_rc) {
        c->tx_rc = rc;
        memcpy(c->tx_err, c->err, sizeof(c->err));
    }
    return rc;
}

int pg_rolled_back(pg_session *c)
{
    snprintf(c->err, sizeof(c->err), "the transaction was rolled back%s%.200s",
             c->tx_rc ? " after " : "", c->tx_rc ? c->tx_err : "");
    return c->tx_rc ? c->tx_rc : STORE_ERR_IO;
}

/* How long an answer may take from a server that bounds the statement at
 * ms itself: ms and a grace (a quarter, 1 to 2 s) for its answer to arrive
 * from a loaded host, so that a slow server is told apart from a silent
 * one. 0 (no statement_timeout) is no bound here either. */
static int answer_ms(int ms)
{
    int grace = ms / 4 < GRACE_MIN_MS ? GRACE_MIN_MS : ms / 4 > GRACE_MAX_MS ? GRACE_MAX_MS
                                                                           : ms / 4;
    return ms > 0 ? ms + grace : 0;
}

static int64_t deadline_in(int ms) { return ms > 0 ? pg_now_ms() + ms : INT64_MAX; }

/* The session's socket closed at once, with nothing more sent: what was
 * asked may still run on the server, to its statement_timeout. What the
 * caller knows of the transaction (in_tx, tx_marker) stays. */
static void drop(pg_session *c)
{
    PQfinish(c->pg);
    c->pg = NULL;
    memset(c->prepared, 0, sizeof(c->prepared));
}

/* A statement on a session already dropped: nothing to send it on. */
static int no_session(pg_session *c, const char *what)
{
    snprintf(c->err, sizeof(c->err), "%s: the session to PostgreSQL was lost", what);
    return STORE_ERR_UNAVAILABLE;
}

/* The answer to what was just sent (sent: PQsend*'s result), awaited for
 * ms: STORE_OK with *out the result (PQclear it), or the failure. */
static int await(pg_session *c, const char *what, int sent, int ms, PGresult **out)
{
    int timed_out = 0;
    PGresult *r = sent ? pg_io_await(c->pg, deadline_in(ms), &timed_out) : NULL;
    *out = NULL;
    if (timed_out) {
        snprintf(c->err, sizeof(c->err), "%s: no answer from PostgreSQL within %d ms; the "
                 "session was dropped", what, ms);
        drop(c);
        return STORE_ERR_UNAVAILABLE;
    }
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        int rc = pg_fail(c, what, r);
        PQclear(r);
        return rc;
    }
    *out = r;
    return STORE_OK;
}

/* Runs prepared statement id (preparing it on this session's first use).
 * STORE_OK with *out the result (PQclear it), or the failure. */
int pg_exec_waiting(pg_session *c, int id, const struct params *p, int wait_ms,
                    PGresult **out)
{
    *out = NULL;
    if (c->pg == NULL)
        return no_session(c, c->cfg->stmts[id].what);
    int ms = answer_ms(c->cfg->timeout_ms);
    char name[8];
    snprintf(name, sizeof(name), "s%d", (int)id);
    if (!c->prepared[id]) {
        Oid types[PARAMS_MAX];
        int n = (int)strlen(c->cfg->stmts[id].types);
        for (int i = 0; i < n; i++)
            types[i] = c->cfg->stmts[id].types[i] == 't' ? 25 : 20; /* text, int8 */
        PGresult *r;
        int rc = await(c, "prepare", PQsendPrepare(c->pg, name, c->cfg->stmts[id].sql, n, types),
                       ms, &r);
        PQclear(r);
        if (rc != STORE_OK)
            return rc;
        c->prepared[id] = 1;
    }
    int sent = PQsendQueryPrepared(c->pg, name, p ? p->n : 0, p ? p->v : NULL, NULL, NULL, 0);
    return await(c, c->cfg->stmts[id].what, sent, ms > 0 && wait_ms > 0 ? ms + wait_ms : ms, out);
}

int pg_exec(pg_session *c, int id, const struct params *p, PGresult **out)
{
    return pg_exec_waiting(c, id, p, 0, out);
}

/* A statement of one row at most: STORE_OK with the row in *out,
 * STORE_ERR_NOT_FOUND, or the failure. */
int pg_exec_row(pg_session *c, int id, const struct params *p, PGresult **out)
{
    int rc = pg_exec(c, id, p, out);
    if (rc == STORE_OK && PQntuples(*out) == 0) {
        PQclear(*out);
        *out = NULL;
        rc = STORE_ERR_NOT_FOUND;
    }
    return rc;
}

/* sql as plain text, its answer awaited for ms. */
static int query_within(pg_session *c, const char *sql, int ms, PGresult **out)
{
    *out = NULL;
    if (c->pg == NULL)
        return no_session(c, sql);
    return await(c, sql, PQsendQuery(c->pg, sql), ms, out);
}

int pg_query(pg_session *c, const char *sql, PGresult **out)
{
    return query_within(c, sql, answer_ms(c->cfg->timeout_ms), out);
}

/* A statement run as plain text (BEGIN, COMMIT, SET, a migration). */
int pg_command(pg_session *c, const char *sql)
{
    PGresult *r;
    int rc = pg_query(c, sql, &r);
    PQclear(r);
    return rc;
}

int pg_in_transaction(pg_session *c)
{
    if (c->in_tx)
        return 1;
    snprintf(c->err, sizeof(c->err), "the transaction is no longer open");
    return 0;
}

void pg_rollback(pg_session *c)
{
    if (c->in_tx && PQstatus(c->pg) == CONNECTION_OK)
        pg_command(c, "ROLLBACK");
    c->in_tx = 0;
    c->tx_marker.at[0] = '\0';
    c->tx_rc = 0;
}

/* ---- sessions ---- */

void pg_session_close(pg_session *c)
{
    PQfinish(c->pg);
    c->pg = NULL;
    memset(c->prepared, 0, sizeof(c->prepared));
    c->in_tx = 0;
    c->tx_marker.at[0] = '\0';
}

static void ignore_notice(void *arg, const char *message) { (void)arg, (void)message; }

/* The session's options: the user's own from --db (either form: a URL's
 * ?options=, a conninfo's options=; else PGOPTIONS), then ours. libpq
 * keeps one value per key, the last, so ours alone would drop the user's
 * (a search_path, and the migrations land in public); within one options
 * value the server applies each -c in turn, so ours, last, still bound
 * every statement. Returns 0, or -1 with why in c->err when they don't
 * fit. */
static int session_options(pg_session *c, char *buf, size_t size)
{
    const pg_session_cfg *cfg = c->cfg;
    const char *user = getenv("PGOPTIONS"); /* libpq's default, which --db overrides */
    PQconninfoOption *opts = PQconninfoParse(cfg->db, NULL); /* malformed: connect says why */
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "options") == 0 && o->val)
            user = o->val;
    user = user ? user : "";
    /* --sync normal: as on SQLite, a crash of the server may lose the last
     * commits but never half of one */
    int n = snprintf(buf, size, "%s%s-c statement_timeout=%d -c synchronous_commit=%s", user,
                     *user ? " " : "", cfg->timeout_ms, cfg->sync_full ? "on" : "off");
    PQconninfoFree(opts);
    if (n < 0 || (size_t)n >= size) {
        snprintf(c->err, sizeof(c->err), "cannot connect to PostgreSQL: the options in --db "
                 "and stockd's own come to over %zu bytes", size - 1);
        return -1;
    }
    return 0;
}

/* Opens c's session: --db (a URL or a conninfo) with the password from the
 * file, if any, and a bound on every statement; the connect bounded by
 * --db-timeout-ms too, shared among the conninfo's hosts, but at least
 * CONNECT_MIN_MS a host: a loaded server takes a while to start a backend.
 * c->unreachable tells a failed connect from a session lost after it,
 * c->refused a final refusal from the rest. */
int pg_session_open(pg_session *c)
{
    const pg_session_cfg *cfg = c->cfg;
    char options[1024], why[512], stalled[256];
    if (session_options(c, options, sizeof(options)) != 0) {
        pg_session_close(c);
        c->refused = c->unreachable = 1; /* waiting won't make them shorter */
        return STORE_ERR_UNAVAILABLE;
    }
    /* after dbname, so that these override what the URL says (options: the
     * user's merged in) */
    const char *keys[] = {"dbname", "options", "application_name",
                          cfg->password ? "password" : NULL, NULL};
    const char *values[] = {cfg->db, options, "stockd", cfg->password, NULL};
    pg_session_close(c);
    c->pg = pg_io_connect(keys, values, cfg->timeout_ms, CONNECT_MIN_MS, stalled,
                          sizeof(stalled));
    if (c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK) {
        const char *msg = c->pg ? PQerrorMessage(c->pg) : "out of memory";
        int len = (int)strlen(msg);
        if (c->pg && PQstatus(c->pg) != CONNECTION_BAD) /* left mid-connect: libpq's... */
            while (len > 0 && msg[len - 1] != '\n') /* ...last line is half written */
                len--;
        snprintf(why, sizeof(why), "%s%s%.*s", stalled, stalled[0] && len ? "; " : "", len, msg);
        /* the SQLSTATEs out of why; a host that stalled may yet answer */
        int refused = pg_io_refused(why) && !stalled[0];
        c->refused = refused || (c->pg && !stalled[0] && PQconnectionNeedsPassword(c->pg));
        c->unreachable = 1;
        set_err(c, "cannot connect to PostgreSQL", why);
        pg_session_close(c);
        return STORE_ERR_UNAVAILABLE;
    }
    if (PQserverVersion(c->pg) < 130000) { /* gen_random_uuid, of the COMMIT-in-doubt marker */
        snprintf(why, sizeof(why), "the server is PostgreSQL %d.%d; stockd needs 13 or later",
                 PQserverVersion(c->pg) / 10000, PQserverVersion(c->pg) / 100 % 100);
        c->refused = 1; /* waiting won't make it newer */
        set_err(c, "cannot use this PostgreSQL", why);
        pg_session_close(c);
        return STORE_ERR_UNAVAILABLE;
    }
    c->refused = c->unreachable = 0;
    PQsetNoticeProcessor(c->pg, ignore_notice, NULL); /* not onto stderr: the log is ours */
    PGresult *r;
    int rc = pg_query(c, "SELECT pg_backend_pid(), backend_start::text FROM "
                         "pg_stat_activity WHERE pid = pg_backend_pid()", &r);
    if (rc == STORE_OK && PQntuples(r) == 1) {
        c->pid = (int)col_int(r, 0, 0);
        col_text(c->started, sizeof(c->started), r, 0, 1);
    } else if (rc == STORE_OK) {
        snprintf(c->err, sizeof(c->err), "read the session's identity: no row");
        rc = STORE_ERR_IO;
    }
    PQclear(r);
    if (rc != STORE_OK)
        pg_session_close(c);
    return rc;
}

/* Whether a pooled session is still usable. An idle one has nothing to
 * read unless the server spoke first - as it does when it ends the session
 * (a restart, pg_terminate_backend: FATAL, then EOF) - so one that has
 * something to read is replaced, rather than left to fail a request. */
int pg_session_alive(pg_session *c)
{
    if (c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK)
        return 0;
    struct pollfd p = {.fd = PQsocket(c->pg), .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

/* A migration's step that may run long, or wait for another replica's. */
static int migration_step(pg_session *c, const char *sql)
{
    PGresult *r;
    int rc = query_within(c, sql, MIGRATION_MS, &r);
    PQclear(r);
    return rc;
}

/* Applies every embedded schema file the database has not seen, in one
 * transaction under an advisory lock: replicas starting together wait for
 * each other, and the later ones find the work done. */
int pg_migrate(pg_session *c, char *err, size_t errlen)
{
    char sql[160], lock[64];
    PGresult *r = NULL;
    snprintf(lock, sizeof(lock), "SELECT pg_advisory_xact_lock(%lld)", MIGRATION_LOCK);
    int rc = pg_command(c, "BEGIN");
    if (rc == STORE_OK) /* a long migration, and the wait for another replica's */
        rc = pg_command(c, "SET LOCAL statement_timeout = 0");
    if (rc == STORE_OK)
        rc = migration_step(c, lock);
    if (rc == STORE_OK)
        rc = pg_command(c, "CREATE TABLE IF NOT EXISTS stockd_schema (version integer PRIMARY KEY, "
                        "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())");
    if (rc == STORE_OK)
        rc = pg_query(c, "SELECT COALESCE(max(version), 0) FROM stockd_schema", &r);
    int version = rc == STORE_OK ? (int)col_int(r, 0, 0) : -1;
    PQclear(r);
    for (int i = 0; rc == STORE_OK && i < store_postgres_migrations_count; i++) {
        const struct store_migration *m = &store_postgres_migrations[i];
        if (m->version <= version)
            continue;
        snprintf(sql, sizeof(sql), "INSERT INTO stockd_schema (version, name) VALUES (%d, '%s')",
                 m->version, m->name); /* embedded names: digits, letters, _ and . */
        rc = migration_step(c, m->sql);
        if (rc == STORE_OK)
            rc = pg_command(c, sql);
    }
    if (rc == STORE_OK)
        rc = pg_command(c, "COMMIT");
    if (rc != STORE_OK) {
        pg_command(c, "ROLLBACK");
        snprintf(err, errlen, "schema migration failed: %s", c->err);
    }
    return rc;
}
