/* store_postgres.c - the PostgreSQL backend of the store (store_backend.h),
 * for replicas on several hosts: a bounded pool of libpq connections, each
 * with its statements prepared once; the embedded migrations
 * (schema/postgres/) under an advisory lock, so replicas that start together
 * apply each file once; items, orders, lines and their transactions with the
 * semantics store.h states, on READ COMMITTED and row locks.
 *
 * A server that goes away: a connection it closed while pooled is replaced
 * before use; a failure on the way answers STORE_ERR_UNAVAILABLE; a COMMIT
 * whose answer was lost is resolved by looking for the transaction's first
 * order once the old session is surely gone (commit_in_doubt). */
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_backend.h"

#define POOL_MAX 256
#define PARAMS_MAX 7
#define MIGRATION_LOCK 0x73746f636bLL /* pg_advisory_xact_lock key: "stock" */
#define IN_DOUBT_MS 10000             /* how long a lost COMMIT's outcome is looked for */

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
#define ITEM_SELECT                                                                  \
    "SELECT i.id, i.name, i.stock, COALESCE(SUM(l.quantity), 0), COUNT(l.id) "      \
    "FROM items i LEFT JOIN order_lines l ON l.item_id = i.id "
#define ORDER_COLS "o.id, o.request_id, o.instance_id, o.lock_mode, " TS("o.created_at")
#define LINE_COLS "l.item_id, l.quantity, l.remaining, COALESCE(l.fence, 0), " \
                  "COALESCE(l.fence_seq, 0)"

extern const struct store_migration store_postgres_migrations[];
extern const int store_postgres_migrations_count;

enum stmt_id {
    ST_PING, ST_ITEM_INSERT, ST_ITEM_GET, ST_ITEM_LIST,
    ST_SET_STOCK, ST_SET_STOCK_FENCED, ST_STOCK_READ, ST_STOCK_CLAIM, ST_STOCK_WRITE_CLAIMED,
    ST_STOCK_TAKE, ST_STOCK_LOCK, ST_ORDER_INSERT, ST_LINE_INSERT, ST_ORDER_BY_REQUEST,
    ST_ORDER_GET, ST_ORDER_EXISTS, ST_LINES_OF_ORDER, ST_LINES_OF_ITEM,
    ST_COUNT
};

/* Each statement with its parameters' types: i = bigint, t = text. Typed
 * up front, so that a statement may leave one unused (update_item binds
 * (id, value, fence, seq) to all of its kind). */
static const struct {
    const char *what, *sql, *types;
} stmts[ST_COUNT] = {
    [ST_PING] = {"ping", "SELECT 1", ""},
    [ST_ITEM_INSERT] = {"insert item", "INSERT INTO items (name, stock) VALUES ($1, $2) RETURNING id", "ti"},
    [ST_ITEM_GET] = {"read item", ITEM_SELECT "WHERE i.id = $1 GROUP BY i.id", "i"},
    [ST_ITEM_LIST] = {"list items", ITEM_SELECT "WHERE i.id > $1 GROUP BY i.id ORDER BY i.id LIMIT $2", "ii"},
    [ST_SET_STOCK] = {"set stock", "UPDATE items SET stock = $2, updated_at = now() WHERE id = $1", "iiii"},
    [ST_SET_STOCK_FENCED] = {"set stock", "UPDATE items SET stock = $2, fence = $3, fence_seq = $4, "
                             "updated_at = now() WHERE id = $1 AND (fence, fence_seq) < ($3, $4)",
                             "iiii"},
    [ST_STOCK_READ] = {"read stock", "SELECT stock FROM items WHERE id = $1", "i"},
    [ST_STOCK_CLAIM] = {"claim row", "UPDATE items SET fence = $3, fence_seq = $4 WHERE id = $1 AND "
                        "(fence, fence_seq) < ($3, $4) RETURNING stock", "iiii"},
    [ST_STOCK_WRITE_CLAIMED] = {"write stock", "UPDATE items SET stock = $2, updated_at = now() WHERE id = $1 "
                                "AND fence = $3 AND fence_seq = $4", "iiii"},
    [ST_STOCK_TAKE] = {"take stock", "UPDATE items SET stock = stock - $2, updated_at = now() WHERE id = $1 "
                       "AND stock >= $2 RETURNING stock", "ii"},
    [ST_STOCK_LOCK] = {"lock row", "SELECT stock FROM items WHERE id = $1 FOR UPDATE", "i"},
    /* a requestId already there (or being written by another transaction,
     * which this one then waits for) adds nothing and returns no row */
    [ST_ORDER_INSERT] = {"insert order", "INSERT INTO orders (request_id, instance_id, lock_mode) "
                         "VALUES ($1, $2, $3) ON CONFLICT (request_id) DO NOTHING "
                         "RETURNING id, " TS("created_at"), "ttt"},
    [ST_LINE_INSERT] = {"insert order line", "INSERT INTO order_lines (order_id, item_id, quantity, remaining, fence, "
                        "fence_seq, lock_token) VALUES ($1, $2, $3, $4, $5, $6, $7)", "iiiiiit"},
    [ST_ORDER_BY_REQUEST] = {"find request id", "SELECT " ORDER_COLS " FROM orders o WHERE o.request_id = $1", "t"},
    [ST_ORDER_GET] = {"read order", "SELECT " ORDER_COLS " FROM orders o WHERE o.id = $1", "i"},
    [ST_ORDER_EXISTS] = {"find order", "SELECT 1 FROM orders WHERE id = $1", "i"},
    [ST_LINES_OF_ORDER] = {"read order lines", "SELECT " LINE_COLS " FROM order_lines l WHERE l.order_id = $1 "
                           "ORDER BY l.id", "i"},
    [ST_LINES_OF_ITEM] = {"list lines", "SELECT " ORDER_COLS ", " LINE_COLS " FROM order_lines l JOIN orders o "
                          "ON o.id = l.order_id WHERE l.item_id = $1 AND l.order_id < $2 "
                          "ORDER BY l.order_id DESC LIMIT $3", "iii"},
};

typedef struct pg_store pg_store;

typedef struct pg_conn {
    struct store_conn base;
    pg_store *s;
    PGconn *pg;
    int prepared[ST_COUNT];
    int in_tx;
    int pid;                /* the server's process for this session... */
    char started[48];       /* ...and when it started: together, this session */
    int64_t tx_first_order; /* the first order the open transaction added, or 0 */
    char err[256];
} pg_conn;

struct pg_store {
    struct store base;
    store_config cfg;
    char *db, *password;
    pthread_mutex_t mu; /* guards idle, nidle, open */
    pthread_cond_t freed;
    pg_conn *idle[POOL_MAX];
    int nidle, open; /* pooled, and in all (pooled or in use) */
};

#define CONN(c) ((pg_conn *)(c))

/* Text parameters of one statement (NULL for SQL NULL). */
struct params {
    int n;
    const char *v[PARAMS_MAX];
    char num[PARAMS_MAX][24];
};

static void p_int(struct params *p, int64_t v)
{
    snprintf(p->num[p->n], sizeof(p->num[0]), "%lld", (long long)v);
    p->v[p->n] = p->num[p->n];
    p->n++;
}

static void p_text(struct params *p, const char *text) { p->v[p->n++] = text; }

static int64_t col_int(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static void col_text(char *dst, size_t size, const PGresult *r, int row, int col)
{
    snprintf(dst, size, "%s", PQgetvalue(r, row, col));
}

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

/* Maps a failed result (or none: the connection failed) to a store code.
 * Connection failures and a server shutting down are UNAVAILABLE; waits
 * cut short (lock_timeout, statement_timeout) and conflicts the server
 * resolved by cancelling us are BUSY or LOCK_TIMEOUT. */
static int fail(pg_conn *c, const char *what, const PGresult *r)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    set_err(c, what, r && *PQresultErrorMessage(r) ? PQresultErrorMessage(r)
                                                    : PQerrorMessage(c->pg));
    if (PQstatus(c->pg) != CONNECTION_OK || state == NULL || strncmp(state, "08", 2) == 0 ||
        strncmp(state, "57P0", 4) == 0 || strcmp(state, "53300") == 0)
        return STORE_ERR_UNAVAILABLE;
    if (strcmp(state, "55P03") == 0)
        return STORE_ERR_LOCK_TIMEOUT;
    if (strcmp(state, "57014") == 0 || strcmp(state, "40P01") == 0 ||
        strcmp(state, "40001") == 0)
        return STORE_ERR_BUSY;
    return STORE_ERR_IO;
}

/* Runs prepared statement id (preparing it on this session's first use).
 * STORE_OK with *out the result (PQclear it), or the failure. */
static int exec(pg_conn *c, enum stmt_id id, const struct params *p, PGresult **out)
{
    *out = NULL;
    char name[8];
    snprintf(name, sizeof(name), "s%d", (int)id);
    if (!c->prepared[id]) {
        Oid types[PARAMS_MAX];
        int n = (int)strlen(stmts[id].types);
        for (int i = 0; i < n; i++)
            types[i] = stmts[id].types[i] == 't' ? 25 : 20; /* text, int8 */
        PGresult *r = PQprepare(c->pg, name, stmts[id].sql, n, types);
        int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
        int rc = ok ? STORE_OK : fail(c, "prepare", r);
        PQclear(r);
        if (rc != STORE_OK)
            return rc;
        c->prepared[id] = 1;
    }
    PGresult *r = PQexecPrepared(c->pg, name, p ? p->n : 0, p ? p->v : NULL, NULL, NULL, 0);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        int rc = fail(c, stmts[id].what, r);
        PQclear(r);
        return rc;
    }
    *out = r;
    return STORE_OK;
}

/* A statement of one row at most: STORE_OK with the row in *out,
 * STORE_ERR_NOT_FOUND, or the failure. */
static int exec_row(pg_conn *c, enum stmt_id id, const struct params *p, PGresult **out)
{
    int rc = exec(c, id, p, out);
    if (rc == STORE_OK && PQntuples(*out) == 0) {
        PQclear(*out);
        *out = NULL;
        rc = STORE_ERR_NOT_FOUND;
    }
    return rc;
}

/* A statement run as plain text (BEGIN, COMMIT, SET, a migration). */
static int command(pg_conn *c, const char *sql)
{
    PGresult *r = PQexec(c->pg, sql);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? STORE_OK : fail(c, sql, r);
    PQclear(r);
    return rc;
}

static int in_transaction(pg_conn *c)
{
    if (c->in_tx)
        return 1;
    snprintf(c->err, sizeof(c->err), "the transaction is no longer open");
    return 0;
}

static void rollback(pg_conn *c)
{
    if (c->in_tx && PQstatus(c->pg) == CONNECTION_OK)
        command(c, "ROLLBACK");
    c->in_tx = 0;
    c->tx_first_order = 0;
}

static void read_item(const PGresult *r, int row, store_item *it)
{
    it->id = col_int(r, row, 0);
    col_text(it->name, sizeof(it->name), r, row, 1);
    it->stock = col_int(r, row, 2);
    it->sold = col_int(r, row, 3);
    it->line_count = col_int(r, row, 4);
}

/* ORDER_COLS from column col on. */
static void read_order_info(const PGresult *r, int row, int col, store_order_info *o)
{
    o->order_id = col_int(r, row, col);
    o->has_request_id = !PQgetisnull(r, row, col + 1);
    col_text(o->request_id, sizeof(o->request_id), r, row, col + 1);
    col_text(o->instance, sizeof(o->instance), r, row, col + 2);
    col_text(o->lock_mode, sizeof(o->lock_mode), r, row, col + 3);
    col_text(o->created_at, sizeof(o->created_at), r, row, col + 4);
}

/* LINE_COLS from column col on. */
static void read_line(const PGresult *r, int row, int col, store_line *l)
{
    l->item_id = col_int(r, row, col);
    l->quantity = col_int(r, row, col + 1);
    l->remaining = col_int(r, row, col + 2);
    l->fence.fence = col_int(r, row, col + 3);
    l->fence.seq = (int)col_int(r, row, col + 4);
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
    snprintf(connect_s, sizeof(connect_s), "%d", cfg->timeout_ms > 2000 ? cfg->timeout_ms / 1000 : 2);
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
                 ? STORE_OK : fail(c, "read the session's identity", r);
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
    int rc = command(c, "BEGIN");
    if (rc == STORE_OK) /* a long migration, and the wait for another replica's */
        rc = command(c, "SET LOCAL statement_timeout = 0");
    if (rc == STORE_OK)
        rc = command(c, lock);
    if (rc == STORE_OK)
        rc = command(c, "CREATE TABLE IF NOT EXISTS stockd_schema (version integer PRIMARY KEY, "
                        "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())");
    int version = -1;
    if (rc == STORE_OK) {
        PGresult *r = PQexec(c->pg, "SELECT COALESCE(max(version), 0) FROM stockd_schema");
        if (r && PQresultStatus(r) == PGRES_TUPLES_OK)
            version = (int)col_int(r, 0, 0);
        else
            rc = fail(c, "read the schema version", r);
        PQclear(r);
    }
    for (int i = 0; rc == STORE_OK && i < store_postgres_migrations_count; i++) {
        const struct store_migration *m = &store_postgres_migrations[i];
        if (m->version <= version)
            continue;
        snprintf(sql, sizeof(sql), "INSERT INTO stockd_schema (version, name) VALUES (%d, '%s')",
                 m->version, m->name); /* embedded names: digits, letters, _ and . */
        rc = command(c, m->sql);
        if (rc == STORE_OK)
            rc = command(c, sql);
    }
    if (rc == STORE_OK)
        rc = command(c, "COMMIT");
    if (rc != STORE_OK) {
        command(c, "ROLLBACK");
        snprintf(err, errlen, "schema migration failed: %s", c->err);
    }
    return rc;
}

static void pg_close(store *st);

/* PostgreSQL takes its URLs (postgresql:// or postgres://) and libpq's
 * key=value conninfo ("host=... dbname=...", by its first keyword). */
static int pg_serves(const char *db)
{
    static const char *const starts[] = {"postgresql://", "postgres://", "host=", "hostaddr=",
                                         "dbname=", "user=", "port=", "service=", NULL};
    for (int i = 0; starts[i]; i++)
        if (strncmp(db, starts[i], strlen(starts[i])) == 0)
            return 1;
    return 0;
}

static int pg_open(const store_config *cfg, store **out, char *err, size_t errlen)
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

static void pg_close(store *st)
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
static int pg_get(store *st, store_conn **out, char *err, size_t errlen)
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
static void pg_put(store *st, store_conn *conn)
{
    pg_store *s = (pg_store *)st;
    pg_conn *c = CONN(conn);
    rollback(c);
    if (c->pg && PQstatus(c->pg) != CONNECTION_OK)
        session_close(c);
    pthread_mutex_lock(&s->mu);
    s->idle[s->nidle++] = c; /* nidle <= open <= pool_size <= POOL_MAX */
    pthread_cond_signal(&s->freed);
    pthread_mutex_unlock(&s->mu);
}

static const char *pg_errstr(const store_conn *c) { return CONN(c)->err; }

static int pg_ping(store_conn *conn)
{
    PGresult *r;
    int rc = exec(CONN(conn), ST_PING, NULL, &r);
    PQclear(r);
    return rc;
}

/* ---- items ---- */

static int pg_item_get(store_conn *conn, int64_t id, store_item *out)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, id);
    int rc = exec_row(CONN(conn), ST_ITEM_GET, &p, &r);
    if (rc == STORE_OK)
        read_item(r, 0, out);
    PQclear(r);
    return rc;
}

static int pg_item_create(store_conn *conn, const char *name, int64_t stock, store_item *out)
{
    struct params p = {0};
    PGresult *r;
    p_text(&p, name);
    p_int(&p, stock);
    int rc = exec_row(CONN(conn), ST_ITEM_INSERT, &p, &r);
    int64_t id = rc == STORE_OK ? col_int(r, 0, 0) : 0;
    PQclear(r);
    return rc == STORE_OK ? pg_item_get(conn, id, out) : rc;
}

static int pg_item_list(store_conn *conn, int64_t after, int limit, store_item_fn fn, void *arg)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, after);
    p_int(&p, limit);
    int rc = exec(CONN(conn), ST_ITEM_LIST, &p, &r);
    store_item it;
    for (int i = 0; rc == STORE_OK && i < PQntuples(r); i++) {
        read_item(r, i, &it);
        fn(&it, arg);
    }
    PQclear(r);
    return rc;
}

static int pg_stock_read(store_conn *conn, int64_t item_id, int64_t *stock)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, item_id);
    int rc = exec_row(CONN(conn), ST_STOCK_READ, &p, &r);
    if (rc == STORE_OK)
        *stock = col_int(r, 0, 0);
    PQclear(r);
    return rc;
}

/* Runs an UPDATE on one item bound as (id, value, fence, seq). When it
 * changes nothing the item is missing (NOT_FOUND) or, when fenced, another
 * holder's token is on the row (STALE). With RETURNING, *ret gets column 0. */
static int update_item(pg_conn *c, enum stmt_id id_stmt, int64_t id, int64_t value,
                       const store_fence *f, int64_t *ret)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, id);
    p_int(&p, value);
    p_int(&p, f ? f->fence : 0);
    p_int(&p, f ? f->seq : 0);
    int rc = exec(c, id_stmt, &p, &r);
    int changed = rc == STORE_OK && (PQntuples(r) > 0 || atoi(PQcmdTuples(r)) > 0);
    if (changed && ret && PQntuples(r) > 0)
        *ret = col_int(r, 0, 0);
    PQclear(r);
    if (rc == STORE_OK && !changed) {
        int64_t ignored;
        rc = pg_stock_read(&c->base, id, &ignored);
        if (rc == STORE_OK) {
            snprintf(c->err, sizeof(c->err), "item %lld carries a newer lock's token than "
                     "(%lld, %d)", (long long)id, (long long)(f ? f->fence : 0), f ? f->seq : 0);
            rc = STORE_ERR_STALE;
        }
    }
    return rc;
}

static int pg_stock_claim(store_conn *conn, int64_t item_id, const store_fence *f,
                          int64_t *stock)
{
    return update_item(CONN(conn), ST_STOCK_CLAIM, item_id, 0, f, stock);
}

/* ---- transactions ---- */

static int pg_tx_begin(store_conn *conn)
{
    pg_conn *c = CONN(conn);
    int rc = command(c, "BEGIN");
    c->in_tx = rc == STORE_OK;
    c->tx_first_order = 0;
    return rc;
}

static void pg_tx_abort(store_conn *conn) { rollback(CONN(conn)); }

/* A COMMIT whose answer never came: it may or may not have happened. Once
 * the old session is surely gone (terminated and waited for, should the
 * server still be running it), its first order is there or not for good,
 * and with it the whole transaction. Tried on fresh sessions until
 * IN_DOUBT_MS - a server that is restarting comes back meanwhile. */
static int commit_in_doubt(pg_conn *c)
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
        if (session_open(c) == STORE_OK && command(c, sql) == STORE_OK &&
            exec(c, ST_ORDER_EXISTS, &p, &r) == STORE_OK) {
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

static int pg_tx_commit(store_conn *conn, const store_commit_check *check)
{
    pg_conn *c = CONN(conn);
    if (!in_transaction(c))
        return STORE_ERR_IO;
    if (check && !check->ok(check->arg)) {
        snprintf(c->err, sizeof(c->err), "commit vetoed by the caller");
        rollback(c);
        return STORE_ERR_VETOED;
    }
    PGresult *r = PQexec(c->pg, "COMMIT");
    int answered = r && PQresultStatus(r) == PGRES_COMMAND_OK;
    /* COMMIT of a transaction that failed earlier answers ROLLBACK */
    int rc = answered && strcmp(PQcmdStatus(r), "COMMIT") == 0 ? STORE_OK
             : answered ? (snprintf(c->err, sizeof(c->err), "the transaction was rolled back"),
                           STORE_ERR_IO)
                        : fail(c, "COMMIT", r);
    PQclear(r);
    c->in_tx = 0;
    if (rc == STORE_ERR_UNAVAILABLE)
        rc = c->tx_first_order > 0 ? commit_in_doubt(c) : STORE_ERR_IN_DOUBT;
    c->tx_first_order = 0;
    return rc;
}

static int pg_item_set_stock(store_conn *conn, int64_t id, int64_t stock, const store_fence *f,
                             const store_commit_check *check)
{
    pg_conn *c = CONN(conn);
    int rc = pg_tx_begin(conn);
    if (rc == STORE_OK)
        rc = update_item(c, f ? ST_SET_STOCK_FENCED : ST_SET_STOCK, id, stock, f, NULL);
    if (rc == STORE_OK)
        return pg_tx_commit(conn, check);
    rollback(c);
    return rc;
}

static int pg_tx_set_stock(store_conn *conn, int64_t item_id, int64_t stock, const store_fence *f)
{
    pg_conn *c = CONN(conn);
    if (!in_transaction(c))
        return STORE_ERR_IO;
    return update_item(c, f ? ST_STOCK_WRITE_CLAIMED : ST_SET_STOCK, item_id, stock, f, NULL);
}

static int pg_tx_take(store_conn *conn, int64_t item_id, int64_t quantity, int64_t *left)
{
    pg_conn *c = CONN(conn);
    if (!in_transaction(c))
        return STORE_ERR_IO;
    struct params p = {0};
    PGresult *r;
    p_int(&p, item_id);
    p_int(&p, quantity);
    int rc = exec(c, ST_STOCK_TAKE, &p, &r);
    int taken = rc == STORE_OK && PQntuples(r) > 0;
    if (taken)
        *left = col_int(r, 0, 0);
    PQclear(r);
    if (rc == STORE_OK && !taken) { /* no row: missing or not enough */
        rc = pg_stock_read(conn, item_id, left);
        if (rc == STORE_OK)
            rc = STORE_ERR_INSUFFICIENT;
    }
    return rc;
}

static int pg_tx_lock_stock(store_conn *conn, int64_t item_id, int wait_ms, int64_t *stock)
{
    pg_conn *c = CONN(conn);
    if (!in_transaction(c))
        return STORE_ERR_IO;
    /* the statement's own bound must not cut the wait short */
    char set[96];
    snprintf(set, sizeof(set), "SET LOCAL lock_timeout = %d; SET LOCAL statement_timeout = %d",
             wait_ms > 0 ? wait_ms : 1, (wait_ms > 0 ? wait_ms : 1) + c->s->cfg.timeout_ms);
    struct params p = {0};
    PGresult *r = NULL;
    p_int(&p, item_id);
    int rc = command(c, set);
    if (rc == STORE_OK)
        rc = exec_row(c, ST_STOCK_LOCK, &p, &r);
    if (rc == STORE_OK)
        *stock = col_int(r, 0, 0);
    else if (rc == STORE_ERR_LOCK_TIMEOUT)
        snprintf(c->err, sizeof(c->err), "the row of item %lld stayed locked for %d ms",
                 (long long)item_id, wait_ms);
    PQclear(r);
    return rc;
}

/* ---- orders and lines ---- */

static int read_lines_of_order(pg_conn *c, store_order *o)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, o->info.order_id);
    int rc = exec(c, ST_LINES_OF_ORDER, &p, &r);
    o->nlines = 0;
    for (int i = 0; rc == STORE_OK && i < PQntuples(r) && i < RULE_ORDER_LINES_MAX; i++)
        read_line(r, i, 0, &o->lines[o->nlines++]);
    PQclear(r);
    return rc;
}

/* The order statement id finds by p, with its lines. */
static int read_order(pg_conn *c, enum stmt_id id, const struct params *p, store_order *out)
{
    PGresult *r;
    int rc = exec_row(c, id, p, &r);
    if (rc == STORE_OK)
        read_order_info(r, 0, 0, &out->info);
    PQclear(r);
    return rc == STORE_OK ? read_lines_of_order(c, out) : rc;
}

static int pg_order_by_request(store_conn *conn, const char *request_id, store_order *out)
{
    struct params p = {0};
    p_text(&p, request_id);
    return read_order(CONN(conn), ST_ORDER_BY_REQUEST, &p, out);
}

static int pg_order_get(store_conn *conn, int64_t order_id, store_order *out)
{
    struct params p = {0};
    p_int(&p, order_id);
    return read_order(CONN(conn), ST_ORDER_GET, &p, out);
}

static int pg_lines_of_item(store_conn *conn, int64_t item_id, int64_t before, int limit,
                            store_line_fn fn, void *arg)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, item_id);
    p_int(&p, before > 0 ? before : INT64_MAX);
    p_int(&p, limit);
    int rc = exec(CONN(conn), ST_LINES_OF_ITEM, &p, &r);
    store_order_info o;
    store_line l;
    for (int i = 0; rc == STORE_OK && i < PQntuples(r); i++) {
        read_order_info(r, i, 0, &o);
        read_line(r, i, 5, &l);
        fn(&o, &l, arg);
    }
    PQclear(r);
    return rc;
}

static int insert_line(pg_conn *c, int64_t order_id, const store_line *l, const char *lock_token)
{
    struct params p = {0};
    PGresult *r;
    p_int(&p, order_id);
    p_int(&p, l->item_id);
    p_int(&p, l->quantity);
    p_int(&p, l->remaining);
    p_int(&p, l->fence.fence);
    p_int(&p, l->fence.seq);
    p_text(&p, lock_token);
    if (l->fence.fence == 0) /* unfenced: NULL, as SQLite's rows have it */
        p.v[4] = p.v[5] = NULL;
    int rc = exec(c, ST_LINE_INSERT, &p, &r);
    PQclear(r);
    return rc;
}

static int pg_tx_add_order(store_conn *conn, const store_new_order *o, store_order *out)
{
    pg_conn *c = CONN(conn);
    if (!in_transaction(c))
        return STORE_ERR_IO;
    struct params p = {0};
    PGresult *r;
    p_text(&p, o->request_id);
    p_text(&p, o->instance);
    p_text(&p, o->lock_mode);
    memset(out, 0, sizeof(*out));
    int rc = exec(c, ST_ORDER_INSERT, &p, &r);
    int added = rc == STORE_OK && PQntuples(r) > 0;
    if (added) {
        out->info.order_id = col_int(r, 0, 0);
        col_text(out->info.created_at, sizeof(out->info.created_at), r, 0, 1);
    }
    PQclear(r);
    if (rc == STORE_OK && !added) { /* its requestId was there: the earlier order */
        rc = pg_order_by_request(conn, o->request_id, out);
        return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
    }
    for (int i = 0; rc == STORE_OK && i < o->nlines; i++)
        rc = insert_line(c, out->info.order_id, &o->lines[i], o->lock_token);
    if (rc != STORE_OK)
        return rc;
    if (c->tx_first_order == 0)
        c->tx_first_order = out->info.order_id;
    out->info.has_request_id = o->request_id != NULL;
    snprintf(out->info.request_id, sizeof(out->info.request_id), "%s",
             o->request_id ? o->request_id : "");
    snprintf(out->info.instance, sizeof(out->info.instance), "%s", o->instance);
    snprintf(out->info.lock_mode, sizeof(out->info.lock_mode), "%s", o->lock_mode);
    out->nlines = o->nlines;
    memcpy(out->lines, o->lines, (size_t)o->nlines * sizeof(o->lines[0]));
    return STORE_OK;
}

const store_backend store_postgres = {
    .name = "postgres",
    .serves = pg_serves,
    .open = pg_open,
    .close = pg_close,
    .get = pg_get,
    .put = pg_put,
    .errstr = pg_errstr,
    .ping = pg_ping,
    .item_create = pg_item_create,
    .item_get = pg_item_get,
    .item_list = pg_item_list,
    .item_set_stock = pg_item_set_stock,
    .lines_of_item = pg_lines_of_item,
    .order_by_request = pg_order_by_request,
    .order_get = pg_order_get,
    .stock_read = pg_stock_read,
    .stock_claim = pg_stock_claim,
    .tx_begin = pg_tx_begin,
    .tx_set_stock = pg_tx_set_stock,
    .tx_take = pg_tx_take,
    .tx_lock_stock = pg_tx_lock_stock,
    .tx_add_order = pg_tx_add_order,
    .tx_commit = pg_tx_commit,
    .tx_abort = pg_tx_abort,
};
