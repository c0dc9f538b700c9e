/* reserve.c - a reserve run's buyers on one event loop: each slot carries one
 * buyer at a time through its reservation and its confirm or cancel, with a
 * deadline on every attempt and the retries on the slot's other replica. */
#include "loadgen/reserve.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/answer.h"
#include "loadgen/conn.h"
#include "loadgen/evloop.h"
#include "loadgen/http.h"

#define RESP_MAX 16384
#define MAX_EVENTS 256
#define IDLE_WAKE_NS 50000000LL
#define TICK_NS 250000000LL /* how often the caller's tick is asked */
#define BODY_MAX 512
#define REQ_MAX (LG_HTTP_HEAD_MAX + BODY_MAX)

enum job { JOB_NONE, JOB_RESERVE, JOB_STEP, JOB_READ };

struct slot;

/* What an event's tag points at: a slot and which of its two connections. */
struct cref {
    struct slot *s;
    int i;
};

struct slot {
    struct engine *e;
    lg_conn conn[2];
    struct cref ref[2];
    int target[2];
    int job;             /* enum job in flight or due, JOB_NONE when free */
    int which;           /* the connection of the attempt in flight */
    int attempt;
    int busy;
    long long k;         /* the record */
    int64_t due_ns;      /* not before (the rate's schedule, a retry's pause) */
    int64_t deadline_ns; /* the attempt in flight times out */
    int64_t origin_ns;   /* latency counts from here */
    char req[REQ_MAX];
    size_t req_len;
};

typedef struct engine {
    const lg_reserve_cfg *c;
    lg_rsv *r;
    lg_result *res;      /* NULL while reading back */
    lg_http_addr *addrs;
    lg_evloop *loop;
    struct slot *slots;
    int nslots, live;
    long long next;      /* the next record to take */
    int64_t last_ns;
    long long done, errors; /* requests with a final outcome; of which not ok */
    int stop;            /* what the tick asked: 0, 1 no new buyers, 2 abandon */
} engine;

int lg_reserve_plan(const int share[3], long long k)
{
    int p = (int)((k * 37) % 100); /* 37 is prime to 100: a block of 100 takes each p once */
    return p < share[0] ? LG_RSV_CONFIRM : p < share[0] + share[1] ? LG_RSV_CANCEL
                                                                    : LG_RSV_LAPSE;
}

static int64_t since(const engine *e, int64_t now)
{
    return now - e->c->start_ns;
}

/* The request of the slot's job, for its connection which. */
static int build(struct slot *s)
{
    const lg_reserve_cfg *c = s->e->c;
    lg_rsv *r = &s->e->r[s->k];
    char path[96], body[BODY_MAX];
    const char *method = "POST";
    int blen = 0;
    if (s->job == JOB_RESERVE) {
        snprintf(path, sizeof(path), "/reservations");
        blen = snprintf(body, sizeof(body), "{\"lines\":[{\"itemId\":%lld,\"quantity\":%d}],"
                        "\"holdMs\":%d,\"requestId\":\"%s-r%lld\",\"buyerId\":\"%s-b%d\"}",
                        c->item_id, r->quantity, c->hold_ms, c->run_id, s->k, c->run_id, r->buyer);
    } else if (s->job == JOB_STEP) {
        snprintf(path, sizeof(path), "/reservations/%lld/%s", r->id,
                 r->plan == LG_RSV_CONFIRM ? "confirm" : "cancel");
        blen = snprintf(body, sizeof(body), "{}");
    } else {
        snprintf(path, sizeof(path), "/reservations/%lld", r->id);
        method = "GET";
    }
    const lg_http_addr *a = &s->e->addrs[s->target[s->which]];
    int hlen = lg_http_head(s->req, sizeof(s->req) - BODY_MAX - 24, method, path, a->host,
                            s->job != JOB_READ);
    if (hlen < 0 || blen < 0 || blen >= (int)sizeof(body))
        return LG_ERR_USAGE;
    if (s->job != JOB_READ)
        hlen += (int)lg_http_head_end(s->req + hlen, (size_t)blen);
    memcpy(s->req + hlen, body, (size_t)blen);
    s->req_len = (size_t)hlen + (size_t)blen;
    return LG_OK;
}

static void send_attempt(struct slot *s, int64_t now);

/* Takes the slot's next record, or frees the slot for good. */
static void next_job(struct slot *s, int64_t now)
{
    engine *e = s->e;
    s->job = JOB_NONE;
    s->attempt = 0;
    s->busy = 0;
    if (e->res == NULL)
        while (e->next < e->c->buyers && e->r[e->next].id <= 0)
            e->next++;
    if (e->next >= e->c->buyers) {
        e->live--;
        return;
    }
    s->k = e->next++;
    s->job = e->res ? JOB_RESERVE : JOB_READ;
    s->due_ns = now;
    if (e->res && e->c->rate > 0)
        s->due_ns = e->c->start_ns + (int64_t)((double)s->k / e->c->rate * 1e9);
    if (s->due_ns <= now)
        send_attempt(s, now);
}

/* A step's first attempt goes to the slot's second replica, retries alternate. */
static void send_attempt(struct slot *s, int64_t now)
{
    lg_rsv *r = &s->e->r[s->k];
    s->which = ((s->job == JOB_STEP) + s->attempt) & 1;
    if (build(s) != LG_OK) { /* cannot happen with the bounded fields; never hang on it */
        s->busy = 0;
        next_job(s, now);
        return;
    }
    if (s->job == JOB_RESERVE && s->attempt == 0)
        r->sent_ns = since(s->e, now);
    s->busy = 1;
    if (s->attempt == 0) /* from the intended send (--rate), retries included, as load.c */
        s->origin_ns = s->job == JOB_RESERVE && s->due_ns < now ? s->due_ns : now;
    s->deadline_ns = now + (int64_t)s->e->c->timeout_ms * 1000000;
    struct iovec iov = {s->req, s->req_len};
    if (lg_conn_send(&s->conn[s->which], &iov, 1) == LG_CONN_ERROR)
        s->deadline_ns = now; /* no connection: the next scan fails the attempt */
}

static void tally(struct slot *s, int outcome, int64_t now)
{
    engine *e = s->e;
    if (e->res == NULL)
        return;
    lg_tally_record(&e->res->targets[s->target[s->which]], outcome,
                    (uint64_t)(now - s->origin_ns) / 1000, since(e, now));
    e->last_ns = now;
    e->done++;
    e->errors += outcome != LG_OUT_OK;
}

/* Gives up on the attempt in flight: another attempt on the other connection,
 * or the step's fate stays unknown. */
static void failed(struct slot *s, int64_t now)
{
    lg_conn_close(&s->conn[s->which]);
    s->busy = 0;
    if (s->attempt < s->e->c->retries) {
        if (s->e->res)
            s->e->res->targets[s->target[s->which]].retries++;
        s->attempt++;
        s->due_ns = now + 50000000LL; /* a pause, so a dead replica is not hammered */
        return;
    }
    lg_rsv *r = &s->e->r[s->k];
    if (s->job == JOB_RESERVE)
        r->reserve = LG_STEP_UNKNOWN, r->outcome = LG_OUT_TRANSPORT;
    else if (s->job == JOB_STEP)
        r->step = LG_STEP_UNKNOWN;
    tally(s, LG_OUT_TRANSPORT, now);
    next_job(s, now);
}

static long long int_of(const json_t *o, const char *key)
{
    const json_t *j = json_object_get(o, key);
    return json_is_integer(j) ? (long long)json_integer_value(j) : 0;
}

/* A reservation as POST /reservations or GET /reservations/{id} answers it. */
static int read_reservation(lg_rsv *r, const json_t *root)
{
    const char *exp = json_string_value(json_object_get(root, "expiresAt"));
    const char *state = json_string_value(json_object_get(root, "state"));
    long long id = int_of(root, "reservationId");
    if (id <= 0 || exp == NULL || state == NULL)
        return -1;
    r->id = id;
    r->expires_ms = lg_rsv_parse_time(exp);
    r->state = (uint8_t)lg_rsv_state_of(state);
    r->order_id = int_of(root, "orderId");
    return 0;
}

/* The answer is in: what it says of the record, and the slot's next job. */
static void answered(struct slot *s, int64_t now)
{
    const lg_http_resp *h = &s->conn[s->which].resp;
    lg_rsv *r = &s->e->r[s->k];
    json_t *root = h->body ? json_loadb(h->body, h->len, 0, NULL) : NULL;
    int ok2xx = h->status >= 200 && h->status < 300 && json_is_object(root);
    lg_answer a;
    lg_answer_parse(h->status, h->body, h->len, &a);
    if (ok2xx)
        a.outcome = LG_OUT_OK;
    if (s->job == JOB_READ) { /* a 404 is an answer; anything else but a 200 is asked again */
        int got = h->status == 404 ? 0 : ok2xx ? read_reservation(r, root) : -1;
        json_decref(root);
        if (got != 0) {
            r->state = LG_RSV_UNREAD;
            failed(s, now);
            return;
        }
        if (h->status == 404)
            r->state = LG_RSV_MISSING;
        next_job(s, now);
        return;
    }
    if (ok2xx && s->job == JOB_RESERVE && read_reservation(r, root) != 0)
        a.outcome = LG_OUT_MALFORMED;
    json_decref(root);
    if (LG_OUT_UNDETERMINED(a.outcome)) { /* a retry, as for a lost answer */
        failed(s, now);
        return;
    }
    tally(s, a.outcome, now);
    s->busy = 0;
    uint8_t step = a.outcome == LG_OUT_OK ? LG_STEP_OK : LG_STEP_REFUSED;
    if (step == LG_STEP_REFUSED)
        snprintf(r->code, sizeof(r->code), "%s", a.code);
    if (s->job == JOB_STEP) {
        r->step = step;
        r->step_ns = since(s->e, now);
        next_job(s, now);
        return;
    }
    r->reserve = step;
    r->outcome = (uint8_t)a.outcome;
    r->held_ns = since(s->e, now);
    r->state = LG_RSV_UNREAD; /* read back at the end */
    if (step != LG_STEP_OK || r->plan == LG_RSV_LAPSE) {
        next_job(s, now);
        return;
    }
    s->job = JOB_STEP;
    s->attempt = 0;
    send_attempt(s, now);
}

/* Deadlines, scheduled sends and retries; the next time a slot needs a look. */
static int64_t scan(engine *e, int64_t now)
{
    int64_t wake = now + IDLE_WAKE_NS;
    for (int i = 0; i < e->nslots; i++) {
        struct slot *s = &e->slots[i];
        if (s->job == JOB_NONE)
            continue;
        if (s->busy && now >= s->deadline_ns)
            failed(s, now);
        else if (!s->busy && now >= s->due_ns)
            send_attempt(s, now);
        if (s->job == JOB_NONE)
            continue;
        int64_t t = s->busy ? s->deadline_ns : s->due_ns;
        if (t < wake)
            wake = t;
    }
    return wake;
}

static void on_event(const lg_event *ev, int64_t now)
{
    struct cref *ref = ev->tag;
    struct slot *s = ref->s;
    if (!s->busy || ref->i != s->which) {
        lg_conn_event(&s->conn[ref->i], ev->events); /* closes an idle one the server closed */
        return;
    }
    int st = lg_conn_event(&s->conn[s->which], ev->events);
    if (st == LG_CONN_DONE)
        answered(s, now);
    else if (st == LG_CONN_ERROR)
        failed(s, now);
}

/* Every step under way given up: it may or may not have happened. */
static void abandon(engine *e)
{
    for (int i = 0; i < e->nslots; i++) {
        struct slot *s = &e->slots[i];
        if (s->job == JOB_RESERVE && (s->busy || s->attempt > 0))
            e->r[s->k].reserve = LG_STEP_UNKNOWN, e->r[s->k].outcome = LG_OUT_TRANSPORT;
        else if (s->job == JOB_STEP)
            e->r[s->k].step = LG_STEP_UNKNOWN;
        s->job = JOB_NONE;
        lg_conn_close(&s->conn[0]);
        lg_conn_close(&s->conn[1]);
    }
    e->live = 0;
}

/* Asks the caller's tick whether to go on. */
static void ask(engine *e, int64_t now, int64_t *tick_ns)
{
    const lg_reserve_cfg *c = e->c;
    if (c->tick == NULL || now < *tick_ns)
        return;
    *tick_ns = now + TICK_NS;
    int want = c->tick(e->done, e->errors, c->tick_arg);
    if (want <= e->stop)
        return;
    e->stop = want;
    e->next = c->buyers; /* no new buyer; a reservation held still gets its step */
    if (want >= 2)
        abandon(e);
}

static int drive(engine *e)
{
    lg_event ev[MAX_EVENTS];
    int64_t now = lg_now_ns(), tick_ns = now + TICK_NS;
    for (int i = 0; i < e->nslots; i++)
        next_job(&e->slots[i], now);
    while (e->live > 0) {
        int64_t wake = scan(e, lg_now_ns());
        if (e->live == 0)
            break;
        if (e->c->tick && wake > tick_ns)
            wake = tick_ns;
        int n = lg_evloop_wait(e->loop, wake, ev, MAX_EVENTS);
        now = lg_now_ns();
        for (int i = 0; i < n; i++)
            on_event(&ev[i], now);
        if (e->res)
            ask(e, now, &tick_ns);
    }
    return LG_OK;
}

static void engine_free(engine *e)
{
    for (int i = 0; e->slots && i < e->nslots; i++)
        for (int j = 0; j < 2; j++)
            lg_conn_free(&e->slots[i].conn[j]);
    free(e->slots);
    free(e->addrs);
    lg_evloop_free(e->loop);
}

static int engine_init(engine *e, const lg_reserve_cfg *c, lg_rsv *r, lg_result *res,
                       lg_err *err)
{
    memset(e, 0, sizeof(*e));
    e->c = c, e->r = r, e->res = res;
    e->nslots = e->live = c->concurrency;
    e->addrs = calloc((size_t)c->ntargets, sizeof(*e->addrs));
    e->slots = calloc((size_t)c->concurrency, sizeof(*e->slots));
    if (e->addrs == NULL || e->slots == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory for %d connections", c->concurrency);
    for (int t = 0; t < c->ntargets; t++) {
        int rc = lg_http_resolve(c->targets[t].url, &e->addrs[t], NULL, err);
        if (rc != LG_OK)
            return rc;
    }
    int rc = lg_evloop_new(&e->loop, err);
    for (int i = 0; rc == LG_OK && i < e->nslots; i++) {
        struct slot *s = &e->slots[i];
        s->e = e;
        for (int j = 0; j < 2; j++) {
            s->target[j] = (i + j) % c->ntargets;
            s->ref[j] = (struct cref){s, j};
            lg_conn_init(&s->conn[j], e->loop, &e->addrs[s->target[j]], &s->ref[j], RESP_MAX, 0);
        }
    }
    return rc;
}

/* Each buyer's plan, buyerId and quantity, fixed by its index. */
static void plan_all(const lg_reserve_cfg *c, lg_rsv *r)
{
    memset(r, 0, (size_t)c->buyers * sizeof(*r));
    for (long long k = 0; k < c->buyers; k++) {
        uint64_t x = 0x9e3779b97f4a7c15ULL * (uint64_t)(k + 1);
        x ^= x >> 31;
        r[k].plan = (uint8_t)lg_reserve_plan(c->share, k);
        r[k].buyer = c->buyer_ids ? (int)(k % c->buyer_ids) : (int)k;
        r[k].quantity = c->qmin + (int)(x % (uint64_t)(c->qmax - c->qmin + 1));
    }
}

int lg_reserve_run(const lg_reserve_cfg *c, lg_rsv *r, lg_result *res, int *stopped,
                   lg_err *err)
{
    plan_all(c, r);
    int rc = lg_tally_init(&res->total);
    res->ntargets = c->ntargets;
    res->targets = calloc((size_t)c->ntargets, sizeof(*res->targets));
    snprintf(res->run_id, sizeof(res->run_id), "%s", c->run_id);
    if (res->targets == NULL)
        rc = LG_ERR_NOMEM;
    for (int t = 0; rc == LG_OK && t < c->ntargets; t++)
        rc = lg_tally_init(&res->targets[t]);
    if (rc != LG_OK)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory");
    engine e;
    rc = engine_init(&e, c, r, res, err);
    res->start_ns = c->start_ns;
    if (rc == LG_OK)
        rc = drive(&e);
    *stopped = e.stop > 0;
    engine_free(&e);
    res->elapsed_s = e.last_ns > res->start_ns ? (double)(e.last_ns - res->start_ns) / 1e9 : 0;
    for (int t = 0; t < c->ntargets; t++)
        lg_tally_merge(&res->total, &res->targets[t]);
    return rc;
}

int lg_reserve_read(const lg_reserve_cfg *c, lg_rsv *r, lg_err *err)
{
    engine e;
    int rc = engine_init(&e, c, r, NULL, err);
    if (rc == LG_OK)
        rc = drive(&e);
    engine_free(&e);
    return rc;
}
