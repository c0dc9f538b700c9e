/* store.c - the inventory in SQLite: a pool of connections with cached
 * statements, the embedded schema migrations, items, the ledger, and the
 * deduction transactions. */
#include "store.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "migrations.h"

#define IDLE_MAX 64
#define NOW_SQL "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
#define ORDER_COLS                                                                     \
    "id, item_id, quantity, remaining, COALESCE(fence, 0), request_id, instance_id, " \
    "lock_mode, created_at, COALESCE(fence_seq, 0)"
#define ITEM_SELECT                                                                   \
    "SELECT i.id, i.name, i.stock, COALESCE(SUM(d.quantity), 0), COUNT(d.id) "       \
    "FROM items i LEFT JOIN deductions d ON d.item_id = i.id "

enum stmt_id {
    ST_BEGIN, ST_COMMIT, ST_ROLLBACK, ST_PING,
    ST_ITEM_INSERT, ST_ITEM_GET, ST_ITEM_LIST, ST_SET_STOCK, ST_SET_STOCK_FENCED,
    ST_STOCK_READ, ST_STOCK_CLAIM, ST_STOCK_WRITE_CLAIMED, ST_STOCK_ATOMIC, ST_ORDER_INSERT, ST_ORDER_BY_REQUEST, ST_ORDERS_OF_ITEM,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE", /* take the write lock up front: no upgrade deadlocks */
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_PING] = "SELECT 1",
    [ST_ITEM_INSERT] = "INSERT INTO items (name, stock) VALUES (?1, ?2)",
    [ST_ITEM_GET] = ITEM_SELECT "WHERE i.id = ?1 GROUP BY i.id",
    [ST_ITEM_LIST] = ITEM_SELECT "WHERE i.id > ?1 GROUP BY i.id ORDER BY i.id LIMIT ?2",
    [ST_SET_STOCK] = "UPDATE items SET stock = ?2, updated_at = " NOW_SQL " WHERE id = ?1",
    [ST_SET_STOCK_FENCED] = "UPDATE items SET stock = ?2, fence = ?3, fence_seq = ?4, "
                            "updated_at = " NOW_SQL " WHERE id = ?1 AND (fence, fence_seq) < (?3, ?4)",
    [ST_STOCK_READ] = "SELECT stock FROM items WHERE id = ?1",
    [ST_STOCK_CLAIM] = "UPDATE items SET fence = ?3, fence_seq = ?4 WHERE id = ?1 AND "
                       "(fence, fence_seq) < (?3, ?4) RETURNING stock", /* ?2 unused */
    [ST_STOCK_WRITE_CLAIMED] = "UPDATE items SET stock = ?2, updated_at = " NOW_SQL
                               " WHERE id = ?1 AND fence = ?3 AND fence_seq = ?4",
    [ST_STOCK_ATOMIC] = "UPDATE items SET stock = stock - ?2, updated_at = " NOW_SQL
                        " WHERE id = ?1 AND stock >= ?2 RETURNING stock",
    [ST_ORDER_INSERT] = "INSERT INTO deductions (item_id, quantity, remaining, request_id, "
                        "instance_id, lock_mode, fence, lock_token, fence_seq) "
                        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING id, created_at",
    [ST_ORDER_BY_REQUEST] = "SELECT " ORDER_COLS " FROM deductions WHERE request_id = ?1",
    [ST_ORDERS_OF_ITEM] = "SELECT " ORDER_COLS " FROM deductions WHERE item_id = ?1 AND id < ?2 "
                          "ORDER BY id DESC LIMIT ?3",
};

struct store_conn {
    sqlite3 *db;
    sqlite3_stmt *stmt[ST_COUNT]; /* prepared on first use */
    char err[256];
};

struct store {
    store_config cfg;
    char *path;
    pthread_mutex_t mu;
    store_conn *idle[IDLE_MAX];
    int nidle;
};

/* Records SQLite's error and maps it to a store code. */
static int fail(store_conn *c, const char *what)
{
    int code = sqlite3_errcode(c->db);
    snprintf(c->err, sizeof(c->err), "%s: %s", what, sqlite3_errmsg(c->db));
    return (code == SQLITE_BUSY || code == SQLITE_LOCKED) ? STORE_ERR_BUSY : STORE_ERR_IO;
}

/* The cached statement, reset and unbound; NULL when it can't be prepared. */
static sqlite3_stmt *stmt(store_conn *c, enum stmt_id id)
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
static int run(store_conn *c, enum stmt_id id)
{
    sqlite3_stmt *st = stmt(c, id);
    if (st == NULL)
        return STORE_ERR_IO;
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? STORE_OK : fail(c, stmt_sql[id]);
}

static void rollback(store_conn *c)
{
    if (!sqlite3_get_autocommit(c->db))
        run(c, ST_ROLLBACK);
}

/* Commits the open transaction unless check vetoes it (then the caller rolls back). */
static int commit(store_conn *c, const store_commit_check *check)
{
    if (check && !check->ok(check->arg)) {
        snprintf(c->err, sizeof(c->err), "commit vetoed by the caller");
        return STORE_ERR_VETOED;
    }
    return run(c, ST_COMMIT);
}

static void copy_text(char *dst, size_t size, sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    snprintf(dst, size, "%s", t ? (const char *)t : "");
}

static void read_item(sqlite3_stmt *st, store_item *it)
{
    it->id = sqlite3_column_int64(st, 0);
    copy_text(it->name, sizeof(it->name), st, 1);
    it->stock = sqlite3_column_int64(st, 2);
    it->sold = sqlite3_column_int64(st, 3);
    it->order_count = sqlite3_column_int64(st, 4);
}

static void read_order(sqlite3_stmt *st, store_order *o)
{
    o->order_id = sqlite3_column_int64(st, 0);
    o->item_id = sqlite3_column_int64(st, 1);
    o->quantity = sqlite3_column_int64(st, 2);
    o->remaining = sqlite3_column_int64(st, 3);
    o->fence = sqlite3_column_int64(st, 4);
    o->has_request_id = sqlite3_column_type(st, 5) != SQLITE_NULL;
    copy_text(o->request_id, sizeof(o->request_id), st, 5);
    copy_text(o->instance, sizeof(o->instance), st, 6);
    copy_text(o->lock_mode, sizeof(o->lock_mode), st, 7);
    copy_text(o->created_at, sizeof(o->created_at), st, 8);
    o->fence_seq = sqlite3_column_int(st, 9);
}

static void conn_close(store_conn *c)
{
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(c->stmt[i]);
    sqlite3_close(c->db);
    free(c);
}

static store_conn *conn_open(const store *s, char *err, size_t errlen)
{
    store_conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
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
static int migrate(store_conn *c, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    int version = -1, rc = run(c, ST_BEGIN);
    if (rc == STORE_OK && sqlite3_prepare_v2(c->db, "PRAGMA user_version", -1, &st, NULL) ==
                              SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    for (int i = 0; rc == STORE_OK && version >= 0 && i < store_migration_count; i++) {
        const struct store_migration *m = &store_migrations[i];
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

int store_open(const store_config *cfg, store **out, char *err, size_t errlen)
{
    *out = NULL;
    store *s = calloc(1, sizeof(*s));
    if (s == NULL || (s->path = strdup(cfg->path)) == NULL) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return STORE_ERR_IO;
    }
    s->cfg = *cfg;
    s->cfg.path = s->path;
    pthread_mutex_init(&s->mu, NULL);
    store_conn *c = conn_open(s, err, errlen);
    int rc = c ? migrate(c, err, errlen) : STORE_ERR_IO;
    if (rc != STORE_OK) {
        if (c)
            conn_close(c);
        store_close(s);
        return rc;
    }
    store_put(s, c);
    *out = s;
    return STORE_OK;
}

void store_close(store *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < s->nidle; i++)
        conn_close(s->idle[i]);
    pthread_mutex_destroy(&s->mu);
    free(s->path);
    free(s);
}

store_conn *store_get(store *s, char *err, size_t errlen)
{
    store_conn *c = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->nidle > 0)
        c = s->idle[--s->nidle];
    pthread_mutex_unlock(&s->mu);
    return c ? c : conn_open(s, err, errlen);
}

void store_put(store *s, store_conn *c)
{
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

const char *store_errstr(const store_conn *c) { return c->err; }

int store_ping(store_conn *c)
{
    sqlite3_stmt *st = stmt(c, ST_PING);
    if (st == NULL)
        return STORE_ERR_IO;
    int rc = sqlite3_step(st) == SQLITE_ROW ? STORE_OK : fail(c, "ping");
    sqlite3_reset(st);
    return rc;
}

int store_item_create(store_conn *c, const char *name, int64_t stock, store_item *out)
{
    sqlite3_stmt *st = stmt(c, ST_ITEM_INSERT);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, stock);
    int rc = sqlite3_step(st) == SQLITE_DONE ? STORE_OK : fail(c, "insert item");
    sqlite3_reset(st);
    return rc == STORE_OK ? store_item_get(c, sqlite3_last_insert_rowid(c->db), out) : rc;
}

int store_item_get(store_conn *c, int64_t id, store_item *out)
{
    sqlite3_stmt *st = stmt(c, ST_ITEM_GET);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, id);
    int step = sqlite3_step(st), rc = STORE_ERR_NOT_FOUND;
    if (step == SQLITE_ROW) {
        read_item(st, out);
        rc = STORE_OK;
    } else if (step != SQLITE_DONE) {
        rc = fail(c, "read item");
    }
    sqlite3_reset(st);
    return rc;
}

int store_item_list(store_conn *c, int64_t after, int limit, store_item_fn fn, void *arg)
{
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

int store_orders(store_conn *c, int64_t item_id, int64_t before, int limit, store_order_fn fn,
                 void *arg)
{
    sqlite3_stmt *st = stmt(c, ST_ORDERS_OF_ITEM);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item_id);
    sqlite3_bind_int64(st, 2, before > 0 ? before : INT64_MAX);
    sqlite3_bind_int(st, 3, limit);
    int step;
    store_order o;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        read_order(st, &o);
        fn(&o, arg);
    }
    int rc = step == SQLITE_DONE ? STORE_OK : fail(c, "list orders");
    sqlite3_reset(st);
    return rc;
}

int store_order_by_request(store_conn *c, const char *request_id, store_order *out)
{
    sqlite3_stmt *st = stmt(c, ST_ORDER_BY_REQUEST);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_text(st, 1, request_id, -1, SQLITE_STATIC);
    int step = sqlite3_step(st), rc = STORE_ERR_NOT_FOUND;
    if (step == SQLITE_ROW) {
        read_order(st, out);
        rc = STORE_OK;
    } else if (step != SQLITE_DONE) {
        rc = fail(c, "find request id");
    }
    sqlite3_reset(st);
    return rc;
}

int store_stock_read(store_conn *c, int64_t item_id, int64_t *stock)
{
    sqlite3_stmt *st = stmt(c, ST_STOCK_READ);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, item_id);
    int step = sqlite3_step(st), rc = STORE_ERR_NOT_FOUND;
    if (step == SQLITE_ROW) {
        *stock = sqlite3_column_int64(st, 0);
        rc = STORE_OK;
    } else if (step != SQLITE_DONE) {
        rc = fail(c, "read stock");
    }
    sqlite3_reset(st);
    return rc;
}

/* Runs an UPDATE on one item bound as (id, value, fence, seq). When it
 * changes nothing the item is missing (NOT_FOUND) or, when fenced, another
 * holder's token is on the row (STALE). With RETURNING, *ret gets column 0. */
static int update_item(store_conn *c, enum stmt_id id_stmt, int64_t id, int64_t value,
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
        int64_t ignored;
        rc = store_stock_read(c, id, &ignored);
        if (rc == STORE_OK) {
            snprintf(c->err, sizeof(c->err), "item %lld carries a newer lock's token than "
                     "(%lld, %d)", (long long)id, (long long)f->fence, f->seq);
            rc = STORE_ERR_STALE;
        }
    }
    return rc;
}

int store_stock_claim(store_conn *c, int64_t item_id, const store_fence *f, int64_t *stock)
{
    return update_item(c, ST_STOCK_CLAIM, item_id, 0, f, stock);
}

int store_item_set_stock(store_conn *c, int64_t id, int64_t stock, const store_fence *f,
                         const store_commit_check *check)
{
    int rc = run(c, ST_BEGIN);
    if (rc == STORE_OK)
        rc = update_item(c, f ? ST_SET_STOCK_FENCED : ST_SET_STOCK, id, stock, f, NULL);
    if (rc == STORE_OK)
        rc = commit(c, check);
    if (rc != STORE_OK)
        rollback(c);
    return rc;
}

/* The write half of read-modify-write; fenced, only while our claim stands. */
static int write_stock(store_conn *c, const store_deduction *d)
{
    const store_fence *f = d->fence.fence > 0 ? &d->fence : NULL;
    return update_item(c, f ? ST_STOCK_WRITE_CLAIMED : ST_SET_STOCK, d->item_id, d->new_stock, f,
                       NULL);
}

/* stock = stock - quantity where enough is left; *left is the new stock, or
 * the unchanged stock when it was insufficient. */
static int take_atomically(store_conn *c, const store_deduction *d, int64_t *left)
{
    sqlite3_stmt *st = stmt(c, ST_STOCK_ATOMIC);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, d->item_id);
    sqlite3_bind_int64(st, 2, d->quantity);
    int step = sqlite3_step(st), rc = STORE_OK;
    if (step == SQLITE_ROW)
        *left = sqlite3_column_int64(st, 0);
    else if (step != SQLITE_DONE)
        rc = fail(c, "deduct stock");
    sqlite3_reset(st);
    if (rc == STORE_OK && step == SQLITE_DONE) { /* no row: missing or not enough */
        rc = store_stock_read(c, d->item_id, left);
        if (rc == STORE_OK)
            rc = STORE_ERR_INSUFFICIENT;
    }
    return rc;
}

static int insert_order(store_conn *c, const store_deduction *d, int64_t remaining,
                        store_order *out)
{
    sqlite3_stmt *st = stmt(c, ST_ORDER_INSERT);
    if (st == NULL)
        return STORE_ERR_IO;
    sqlite3_bind_int64(st, 1, d->item_id);
    sqlite3_bind_int64(st, 2, d->quantity);
    sqlite3_bind_int64(st, 3, remaining);
    if (d->request_id)
        sqlite3_bind_text(st, 4, d->request_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, d->instance, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, d->lock_mode, -1, SQLITE_STATIC);
    if (d->fence.fence > 0) {
        sqlite3_bind_int64(st, 7, d->fence.fence);
        sqlite3_bind_int(st, 9, d->fence.seq);
    }
    if (d->lock_token)
        sqlite3_bind_text(st, 8, d->lock_token, -1, SQLITE_STATIC);
    int rc = STORE_OK;
    if (sqlite3_step(st) == SQLITE_ROW) {
        memset(out, 0, sizeof(*out));
        out->order_id = sqlite3_column_int64(st, 0);
        copy_text(out->created_at, sizeof(out->created_at), st, 1);
    } else {
        rc = fail(c, "insert deduction");
    }
    sqlite3_reset(st);
    if (rc != STORE_OK)
        return rc;
    out->item_id = d->item_id;
    out->quantity = d->quantity;
    out->remaining = remaining;
    out->fence = d->fence.fence;
    out->fence_seq = d->fence.seq;
    out->has_request_id = d->request_id != NULL;
    snprintf(out->request_id, sizeof(out->request_id), "%s", d->request_id ? d->request_id : "");
    snprintf(out->instance, sizeof(out->instance), "%s", d->instance);
    snprintf(out->lock_mode, sizeof(out->lock_mode), "%s", d->lock_mode);
    return STORE_OK;
}

/* One deduction transaction: replay check, stock write, ledger row, commit. */
static int deduct(store_conn *c, const store_deduction *d, int atomic, store_order *out,
                  int64_t *left)
{
    int rc = run(c, ST_BEGIN);
    if (rc != STORE_OK)
        return rc;
    if (d->request_id) {
        rc = store_order_by_request(c, d->request_id, out);
        if (rc != STORE_ERR_NOT_FOUND) {
            rollback(c);
            return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
        }
    }
    *left = d->new_stock;
    rc = atomic ? take_atomically(c, d, left) : write_stock(c, d);
    if (rc == STORE_OK)
        rc = insert_order(c, d, *left, out);
    if (rc == STORE_OK)
        rc = commit(c, d->check);
    if (rc != STORE_OK)
        rollback(c);
    return rc;
}

int store_deduct_write(store_conn *c, const store_deduction *d, store_order *out)
{
    int64_t left;
    return deduct(c, d, 0, out, &left);
}

int store_deduct_atomic(store_conn *c, const store_deduction *d, store_order *out,
                        int64_t *remaining)
{
    return deduct(c, d, 1, out, remaining);
}

int store_batch_begin(store_conn *c, int64_t item_id, const store_fence *f, int64_t *stock)
{
    int rc = run(c, ST_BEGIN);
    if (rc == STORE_OK)
        rc = f ? store_stock_claim(c, item_id, f, stock) : store_stock_read(c, item_id, stock);
    if (rc != STORE_OK)
        rollback(c);
    return rc;
}

int store_batch_add(store_conn *c, const store_deduction *d, store_order *out)
{
    if (sqlite3_get_autocommit(c->db)) { /* an earlier failure ended the transaction */
        snprintf(c->err, sizeof(c->err), "the batch transaction is no longer open");
        return STORE_ERR_IO;
    }
    if (d->request_id) {
        int rc = store_order_by_request(c, d->request_id, out);
        if (rc != STORE_ERR_NOT_FOUND)
            return rc == STORE_OK ? STORE_ERR_DUPLICATE : rc;
    }
    /* a failed INSERT undoes only itself; the transaction goes on */
    return insert_order(c, d, d->new_stock, out);
}

int store_batch_commit(store_conn *c, int64_t item_id, int64_t stock, const store_fence *f)
{
    store_deduction d = {.item_id = item_id, .new_stock = stock};
    if (f)
        d.fence = *f;
    if (sqlite3_get_autocommit(c->db)) {
        snprintf(c->err, sizeof(c->err), "the batch transaction is no longer open");
        return STORE_ERR_IO;
    }
    int rc = write_stock(c, &d);
    if (rc == STORE_OK)
        rc = run(c, ST_COMMIT);
    if (rc != STORE_OK)
        rollback(c);
    return rc;
}

void store_batch_abort(store_conn *c) { rollback(c); }
