/* history.c - the history check of history.h: per-bucket sums of the units
 * invoked and acknowledged, their prefix sums, and one pass over the reads;
 * the sales after sold-out through a suffix maximum of the reads and a prefix
 * minimum of the sold-out quantities. */
#include "loadgen/history.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/err.h"

int lg_reads_add(lg_reads *rs, const lg_read *x)
{
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 1024;
        lg_read *grown = realloc(rs->r, cap * sizeof(*grown));
        if (grown == NULL) {
            rs->failed++;
            return LG_ERR_NOMEM;
        }
        rs->r = grown;
        rs->cap = cap;
    }
    rs->r[rs->n++] = *x;
    return LG_OK;
}

void lg_reads_free(lg_reads *rs)
{
    free(rs->r);
    memset(rs, 0, sizeof(*rs));
}

void lg_history_free(lg_history *h)
{
    free(h->lo);
    free(h->hi);
    h->lo = h->hi = NULL;
}

/* The working state of one check: the buckets and the walk over records. */
typedef struct walk {
    const lg_history_in *in;
    int64_t bucket_ns;
    size_t nb;
    long long *inv, *ack; /* per bucket, then prefix sums */
    long long *rmax;      /* highest read begun in the bucket, then from it on */
    long long *somin;     /* least quantity sold out there, stock never back; then up to it */
} walk;

static size_t bucket_of(const walk *w, int64_t t)
{
    if (t < 0)
        return 0;
    size_t b = (size_t)(t / w->bucket_ns);
    return b < w->nb ? b : w->nb - 1;
}

/* The units of the item's lines in record r of batch b, and (for a sold-out
 * answer) whether it named one of them short: a single line always is; a
 * cart's answer names the short lines by their claimed remaining. */
static long long units_of(const walk *w, const lg_batch *b, const lg_rec *r, int *short_line)
{
    long long u = 0;
    const lg_line *ln = lg_rec_lines(b, r);
    *short_line = 0;
    for (int k = 0; k < r->nlines; k++)
        if ((int)ln[k].item == w->in->item) {
            u += ln[k].quantity;
            *short_line |= r->nlines == 1 || ln[k].remaining >= 0;
        }
    return u;
}

static void name_request(char *buf, const char *run_id, int b, size_t i)
{
    snprintf(buf, LG_ORDER_EXAMPLE_MAX, "%s-%d-%zu", run_id ? run_id : "", b, i);
}

/* The span the buckets must cover: every time a record or read has. */
static int64_t horizon(const lg_history_in *in)
{
    int64_t end = 0;
    for (int b = 0; b < in->nbatch; b++)
        for (size_t i = 0; i < in->batches[b].nrecs; i++) {
            if (in->batches[b].sent_ns[i] > end)
                end = in->batches[b].sent_ns[i];
            if (in->batches[b].done_ns[i] > end)
                end = in->batches[b].done_ns[i];
        }
    for (size_t i = 0; i < in->nreads; i++)
        if (in->reads[i].t1_ns > end)
            end = in->reads[i].t1_ns;
    return end;
}

static int alloc_walk(walk *w, const lg_history_in *in)
{
    memset(w, 0, sizeof(*w));
    w->in = in;
    w->bucket_ns = in->bucket_ns > 0 ? in->bucket_ns : LG_HISTORY_BUCKET_NS;
    int64_t end = horizon(in);
    while (end / w->bucket_ns + 1 > LG_HISTORY_BUCKETS_MAX)
        w->bucket_ns *= 2;
    w->nb = (size_t)(end / w->bucket_ns) + 1;
    w->inv = calloc(w->nb, sizeof(*w->inv));
    w->ack = calloc(w->nb, sizeof(*w->ack));
    w->rmax = malloc(w->nb * sizeof(*w->rmax));
    w->somin = malloc(w->nb * sizeof(*w->somin));
    if (!w->inv || !w->ack || !w->rmax || !w->somin)
        return LG_ERR_NOMEM;
    for (size_t b = 0; b < w->nb; b++) {
        w->rmax[b] = LLONG_MIN;
        w->somin[b] = LLONG_MAX;
    }
    return LG_OK;
}

static void free_walk(walk *w)
{
    free(w->inv);
    free(w->ack);
    free(w->rmax);
    free(w->somin);
}

/* Units invoked and acknowledged per bucket, then summed up to each. */
static void sum_requests(walk *w)
{
    const lg_history_in *in = w->in;
    for (int b = 0; b < in->nbatch; b++) {
        const lg_batch *bt = &in->batches[b];
        for (size_t i = 0; i < bt->nrecs; i++) {
            int sh;
            long long u = units_of(w, bt, &bt->recs[i], &sh);
            if (u == 0)
                continue;
            w->inv[bucket_of(w, bt->sent_ns[i])] += u;
            if (bt->recs[i].outcome == LG_OUT_OK)
                w->ack[bucket_of(w, bt->done_ns[i])] += u;
        }
    }
    for (size_t b = 1; b < w->nb; b++) {
        w->inv[b] += w->inv[b - 1];
        w->ack[b] += w->ack[b - 1];
    }
}

/* The band of a read, rounded outward to whole buckets. */
static void band_of(const walk *w, const lg_read *r, long long *lo, long long *hi)
{
    size_t b0 = bucket_of(w, r->t0_ns), b1 = bucket_of(w, r->t1_ns);
    *lo = w->in->initial - w->inv[b1];
    *hi = w->in->initial - (b0 > 0 ? w->ack[b0 - 1] : 0);
}

/* The last acknowledged request whose answer came before bucket b0 (the
 * latest deduction a stale read misses), or the last one invoked up to bucket
 * b1 included (the latest an impossible read could reflect). */
static void bounding(const walk *w, int acked, size_t bound, lg_history_example *ex)
{
    const lg_history_in *in = w->in;
    int64_t best = -1;
    for (int b = 0; b < in->nbatch; b++) {
        const lg_batch *bt = &in->batches[b];
        for (size_t i = 0; i < bt->nrecs; i++) {
            int sh;
            if (units_of(w, bt, &bt->recs[i], &sh) == 0)
                continue;
            int64_t t = acked ? bt->done_ns[i] : bt->sent_ns[i];
            size_t k = bucket_of(w, t);
            int in_bound = acked ? bt->recs[i].outcome == LG_OUT_OK && k < bound : k <= bound;
            if (in_bound && t > best) {
                best = t;
                name_request(ex->request, in->run_id, b, i);
                ex->sent_ns = bt->sent_ns[i];
                ex->done_ns = bt->done_ns[i];
            }
        }
    }
}

static void check_reads(walk *w, lg_history *h)
{
    const lg_history_in *in = w->in;
    for (size_t i = 0; i < in->nreads; i++) {
        const lg_read *r = &in->reads[i];
        long long lo, hi;
        band_of(w, r, &lo, &hi);
        h->lo[i] = lo;
        h->hi[i] = hi;
        size_t b0 = bucket_of(w, r->t0_ns);
        if (r->stock > w->rmax[b0])
            w->rmax[b0] = r->stock;
        lg_history_example x = {*r, lo, hi, "", 0, 0};
        if (r->stock > hi) {
            if (h->stale_n++ == 0 || r->stock - hi > h->stale_worst) {
                h->stale_worst = r->stock - hi;
                h->stale = x;
            }
        } else if (r->stock < lo) {
            if (h->impossible_n++ == 0 || lo - r->stock > h->impossible_worst) {
                h->impossible_worst = lo - r->stock;
                h->impossible = x;
            }
        }
    }
    if (h->stale_n)
        bounding(w, 1, bucket_of(w, h->stale.read.t0_ns), &h->stale);
    if (h->impossible_n)
        bounding(w, 0, bucket_of(w, h->impossible.read.t1_ns), &h->impossible);
}

/* A sold-out answer for the item's line, and its quantity; 0 when r is not one. */
static long long sold_out_qty(const walk *w, const lg_batch *bt, const lg_rec *r)
{
    int sh;
    long long u = units_of(w, bt, r, &sh);
    return r->outcome == LG_OUT_INSUFFICIENT && sh ? u : 0;
}

/* Whether a read begun in the sold-out's bucket or later showed q back. */
static int came_back(const walk *w, int64_t done_ns, long long q)
{
    return w->rmax[bucket_of(w, done_ns)] >= q;
}

static void check_sales(walk *w, lg_history *h)
{
    const lg_history_in *in = w->in;
    for (size_t b = w->nb - 1; b > 0; b--) /* the highest read from each bucket on */
        if (w->rmax[b] > w->rmax[b - 1])
            w->rmax[b - 1] = w->rmax[b];
    for (int b = 0; b < in->nbatch; b++) {
        const lg_batch *bt = &in->batches[b];
        for (size_t i = 0; i < bt->nrecs; i++) {
            long long q = sold_out_qty(w, bt, &bt->recs[i]);
            size_t k = bucket_of(w, bt->done_ns[i]);
            if (q > 0 && !came_back(w, bt->done_ns[i], q) && q < w->somin[k])
                w->somin[k] = q;
        }
    }
    for (size_t b = 1; b < w->nb; b++)
        if (w->somin[b - 1] < w->somin[b])
            w->somin[b] = w->somin[b - 1];
    int64_t first = INT64_MAX;
    int fb = 0;
    size_t fi = 0;
    for (int b = 0; b < in->nbatch; b++) {
        const lg_batch *bt = &in->batches[b];
        for (size_t i = 0; i < bt->nrecs; i++) {
            int sh;
            long long u = units_of(w, bt, &bt->recs[i], &sh);
            size_t k = bucket_of(w, bt->sent_ns[i]);
            if (u == 0 || bt->recs[i].outcome != LG_OUT_OK || k == 0 || w->somin[k - 1] > u)
                continue;
            h->sold_after_n++;
            h->sold_after_units += u;
            if (bt->sent_ns[i] < first)
                first = bt->sent_ns[i], fb = b, fi = i;
        }
    }
    if (h->sold_after_n == 0)
        return;
    const lg_batch *ob = &in->batches[fb];
    lg_history_sale *s = &h->sale;
    int sh;
    s->ok_qty = units_of(w, ob, &ob->recs[fi], &sh);
    s->ok_sent_ns = first;
    name_request(s->ok, in->run_id, fb, fi);
    size_t k = bucket_of(w, first);
    int64_t best = INT64_MAX;
    for (int b = 0; b < in->nbatch; b++) { /* the earliest sold-out it went past */
        const lg_batch *bt = &in->batches[b];
        for (size_t i = 0; i < bt->nrecs; i++) {
            long long q = sold_out_qty(w, bt, &bt->recs[i]);
            int64_t d = bt->done_ns[i];
            if (q > 0 && q <= s->ok_qty && bucket_of(w, d) < k && !came_back(w, d, q) &&
                d < best) {
                best = d;
                s->sold_out_qty = q;
                s->sold_out_done_ns = d;
                name_request(s->sold_out, in->run_id, b, i);
            }
        }
    }
}

static void skip(lg_history *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->skipped, sizeof(h->skipped), fmt, ap);
    va_end(ap);
}

int lg_history_check(const lg_history_in *in, lg_history *out)
{
    memset(out, 0, sizeof(*out));
    out->id = in->id;
    out->reads = in->nreads;
    out->failed = in->failed;
    out->interval_ms = in->interval_ms;
    out->initial = in->initial;
    int timed = in->nbatch > 0;
    for (int b = 0; b < in->nbatch; b++)
        timed &= in->batches[b].nrecs == 0 || in->batches[b].sent_ns != NULL;
    if (in->skip) {
        skip(out, "%s", in->skip);
        return LG_OK;
    }
    if (!timed) {
        skip(out, "the run kept no request times");
        return LG_OK;
    }
    if (in->nreads == 0) {
        skip(out, "no read of the item answered while the load ran (%lld failed)", in->failed);
        return LG_OK;
    }
    walk w;
    out->lo = malloc(in->nreads * sizeof(*out->lo));
    out->hi = malloc(in->nreads * sizeof(*out->hi));
    if (alloc_walk(&w, in) != LG_OK || out->lo == NULL || out->hi == NULL) {
        free_walk(&w);
        lg_history_free(out);
        return LG_ERR_NOMEM;
    }
    out->bucket_ns = w.bucket_ns;
    out->reads_at = in->reads;
    sum_requests(&w);
    check_reads(&w, out);
    check_sales(&w, out);
    free_walk(&w);
    out->checked = 1;
    return LG_OK;
}

static double ms(int64_t ns)
{
    return (double)ns / 1e6;
}

static int add(lg_finding *out, int n, int max, int kind, long long amount, const char *fmt, ...)
{
    if (n >= max)
        return n;
    out[n].kind = kind;
    out[n].violation = 1;
    out[n].amount = amount;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out[n].text, sizeof(out[n].text), fmt, ap);
    va_end(ap);
    return n + 1;
}

int lg_history_judge(const lg_history *h, lg_finding *out, int max, int *violations)
{
    int n = 0;
    if (h->checked && h->stale_n) {
        const lg_history_example *x = &h->stale;
        n = add(out, n, max, LG_V_STALE_READ, h->stale_n,
                "item %lld: %lld reads above the band (acknowledged deductions missing): worst "
                "read %lld at %.1f-%.1f ms, band [%lld, %lld]; the last of %lld units "
                "acknowledged before it began: %s (invoked %.1f ms, acknowledged %.1f ms)",
                h->id, h->stale_n, x->read.stock, ms(x->read.t0_ns), ms(x->read.t1_ns), x->lo,
                x->hi, h->initial - x->hi, x->request, ms(x->sent_ns), ms(x->done_ns));
    }
    if (h->checked && h->impossible_n) {
        const lg_history_example *x = &h->impossible;
        n = add(out, n, max, LG_V_IMPOSSIBLE_READ, h->impossible_n,
                "item %lld: %lld reads below the band (more deducted than was asked): worst "
                "read %lld at %.1f-%.1f ms, band [%lld, %lld]; the last of %lld units invoked "
                "before it ended: %s (invoked %.1f ms)",
                h->id, h->impossible_n, x->read.stock, ms(x->read.t0_ns), ms(x->read.t1_ns),
                x->lo, x->hi, h->initial - x->lo, x->request[0] ? x->request : "none",
                ms(x->sent_ns));
    }
    if (h->checked && h->sold_after_n) {
        const lg_history_sale *s = &h->sale;
        n = add(out, n, max, LG_V_SOLD_AFTER_SOLD_OUT, h->sold_after_n,
                "item %lld: %lld successes (%lld units) invoked after a sold-out answer, no read "
                "after it showing the stock back: first %s (%lld units, invoked %.1f ms) after "
                "%s (%lld units sold out, answered %.1f ms)",
                h->id, h->sold_after_n, h->sold_after_units, s->ok, s->ok_qty,
                ms(s->ok_sent_ns), s->sold_out, s->sold_out_qty, ms(s->sold_out_done_ns));
    }
    if (violations)
        *violations = n;
    return n;
}
