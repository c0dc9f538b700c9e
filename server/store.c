/* store.c - the storage interface's one choice (which backend serves --db)
 * and its dispatch to that backend's operations. */
#include "store_backend.h"

#include <stdio.h>
#include <string.h>

/* In order of preference; the last one, SQLite, takes any path. */
static const store_backend *const backends[] = {&store_postgres, &store_sqlite};
#define NBACKENDS (sizeof(backends) / sizeof(backends[0]))

int store_open(const store_config *cfg, store **out, char *err, size_t errlen)
{
    *out = NULL;
    for (size_t i = 0; i < NBACKENDS; i++)
        if (backends[i]->serves(cfg->db))
            return backends[i]->open(cfg, out, err, errlen);
    snprintf(err, errlen, "no storage backend takes '%s'", cfg->db);
    return STORE_ERR_IO;
}

const char *store_db_shown(const char *db, char *buf, size_t size)
{
    const char *scheme = strstr(db, "://"), *at = scheme ? strchr(scheme + 3, '@') : NULL;
    const char *colon = scheme ? memchr(scheme + 3, ':', at ? (size_t)(at - scheme - 3) : 0) : NULL;
    const char *pw = scheme ? NULL : strstr(db, "password=");
    if (colon) /* scheme://user:secret@host... */
        snprintf(buf, size, "%.*s:***%s", (int)(colon - db), db, at);
    else if (pw) /* ... password=secret ... */
        snprintf(buf, size, "%.*spassword=***%s", (int)(pw - db), db, pw + strcspn(pw, " "));
    else
        snprintf(buf, size, "%s", db);
    return buf;
}

void store_order_written(const store_new_order *o, store_order *out)
{
    out->info.has_request_id = o->request_id != NULL;
    snprintf(out->info.request_id, sizeof(out->info.request_id), "%s",
             o->request_id ? o->request_id : "");
    snprintf(out->info.instance, sizeof(out->info.instance), "%s", o->instance);
    snprintf(out->info.lock_mode, sizeof(out->info.lock_mode), "%s", o->lock_mode);
    out->nlines = o->nlines;
    memcpy(out->lines, o->lines, (size_t)o->nlines * sizeof(o->lines[0]));
}

void store_close(store *s)
{
    if (s)
        s->be->close(s);
}

const char *store_backend_name(const store *s) { return s->be->name; }
int store_has_row_locks(const store *s) { return s->be->tx_lock_stock != NULL; }

int store_get(store *s, store_conn **out, char *err, size_t errlen)
{
    return s->be->get(s, out, err, errlen);
}
void store_put(store *s, store_conn *c) { s->be->put(s, c); }
const char *store_errstr(const store_conn *c) { return c->be->errstr(c); }
int store_ping(store_conn *c) { return c->be->ping(c); }

int store_item_create(store_conn *c, const char *name, int64_t stock, store_item *out)
{
    return c->be->item_create(c, name, stock, out);
}

int store_item_get(store_conn *c, int64_t id, store_item *out)
{
    return c->be->item_get(c, id, out);
}

int store_item_list(store_conn *c, int64_t after, int limit, store_item_fn fn, void *arg)
{
    return c->be->item_list(c, after, limit, fn, arg);
}

int store_item_set_stock(store_conn *c, int64_t id, int64_t stock, const store_fence *f,
                         const store_commit_check *check)
{
    return c->be->item_set_stock(c, id, stock, f, check);
}

int store_lines_of_item(store_conn *c, int64_t item_id, int64_t before, int limit,
                        store_line_fn fn, void *arg)
{
    return c->be->lines_of_item(c, item_id, before, limit, fn, arg);
}

int store_order_by_request(store_conn *c, const char *request_id, store_order *out)
{
    return c->be->order_by_request(c, request_id, out);
}

int store_order_get(store_conn *c, int64_t order_id, store_order *out)
{
    return c->be->order_get(c, order_id, out);
}

int store_stock_read(store_conn *c, int64_t item_id, int64_t *stock)
{
    return c->be->stock_read(c, item_id, stock);
}

int store_stock_claim(store_conn *c, int64_t item_id, const store_fence *f, int64_t *stock)
{
    return c->be->stock_claim(c, item_id, f, stock);
}

int store_tx_begin(store_conn *c) { return c->be->tx_begin(c); }

int store_tx_set_stock(store_conn *c, int64_t item_id, int64_t stock, const store_fence *f)
{
    return c->be->tx_set_stock(c, item_id, stock, f);
}

int store_tx_take(store_conn *c, int64_t item_id, int64_t quantity, int64_t *left)
{
    return c->be->tx_take(c, item_id, quantity, left);
}

int store_tx_lock_stock(store_conn *c, int64_t item_id, int wait_ms, int64_t *stock)
{
    return c->be->tx_lock_stock(c, item_id, wait_ms, stock);
}

int store_tx_add_order(store_conn *c, const store_new_order *o, store_order *out)
{
    return c->be->tx_add_order(c, o, out);
}

int store_tx_commit(store_conn *c, const store_commit_check *check)
{
    return c->be->tx_commit(c, check);
}

void store_tx_abort(store_conn *c) { c->be->tx_abort(c); }
