/* store_postgres_session.c - the PostgreSQL backend's sessions: a bounded
 * pool of libpq connections, each with its statements prepared once; errors
 * mapped to store codes; the embedded migrations (schema/postgres/) under an
 * advisory lock, so replicas that start together apply each file once.
 *
 * A server that goes away: a session it closed while pooled is replaced
 * before use; a failure on the way answers STORE_ERR_UNAVAILABLE; a COMMIT
 * whose answer was lost is resolved by looking for the transaction's first
 * order once the old session is surely gone (pg_commit_in_doubt). */
#include <ctype.h>
#include <poll.h>
#include <string.h>
#include <time.h>

#include "store_postgres_internal.h"

#define MIGRATION_LOCK 0x73746f636bLL /* pg_advisory_xact_lock key: "stock" */
#define IN_DOUBT_MS 10000             /* how long a lost COMMIT's outcome is looked for */

extern const struct store_migration store_postgres_migrations[];
extern const int store_postgres_migrations_count;

/* libpq's messages: the first line (the rest is advice such as "This
 * probably means..."), without "ERROR:  ". */
static void set_err(pg_conn *c, const char *what, const char *msg)
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
static int code_of(const pg_conn *c, const char *state)
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
int pg_fail(pg_conn *c, const char *what, const PGresult *r)
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

int pg_rolled_back(pg_conn *c)
{
    snprintf(c->err, sizeof(c->err), "the transaction was rolled back%s%.200s",
             c->tx_rc ? " after " : "", c->tx_rc ? c->tx_err : "");
    return c->tx_rc ? c->tx_rc : STORE_ERR_IO;
}

/* Runs prepared statement id (preparing it on this session's first use).
 * STORE_OK with *out the result (PQclear it), or the failure. */
int pg_exec(pg_conn *c, enum stmt_id id, const struct params *p, PGresult **out)
{
    *out = NULL;
    char name[8];
    snprintf(name, sizeof(name), "s%d", (int)id);
    if (!c->prepared[id]) {
        Oid types[PARAMS_MAX];
        int n = (int)strlen(pg_stmts[id].types);
        for (int i = 0; i < n; i++)
            types[i] = pg_stmts[id].types[i] == 't' ? 25 : 20; /* text, int8 */
        PGresult *r = PQprepare(c->pg, name, pg_stmts[id].sql, n, types);
        int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
        int rc = ok ? STORE_OK : pg_fail(c, "prepare", r);
        PQclear(r);
        if (rc != STORE_OK)
            return rc;
        c->prepared[id] = 1;
    }
    PGresult *r = PQexecPrepared(c->pg, name, p ? p->n : 0, p ? p->v : NULL, NULL, NULL, 0);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        int rc = pg_fail(c, pg_stmts[id].what, r);
        PQclear(r);
        return rc;
    }
    *out = r;
    return STORE_OK;
}

/* A statement of one row at most: STORE_OK with the row in *out,
 * STORE_ERR_NOT_FOUND, or the failure. */
int pg_exec_row(pg_conn *c, enum stmt_id id, const struct params *p, PGresult **out)
{
    int rc = pg_exec(c, id, p, out);
    if (rc == STORE_OK && PQntuples(*out) == 0) {
        PQclear(*out);
        *out = NULL;
        rc = STORE_ERR_NOT_FOUND;
    }
    return rc;
}

/* A statement run as plain text (BEGIN, COMMIT, SET, a migration). */
int pg_command(pg_conn *c, const char *sql)
{
    PGresult *r = PQexec(c->pg, sql);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? STORE_OK : pg_fail(c, sql, r);
    PQclear(r);
    return rc;
}

int pg_in_transaction(pg_conn *c)
{
    if (c->in_tx)
        return 1;
    snprintf(c->err, sizeof(c->err), "the transaction is no longer open");
    return 0;
}

void pg_rollback(pg_conn *c)
{
    if (c->in_tx && PQstatus(c->pg) == CONNECTION_OK)
        pg_command(c, "ROLLBACK");
    c->in_tx = 0;
    c->tx_first_order = 0;
    c->tx_rc = 0;
}

/* ---- sessions and the pool ---- */

static const store_backend *backend(void) { return &store_postgres; }

static void session_close(pg_conn *c)
{
    PQfinish(c->pg);
    c->pg = NULL;
    memset(c->prepared, 0, sizeof(c->prepared));
    c->in_tx = 0;
    c->tx_first_order = 0;
}

static void ignore_notice(void *arg, const char *message) { (void)arg, (void)message; }

/* Opens c's session: --db (a URL or a conninfo) with the password from the
 * file, if any, and a bound on every statement. */
static int session_open(pg_conn *c)
{
    const store_config *cfg = &c->s->cfg;
    char options[96], connect_s[16];
    /* --sync normal: as on SQLite, a crash of the server may lose the last
     * commits but never half of one */
    snprintf(options, sizeof(options), "-c statement_timeout=%d -c synchronous_commit=%s",
             cfg->timeout_ms, cfg->sync_full ? "on" : "off");
    snprintf(connect_s, sizeof(connect_s), "%d",
             cfg->timeout_ms > 2000 ? cfg->timeout_ms / 1000 : 2); /* libpq's least: 2 s */
    /* after dbname, so that these override what the URL says */
    const char *keys[] = {"dbname", "connect_timeout", "options", "application_name",
                          c->s->password ? "password" : NULL, NULL};
    const char *values[] = {c->s->db, connect_s, options, "stockd", c->s->password, NULL};
    session_close(c);
    c->pg = PQconnectdbParams(keys, values, 1);
    if (c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK) {
        set_err(c, "cannot connect to PostgreSQL", c->pg ? PQerrorMessage(c->pg) : "out of memory");
        session_close(c);
        return STORE_ERR_UNAVAILABLE;
    }
    PQsetNoticeProcessor(c->pg, ignore_notice, NULL); /* not onto stderr: the log is ours */
    PGresult *r = PQexec(c->pg, "SELECT pg_backend_pid(), backend_start::text FROM "
                                "pg_stat_activity WHERE pid = pg_backend_pid()");
    int rc = r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1
                 ? STORE_OK : pg_fail(c, "read the session's identity", r);
    if (rc == STORE_OK) {
        c->pid = (int)col_int(r, 0, 0);
        col_text(c->started, sizeof(c->started), r, 0, 1);
    }
    PQclear(r);
    if (rc != STORE_OK)
        session_close(c);
    return rc;
}

/* Whether a pooled session is still usable. An idle one has nothing to
 * read unless the server spoke first - as it does when it ends the session
 * (a restart, pg_terminate_backend: FATAL, then EOF) - so one that has
 * something to read is replaced, rather than left to fail a request. */
static int session_alive(pg_conn *c)
{
    if (c->pg == NULL || PQstatus(c->pg) != CONNECTION_OK)
        return 0;
    struct pollfd p = {.fd = PQsocket(c->pg), .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

static void conn_free(pg_conn *c)
{
    if (c) {
        session_close(c);
        free(c);
    }
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Applies every embedded schema file the database has not seen, in one
 * transaction under an advisory lock: replicas starting together wait for
 * each other, and the later ones find the work done. */
static int migrate(pg_conn *c, char *err, size_t errlen)
{
    char sql[160], lock[64];
    snprintf(lock, sizeof(lock), "SELECT pg_advisory_xact_lock(%lld)", MIGRATION_LOCK);
    int rc = pg_command(c, "BEGIN");
    if (rc == STORE_OK) /* a long migration, and the wait for another replica's */
        rc = pg_command(c, "SET LOCAL statement_timeout = 0");
    if (rc == STORE_OK)
        rc = pg_command(c, lock);
    if (rc == STORE_OK)
        rc = pg_command(c, "CREATE TABLE IF NOT EXISTS stockd_schema (version integer PRIMARY KEY, "
                        "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())");
    int version = -1;
    if (rc == STORE_OK) {
        PGresult *r = PQexec(c->pg, "SELECT COALESCE(max(version), 0) FROM stockd_schema");
        if (r && PQresultStatus(r) == PGRES_TUPLES_OK)
            version = (int)col_int(r, 0, 0);
        else
            rc = pg_fail(c, "read the schema version", r);
        PQclear(r);
    }
    for (int i = 0; rc == STORE_OK && i < store_postgres_migrations_count; i++) {
        const struct store_migration *m = &store_postgres_migrations[i];
        if (m->version <= version)
            continue;
        snprintf(sql, sizeof(sql), "INSERT INTO stockd_schema (version, name) VALUES (%d, '%s')",
                 m->version, m->name); /* embedded names: digits, letters, _ and . */
        rc = pg_command(c, m->sql);
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

void pg_close(store *st);

/* PostgreSQL takes its URLs (postgresql:// or postgres://) and libpq's
 * key=value conninfo, told by its first word: a keyword and '=' (blanks
 * allowed around both, as libpq reads it). Any keyword: a misspelt one gets
 * libpq's error, not an SQLite file named after the conninfo. A file whose
 * name starts so is written ./name. */
int pg_serves(const char *db)
{
    if (strncmp(db, "postgresql://", 13) == 0 || strncmp(db, "postgres://", 11) == 0)
        return 1;
    const char *p = db + strspn(db, " \t\n");
    size_t klen = 0;
    while (isalnum((unsigned char)p[klen]) || p[klen] == '_')
        klen++;
    return klen > 0 && !isdigit((unsigned char)p[0]) && p[klen + strspn(p + klen, " \t\n")] == '=';
}

int pg_open(const store_config *cfg, store **out, char *err, size_t errlen)
{
    pg_store *s = calloc(1, sizeof(*s));
    pg_conn *c = calloc(1, sizeof(*c));
    if (s == NULL || c == NULL || (s->db = strdup(cfg->db)) == NULL ||
        (cfg->password && (s->password = strdup(cfg->password)) == NULL)) {
        free(c);
        if (s)
            free(s->db);
        free(s);
        snprintf(err, errlen, "out of memory");
        return STORE_ERR_IO;
    }
    s->base.be = backend();
    s->cfg = *cfg;
    s->cfg.db = s->db;
    s->cfg.password = NULL; /* s->password has it */
    s->cfg.pool_size = cfg->pool_size < 1 ? 1 : cfg->pool_size > POOL_MAX ? POOL_MAX
                                                                          : cfg->pool_size;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->freed, NULL);
    c->base.be = backend();
    c->s = s;
    int rc = session_open(c);
    if (rc != STORE_OK)
        snprintf(err, errlen, "%s", c->err);
    else
        rc = migrate(c, err, errlen);
    if (rc != STORE_OK) {
        conn_free(c);
        pg_close(&s->base);
        return rc;
    }
    s->idle[s->nidle++] = c;
    s->open = 1;
    *out = &s->base;
    return STORE_OK;
}

void pg_close(store *st)
{
    pg_store *s = (pg_store *)st;
    for (int i = 0; i < s->nidle; i++)
        conn_free(s->idle[i]);
    pthread_cond_destroy(&s->freed);
    pthread_mutex_destroy(&s->mu);
    if (s->password) /* not left in freed memory */
        memset(s->password, 0, strlen(s->password));
    free(s->password);
    free(s->db);
    free(s);
}

/* A pooled connection, or a new one while the pool has room; else waits up
 * to the busy timeout for one to come back. */
int pg_get(store *st, store_conn **out, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)st;
    pg_conn *c = NULL;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += s->cfg.busy_timeout_ms / 1000;
    until.tv_nsec += (long)(s->cfg.busy_timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    *out = NULL;
    pthread_mutex_lock(&s->mu);
    while (s->nidle == 0 && s->open >= s->cfg.pool_size &&
           pthread_cond_timedwait(&s->freed, &s->mu, &until) == 0) {
    }
    int busy = 0;
    if (s->nidle > 0)
        c = s->idle[--s->nidle];
    else if (s->open < s->cfg.pool_size)
        s->open++; /* a new one, opened below */
    else
        busy = 1;
    pthread_mutex_unlock(&s->mu);
    if (busy) {
        snprintf(err, errlen, "all %d PostgreSQL connections stayed in use for %d ms",
                 s->cfg.pool_size, s->cfg.busy_timeout_ms);
        return STORE_ERR_BUSY;
    }
    if (c == NULL && (c = calloc(1, sizeof(*c))) != NULL) {
        c->base.be = backend();
        c->s = s;
    }
    int rc = c == NULL ? STORE_ERR_IO : session_alive(c) ? STORE_OK : session_open(c);
    if (rc != STORE_OK) {
        snprintf(err, errlen, "%s", c ? c->err : "out of memory");
        conn_free(c);
        pthread_mutex_lock(&s->mu);
        s->open--;
        pthread_cond_signal(&s->freed);
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    *out = &c->base;
    return STORE_OK;
}

/* Back to the pool, out of any transaction; a broken session is closed
 * here (the next get opens a new one). */
void pg_put(store *st, store_conn *conn)
{
    pg_store *s = (pg_store *)st;
    pg_conn *c = CONN(conn);
    pg_rollback(c);
    if (c->pg && PQstatus(c->pg) != CONNECTION_OK)
        session_close(c);
    pthread_mutex_lock(&s->mu);
    s->idle[s->nidle++] = c; /* nidle <= open <= pool_size <= POOL_MAX */
    pthread_cond_signal(&s->freed);
    pthread_mutex_unlock(&s->mu);
}

const char *pg_errstr(const store_conn *c) { return CONN(c)->err; }

int pg_ping(store_conn *conn)
{
    PGresult *r;
    int rc = pg_exec(CONN(conn), ST_PING, NULL, &r);
    PQclear(r);
    return rc;
}

/* TRUNCATE gives the table a new, empty file, so the row needs a new page
 * where the tables live: the write that fails first when that disk is full
 * (most deductions fit in pages their tables already have). */
int pg_probe_write(store_conn *conn)
{
    pg_conn *c = CONN(conn);
    int rc = pg_command(c, "BEGIN");
    if (rc == STORE_OK)
        rc = pg_command(c, "TRUNCATE write_probe");
    if (rc == STORE_OK)
        rc = pg_command(c, "INSERT INTO write_probe DEFAULT VALUES");
    if (rc == STORE_OK)
        rc = pg_command(c, "COMMIT");
    if (rc != STORE_OK)
        pg_command(c, "ROLLBACK");
    return rc;
}

/* A COMMIT whose answer never came: it may or may not have happened. Once
 * the old session is surely gone (terminated and waited for, should the
 * server still be running it), its first order is there or not for good,
 * and with it the whole transaction. Tried on fresh sessions until
 * IN_DOUBT_MS - a server that is restarting comes back meanwhile. */
int pg_commit_in_doubt(pg_conn *c)
{
    char lost[sizeof(c->err)], sql[200]; /* lost: why COMMIT failed, for the message */
    int64_t order = c->tx_first_order;
    struct params p = {0};
    p_int(&p, order);
    snprintf(lost, sizeof(lost), "%s", c->err);
    snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(pid, 2000) FROM pg_stat_activity "
             "WHERE pid = %d AND backend_start::text = '%s'", c->pid, c->started);
    for (int64_t end = now_ms() + IN_DOUBT_MS; now_ms() < end;) {
        PGresult *r = NULL;
        if (session_open(c) == STORE_OK && pg_command(c, sql) == STORE_OK &&
            pg_exec(c, ST_ORDER_EXISTS, &p, &r) == STORE_OK) {
            int committed = PQntuples(r) > 0;
            PQclear(r);
            if (committed)
                return STORE_OK;
            snprintf(c->err, sizeof(c->err), "%.180s; nothing was written", lost);
            return STORE_ERR_UNAVAILABLE;
        }
        struct timespec pause = {0, 100 * 1000000L};
        nanosleep(&pause, NULL);
    }
    snprintf(c->err, sizeof(c->err), "%.180s; PostgreSQL stayed away: whether it committed is "
             "unknown", lost);
    return STORE_ERR_IN_DOUBT;
}
