/* buyers.c - a flash sale's buyers in one process: every connection made
 * first (each bound to its own 127.x.y.z), then every request written in one
 * sweep at the fire, then the answers read as they come, each timed from the
 * fire: a buyer who waited in a queue waited from the moment the sale opened. */
#include "loadgen/buyers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/conn.h"
#include "loadgen/evloop.h"

#define RESP_MAX 4096 /* stockd's answers are far smaller */
#define MAX_EVENTS 256
#define REQ_MAX (LG_HTTP_HEAD_MAX + 256)

enum { B_CONNECTING, B_CONNECTED, B_SENT, B_DONE };

typedef struct buyer {
    lg_conn conn;
    struct sockaddr_in src;
    int state;
    lg_buyer *out;
    lg_line line;
    char *req; /* head and body, made before the fire */
    size_t req_len;
} buyer;

typedef struct sale {
    const lg_buyers_cfg *cfg;
    lg_evloop *loop;
    buyer *b;
    int n, ninit;   /* buyers, those set up (their connection to free) */
    int pending;    /* those still connecting or waiting for an answer */
    int64_t fire_ns, last_ns; /* the fire; the last answer */
} sale;

/* The whole request of buyer i, made once: a POST of its one line. */
static int make_request(sale *s, buyer *by, int i, int g, const lg_http_addr *a)
{
    const lg_buyers_cfg *c = s->cfg;
    uint64_t rng = 0x9e3779b97f4a7c15ULL + (uint64_t)g;
    lg_shape_draw(c->shape, g, &rng, &by->line);
    char rid[64], body[LG_BODY_MAX], head[LG_HTTP_HEAD_MAX];
    snprintf(rid, sizeof(rid), "%s-%d-%d", c->run_id, c->batch, i);
    int blen = lg_shape_body(c->shape, &by->line, 1, rid, body, sizeof(body));
    int hlen = lg_http_head(head, sizeof(head) - 24, "POST", lg_shape_path(c->shape), a->host, 1);
    if (blen < 0 || hlen < 0)
        return LG_ERR_USAGE;
    hlen += (int)lg_http_head_end(head + hlen, (size_t)blen);
    by->req = malloc((size_t)hlen + (size_t)blen);
    if (by->req == NULL)
        return LG_ERR_NOMEM;
    memcpy(by->req, head, (size_t)hlen);
    memcpy(by->req + hlen, body, (size_t)blen);
    by->req_len = (size_t)hlen + (size_t)blen;
    return LG_OK;
}

/* A buyer's end: its fate, and the answer's status and outcome when there is one. */
static void finish(sale *s, buyer *by, int fate, int64_t now)
{
    lg_buyer *o = by->out;
    o->fate = (uint8_t)fate;
    o->outcome = LG_OUT_TRANSPORT;
    o->remaining = -1;
    if (fate == LG_BUYER_ANSWERED) {
        const lg_http_resp *r = &by->conn.resp;
        lg_answer a;
        lg_shape_answer(s->cfg->shape, r->status, r->body, r->len, &by->line, 1, &a);
        o->outcome = (uint8_t)a.outcome;
        o->status = (uint16_t)r->status;
        o->remaining = by->line.remaining;
        o->latency_us = (uint32_t)((now - s->fire_ns) / 1000);
        s->last_ns = now;
    }
    lg_conn_close(&by->conn);
    by->state = B_DONE;
    s->pending--;
}

/* Moves a buyer on after its connection reported rc. */
static void step(sale *s, buyer *by, int rc, int64_t now)
{
    if (rc == LG_CONN_AGAIN)
        return;
    if (by->state == B_CONNECTING) {
        if (rc == LG_CONN_DONE) {
            by->state = B_CONNECTED;
            s->pending--;
        } else {
            finish(s, by, LG_BUYER_CONNECT_FAILED, now);
        }
        return;
    }
    finish(s, by, rc == LG_CONN_DONE ? LG_BUYER_ANSWERED : LG_BUYER_UNANSWERED, now);
}

/* Runs the loop until nothing is pending or until (ns); what is still
 * pending then ends as late. */
static void run_until(sale *s, int64_t until, int late)
{
    lg_event ev[MAX_EVENTS];
    while (s->pending > 0 && lg_now_ns() < until) {
        int n = lg_evloop_wait(s->loop, until, ev, MAX_EVENTS);
        int64_t now = lg_now_ns();
        for (int i = 0; i < n; i++) {
            buyer *by = ev[i].tag;
            if (by->state == B_CONNECTING || by->state == B_SENT)
                step(s, by, lg_conn_event(&by->conn, ev[i].events), now);
        }
    }
    for (int i = 0; i < s->n; i++)
        if (s->b[i].state == (late == LG_BUYER_CONNECT_FAILED ? B_CONNECTING : B_SENT)) {
            snprintf(s->b[i].conn.why, sizeof(s->b[i].conn.why), "timed out");
            finish(s, &s->b[i], late, lg_now_ns());
        }
}

/* Sets every buyer up and starts its connection. */
static int connect_all(sale *s, const lg_sale_part *part, lg_buyer *out)
{
    const lg_buyers_cfg *c = s->cfg;
    for (int i = 0; i < s->n; i++) {
        buyer *by = &s->b[i];
        int g = part->first + i;
        const lg_http_addr *a = &c->addrs[lg_sale_target(g, c->ntargets)];
        by->out = &out[i];
        memset(by->out, 0, sizeof(*by->out));
        lg_conn_init(&by->conn, s->loop, a, by, RESP_MAX, 0);
        s->ninit++;
        lg_sale_src(g, &by->src);
        lg_conn_bind(&by->conn, (const struct sockaddr *)&by->src, sizeof(by->src));
        int rc = make_request(s, by, i, g, a);
        if (rc != LG_OK)
            return rc;
    }
    s->pending = s->n;
    for (int i = 0; i < s->n; i++)
        step(s, &s->b[i], lg_conn_open(&s->b[i].conn), lg_now_ns());
    return LG_OK;
}

/* Writes every connected buyer's request, as close together as one loop can. */
static void fire(sale *s)
{
    s->fire_ns = lg_now_ns();
    for (int i = 0; i < s->n; i++) {
        buyer *by = &s->b[i];
        if (by->state != B_CONNECTED)
            continue;
        by->state = B_SENT;
        s->pending++;
        struct iovec iov = {by->req, by->req_len};
        step(s, by, lg_conn_send(&by->conn, &iov, 1), s->fire_ns);
    }
}

static void sale_free(sale *s)
{
    for (int i = 0; s->b && i < s->ninit; i++) {
        lg_conn_free(&s->b[i].conn);
        free(s->b[i].req);
    }
    free(s->b);
    lg_evloop_free(s->loop);
}

int lg_buyers_run(const lg_buyers_cfg *c, lg_sale_part *part, lg_buyer *buyers, lg_err *err)
{
    sale s = {.cfg = c, .n = part->n};
    s.b = calloc((size_t)(s.n ? s.n : 1), sizeof(*s.b));
    if (s.b == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory for %d buyers", s.n);
    int rc = lg_evloop_new(&s.loop, err);
    if (rc == LG_OK && (rc = connect_all(&s, part, buyers)) != LG_OK)
        lg_errf(err, rc, rc == LG_ERR_NOMEM ? "out of memory for the buyers' requests"
                                             : "a buyer's request outgrew its buffer");
    int64_t timeout = (int64_t)c->timeout_ms * 1000000;
    if (rc == LG_OK)
        run_until(&s, lg_now_ns() + timeout, LG_BUYER_CONNECT_FAILED);
    int connected = 0;
    for (int i = 0; rc == LG_OK && i < s.n; i++)
        connected += s.b[i].state == B_CONNECTED;
    if (rc == LG_OK && c->ready && c->ready(c->arg, connected) != 0)
        rc = lg_errf(err, LG_ERR_SYS, "the sale was called off before the fire");
    if (rc == LG_OK) {
        fire(&s);
        part->fire_ns = s.fire_ns;
        run_until(&s, s.fire_ns + timeout, LG_BUYER_TIMED_OUT);
        part->last_ns = s.last_ns ? s.last_ns : s.fire_ns;
    }
    sale_free(&s);
    return rc;
}
