/* report_history.c - the report's part for the history check (history.h):
 * a line of text before the verdict, and the JSON report's "history" object
 * with the reads drawn against their band (thinned for drawing, the reads
 * outside the band kept). Part of the report module (report.h). */
#include "loadgen/report.h"

/* Reads drawn at most, besides those outside the band (up to as many again). */
#define DRAWN_MAX 600

static int outside(const lg_history *h, size_t i)
{
    return h->reads_at != NULL && (h->reads_at[i].stock > h->hi[i] ||
                                   h->reads_at[i].stock < h->lo[i]);
}

void lg_report_history_text(FILE *f, const lg_opts *o, const lg_run *r)
{
    const lg_history *h = &r->history;
    if (r->nitems == 0)
        return;
    if (o->history_ms == 0) {
        fputs("\nhistory check: off (--history-ms 0)\n", f);
        return;
    }
    if (!h->checked) {
        fprintf(f, "\nhistory check: skipped: %s\n", h->skipped[0] ? h->skipped : "not run");
        return;
    }
    fprintf(f, "\nhistory check: item %lld read %zu times while the load ran, every %d ms "
            "(%lld unusable, skipped); each read against initial - invoked .. initial - "
            "acknowledged, bounds rounded out to %.0f ms: %lld stale, %lld impossible; "
            "%lld sales after a sold-out answer\n", h->id, h->reads, h->interval_ms, h->failed,
            (double)h->bucket_ns / 1e6, h->stale_n, h->impossible_n, h->sold_after_n);
}

static json_t *example_json(const lg_history_example *x)
{
    return json_pack("{s:f, s:f, s:I, s:I, s:I, s:s, s:f, s:f}", "t0Ms", x->read.t0_ns / 1e6,
                     "t1Ms", x->read.t1_ns / 1e6, "stock", (json_int_t)x->read.stock, "low",
                     (json_int_t)x->lo, "high", (json_int_t)x->hi, "request", x->request,
                     "requestInvokedMs", x->sent_ns / 1e6, "requestCompletedMs",
                     x->done_ns / 1e6);
}

/* The reads to draw: every k-th, and every one outside the band (up to
 * DRAWN_MAX of those), in order. */
static json_t *series_json(const lg_history *h)
{
    json_t *t0 = json_array(), *t1 = json_array(), *v = json_array(), *lo = json_array(),
           *hi = json_array();
    size_t k = h->reads / DRAWN_MAX + 1, out = 0;
    for (size_t i = 0; i < h->reads; i++) {
        int off = outside(h, i) && out < DRAWN_MAX;
        if (i % k != 0 && !off && i + 1 != h->reads)
            continue;
        out += off;
        const lg_read *x = &h->reads_at[i];
        json_array_append_new(t0, json_real(x->t0_ns / 1e6));
        json_array_append_new(t1, json_real(x->t1_ns / 1e6));
        json_array_append_new(v, json_integer((json_int_t)x->stock));
        json_array_append_new(lo, json_integer((json_int_t)h->lo[i]));
        json_array_append_new(hi, json_integer((json_int_t)h->hi[i]));
    }
    return json_pack("{s:o, s:o, s:o, s:o, s:o}", "t0Ms", t0, "t1Ms", t1, "stock", v, "low", lo,
                     "high", hi);
}

json_t *lg_report_history_json(const lg_opts *o, const lg_run *r)
{
    const lg_history *h = &r->history;
    const char *skipped = o->history_ms == 0 ? "--history-ms 0"
                          : h->checked       ? NULL
                          : h->skipped[0]    ? h->skipped
                                             : "not run";
    long long viol = h->stale_n + h->impossible_n + h->sold_after_n;
    json_t *j = json_pack("{s:b, s:s?, s:I, s:i, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I, s:I}",
                          "checked", h->checked, "skipped", skipped, "itemId",
                          (json_int_t)(r->nitems ? r->items[0].id : 0), "intervalMs",
                          o->history_ms, "reads", (json_int_t)r->reads.n, "failed",
                          (json_int_t)r->reads.failed, "bucketMs", h->bucket_ns / 1e6,
                          "bandChecks", (json_int_t)(h->checked ? h->reads : 0), "withinBand",
                          (json_int_t)(h->checked ? h->reads - h->stale_n - h->impossible_n : 0),
                          "stale", (json_int_t)h->stale_n, "impossible",
                          (json_int_t)h->impossible_n, "soldAfterSoldOut",
                          (json_int_t)h->sold_after_n, "violations", (json_int_t)viol);
    if (j == NULL || !h->checked)
        return j;
    json_object_set_new(j, "initial", json_integer((json_int_t)h->initial));
    if (h->stale_n)
        json_object_set_new(j, "worstStale", example_json(&h->stale));
    if (h->impossible_n)
        json_object_set_new(j, "worstImpossible", example_json(&h->impossible));
    if (h->sold_after_n)
        json_object_set_new(
            j, "firstSoldAfterSoldOut",
            json_pack("{s:s, s:I, s:f, s:s, s:I, s:f}", "request", h->sale.ok, "quantity",
                      (json_int_t)h->sale.ok_qty, "invokedMs", h->sale.ok_sent_ns / 1e6,
                      "soldOutRequest", h->sale.sold_out, "soldOutQuantity",
                      (json_int_t)h->sale.sold_out_qty, "soldOutCompletedMs",
                      h->sale.sold_out_done_ns / 1e6));
    json_object_set_new(j, "series", series_json(h));
    return j;
}
