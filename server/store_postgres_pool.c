/* store_postgres_pool.c - the PostgreSQL backend's store: a bounded pool
 * of sessions (store_postgres_session.c), each taken by one thread at a
 * time. A session closed while pooled is replaced before use. A session
 * that can't be opened starts an outage: requests that need a new one are
 * answered at once, with the last attempt's failure, while one thread (the
 * reconnector) tries again with backoff - not one connect per request,
 * each waiting out its timeout, against a server that is down. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/store_postgres_pool.h"

#define RECONNECT_FIRST_MS 50 /* the reconnector's first pause... */
#define RECONNECT_MAX_MS 1000 /* ...doubling up to this, while no request comes */

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

/* A --db that libpq can't read: STORE_ERR_IO with err saying why (its
 * text may quote --db; store.c redacts it), rather than waited for. */
static int check_conninfo(const char *db, char *err, size_t errlen)
{
    char *why = NULL;
    PQconninfoOption *opts = PQconninfoParse(db, &why);
    int rc = opts ? STORE_OK : STORE_ERR_IO;
    if (opts == NULL)
        snprintf(err, errlen, "--db: %.*s", why ? (int)strcspn(why, "\n") : 13,
                 why ? why : "out of memory");
    PQconninfoFree(opts);
    PQfreemem(why);
    return rc;
}

static pg_conn *conn_new(pg_store *s)
{
    pg_conn *c = calloc(1, sizeof(*c));
    if (c) {
        c->base.be = s->base.be;
        c->ses.cfg = &s->session;
    }
    return c;
}

static void conn_free(pg_conn *c)
{
    if (c) {
        pg_session_close(&c->ses);
        free(c);
    }
}

int pg_pool_open(const store_config *cfg, const store_backend *be, const struct pg_stmt *stmts,
                 int nstmts, store **out, char *err, size_t errlen)
{
    if (check_conninfo(cfg->db, err, errlen) != STORE_OK)
        return STORE_ERR_IO;
    pg_store *s = calloc(1, sizeof(*s));
    if (s)
        s->base.be = be;
    pg_conn *c = s ? conn_new(s) : NULL;
    if (s == NULL || c == NULL || (s->db = strdup(cfg->db)) == NULL ||
        (cfg->password && (s->password = strdup(cfg->password)) == NULL)) {
        free(c);
        if (s)
            free(s->db);
        free(s);
        snprintf(err, errlen, "out of memory");
        return STORE_ERR_IO;
    }
    s->cfg = *cfg;
    s->cfg.db = s->db;
    s->cfg.password = NULL; /* s->password has it */
    s->session = (pg_session_cfg){s->db, s->password, cfg->timeout_ms, cfg->sync_full, stmts,
                                  nstmts};
    s->cfg.pool_size = cfg->pool_size < 1 ? 1 : cfg->pool_size > POOL_MAX ? POOL_MAX
                                                                          : cfg->pool_size;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->freed, NULL);
    pthread_condattr_t attr; /* the reconnector's pauses: on the monotonic clock */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &attr);
    pthread_condattr_destroy(&attr);
    int rc = pg_session_open(&c->ses);
    if (rc != STORE_OK) {
        snprintf(err, errlen, "%s", c->ses.err);
        if (c->ses.refused) /* waiting for the server would not help */
            rc = STORE_ERR_IO;
    } else {
        rc = pg_migrate(&c->ses, err, errlen);
    }
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
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->mu);
    if (s->started)
        pthread_join(s->reconnector, NULL);
    for (int i = 0; i < s->nidle; i++)
        conn_free(s->idle[i]);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->freed);
    pthread_mutex_destroy(&s->mu);
    if (s->password) /* not left in freed memory */
        memset(s->password, 0, strlen(s->password));
    free(s->password);
    free(s->db);
    free(s);
}

/* The reconnector's pause after a failed attempt (under s->mu): pause ms,
 * or RECONNECT_FIRST_MS once a request has come meanwhile - an outage
 * with traffic is tried every RECONNECT_FIRST_MS, so that it ends soon
 * after the server is back; one without backs off. */
static void reconnect_pause(pg_store *s, int pause)
{
    int64_t start = pg_now_ms();
    s->asked = 0;
    while (!s->closing) {
        int64_t end = start + (s->asked ? RECONNECT_FIRST_MS : pause);
        if (pg_now_ms() >= end)
            return;
        struct timespec until = {end / 1000, (long)(end % 1000) * 1000000L}; /* monotonic */
        pthread_cond_timedwait(&s->wake, &s->mu, &until);
    }
}

/* "host:port" of the server pg is connected to, safe to show in a JSON
 * string or a Prometheus label. */
static void node_of(PGconn *pg, char *buf, size_t size)
{
    const char *host = PQhost(pg), *port = PQport(pg);
    snprintf(buf, size, "%s:%s", host ? host : "", port ? port : "");
    for (char *p = buf; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = '_';
}

/* The reconnector: one session opened again and again, pausing between
 * attempts (doubling up to RECONNECT_MAX_MS), until the server takes it;
 * it then joins the pool and the outage ends. */
static void *reconnect(void *arg)
{
    pg_store *s = arg;
    pg_conn *c = NULL;
    int pause = RECONNECT_FIRST_MS;
    pthread_mutex_lock(&s->mu);
    while (!s->closing) {
        pthread_mutex_unlock(&s->mu);
        if (c == NULL)
            c = conn_new(s);
        int rc = c ? pg_session_open(&c->ses) : STORE_ERR_IO;
        pthread_mutex_lock(&s->mu);
        if (rc == STORE_OK) {
            s->down_since = 0;
            node_of(c->ses.pg, s->node, sizeof(s->node)); /* after a failover: the new one */
            if (s->open < s->cfg.pool_size) {
                s->idle[s->nidle++] = c;
                s->open++;
                c = NULL;
                pthread_cond_signal(&s->freed);
            }
            break;
        }
        snprintf(s->down_err, sizeof(s->down_err), "%s", c ? c->ses.err : "out of memory");
        reconnect_pause(s, pause);
        pause = pause * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : pause * 2;
    }
    s->reconnecting = 0; /* with down_since, in one step: a new outage starts a new one */
    pthread_mutex_unlock(&s->mu);
    conn_free(c);
    return NULL;
}

/* A new session could not be opened: requests that need one are answered
 * at once from now on, while the reconnector (one at most) tries again. */
static void outage_begin(pg_store *s, const char *why)
{
    pthread_mutex_lock(&s->mu);
    if (s->down_since == 0)
        s->down_since = pg_now_ms();
    s->node[0] = '\0'; /* no server is written to now: don't name the lost one */
    snprintf(s->down_err, sizeof(s->down_err), "%s", why);
    if (!s->reconnecting && !s->closing) {
        if (s->started) /* the last one, which has ended (reconnecting 0) */
            pthread_join(s->reconnector, NULL);
        s->started = s->reconnecting = pthread_create(&s->reconnector, NULL, reconnect, s) == 0;
        if (!s->started) /* no thread to end it: each request tries for itself */
            s->down_since = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

/* Takes a pooled connection or room for a new one (*c NULL), waiting up to
 * the busy timeout for either: 0, or -1 when none came. During an outage,
 * down gets its answer, for a request that would have to connect. */
static int take(pg_store *s, pg_conn **c, char *down, size_t size)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += s->cfg.busy_timeout_ms / 1000;
    until.tv_nsec += (long)(s->cfg.busy_timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    *c = NULL;
    down[0] = '\0';
    pthread_mutex_lock(&s->mu);
    while (s->nidle == 0 && s->open >= s->cfg.pool_size &&
           pthread_cond_timedwait(&s->freed, &s->mu, &until) == 0) {
    }
    int rc = 0;
    if (s->nidle > 0)
        *c = s->idle[--s->nidle];
    else if (s->open < s->cfg.pool_size)
        s->open++; /* a new one, opened by the caller */
    else
        rc = -1;
    if (s->down_since) {
        snprintf(down, size, "%.200s (unreachable for %.1f s; reconnecting in the background)",
                 s->down_err, (double)(pg_now_ms() - s->down_since) / 1000);
        if (!s->asked) { /* the reconnector's next attempt: soon */
            s->asked = 1;
            pthread_cond_signal(&s->wake);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* A pooled connection, or a new one while the pool has room; else waits up
 * to the busy timeout for one to come back. One that would have to connect
 * during an outage gets its answer at once. */
int pg_get(store *st, store_conn **out, char *err, size_t errlen)
{
    pg_store *s = (pg_store *)st;
    pg_conn *c;
    char down[sizeof(s->down_err) + 80];
    *out = NULL;
    if (take(s, &c, down, sizeof(down)) != 0) {
        snprintf(err, errlen, "all %d PostgreSQL connections stayed in use for %d ms",
                 s->cfg.pool_size, s->cfg.busy_timeout_ms);
        return STORE_ERR_BUSY;
    }
    if (c == NULL)
        c = conn_new(s);
    int rc = c == NULL ? STORE_ERR_IO : pg_session_alive(&c->ses) ? STORE_OK
                                      : down[0] ? STORE_ERR_UNAVAILABLE : pg_session_open(&c->ses);
    if (rc != STORE_OK) {
        snprintf(err, errlen, "%s", c == NULL ? "out of memory" : down[0] ? down : c->ses.err);
        if (c && !down[0] && c->ses.unreachable) /* not a session lost after its connect */
            outage_begin(s, c->ses.err);
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
    char node[sizeof(s->node)] = "";
    pg_rollback(&c->ses);
    if (c->ses.pg && PQstatus(c->ses.pg) != CONNECTION_OK)
        pg_session_close(&c->ses);
    else if (c->ses.pg)
        node_of(c->ses.pg, node, sizeof(node));
    pthread_mutex_lock(&s->mu);
    if (s->down_since) /* a session on the lost server may still look alive */
        node[0] = '\0';
    if (node[0])
        memcpy(s->node, node, sizeof(node));
    s->idle[s->nidle++] = c; /* nidle <= open <= pool_size <= POOL_MAX */
    pthread_cond_signal(&s->freed);
    pthread_mutex_unlock(&s->mu);
}

const char *pg_errstr(const store_conn *c) { return CONN(c)->ses.err; }

void pg_node(store *st, char *buf, size_t size)
{
    pg_store *s = (pg_store *)st;
    pthread_mutex_lock(&s->mu);
    snprintf(buf, size, "%s", s->node);
    pthread_mutex_unlock(&s->mu);
}
