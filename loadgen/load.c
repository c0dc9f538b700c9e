/* load.c - the load engine: per thread one epoll loop (evloop.h), a fixed
 * set of connection slots that each carry one request at a time over a
 * keep-alive HTTP/1.1 connection (conn.h), deadlines for the attempts in
 * flight, and the closed/open-loop schedule. */
#include "loadgen/load.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/conn.h"
#include "loadgen/evloop.h"
#include "loadgen/http.h"

#define RESP_MAX 16384          /* answer bytes kept; stockd's answers are far smaller */
#define IDLE_WAKE_NS 50000000LL /* scan at least every 50 ms to notice stop and deadline */
#define RETRY_BACKOFF_NS 50000000LL
#define MAX_EVENTS 256

enum slot_state { SLOT_IDLE, SLOT_BUSY, SLOT_RETRY, SLOT_DONE };

struct worker;

/* One connection's worth of work: one request in flight at a time. */
struct slot {
    struct worker *w;
    lg_conn conn;
    int target;
    int state;         /* enum slot_state */
    int attempt;       /* 0 for the first send of the current request */
    size_t rec;        /* index of the current request's record */
    int64_t origin_ns; /* latency counts from here: the intended send time */
    int64_t next_ns;   /* open loop: this slot's next scheduled send */
    int64_t retry_ns;  /* SLOT_RETRY: when to resend */
    int64_t deadline_ns; /* SLOT_BUSY: when the attempt times out */
    /* the request head, formatted once (per request when an --api profile's path or
     * headers name a placeholder) */
    char head[LG_HTTP_HEAD_MAX + LG_PROFILE_PATH_MAX + LG_PROFILE_HEADERS_MAX];
    size_t head_len;   /* up to "Content-Length: " when there is a body */
    char body[LG_BODY_MAX];
    size_t body_len;
};

struct worker {
    struct lg_load *load;
    int id;
    pthread_t tid;
    int started;
    lg_evloop *loop;
    struct slot *slots;
    int nslots, nlive; /* slots, and those not SLOT_DONE */
    int first;         /* global index of slots[0] */
    int64_t scan_ns;   /* when the slots next need a look (timers, schedule, stop) */
    lg_tally *tally;   /* [ntargets] */
    lg_batch batch;    /* this thread's records and their lines */
    size_t caprecs, caplines;
    uint64_t rng;
    int64_t last_ns;   /* last final answer */
    int fail;          /* LG_ERR_* that ended this thread early, 0 otherwise */
    char failmsg[200];
    char example[LG_OUT_COUNT][LG_EXAMPLE_MAX];
    _Atomic uint64_t done, errors; /* read by the progress line while running */
    _Atomic int finished;
};

struct lg_load {
    lg_load_cfg cfg;
    char run_id[40];
    lg_http_addr *addrs;           /* [ntargets], resolved once, read-only while running */
    struct worker *workers;
    int nworkers;
    int64_t start_ns, deadline_ns; /* deadline -1: none */
    int64_t interval_ns;           /* open loop: time between one slot's sends; 0 closed */
    int64_t timeout_ns;            /* per attempt */
    atomic_llong tickets;          /* request numbers handed out so far */
    atomic_int stop;               /* 0 run, 1 finish in-flight, 2 abandon in-flight */
};

/* Whether no more requests may start: stopped, past the deadline, or all claimed. */
static int exhausted(const lg_load *l, int64_t now)
{
    if (atomic_load_explicit(&l->stop, memory_order_relaxed))
        return 1;
    if (l->deadline_ns >= 0 && now >= l->deadline_ns)
        return 1;
    return l->cfg.requests > 0 &&
           atomic_load_explicit(&l->tickets, memory_order_relaxed) >= l->cfg.requests;
}

/* The next request number, or -1 when the run allows no more. */
static long long claim(lg_load *l, int64_t now)
{
    if (exhausted(l, now))
        return -1;
    long long t = atomic_fetch_add_explicit(&l->tickets, 1, memory_order_relaxed);
    return l->cfg.requests > 0 && t >= l->cfg.requests ? -1 : t;
}

/* The path every request of the run goes to. */
static const char *req_path(const lg_load_cfg *c)
{
    return c->raw ? c->path : lg_shape_path(&c->shape);
}

/* Room for one more record and a cart's worth of lines. 0 or LG_ERR_NOMEM
 * (also when the line indexes would outgrow lg_rec.first). */
static int reserve(struct worker *w)
{
    lg_batch *b = &w->batch;
    if (b->nrecs == w->caprecs) {
        size_t cap = w->caprecs ? w->caprecs * 2 : 1024;
        lg_rec *grown = realloc(b->recs, cap * sizeof(*grown));
        if (grown == NULL)
            return LG_ERR_NOMEM;
        b->recs = grown;
        int64_t *sent = realloc(b->sent_ns, cap * sizeof(*sent));
        if (sent == NULL)
            return LG_ERR_NOMEM;
        b->sent_ns = sent;
        int64_t *done = realloc(b->done_ns, cap * sizeof(*done));
        if (done == NULL)
            return LG_ERR_NOMEM;
        b->done_ns = done;
        w->caprecs = cap;
    }
    if (b->nlines + LG_ORDER_LINES_MAX > w->caplines) {
        size_t cap = w->caplines ? w->caplines * 2 : 1024 + LG_ORDER_LINES_MAX;
        lg_line *grown = cap <= UINT32_MAX ? realloc(b->lines, cap * sizeof(*grown)) : NULL;
        if (grown == NULL)
            return LG_ERR_NOMEM;
        b->lines = grown;
        w->caplines = cap;
    }
    return LG_OK;
}

/* Makes the record, lines and body of request number ticket. 0, LG_ERR_NOMEM,
 * or LG_ERR_USAGE when the body outgrew LG_BODY_MAX (which bounds every
 * request lg_shape_valid allows). */
static int prepare(struct slot *s, long long ticket)
{
    struct worker *w = s->w;
    const lg_shape *shape = &w->load->cfg.shape;
    if (reserve(w) != LG_OK)
        return LG_ERR_NOMEM;
    lg_batch *b = &w->batch;
    s->rec = b->nrecs++;
    lg_rec *r = &b->recs[s->rec];
    r->first = (uint32_t)b->nlines;
    r->nlines = (uint8_t)lg_shape_draw(shape, ticket, &w->rng, lg_rec_lines(b, r));
    r->outcome = LG_OUT_TRANSPORT; /* until an answer says otherwise */
    r->resends = 0;
    b->nlines += r->nlines;
    char rid[LG_PROFILE_REQUEST_MAX];
    snprintf(rid, sizeof(rid), "%s-%d-%zu", w->load->run_id, w->id, s->rec);
    int n = lg_shape_body(shape, lg_rec_lines(b, r), r->nlines, rid, s->body, sizeof(s->body));
    s->body_len = n < 0 ? 0 : (size_t)n;
    if (n >= 0 && lg_shape_head_varies(shape)) {
        int h = lg_shape_head(shape, lg_rec_lines(b, r), rid, w->load->addrs[s->target].host,
                              s->head, sizeof(s->head) - 24);
        s->head_len = h < 0 ? 0 : (size_t)h;
        n = h;
    }
    return n < 0 ? LG_ERR_USAGE : LG_OK;
}

/* Books the final outcome of the slot's request and frees the slot. Its
 * completion time for the history check is read now, after the answer was
 * parsed, not the batch's now: that was read before any socket, and a
 * service that commits after sending its first bytes (or a write that met
 * EAGAIN, then a read in one event) could have committed after it. */
static void complete(struct slot *s, const lg_answer *a, int64_t now)
{
    struct worker *w = s->w;
    lg_tally_record(&w->tally[s->target], a->outcome, (uint64_t)(now - s->origin_ns) / 1000,
                    now - w->load->start_ns);
    int64_t done = w->load->cfg.raw ? now : lg_now_ns(); /* raw keeps no times */
    if (!w->load->cfg.raw) {
        w->batch.recs[s->rec].outcome = (uint8_t)a->outcome;
        w->batch.done_ns[s->rec] = done - w->load->start_ns;
    }
    if (a->why[0] && !w->example[a->outcome][0])
        snprintf(w->example[a->outcome], sizeof(w->example[0]), "%.200s%.100s: %.119s",
                 w->load->cfg.targets[s->target].url, req_path(&w->load->cfg), a->why);
    atomic_fetch_add_explicit(&w->done, 1, memory_order_relaxed);
    if (a->outcome != LG_OUT_OK)
        atomic_fetch_add_explicit(&w->errors, 1, memory_order_relaxed);
    w->last_ns = done; /* the load's end: no completion after it */
    s->state = SLOT_IDLE;
    s->attempt = 0;
}

static void complete_transport(struct slot *s, const char *why, int64_t now)
{
    lg_answer a;
    memset(&a, 0, sizeof(a));
    a.outcome = LG_OUT_TRANSPORT;
    a.remaining = a.quantity = -1;
    snprintf(a.why, sizeof(a.why), "%.119s", why);
    complete(s, &a, now);
}

static void on_failed(struct slot *s, const char *why, int64_t now);

/* Puts the slot's request on its connection: the head (with this body's
 * length when there is one) and the body, straight from the slot's buffers.
 * A connection that cannot even be made fails the attempt at once. */
static void send_request(struct slot *s, int64_t now)
{
    struct worker *w = s->w;
    struct iovec iov[2] = {{s->head, s->head_len}, {s->body, s->body_len}};
    int n = 1;
    if (!w->load->cfg.raw) {
        iov[0].iov_len += lg_http_head_end(s->head + s->head_len, s->body_len);
        n = 2;
    }
    s->state = SLOT_BUSY;
    s->deadline_ns = now + w->load->timeout_ns;
    if (s->deadline_ns < w->scan_ns)
        w->scan_ns = s->deadline_ns;
    if (lg_conn_send(&s->conn, iov, n) == LG_CONN_ERROR)
        on_failed(s, s->conn.why, now);
}

/* An attempt got no answer: retry it, or complete it as a transport error. A
 * slot that needs no retry is looked at again at once (a refused connection
 * fails inside send_request, which must not recurse into the next one). */
static void on_failed(struct slot *s, const char *why, int64_t now)
{
    struct worker *w = s->w;
    const lg_load_cfg *c = &w->load->cfg;
    if (!c->raw && s->attempt < c->retries && !atomic_load(&w->load->stop)) {
        s->attempt++;
        w->tally[s->target].retries++;
        lg_rec *r = &w->batch.recs[s->rec];
        if (r->resends < UINT8_MAX)
            r->resends++;
        s->state = SLOT_RETRY;
        s->retry_ns = now + RETRY_BACKOFF_NS * s->attempt;
        if (s->retry_ns < w->scan_ns)
            w->scan_ns = s->retry_ns;
        return;
    }
    complete_transport(s, why, now);
    w->scan_ns = now;
}

/* The whole answer is in: classify it and complete the request. */
static void on_answer(struct slot *s, int64_t now)
{
    struct worker *w = s->w;
    const lg_load_cfg *c = &w->load->cfg;
    const lg_http_resp *r = &s->conn.resp;
    lg_answer a;
    if (c->raw) {
        lg_answer_status(r->status, &a);
    } else {
        /* a body beyond RESP_MAX is cut, fails to parse, and so is malformed */
        lg_rec *rec = &w->batch.recs[s->rec];
        lg_shape_answer(&c->shape, r->status, r->body, r->len, lg_rec_lines(&w->batch, rec),
                        rec->nlines, &a);
    }
    complete(s, &a, now);
}

static void fail(struct worker *w, int code, const char *msg)
{
    if (!w->fail) {
        w->fail = code;
        snprintf(w->failmsg, sizeof(w->failmsg), "thread %d: %s", w->id, msg);
    }
}

/* Starts the next request on an idle slot when its time has come; else
 * makes sure the slots are looked at again by then. */
static void start_idle(struct slot *s, int64_t now)
{
    struct worker *w = s->w;
    lg_load *l = w->load;
    if (l->interval_ns && s->next_ns > now && !exhausted(l, now)) {
        if (s->next_ns < w->scan_ns)
            w->scan_ns = s->next_ns;
        return;
    }
    long long ticket = claim(l, now);
    if (ticket < 0) {
        s->state = SLOT_DONE;
        w->nlive--;
        lg_conn_close(&s->conn); /* nothing more to send on it */
        return;
    }
    /* open loop: latency starts at the planned time even when we are late */
    s->origin_ns = l->interval_ns ? s->next_ns : now;
    s->next_ns += l->interval_ns;
    int rc = l->cfg.raw ? LG_OK : prepare(s, ticket);
    if (rc != LG_OK) {
        fail(w, rc, rc == LG_ERR_NOMEM ? "out of memory for request records"
                                       : "a request outgrew its buffer (its body, or the head "
                                         "an --api profile renders)");
        return;
    }
    if (!l->cfg.raw) /* the invoke: the first send; a resend keeps it */
        w->batch.sent_ns[s->rec] = w->batch.done_ns[s->rec] = now - l->start_ns;
    send_request(s, now);
}

/* Times the attempt in flight out when its deadline has passed. The
 * connection goes: a late answer must not be taken for the next request's. */
static void check_deadline(struct slot *s, int64_t now)
{
    if (s->deadline_ns > now) {
        if (s->deadline_ns < s->w->scan_ns)
            s->w->scan_ns = s->deadline_ns;
        return;
    }
    char why[120];
    snprintf(why, sizeof(why), "timed out after %d ms (%s, %zu bytes of the answer in)",
             s->w->load->cfg.timeout_ms,
             lg_conn_connecting(&s->conn) ? "connecting" : "connected", s->conn.resp.got);
    lg_conn_close(&s->conn);
    on_failed(s, why, now);
}

/* Walks the slots: times out attempts, starts due requests and retries, and
 * sets w->scan_ns to the earliest time one of them has to act. */
static void scan(struct worker *w, int64_t now)
{
    int stopping = atomic_load_explicit(&w->load->stop, memory_order_relaxed) != 0;
    w->scan_ns = now + IDLE_WAKE_NS;
    for (int i = 0; i < w->nslots && !w->fail; i++) {
        struct slot *s = &w->slots[i];
        if (s->state == SLOT_BUSY)
            check_deadline(s, now);
        if (s->state == SLOT_RETRY) {
            if (stopping)
                complete_transport(s, "not retried: loadgen was stopped", now);
            else if (s->retry_ns <= now)
                send_request(s, now);
            else if (s->retry_ns < w->scan_ns)
                w->scan_ns = s->retry_ns;
        }
        if (s->state == SLOT_IDLE)
            start_idle(s, now);
    }
}

/* Hard stop or thread failure: in-flight requests become transport errors. */
static void abandon_all(struct worker *w, const char *why)
{
    int64_t now = lg_now_ns();
    for (int i = 0; i < w->nslots; i++) {
        struct slot *s = &w->slots[i];
        lg_conn_close(&s->conn);
        if (s->state == SLOT_BUSY || s->state == SLOT_RETRY)
            complete_transport(s, why, now);
        if (s->state != SLOT_DONE) {
            s->state = SLOT_DONE;
            w->nlive--;
        }
    }
}

/* Socket events: a finished request makes room for the next one on the same
 * slot at once, as wrk writes its next request from the read handler. */
static void on_events(struct worker *w, const lg_event *ev, int n)
{
    int64_t now = lg_now_ns();
    for (int i = 0; i < n; i++) {
        struct slot *s = ev[i].tag;
        int rc = lg_conn_event(&s->conn, ev[i].events);
        if (rc == LG_CONN_AGAIN || s->state != SLOT_BUSY)
            continue;
        if (rc == LG_CONN_DONE)
            on_answer(s, now);
        else
            on_failed(s, s->conn.why, now);
        if (s->state == SLOT_IDLE && !w->fail)
            start_idle(s, now);
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    lg_event ev[MAX_EVENTS];
    w->scan_ns = 0;
    while (w->nlive > 0 && !w->fail) {
        int64_t now = lg_now_ns();
        if (atomic_load(&w->load->stop) == 2) {
            abandon_all(w, "abandoned: loadgen was stopped");
            break;
        }
        if (now >= w->scan_ns)
            scan(w, now);
        if (w->nlive == 0 || w->fail)
            break;
        on_events(w, ev, lg_evloop_wait(w->loop, w->scan_ns, ev, MAX_EVENTS));
    }
    if (w->fail)
        abandon_all(w, "abandoned: loadgen thread failed");
    atomic_store(&w->finished, 1);
    return NULL;
}

/* Formats the slot's request head once: its target, the run's path. */
static int slot_init(struct slot *s, struct worker *w, int global, lg_err *err)
{
    const lg_load *l = w->load;
    s->w = w;
    s->target = global % l->cfg.ntargets;
    s->state = SLOT_IDLE;
    lg_conn_init(&s->conn, w->loop, &l->addrs[s->target], s, l->cfg.raw ? 0 : RESP_MAX, 0);
    /* someone else's service may not know a resend for the same purchase: loadgen
     * must not buy twice behind the profile's back (--retry only with {request}) */
    s->conn.no_resend = l->cfg.shape.api != NULL;
    const char *host = l->addrs[s->target].host;
    if (!l->cfg.raw && lg_shape_head_varies(&l->cfg.shape))
        return LG_OK; /* each request's own, in prepare */
    int n = l->cfg.raw ? lg_http_head(s->head, sizeof(s->head) - 24, "GET", req_path(&l->cfg),
                                      host, 0)
                       : lg_shape_head(&l->cfg.shape, NULL, NULL, host, s->head,
                                       sizeof(s->head) - 24);
    if (n < 0)
        return lg_errf(err, LG_ERR_USAGE, "the request head for %s%s is too long",
                       l->cfg.targets[s->target].url, req_path(&l->cfg));
    s->head_len = (size_t)n;
    return LG_OK;
}

static int worker_init(struct worker *w, lg_load *l, int id, lg_err *err)
{
    int C = l->cfg.concurrency, T = l->nworkers, ntargets = l->cfg.ntargets;
    int first = (int)((long long)id * C / T), end = (int)((long long)(id + 1) * C / T);
    w->load = l;
    w->id = id;
    w->rng = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)lg_now_ns() + (uint64_t)id * 7919);
    w->first = first;
    w->nslots = w->nlive = end - first;
    w->slots = calloc((size_t)w->nslots, sizeof(*w->slots));
    w->tally = calloc((size_t)ntargets, sizeof(*w->tally));
    if (!w->slots || !w->tally)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory setting up thread %d", id);
    int rc = lg_evloop_new(&w->loop, err);
    if (rc != LG_OK)
        return rc;
    for (int t = 0; t < ntargets; t++)
        if (lg_tally_init(&w->tally[t]) != LG_OK)
            return lg_errf(err, LG_ERR_NOMEM, "out of memory for histograms");
    for (int i = 0; rc == LG_OK && i < w->nslots; i++)
        rc = slot_init(&w->slots[i], w, first + i, err);
    return rc;
}

static void worker_free(struct worker *w)
{
    for (int i = 0; w->slots && i < w->nslots; i++)
        if (w->slots[i].w)
            lg_conn_free(&w->slots[i].conn);
    free(w->slots);
    lg_evloop_free(w->loop);
    for (int t = 0; w->tally && t < w->load->cfg.ntargets; t++)
        lg_tally_free(&w->tally[t]);
    free(w->tally);
    free(w->batch.recs);
    free(w->batch.lines);
    free(w->batch.sent_ns);
    free(w->batch.done_ns);
}

static void load_free(lg_load *l)
{
    for (int i = 0; l->workers && i < l->nworkers; i++)
        worker_free(&l->workers[i]);
    free(l->workers);
    free(l->addrs);
    free(l);
}

/* Starts the clock after the (slow) set-up; staggers the open-loop connections
 * evenly over one interval so the aggregate rate is smooth from the start. */
static void schedule(lg_load *l)
{
    l->start_ns = lg_now_ns();
    l->deadline_ns = l->cfg.duration_s > 0 ? l->start_ns + (int64_t)(l->cfg.duration_s * 1e9) : -1;
    for (int i = 0; i < l->nworkers; i++)
        for (int k = 0; k < l->workers[i].nslots; k++) {
            int global = l->workers[i].first + k;
            l->workers[i].slots[k].next_ns =
                l->start_ns + (l->cfg.rate > 0 ? (int64_t)(global * 1e9 / l->cfg.rate) : 0);
        }
}

static int check_cfg(const lg_load_cfg *c, lg_err *err)
{
    if (c->ntargets < 1 || c->concurrency < c->ntargets || c->threads < 1 ||
        c->threads > c->concurrency || (!c->raw && !lg_shape_valid(&c->shape)) ||
        (c->requests <= 0 && c->duration_s <= 0) ||
        strlen(c->run_id) > 32 || c->timeout_ms < 1)
        return lg_errf(err, LG_ERR_USAGE, "load: inconsistent configuration");
    return LG_OK;
}

/* Starts every worker thread; if one cannot start, stops and joins those
 * that did and returns LG_ERR_SYS. */
static int start_threads(lg_load *l, lg_err *err)
{
    int rc = LG_OK;
    for (int i = 0; rc == LG_OK && i < l->nworkers; i++) {
        int e = pthread_create(&l->workers[i].tid, NULL, worker_main, &l->workers[i]);
        if (e != 0) {
            rc = lg_errf(err, LG_ERR_SYS, "cannot start thread: %s", strerror(e));
            atomic_store(&l->stop, 2);
        } else {
            l->workers[i].started = 1;
        }
    }
    for (int i = 0; rc != LG_OK && i < l->nworkers; i++)
        if (l->workers[i].started)
            pthread_join(l->workers[i].tid, NULL);
    return rc;
}

int lg_load_start(const lg_load_cfg *cfg, lg_load **out, lg_err *err)
{
    *out = NULL;
    if (check_cfg(cfg, err) != LG_OK)
        return LG_ERR_USAGE;
    lg_load *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory");
    l->cfg = *cfg;
    snprintf(l->run_id, sizeof(l->run_id), "%s", cfg->run_id);
    l->cfg.run_id = l->run_id;
    l->nworkers = cfg->threads;
    l->interval_ns = cfg->rate > 0 ? (int64_t)(cfg->concurrency * 1e9 / cfg->rate) : 0;
    if (cfg->rate > 0 && l->interval_ns < 1)
        l->interval_ns = 1;
    l->timeout_ns = (int64_t)cfg->timeout_ms * 1000000LL;
    atomic_init(&l->tickets, 0);
    atomic_init(&l->stop, 0);
    l->workers = calloc((size_t)l->nworkers, sizeof(*l->workers));
    l->addrs = calloc((size_t)cfg->ntargets, sizeof(*l->addrs));
    if (l->workers == NULL || l->addrs == NULL) {
        load_free(l);
        return lg_errf(err, LG_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < l->nworkers; i++)
        l->workers[i].load = l;
    int rc = LG_OK;
    /* once, before the clock starts: a name lookup per connection would be wasted */
    for (int t = 0; rc == LG_OK && t < cfg->ntargets; t++)
        rc = lg_http_resolve(cfg->targets[t].url, &l->addrs[t], NULL, err);
    for (int i = 0; rc == LG_OK && i < l->nworkers; i++)
        rc = worker_init(&l->workers[i], l, i, err);
    if (rc == LG_OK)
        schedule(l);
    if (rc == LG_OK)
        rc = start_threads(l, err);
    if (rc != LG_OK) {
        load_free(l);
        return rc;
    }
    *out = l;
    return LG_OK;
}

int64_t lg_load_start_ns(const lg_load *l)
{
    return l->start_ns;
}

void lg_load_progress(lg_load *l, lg_progress *p)
{
    p->done = p->errors = 0;
    for (int i = 0; i < l->nworkers; i++) {
        p->done += atomic_load_explicit(&l->workers[i].done, memory_order_relaxed);
        p->errors += atomic_load_explicit(&l->workers[i].errors, memory_order_relaxed);
    }
    p->elapsed_s = (double)(lg_now_ns() - l->start_ns) / 1e9;
}

int lg_load_exhausted(lg_load *l)
{
    return exhausted(l, lg_now_ns());
}

int lg_load_finished(lg_load *l)
{
    for (int i = 0; i < l->nworkers; i++)
        if (!atomic_load(&l->workers[i].finished))
            return 0;
    return 1;
}

void lg_load_stop(lg_load *l, int hard)
{
    atomic_store(&l->stop, hard ? 2 : 1);
}

/* Moves a finished worker's counters and records into res. */
static void collect(lg_result *res, struct worker *w, int b, int64_t *last)
{
    for (int t = 0; t < res->ntargets; t++) {
        lg_tally_merge(&res->targets[t], &w->tally[t]);
        lg_tally_merge(&res->total, &w->tally[t]);
    }
    res->batches[b] = w->batch;
    memset(&w->batch, 0, sizeof(w->batch));
    for (int o = 0; o < LG_OUT_COUNT; o++)
        if (!res->example[o][0] && w->example[o][0])
            memcpy(res->example[o], w->example[o], sizeof(res->example[o]));
    if (w->last_ns > *last)
        *last = w->last_ns;
}

int lg_load_join(lg_load *l, lg_result *res, lg_err *err)
{
    memset(res, 0, sizeof(*res));
    for (int i = 0; i < l->nworkers; i++)
        pthread_join(l->workers[i].tid, NULL);
    snprintf(res->run_id, sizeof(res->run_id), "%s", l->run_id);
    res->ntargets = l->cfg.ntargets;
    res->nbatch = l->nworkers;
    res->targets = calloc((size_t)res->ntargets, sizeof(*res->targets));
    res->batches = calloc((size_t)res->nbatch, sizeof(*res->batches));
    int rc = res->targets && res->batches ? lg_tally_init(&res->total) : LG_ERR_NOMEM;
    for (int t = 0; rc == LG_OK && t < res->ntargets; t++)
        rc = lg_tally_init(&res->targets[t]);
    int64_t last = l->start_ns;
    for (int i = 0; rc == LG_OK && i < l->nworkers; i++)
        collect(res, &l->workers[i], i, &last);
    res->elapsed_s = (double)(last - l->start_ns) / 1e9;
    res->start_ns = l->start_ns;
    if (rc != LG_OK)
        lg_errf(err, rc, "out of memory merging results");
    for (int i = 0; rc == LG_OK && i < l->nworkers; i++)
        if (l->workers[i].fail)
            rc = lg_errf(err, l->workers[i].fail, "%s", l->workers[i].failmsg);
    load_free(l);
    return rc;
}

