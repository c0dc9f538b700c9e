/* store_sqlite.c - the SQLite backend of the store (store_backend.h): a pool
 * of connections with cached statements, the embedded schema migrations
 * (schema/sqlite/), and items, orders, lines and their transactions. Several
 * processes on one host share one file (WAL journal, busy timeout). */
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_backend.h"

#define IDLE_MAX 64
#define NOW_SQL "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
/* sold and line_count are kept on the row by a trigger (schema 004): a read
 * costs the same however long the item's ledger is */
#define ITEM_SELECT "SELECT id, name, stock, sold, line_count FROM items "
#define ORDER_COLS "o.id, o.request_id, o.instance_id, o.lock_mode, o.created_at"
#define LINE_COLS "l.item_id, l.quantity, l.remaining, COALESCE(l.fence, 0), " \
                  "COALESCE(l.fence_seq, 0)"

extern const struct store_migration store_sqlite_migrations[];
extern const int store_sqlite_migrations_count;

enum stmt_id {
    ST_BEGIN, ST_COMMIT, ST_ROLLBACK, ST_SAVEPOINT, ST_RELEASE, ST_ROLLBACK_TO, ST_PING,
    ST_ITEM_INSERT, ST_ITEM_GET, ST_ITEM_LIST,
    ST_SET_STOCK, ST_SET_STOCK_FENCED, ST_STOCK_READ, ST_ROW_FENCE, ST_STOCK_CLAIM,
    ST_STOCK_WRITE_CLAIMED,
    ST_STOCK_TAKE, ST_ORDER_INSERT, ST_LINE_INSERT, ST_ORDER_BY_REQUEST, ST_ORDER_GET,
    ST_LINES_OF_ORDER, ST_LINES_OF_ITEM, ST_PROBE,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE", /* take the write lock up front: no upgrade deadlocks */
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_SAVEPOINT] = "SAVEPOINT part",
    [ST_RELEASE] = "RELEASE part",
    [ST_ROLLBACK_TO] = "ROLLBACK TO part",
    [ST_PING] = "SELECT 1",
    [ST_ITEM_INSERT] = "INSERT INTO items (name, stock) VALUES (?1, ?2)",
    [ST_ITEM_GET] = ITEM_SELECT "WHERE id = ?1",
    [ST_ITEM_LIST] = ITEM_SELECT "WHERE id > ?1 ORDER BY id LIMIT ?2",
    [ST_SET_STOCK] = "UPDATE items SET stock = ?2, updated_at = " NOW_SQL " WHERE id = ?1",
    [ST_SET_STOCK_FENCED] = "UPDATE items SET stock = ?2, fence = ?3, fence_seq = ?4, "
                            "updated_at = " NOW_SQL " WHERE id = ?1 AND (fence, fence_seq) < (?3, ?4)",
    [ST_STOCK_READ] = "SELECT stock FROM items WHERE id = ?1",
    [ST_ROW_FENCE] = "SELECT fence, fence_seq FROM items WHERE id = ?1",
    [ST_STOCK_CLAIM] = "UPDATE items SET fence = ?3, fence_seq = ?4 WHERE id = ?1 AND "
                       "(fence, fence_seq) < (?3, ?4) RETURNING stock", /* ?2 unused */
    [ST_STOCK_WRITE_CLAIMED] = "UPDATE items SET stock = ?2, updated_at = " NOW_SQL
                               " WHERE id = ?1 AND fence = ?3 AND fence_seq = ?4",
    [ST_STOCK_TAKE] = "UPDATE items SET stock = stock - ?2, updated_at = " NOW_SQL
                      " WHERE id = ?1 AND stock >= ?2 RETURNING stock",
    [ST_ORDER_INSERT] = "INSERT INTO orders (request_id, instance_id, lock_mode) "
                        "VALUES (?1, ?2, ?3) RETURNING id, created_at",
    [ST_LINE_INSERT] = "INSERT INTO order_lines (order_id, item_id, quantity, remaining, fence, "
                       "fence_seq, lock_token) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_ORDER_BY_REQUEST] = "SELECT " ORDER_COLS " FROM orders o WHERE o.request_id = ?1",
    [ST_ORDER_GET] = "SELECT " ORDER_COLS " FROM orders o WHERE o.id = ?1",
    [ST_LINES_OF_ORDER] = "SELECT " LINE_COLS " FROM order_lines l WHERE l.order_id = ?1 "
                          "ORDER BY l.id",
    [ST_LINES_OF_ITEM] = "SELECT " ORDER_COLS ", " LINE_COLS " FROM order_lines l JOIN orders o "
                         "ON o.id = l.order_id WHERE l.item_id = ?1 AND l.order_id < ?2 "
                         "ORDER BY l.order_id DESC LIMIT ?3",
    /* new content on five pages, about what a deduction appends to the WAL
     * (an identical blob would not be written again) */
    [ST_PROBE] = "UPDATE write_probe SET writes = writes + 1, pad = randomblob(16000)",
};

typedef struct sqlite_conn {
    struct store_conn base;
    sqlite3 *db;
    sqlite3_stmt *stmt[ST_COUNT]; /* prepared on first use */
    int savepoint;                /* the open transaction has one */
    int in_tx;                    /* a transaction was begun and not ended by us... */
    int tx_rc;                    /* ...and the failure that made SQLite roll it back */
    char err[256], tx_err[256];   /* tx_err: that failure's text */
} sqlite_conn;

typedef struct sqlite_store {
    struct store base;
    store_config cfg;
    char *path;
    pthread_mutex_t mu; /* guards idle, nidle */
    sqlite_conn *idle[IDLE_MAX];
    int nidle;
} sqlite_store;

#define CONN(c) ((sqlite_conn *)(c))

/* Records SQLite's error and maps it to a store code. A full disk is
 * SQLITE_FULL wherever SQLite writes - the WAL at COMMIT, a page spilled
 * from the cache mid-transaction, a checkpoint into the main file (each seen
 * on a full tmpfs, SQLite 3.40) - or an I/O error whose errno says so
 * (growing the WAL index, for one). */
static int code_of(int code, int sys)
{
    if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
        return STORE_ERR_BUSY;
    if (code == SQLITE_FULL || (code == SQLITE_IOERR && (sys == ENOSPC || sys == EDQUOT)))
        return STORE_ERR_FULL;
    return STORE_ERR_IO;
}

/* A failed statement may take the whole transaction with it: SQLite rolls
 * it back itself on an I/O error, and on a full disk or no memory in a
 * statement without a statement journal (a page spilled from a small cache
 * mid-transaction). That failure is kept: it is what the transaction's next
 * steps answer (tx_gone), as its real cause - a full disk stays FULL. */
static int fail(sqlite_conn *c, const char *what)
{
    int rc = code_of(sqlite3_errcode(c->db), sqlite3_system_errno(c->db));
    snprintf(c->err, sizeof(c->err), "%s: %s", what, sqlite3_errmsg(c->db));
    if (c->in_tx && !c->tx_rc && sqlite3_get_autocommit(c->db)) {
        c->tx_rc = rc;
        memcpy(c->tx_err, c->err, sizeof(c->err));
    }
    return rc;
}

/* The cached statement, reset and unbound; NULL when it can't be prepared. */
static sqlite3_stmt *stmt(sqlite_conn *c, enum stmt_id id)
{
    sqlite3_stmt *st = c->stmt[id];
    if (st == NULL) {
        if (sqlite3_prepare_v3(c->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) !=
            SQLITE_OK) {
            fail(c, "prepare");
            return NULL;
        }
        c->stmt[id] = st;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
}

/* Runs a statement that returns no row. */
static int run(sqlite_conn *c, enum stmt_id id)
{
    sqlite3_stmt *st = stmt(c, id);
    if (st == NULL)
        return STORE_ERR_IO;
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc == SQLITE_DONE && (id == ST_BEGIN || id == ST_COMMIT)) {
        c->in_tx = id == ST_BEGIN;
        c->tx_rc = 0;
    }
    return rc == SQLITE_DONE ? STORE_OK : fail(c, stmt_sql[id]);
}

/* Steps st, a bound query of at most one row: STORE_OK with the row there to
 * read (reset st after), STORE_ERR_NOT_FOUND, or the failure. */
static int first_row(sqlite_conn *c, sqlite3_stmt *st, const char *what)
{
    int step = sqlite3_step(st);
    return step == SQLITE_ROW ? STORE_OK : step == SQLITE_DONE ? STORE_ERR_NOT_FOUND : fail(c, what);
}

static void rollback(sqlite_conn *c)
{
    if (!sqlite3_get_autocommit(c->db))
        run(c, ST_ROLLBACK);
    c->in_tx = 0;
}

/* STORE_OK inside a transaction; else what ended it: the failure SQLite
 * rolled it back for (fail), or STORE_ERR_IO, with c->err saying so. */
static int tx_open(sqlite_conn *c)
{
    if (!sqlite3_get_autocommit(c->db))
        return STORE_OK;
    if (c->in_tx && c->tx_rc) {
        snprintf(c->err, sizeof(c->err), "the transaction was rolled back after %.200s",
                 c->tx_err);
        return c->tx_rc;
    }
    snprintf(c->err, sizeof(c->err), "the transaction is no longer open");
    return STORE_ERR_IO;
}

static void copy_text(char *dst, size_t size, sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    snprintf(dst, size, "%s", t ? (const char *)t : "");
}

static void bind_text_or_null(sqlite3_stmt *st, int col, const char *text)
{
    if (text)
        sqlite3_bind_text(st, col, text, -1, SQLITE_STATIC);
}

static void read_item(sqlite3_stmt *st, store_item *it)
{
    it->id = sqlite3_column_int64(st, 0);
    copy_text(it->name, sizeof(it->name), st, 1);
    it->stock = sqlite3_column_int64(st, 2);
    it->sold = sqlite3_column_int64(st, 3);
    it->line_count = sqlite3_column_int64(st, 4);
}

/* ORDER_COLS from column col on. */
static void read_order_info(sqlite3_stmt *st, int col, store_order_info *o)
{
    o->order_id = sqlite3_column_int64(st, col);
    o->has_request_id = sqlite3_column_type(st, col + 1) != SQLITE_NULL;
    copy_text(o->request_id, sizeof(o->request_id), st, col + 1);
    copy_text(o->instance, sizeof(o->instance), st, col + 2);
    copy_text(o->lock_mode, sizeof(o->lock_mode), st, col + 3);
    copy_text(o->created_at, sizeof(o->created_at), st, col + 4);
}

/* LINE_COLS from column col on. */
static void read_line(sqlite3_stmt *st, int col, store_line *l)
{
    l->item_id = sqlite3_column_int64(st, col);
    l->quantity = sqlite3_column_int64(st, col + 1);
    l->remaining = sqlite3_column_int64(st, col + 2);
    l->fence.fence = sqlite3_column_int64(st, col + 3);
    l->fence.seq = sqlite3_column_int(st, col + 4);
}

/* ---- connections, the pool, migrations ---- */

static const store_backend *backend(void) { return &store_sqlite; }

static void conn_close(sqlite_conn *c)
{
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(c->stmt[i]);
    sqlite3_close(c->db);
    free(c);
}

static sqlite_conn *conn_open(const sqlite_store *s, char *err, size_t errlen)
{
    sqlite_conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->base.be = backend();
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    char pragmas[160];
    snprintf(pragmas, sizeof(pragmas),
             "PRAGMA journal_mode = WAL; PRAGMA synchronous = %s; PRAGMA foreign_keys = ON;",
             s->cfg.sync_full ? "FULL" : "NORMAL");
    if (sqlite3_open_v2(s->path, &c->db, flags, NULL) != SQLITE_OK ||
        sqlite3_busy_timeout(c->db, s->cfg.busy_timeout_ms) != SQLITE_OK ||
        sqlite3_exec(c->db, pragmas, NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "cannot open database %s: %s", s->path,
                 c->db ? sqlite3_errmsg(c->db) : "out of memory");
        conn_close(c);
        return NULL;
    }
    return c;
}

/* Applies every embedded schema file newer than user_version, all in one
 * transaction, so replicas starting together apply each exactly once. */
static int migrate(sqlite_conn *c, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    int version = -1, rc = run(c, ST_BEGIN);
    if (rc == STORE_OK && sqlite3_prepare_v2(c->db, "PRAGMA user_version", -1, &st, NULL) ==
                              SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    for (int i = 0; rc == STORE_OK && version >= 0 && i < store_sqlite_migrations_count; i++) {
        const struct store_migration *m = &store_sqlite_migrations[i];
        char set_version[48];
        if (m->version <= version)
            continue;
        snprintf(set_version, sizeof(set_version), "PRAGMA user_version = %d", m->version);
        if (sqlite3_exec(c->db, m->sql, NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(c->db, set_version, NULL, NULL, NULL) != SQLITE_OK)
            rc = fail(c, m->name);
    }
    if (rc == STORE_OK && version < 0)
        rc = fail(c, "read user_version");
    if (rc == STORE_OK)
        rc = run(c, ST_COMMIT);
    if (rc != STORE_OK) {
        rollback(c);
        snprintf(err, errlen, "schema migration failed: %s", c->err);
    }
    return rc;
}

static void sq_put(store *st, store_conn *conn);
static void sq_close(store *st);

/* SQLite takes a path: anything that does not name a scheme ("x://"). */
static int sq_serves(const char *db) { return strstr(db, "://") == NULL; }

static int sq_open(const store_config *cfg, store **out, char *err, size_t errlen)
{
    sqlite_store *s = calloc(1, sizeof(*s));
    if (s == NULL || (s->path = strdup(cfg->db)) == NULL) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return STORE_ERR_IO;
    }
    s->base.be = backend();
    s->cfg = *cfg;
    s->cfg.db = s->path;
    pthread_mutex_init(&s->mu, NULL);
    sqlite_conn *c = conn_open(s, err, errlen);
    int rc = c ? migrate(c, err, errlen) : STORE_ERR_IO;
    if (rc != STORE_OK) {
        if (c)
            conn_close(c);
        sq_close(&s->base);
        return rc;
    }
    sq_put(&s->base, &c->base);
    *out = &s->base;
    return STORE_OK;
}

static void sq_close(store *st)
{
    sqlite_store *s = (sqlite_store *)st;
    for (int i = 0; i < s->nidle; i++)
        conn_close(s->idle[i]);
    pthread_mutex_destroy(&s->mu);
    free(s->path);
    free(s);
}

static int sq_get(store *st, store_conn **out, char *err, size_t errlen)
{
    sqlite_store *s = (sqlite_store *)st;
    sqlite_conn *c = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->nidle > 0)
        c = s->idle[--s->nidle];
    pthread_mutex_unlock(&s->mu);
    if (c == NULL)
        c = conn_open(s, err, errlen);
    *out = c ? &c->base : NULL;
    return c ? STORE_OK : STORE_ERR_IO;
}

static void sq_put(store *st, store_conn *conn)
{
    sqlite_store *s = (sqlite_store *)st;
    sqlite_conn *c = CONN(conn);
    rollback(c); /* never pool a connection inside a transaction */
    pthread_mutex_lock(&s->mu);
    if (s->nidle < IDLE_MAX) {
        s->idle[s->nidle++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (c)
        conn_close(c);
}

static const char *sq_errstr(const store_conn *c) { return CONN(c)->err; }

static int sq_ping(store_conn *conn)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = stmt(c, ST_PING);
    if (st == NULL)
        return STORE_ERR_IO;
    int rc = sqlite3_step(st) == SQLITE_ROW ? STORE_OK : fail(c, "ping");
    sqlite3_reset(st);
    return rc;
}

/* ---- items ---- */

static int sq_item_get(store_conn *conn, int64_t id, store_item *out)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = stmt(c, ST_ITEM_GET);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, id);
    int rc = first_row(c, st, "read item");
    if (rc == STORE_OK)
        read_item(st, out);
    sqlite3_reset(st);
    return rc;
}

static int sq_item_create(store_conn *conn, const char *name, int64_t stock, store_item *out)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = stmt(c, ST_ITEM_INSERT);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, stock);
    int rc = sqlite3_step(st) == SQLITE_DONE ? STORE_OK : fail(c, "insert item");
    sqlite3_reset(st);
    return rc == STORE_OK ? sq_item_get(conn, sqlite3_last_insert_rowid(c->db), out) : rc;
}

static int sq_item_list(store_conn *conn, int64_t after, int limit, store_item_fn fn, void *arg)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = stmt(c, ST_ITEM_LIST);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int(st, 2, limit);
    int step;
    store_item it;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        read_item(st, &it);
        fn(&it, arg);
    }
    int rc = step == SQLITE_DONE ? STORE_OK : fail(c, "list items");
    sqlite3_reset(st);
    return rc;
}

static int sq_stock_read(store_conn *conn, int64_t item_id, int64_t *stock)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = stmt(c, ST_STOCK_READ);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item_id);
    int rc = first_row(c, st, "read stock");
    if (rc == STORE_OK)
        *stock = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return rc;
}

/* The token on item id's row into c's stale answer: STORE_OK,
 * STORE_ERR_NOT_FOUND, or the failure. */
static int read_stale_token(sqlite_conn *c, int64_t id)
{
    sqlite3_stmt *st = stmt(c, ST_ROW_FENCE);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, id);
    int rc = first_row(c, st, "read the row's token");
    if (rc == STORE_OK)
        c->base.stale = (store_fence){sqlite3_column_int64(st, 0), sqlite3_column_int(st, 1)};
    sqlite3_reset(st);
    return rc;
}

/* Runs an UPDATE on one item bound as (id, value, fence, seq). When it
 * changes nothing the item is missing (NOT_FOUND) or, when fenced, another
 * holder's token is on the row (STALE, that token in c's stale answer).
 * With RETURNING, *ret gets column 0. */
static int update_item(sqlite_conn *c, enum stmt_id id_stmt, int64_t id, int64_t value,
                       const store_fence *f, int64_t *ret)
{
    sqlite3_stmt *st = stmt(c, id_stmt);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, value);
    if (f) {
        sqlite3_bind_int64(st, 3, f->fence);
        sqlite3_bind_int(st, 4, f->seq);
    }
    int step = sqlite3_step(st), rc = STORE_OK, changed = 0;
    if (step == SQLITE_ROW && ret)
        *ret = sqlite3_column_int64(st, 0);
    if (step == SQLITE_ROW || step == SQLITE_DONE)
        changed = step == SQLITE_ROW || sqlite3_changes(c->db) > 0;
    else
        rc = fail(c, stmt_sql[id_stmt]);
    sqlite3_reset(st);
    if (rc == STORE_OK && !changed) {
        rc = read_stale_token(c, id);
        if (rc == STORE_OK) {
            snprintf(c->err, sizeof(c->err), "item %lld carries a newer lock's token, "
                     "(%lld, %d), than (%lld, %d)", (long long)id, (long long)c->base.stale.fence,
                     c->base.stale.seq, (long long)f->fence, f->seq);
            rc = STORE_ERR_STALE;
        }
    }
    return rc;
}

static int sq_stock_claim(store_conn *conn, int64_t item_id, const store_fence *f,
                          int64_t *stock)
{
    return update_item(CONN(conn), ST_STOCK_CLAIM, item_id, 0, f, stock);
}

/* Commits the open transaction unless check vetoes it; rolls back on failure. */
static int sq_tx_commit(store_conn *conn, const store_commit_check *check)
{
    sqlite_conn *c = CONN(conn);
    int rc = tx_open(c);
    if (rc != STORE_OK) {
        /* rolled back already: nothing to commit */
    } else if (check && !check->ok(check->arg)) {
        snprintf(c->err, sizeof(c->err), "commit vetoed by the caller");
        rc = STORE_ERR_VETOED;
    } else {
        rc = run(c, ST_COMMIT);
    }
    if (rc != STORE_OK)
        rollback(c);
    return rc;
}

static int sq_tx_begin(store_conn *conn)
{
    CONN(conn)->savepoint = 0;
    return run(CONN(conn), ST_BEGIN);
}

/* The one before is released first: savepoints would otherwise pile up,
 * one per order of a transaction. */
static int sq_tx_savepoint(store_conn *conn)
{
    sqlite_conn *c = CONN(conn);
    int rc = tx_open(c);
    if (rc == STORE_OK && c->savepoint)
        rc = run(c, ST_RELEASE);
    if (rc == STORE_OK)
        rc = run(c, ST_SAVEPOINT);
    c->savepoint = rc == STORE_OK;
    return rc;
}

/* A transaction SQLite rolled back whole (tx_open) has no savepoint left:
 * its failure is the answer, for every order of it. */
static int sq_tx_rollback_to_savepoint(store_conn *conn)
{
    sqlite_conn *c = CONN(conn);
    int rc = tx_open(c);
    if (rc == STORE_OK && !c->savepoint) {
        snprintf(c->err, sizeof(c->err), "no savepoint to roll back to");
        rc = STORE_ERR_IO;
    }
    return rc == STORE_OK ? run(c, ST_ROLLBACK_TO) : rc;
}

static void sq_tx_abort(store_conn *conn) { rollback(CONN(conn)); }

/* A write of nothing that matters, committed: STORE_ERR_FULL while the
 * disk has no room for about what a deduction appends to the WAL. */
static int sq_probe_write(store_conn *conn)
{
    sqlite_conn *c = CONN(conn);
    int rc = run(c, ST_BEGIN);
    if (rc == STORE_OK)
        rc = run(c, ST_PROBE);
    if (rc == STORE_OK)
        rc = run(c, ST_COMMIT);
    rollback(c);
    return rc;
}

static int sq_item_set_stock(store_conn *conn, int64_t id, int64_t stock, const store_fence *f,
                             const store_commit_check *check)
{
    sqlite_conn *c = CONN(conn);
    int rc = run(c, ST_BEGIN);
    if (rc == STORE_OK)
        rc = update_item(c, f ? ST_SET_STOCK_FENCED : ST_SET_STOCK, id, stock, f, NULL);
    if (rc == STORE_OK)
        return sq_tx_commit(conn, check);
    rollback(c);
    return rc;
}

/* ---- orders and lines ---- */

static int read_lines_of_order(sqlite_conn *c, store_order *o)
{
    sqlite3_stmt *st = stmt(c, ST_LINES_OF_ORDER);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, o->info.order_id);
    int step;
    o->nlines = 0;
    while ((step = sqlite3_step(st)) == SQLITE_ROW && o->nlines < RULE_ORDER_LINES_MAX)
        read_line(st, 0, &o->lines[o->nlines++]);
    int rc = step == SQLITE_ROW || step == SQLITE_DONE ? STORE_OK : fail(c, "read order lines");
    sqlite3_reset(st);
    return rc;
}

/* The order st (bound) finds, with its lines. */
static int read_order(sqlite_conn *c, sqlite3_stmt *st, const char *what, store_order *out)
{
    int rc = first_row(c, st, what);
    if (rc == STORE_OK)
        read_order_info(st, 0, &out->info);
    sqlite3_reset(st);
    return rc == STORE_OK ? read_lines_of_order(c, out) : rc;
}

static int sq_order_by_request(store_conn *conn, const char *request_id, store_order *out)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = stmt(c, ST_ORDER_BY_REQUEST);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_text(st, 1, request_id, -1, SQLITE_STATIC);
    return read_order(c, st, "find request id", out);
}

static int sq_order_get(store_conn *conn, int64_t order_id, store_order *out)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = stmt(c, ST_ORDER_GET);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, order_id);
    return read_order(c, st, "read order", out);
}

static int sq_lines_of_item(store_conn *conn, int64_t item_id, int64_t before, int limit,
                            store_line_fn fn, void *arg)
{
    sqlite_conn *c = CONN(conn);
    sqlite3_stmt *st = stmt(c, ST_LINES_OF_ITEM);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item_id);
    sqlite3_bind_int64(st, 2, before > 0 ? before : INT64_MAX);
    sqlite3_bind_int(st, 3, limit);
    int step;
    store_order_info o;
    store_line l;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        read_order_info(st, 0, &o);
        read_line(st, 5, &l);
        fn(&o, &l, arg);
    }
    int rc = step == SQLITE_DONE ? STORE_OK : fail(c, "list lines");
    sqlite3_reset(st);
    return rc;
}

static int sq_tx_set_stock(store_conn *conn, int64_t item_id, int64_t stock, const store_fence *f)
{
    sqlite_conn *c = CONN(conn);
    int rc = tx_open(c);
    return rc != STORE_OK ? rc : update_item(c, f ? ST_STOCK_WRITE_CLAIMED : ST_SET_STOCK,
                                             item_id, stock, f, NULL);
}

static int sq_tx_take(store_conn *conn, int64_t item_id, int64_t quantity, int64_t *left)
{
    sqlite_conn *c = CONN(conn);
    int rc = tx_open(c);
    sqlite3_stmt *st = rc == STORE_OK ? stmt(c, ST_STOCK_TAKE) : NULL;
    if (st == NULL)
        return rc != STORE_OK ? rc : STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item_id);
    sqlite3_bind_int64(st, 2, quantity);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW)
        *left = sqlite3_column_int64(st, 0);
    else if (step != SQLITE_DONE)
        rc = fail(c, "take stock");
    sqlite3_reset(st);
    if (rc == STORE_OK && step == SQLITE_DONE) { /* no row: missing or not enough */
        rc = sq_stock_read(conn, item_id, left);
        if (rc == STORE_OK)
            rc = STORE_ERR_INSUFFICIENT;
    }
    return rc;
}

static int insert_line(sqlite_conn *c, int64_t order_id, const store_line *l,
                       const char *lock_token)
{
    sqlite3_stmt *st = stmt(c, ST_LINE_INSERT);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, order_id);
    sqlite3_bind_int64(st, 2, l->item_id);
    sqlite3_bind_int64(st, 3, l->quantity);
    sqlite3_bind_int64(st, 4, l->remaining);
    if (l->fence.fence > 0) {
        sqlite3_bind_int64(st, 5, l->fence.fence);
        sqlite3_bind_int(st, 6, l->fence.seq);
    }
    bind_text_or_null(st, 7, lock_token);
    int rc = sqlite3_step(st) == SQLITE_DONE ? STORE_OK : fail(c, "insert order line");
    sqlite3_reset(st);
    return rc;
}

static int insert_order(sqlite_conn *c, const store_new_order *o, store_order *out)
{
    sqlite3_stmt *st = stmt(c, ST_ORDER_INSERT);
    if (st == NULL)
        return STORE_ERR_IO;
    bind_text_or_null(st, 1, o->request_id);
    sqlite3_bind_text(st, 2, o->instance, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, o->lock_mode, -1, SQLITE_STATIC);
    int rc = STORE_OK;
    memset(out, 0, sizeof(*out));
    if (sqlite3_step(st) == SQLITE_ROW) {
        out->info.order_id = sqlite3_column_int64(st, 0);
        copy_text(out->info.created_at, sizeof(out->info.created_at), st, 1);
    } else {
        rc = fail(c, "insert order");
    }
    sqlite3_reset(st);
    return rc;
}

static int sq_tx_add_order(store_conn *conn, const store_new_order *o, store_order *out)
{
    sqlite_conn *c = CONN(conn);
    int rc = tx_open(c);
    if (rc != STORE_OK)
        return rc;
    if (o->request_id) {
        rc = sq_order_by_request(conn, o->request_id, out);
        if (rc != STORE_ERR_NOT_FOUND)
            return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
    }
    rc = insert_order(c, o, out);
    for (int i = 0; rc == STORE_OK && i < o->nlines; i++)
        rc = insert_line(c, out->info.order_id, &o->lines[i], o->lock_token);
    if (rc != STORE_OK)
        return rc;
    store_order_written(o, out);
    return STORE_OK;
}

const store_backend store_sqlite = {
    .name = "sqlite",
    .serves = sq_serves,
    .open = sq_open,
    .close = sq_close,
    .get = sq_get,
    .put = sq_put,
    .errstr = sq_errstr,
    .ping = sq_ping,
    .probe_write = sq_probe_write,
    .item_create = sq_item_create,
    .item_get = sq_item_get,
    .item_list = sq_item_list,
    .item_set_stock = sq_item_set_stock,
    .lines_of_item = sq_lines_of_item,
    .order_by_request = sq_order_by_request,
    .order_get = sq_order_get,
    .stock_read = sq_stock_read,
    .stock_claim = sq_stock_claim,
    .tx_begin = sq_tx_begin,
    .tx_set_stock = sq_tx_set_stock,
    .tx_take = sq_tx_take,
    .tx_add_order = sq_tx_add_order,
    .tx_savepoint = sq_tx_savepoint,
    .tx_rollback_to_savepoint = sq_tx_rollback_to_savepoint,
    .tx_commit = sq_tx_commit,
    .tx_abort = sq_tx_abort,
};
