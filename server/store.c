/* store.c - the storage interface's one choice (which backend serves --db)
 * and its dispatch to that backend's operations. */
#include "server/store_backend.h"
#include "server/store_lines.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* In order of preference; the last one, SQLite, takes any path. */
static const store_backend *const backends[] = {&store_postgres, &store_sqlite};
#define NBACKENDS (sizeof(backends) / sizeof(backends[0]))

static void redact(const store_config *cfg, char *text, size_t size);

int store_open(const store_config *cfg, store **out, char *err, size_t errlen)
{
    *out = NULL;
    for (size_t i = 0; i < NBACKENDS; i++)
        if (backends[i]->serves(cfg->db)) {
            int rc = backends[i]->open(cfg, out, err, errlen);
            if (rc != STORE_OK)
                redact(cfg, err, errlen); /* libpq may quote a malformed --db */
            return rc;
        }
    char shown[512];
    snprintf(err, errlen, "no storage backend takes '%s'", store_db_shown(cfg->db, shown,
                                                                          sizeof(shown)));
    return STORE_ERR_IO;
}

int store_pooled(const char *db)
{
    for (size_t i = 0; i < NBACKENDS; i++)
        if (backends[i]->serves(db))
            return backends[i]->pooled;
    return 0;
}

/* Stretches of --db that hold a secret, as [start, end) offsets. */
#define SECRETS_MAX 16
#define REDACT_MIN 3
struct secrets {
    size_t start[SECRETS_MAX], end[SECRETS_MAX];
    int n;
    size_t len; /* strlen(db) */
};

/* Records a secret, in order of start; one that overlaps the last joins
 * it. The last slot hides everything to the end, so a --db with more
 * secrets than slots shows none of them. */
static void secret_at(struct secrets *sp, size_t start, size_t end)
{
    if (sp->n > 0 && start <= sp->end[sp->n - 1]) {
        if (end > sp->end[sp->n - 1])
            sp->end[sp->n - 1] = end;
        return;
    }
    if (sp->n == SECRETS_MAX)
        return;
    sp->start[sp->n] = start;
    sp->end[sp->n] = sp->n == SECRETS_MAX - 1 ? sp->len : end;
    sp->n++;
}

/* Key [key, key + len) names a secret: password, sslpassword, ... */
static int is_secret_key(const char *key, size_t len)
{
    return len >= 8 && memmem(key, len, "password", 8) != NULL;
}

/* A URL parameter shown with its value: libpq's keywords that hold no
 * secret. Any other key's value is hidden, including keys written
 * percent-encoded (libpq decodes them: pass%77ord is password). */
static int is_shown_param(const char *key, size_t len)
{
    static const char *const shown[] = {"host", "hostaddr", "port", "dbname", "user",
                                        "sslmode", "connect_timeout", "application_name",
                                        "target_session_attrs", NULL};
    for (int i = 0; shown[i]; i++)
        if (strlen(shown[i]) == len && memcmp(shown[i], key, len) == 0)
            return 1;
    return 0;
}

/* scheme://user:secret@host,host2:port/db?param=value&...#...: libpq ends
 * the user and password at an '@' before the first '/', and a raw '?' or
 * '#' may be part of them, so the password runs from the first ':' to the
 * last '@' before that '/'. With no '@' there, a raw '/' in the password
 * (libpq refuses it, quoting the text) makes the last '@' of all its end:
 * that hides too much of a URL with an '@' in a parameter, never too
 * little. Parameters' values are hidden unless known to be harmless, and a
 * fragment as a whole. */
static void url_secrets(const char *db, const char *auth, struct secrets *sp)
{
    size_t alen = strcspn(auth, "/");
    const char *at = memrchr(auth, '@', alen);
    const char *end = at ? at : strrchr(auth, '@');
    const char *colon = end ? memchr(auth, ':', (size_t)(end - auth)) : NULL;
    if (colon)
        secret_at(sp, (size_t)(colon + 1 - db), (size_t)(end - db));
    const char *rest = at ? at + 1 : auth;
    const char *q = rest + strcspn(rest, "?#");
    for (const char *p = *q == '?' ? q + 1 : ""; *p;) {
        size_t len = strcspn(p, "&#"), klen = strcspn(p, "=&#");
        if (klen < len && !is_shown_param(p, klen))
            secret_at(sp, (size_t)(p + klen + 1 - db), (size_t)(p + len - db));
        p += len;
        if (*p != '&')
            break;
        p++;
    }
    const char *hash = strchr(rest, '#');
    if (hash)
        secret_at(sp, (size_t)(hash + 1 - db), sp->len);
}

/* A conninfo value's length: quoted up to its closing quote, else up to
 * the next space; a backslash escapes the next character in both. */
static size_t value_len(const char *v)
{
    int quoted = v[0] == '\'';
    size_t i = quoted;
    for (; v[i] && (quoted ? v[i] != '\'' : v[i] != ' ' && v[i] != '\t' && v[i] != '\n'); i++)
        if (v[i] == '\\' && v[i + 1])
            i++;
    return i + (quoted && v[i]);
}

/* key = value key='quoted value' ...: each secret key's value. Past
 * anything malformed (libpq will refuse it), everything counts as secret. */
static void conninfo_secrets(const char *db, struct secrets *sp)
{
    const char *p = db;
    for (;;) {
        p += strspn(p, " \t\n");
        if (*p == '\0')
            return;
        size_t klen = strcspn(p, "= \t\n");
        const char *eq = p + klen + strspn(p + klen, " \t\n");
        if (*eq != '=') {
            secret_at(sp, (size_t)(p - db), strlen(db));
            return;
        }
        const char *v = eq + 1 + strspn(eq + 1, " \t\n");
        size_t vlen = value_len(v);
        if (is_secret_key(p, klen))
            secret_at(sp, (size_t)(v - db), (size_t)(v + vlen - db));
        p = v + vlen;
    }
}

/* The secrets of db, in order. Which form db has is told as the backends
 * tell it: a URL's scheme, else a conninfo's first "keyword=". */
static void find_secrets(const char *db, struct secrets *sp)
{
    static const char *const schemes[] = {"postgresql://", "postgres://", NULL};
    sp->n = 0;
    sp->len = strlen(db);
    for (int i = 0; schemes[i]; i++)
        if (strncmp(db, schemes[i], strlen(schemes[i])) == 0) {
            url_secrets(db, db + strlen(schemes[i]), sp);
            return;
        }
    if (store_postgres.serves(db)) /* a conninfo; a file path is shown as it is */
        conninfo_secrets(db, sp);
}

const char *store_db_shown(const char *db, char *buf, size_t size)
{
    struct secrets sp;
    find_secrets(db, &sp);
    size_t used = 0, from = 0;
    buf[0] = '\0';
    for (int i = 0; i <= sp.n && used < size; i++) {
        size_t to = i < sp.n ? sp.start[i] : strlen(db);
        int k = snprintf(buf + used, size - used, "%.*s%s", (int)(to - from), db + from,
                         i < sp.n ? "***" : "");
        used += k > 0 ? (size_t)k : 0;
        from = i < sp.n ? sp.end[i] : to;
    }
    return buf;
}

/* Replaces each occurrence of secret [s, s + len) in text with ***. */
static void replace_secret(char *text, size_t size, const char *secret, size_t len)
{
    if (len < REDACT_MIN)
        return;
    char out[1024];
    size_t used = 0;
    for (const char *p = text; *p && used < sizeof(out) - 4;) {
        if (strncmp(p, secret, len) == 0) {
            memcpy(out + used, "***", 3), used += 3, p += len;
        } else {
            out[used++] = *p++;
        }
    }
    out[used] = '\0';
    snprintf(text, size, "%s", out);
}

/* The percent-decoded form of [s, s + len) into out (at most size - 1). */
static size_t percent_decoded(const char *s, size_t len, char *out, size_t size)
{
    size_t n = 0;
    for (size_t i = 0; i < len && n < size - 1; i++) {
        if (s[i] == '%' && i + 2 < len && isxdigit((unsigned char)s[i + 1]) &&
            isxdigit((unsigned char)s[i + 2])) {
            char hex[3] = {s[i + 1], s[i + 2], '\0'};
            out[n++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else {
            out[n++] = s[i];
        }
    }
    out[n] = '\0';
    return n;
}

/* What libpq splits a URL at: a password with one of them raw is read in
 * pieces, and its error quotes a piece ("invalid integer value "pa" for
 * connection option "port""). */
#define URL_DELIMITERS ":/?#@,&="

/* An error text with every secret of cfg - each in --db as written,
 * percent-decoded and in its pieces, and the password file's - replaced by ***. Secrets
 * shorter than REDACT_MIN are left: replacing every "a" in a text hides
 * nothing and garbles it. */
static void redact(const store_config *cfg, char *text, size_t size)
{
    struct secrets sp;
    find_secrets(cfg->db, &sp);
    for (int i = 0; i < sp.n; i++) {
        const char *secret = cfg->db + sp.start[i];
        size_t len = sp.end[i] - sp.start[i];
        char decoded[512];
        replace_secret(text, size, secret, len);
        replace_secret(text, size, decoded, percent_decoded(secret, len, decoded,
                                                            sizeof(decoded)));
        for (size_t at = 0, n; at < len; at += n + 1) { /* and the pieces libpq may */
            n = strcspn(secret + at, URL_DELIMITERS);   /* have split it into */
            replace_secret(text, size, secret + at, n < len - at ? n : len - at);
        }
    }
    if (cfg->password)
        replace_secret(text, size, cfg->password, strlen(cfg->password));
}

void store_close(store *s)
{
    if (s)
        s->be->close(s);
}

const char *store_backend_name(const store *s) { return s->be->name; }
int store_has_row_locks(const store *s) { return s->be->tx_lock_stock != NULL; }

const char *store_node(store *s, char *buf, size_t size)
{
    if (size > 0)
        buf[0] = '\0';
    if (s->be->node && size > 0)
        s->be->node(s, buf, size);
    return buf;
}
int store_savepoints_max(const store *s) { return s->be->savepoints_max; }

int store_get(store *s, store_conn **out, char *err, size_t errlen)
{
    return s->be->get(s, out, err, errlen);
}
void store_put(store *s, store_conn *c) { s->be->put(s, c); }
const char *store_errstr(const store_conn *c) { return c->be->errstr(c); }
int store_ping(store_conn *c) { return c->be->ping(c); }
int store_probe_write(store_conn *c) { return c->be->probe_write(c); }

int store_item_create(store_conn *c, const char *name, int64_t stock, const char *request_id,
                      int64_t per_buyer_limit, store_item *out)
{
    return c->be->item_create(c, name, stock, request_id, per_buyer_limit, out);
}

int store_item_get(store_conn *c, int64_t id, store_item *out)
{
    return c->be->item_get(c, id, out);
}

int store_item_list(store_conn *c, int64_t after, int limit, store_item_fn fn, void *arg)
{
    return c->be->item_list(c, after, limit, fn, arg);
}

int store_item_set_stock(store_conn *c, int64_t id, int64_t stock, int64_t per_buyer_limit,
                         const store_fence *f, const store_commit_check *check,
                         store_item *out)
{
    return c->be->item_set_stock(c, id, stock, per_buyer_limit, f, check, out);
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

store_fence store_stale_token(const store_conn *c) { return c->stale; }

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

/* out as the order o that the backend just wrote: o's requestId, instance,
 * lock mode and lines; out's order id and created_at (the backend's) stay.
 * Done here, once for every backend. */
static void order_written(const store_new_order *o, store_order *out)
{
    out->info.has_request_id = o->request_id != NULL;
    snprintf(out->info.request_id, sizeof(out->info.request_id), "%s",
             o->request_id ? o->request_id : "");
    out->info.has_buyer_id = o->buyer_id != NULL;
    snprintf(out->info.buyer_id, sizeof(out->info.buyer_id), "%s",
             o->buyer_id ? o->buyer_id : "");
    out->info.reservation_id = 0;
    out->info.cancelled = 0;
    snprintf(out->info.instance, sizeof(out->info.instance), "%s", o->instance);
    snprintf(out->info.lock_mode, sizeof(out->info.lock_mode), "%s", o->lock_mode);
    out->nlines = o->nlines;
    memcpy(out->lines, o->lines, (size_t)o->nlines * sizeof(o->lines[0]));
}

int store_tx_add_order(store_conn *c, const store_new_order *o, store_order *out)
{
    int rc = c->be->tx_add_order(c, o, out);
    if (rc == STORE_OK)
        order_written(o, out);
    return rc;
}

int store_tx_set_buyer_limit(store_conn *c, int64_t id, int64_t per_buyer_limit)
{
    return c->be->tx_set_buyer_limit(c, id, per_buyer_limit);
}

store_limit_info store_limit_item(const store_conn *c) { return c->limit; }

const char *store_reservation_state_name(enum store_reservation_state state)
{
    return (unsigned)state <= STORE_RES_EXPIRED ? store_state_names[state] : "unknown";
}

int store_tx_reserve(store_conn *c, const store_new_reservation *r, store_reservation *out)
{
    return c->be->tx_reserve(c, r, out);
}

int store_reservation_get(store_conn *c, int64_t id, store_reservation *out)
{
    return c->be->reservation_get(c, id, out);
}

/* The order a confirm wrote, as order_written: the backend fills in its
 * id, created_at and lines, the rest is o's and the reservation's. */
static void order_confirmed(const store_new_order *o, const store_reservation *res,
                            store_order *out)
{
    out->info.has_request_id = o->request_id != NULL;
    snprintf(out->info.request_id, sizeof(out->info.request_id), "%s",
             o->request_id ? o->request_id : "");
    out->info.has_buyer_id = res->has_buyer_id;
    memcpy(out->info.buyer_id, res->buyer_id, sizeof(out->info.buyer_id));
    out->info.reservation_id = res->id;
    out->info.cancelled = 0;
    snprintf(out->info.instance, sizeof(out->info.instance), "%s", o->instance);
    snprintf(out->info.lock_mode, sizeof(out->info.lock_mode), "%s", o->lock_mode);
}

int store_tx_reservation_confirm(store_conn *c, int64_t id, const store_new_order *o,
                                 store_reservation *res, store_order *order)
{
    int rc = c->be->tx_reservation_confirm(c, id, o, res, order);
    if (rc == STORE_OK)
        order_confirmed(o, res, order);
    return rc;
}

int store_tx_reservation_cancel(store_conn *c, int64_t id, const int64_t *items,
                                const store_fence *f, int nf, store_reservation *res)
{
    return c->be->tx_reservation_cancel(c, id, items, f, nf, res);
}

int store_reservation_extend(store_conn *c, int64_t id, int64_t hold_ms, store_reservation *out)
{
    return c->be->reservation_extend(c, id, hold_ms, out);
}

int store_reservations_due(store_conn *c, int limit, int64_t *items, int items_max, int *n,
                           int *due)
{
    return c->be->reservations_due(c, limit, items, items_max, n, due);
}

int store_tx_reservations_expire(store_conn *c, const int64_t *items, const store_fence *f,
                                 int n, int limit, int *expired, int64_t *lag_ms)
{
    return c->be->tx_reservations_expire(c, items, f, n, limit, expired, lag_ms);
}

int store_reservations_held(store_conn *c, int64_t *n) { return c->be->reservations_held(c, n); }

int store_tx_order_cancel(store_conn *c, int64_t order_id, const char *request_id,
                          const char *instance, const char *lock_token, const int64_t *items,
                          const store_fence *f, int nf, store_order *out)
{
    return c->be->tx_order_cancel(c, order_id, request_id, instance, lock_token, items, f, nf,
                                  out);
}

int store_tx_savepoint(store_conn *c) { return c->be->tx_savepoint(c); }

int store_tx_rollback_to_savepoint(store_conn *c) { return c->be->tx_rollback_to_savepoint(c); }

int store_tx_commit(store_conn *c, const store_commit_check *check)
{
    return c->be->tx_commit(c, check);
}

void store_tx_abort(store_conn *c) { c->be->tx_abort(c); }
