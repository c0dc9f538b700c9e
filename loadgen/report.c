/* report.c - formats a run for people (aligned text, latencies in ms) and for
 * programs (JSON, latencies in integer microseconds). The verdict text comes
 * from the checker; this file only lays it out. */
#include "loadgen/report.h"

#include <math.h>
#include <string.h>

#include "loadgen/profile.h"
#include "loadgen/tls.h"

static const double pcts[] = {50, 90, 99, 99.9};
static const char *const pct_names[] = {"p50", "p90", "p99", "p99.9"};
#define NPCTS 4

static double ms(uint64_t us)
{
    return (double)us / 1000.0;
}

static double rate(uint64_t n, double secs)
{
    return secs > 0 ? (double)n / secs : 0.0;
}

/* "quantity 1-3", or "carts of 1-5 lines, quantity 1-3" */
static void shape_text(const lg_opts *o, char *buf, size_t size)
{
    char lines[48] = "";
    if (o->lmax)
        snprintf(lines, sizeof(lines), o->lmin == o->lmax ? "carts of %d lines, "
                                                          : "carts of %d-%d lines, ",
                 o->lmin, o->lmax);
    snprintf(buf, size, o->qmin == o->qmax ? "%squantity %d" : "%squantity %d-%d", lines,
             o->qmin, o->qmax);
}

static void header(FILE *f, const lg_opts *o, const lg_run *r)
{
    if (o->get_path[0])
        fprintf(f, "loadgen: raw GET %s", o->get_path);
    else if (o->api) /* someone else's API: its buy, and no workMs (the profile's body) */
        fprintf(f, "loadgen: --api %s, %s %s%s%s", o->api_path,
                lg_profile_method(o->api, LG_PROFILE_BUY), lg_profile_path(o->api, LG_PROFILE_BUY),
                o->scenario[0] ? ", scenario " : "", o->scenario);
    else
        fprintf(f, "loadgen: %s%s", o->scenario[0] ? "scenario "
                                    : o->lmax     ? "POST /orders"
                                                  : "POST /reduceStock",
                o->scenario);
    if (o->buyers)
        fprintf(f, ", %d target%s, %d buyers over %d process%s, ", r->ntargets,
                r->ntargets == 1 ? "" : "s", o->buyers, o->procs, o->procs == 1 ? "" : "es");
    else
        fprintf(f, ", %d target%s, %d connections, %d thread%s, ", r->ntargets,
                r->ntargets == 1 ? "" : "s", o->concurrency, o->reserve ? 1 : o->threads,
                o->reserve || o->threads == 1 ? "" : "s"); /* a reserve run has one loop */
    if (o->rate > 0)
        fprintf(f, "open loop at %.0f req/s, ", o->rate);
    if (o->requests)
        fprintf(f, o->reserve ? "%lld buyers" : "%lld requests", o->requests);
    if (o->requests && o->duration_s)
        fprintf(f, " or ");
    if (o->duration_s)
        fprintf(f, "%.1f s", o->duration_s);
    if (!o->get_path[0]) {
        char shape[96];
        shape_text(o, shape, sizeof(shape));
        fprintf(f, ", %d item%s of stock %lld, %s", r->nitems, r->nitems == 1 ? "" : "s",
                o->item_id || o->api ? r->items[0].stock0 : o->stock, shape);
        if (!o->api)
            fprintf(f, ", workMs %d", o->work_ms);
    }
    fprintf(f, "\n");
    if (lg_opts_tls(o)) {
        unsigned long long done, resumed;
        lg_tls_counts(&done, &resumed);
        fprintf(f, "tls: %s; %llu handshakes, %llu resumed\n",
                o->insecure ? "--insecure: certificates NOT verified"
                            : o->cacert[0] ? "certificates verified against --cacert"
                                           : "certificates verified against the system's CAs",
                done, resumed);
    }
}

static void outcomes(FILE *f, const lg_result *res)
{
    uint64_t total = lg_tally_requests(&res->total);
    fprintf(f, "\n%llu requests in %.3f s = %.1f req/s (%llu retries)\n",
            (unsigned long long)total, res->elapsed_s, rate(total, res->elapsed_s),
            (unsigned long long)res->total.retries);
    fprintf(f, "\n%-28s %8s\n", "outcome", "count");
    for (int o = 0; o < LG_OUT_COUNT; o++)
        fprintf(f, "%-28s %8llu\n", lg_outcome_name(o),
                (unsigned long long)res->total.counts[o]);
    for (int o = 0; o < LG_OUT_COUNT; o++)
        if (res->example[o][0])
            fprintf(f, "  first %s: %s\n", lg_outcome_name(o), res->example[o]);
}

static void latency_row(FILE *f, const char *name, const hist *h)
{
    fprintf(f, "%-28s %8llu %9.3f", name, (unsigned long long)hist_count(h), ms(hist_min(h)));
    for (int i = 0; i < NPCTS; i++)
        fprintf(f, " %9.3f", ms(hist_percentile(h, pcts[i])));
    fprintf(f, " %9.3f\n", ms(hist_max(h)));
}

static void latencies(FILE *f, const lg_result *res)
{
    fprintf(f, "\n%-28s %8s %9s", "latency (ms)", "count", "min");
    for (int i = 0; i < NPCTS; i++)
        fprintf(f, " %9s", pct_names[i]);
    fprintf(f, " %9s\n", "max");
    latency_row(f, "all answers", res->total.all);
    latency_row(f, "ok only", res->total.ok);
}

static void per_target(FILE *f, const lg_run *r)
{
    const lg_result *res = &r->load;
    fprintf(f, "\n%-28s %9s %9s %9s %10s\n", "per target", "requests", "ok", "not ok",
            "req/s");
    for (int t = 0; t < res->ntargets; t++) {
        const lg_tally *x = &res->targets[t];
        uint64_t n = lg_tally_requests(x);
        fprintf(f, "%-28s %9llu %9llu %9llu %10.1f\n", r->targets[t].url, (unsigned long long)n,
                (unsigned long long)x->counts[LG_OUT_OK],
                (unsigned long long)(n - x->counts[LG_OUT_OK]), rate(n, res->elapsed_s));
    }
    if (res->ntargets < 2)
        return; /* the overall table already says it all */
    fprintf(f, "\n%-28s %8s %9s", "latency by target (ms)", "count", "min");
    for (int i = 0; i < NPCTS; i++)
        fprintf(f, " %9s", pct_names[i]);
    fprintf(f, " %9s\n", "max");
    for (int t = 0; t < res->ntargets; t++)
        latency_row(f, r->targets[t].url, res->targets[t].all);
}

/* what acked_n counts: answers of /reduceStock, lines of carts */
static void item_line(FILE *f, const lg_item_check *c, const char *acked_unit, const char *sid)
{
    char id[LG_PROFILE_ID_MAX + 1]; /* an --api service's string id, as it names the item */
    snprintf(id, sizeof(id), "%s", sid ? sid : "");
    if (!sid)
        snprintf(id, sizeof(id), "%lld", c->id);
    if (c->sold0 < 0 || c->sold1 < 0) { /* an --api profile that reads the stock alone */
        fprintf(f, "  item %s: stock %lld -> %lld, acknowledged %lld units in %lld %s, no "
                   "sold count (the outside verdict)\n", id, c->stock0, c->stock1,
                c->acked_qty, c->acked_n, acked_unit);
        return;
    }
    fprintf(f, "  item %s: stock %lld -> %lld, sold %lld, acknowledged %lld units in %lld %s",
            id, c->stock0, c->stock1, c->sold1 - c->sold0, c->acked_qty, c->acked_n,
            acked_unit);
    if (c->ledger_checked)
        fprintf(f, ", ledger rows %lld (%lld units matched)\n", c->rows, c->matched_qty);
    else
        fprintf(f, ", ledger not read row by row\n");
}

/* Few items: one line each; many: the totals. */
static void items(FILE *f, const lg_run *r)
{
    const char *acked_unit = r->carts ? "lines" : "answers";
    fprintf(f, "\nitems\n");
    if (r->nitems <= 5) {
        for (int k = 0; k < r->nitems; k++)
            item_line(f, &r->items[k], acked_unit, r->api_ids ? r->api_ids[k].str : NULL);
        return;
    }
    lg_item_check sum;
    lg_item_check_init(&sum, 0);
    int checked = 0;
    for (int k = 0; k < r->nitems; k++) {
        const lg_item_check *c = &r->items[k];
        sum.stock0 += c->stock0, sum.stock1 += c->stock1;
        sum.sold1 += c->sold1 - c->sold0, sum.acked_qty += c->acked_qty;
        sum.acked_n += c->acked_n, sum.rows += c->rows;
        checked += c->ledger_checked;
    }
    fprintf(f, "  %d items: stock %lld -> %lld, sold %lld, acknowledged %lld units in %lld "
               "%s, ledger read row by row for %d of them (%lld rows)\n",
            r->nitems, sum.stock0, sum.stock1, sum.sold1, sum.acked_qty, sum.acked_n, acked_unit,
            checked, sum.rows);
}

/* The per-order tallies of a cart run. */
static void orders(FILE *f, const lg_order_check *c)
{
    fprintf(f, "  orders: %lld carts with %lld lines, %lld acknowledged; %lld checked line by "
               "line in the ledger: %lld partially applied, %lld acknowledged with a line "
               "missing, %lld refused or failed with a line in it\n",
            c->orders, c->lines, c->acked, c->checked, c->partial_n, c->acked_missing_n,
            c->refused_applied_n);
}

static void verdict(FILE *f, const lg_run *r)
{
    if (r->read_waited_s > 0)
        fprintf(f, "\nread-back waited %.1f s for an answer; first: %s\n", r->read_waited_s,
                r->read_waited_for);
    fprintf(f, "\nVERDICT: %s%s\n", r->verdict == LG_PASS ? "PASS" : "FAIL",
            r->stopped ? " (the run was stopped early; the checks cover what ran)" : "");
    for (int i = 0; i < r->nfindings; i++)
        if (r->findings[i].violation)
            fprintf(f, "  %s\n", r->findings[i].text);
    for (int i = 0; i < r->nexpect; i++)
        fprintf(f, "  expectation not met: %s\n", r->expect[i]);
    for (int i = 0; i < r->nfindings; i++)
        if (!r->findings[i].violation)
            fprintf(f, "  %s\n", r->findings[i].text);
}

/* "n/a" for a series a replica did not export (or could not be read). */
static void peak_value(char *buf, size_t size, long long v, double scale, const char *fmt)
{
    if (v < 0)
        snprintf(buf, size, "n/a");
    else
        snprintf(buf, size, fmt, (double)v / scale);
}

/* What a flash sale adds: the fate of every buyer, the status mix, the
 * latency from the fire, /health meanwhile, each replica at its peak. */
static void sale(FILE *f, const lg_run *r)
{
    const lg_sale *s = r->sale;
    const uint64_t *fa = s->fates;
    fprintf(f, "\nflash sale: %d buyers over %d process%s; soft RLIMIT_NOFILE %lld -> %lld%s\n",
            s->buyers, s->procs, s->procs == 1 ? "" : "es", s->nofile_was, s->nofile,
            s->nofile != s->nofile_was ? " (raised to the hard limit)" : "");
    fprintf(f, "buyers: %llu answered, %llu unanswered (%llu connect failures, %llu closed "
            "without an answer, %llu timed out, %llu never fired)\n",
            (unsigned long long)fa[LG_BUYER_ANSWERED], (unsigned long long)lg_sale_unanswered(s),
            (unsigned long long)fa[LG_BUYER_CONNECT_FAILED],
            (unsigned long long)fa[LG_BUYER_UNANSWERED],
            (unsigned long long)fa[LG_BUYER_TIMED_OUT], (unsigned long long)fa[LG_BUYER_NOT_FIRED]);
    if (s->error[0])
        fprintf(f, "  %s\n", s->error);
    fprintf(f, "status:");
    for (int st = 0; st < LG_SALE_STATUS_MAX; st++)
        if (s->status[st])
            fprintf(f, " %d x%llu", st, (unsigned long long)s->status[st]);
    fprintf(f, "\nfrom the fire (ms): p50 %.3f  p99 %.3f  max %.3f\n",
            ms(hist_percentile(s->fire, 50)), ms(hist_percentile(s->fire, 99)),
            ms(hist_max(s->fire)));
    fprintf(f, "/health meanwhile (ms): %llu answered, p50 %.3f  p99 %.3f  max %.3f, %llu "
            "failed\n", (unsigned long long)hist_count(s->health),
            ms(hist_percentile(s->health, 50)), ms(hist_percentile(s->health, 99)),
            ms(hist_max(s->health)), (unsigned long long)s->health_failed);
    for (int t = 0; t < s->ntargets; t++) {
        const lg_sale_peak *p = &s->peaks[t];
        char th[24], rss[24], fds[24];
        peak_value(th, sizeof(th), p->threads, 1, "%.0f");
        peak_value(rss, sizeof(rss), p->rss_bytes, 1048576.0, "%.1f MiB");
        peak_value(fds, sizeof(fds), p->open_fds, 1, "%.0f");
        fprintf(f, "peak of %s: threads %s, RSS %s, open fds %s (%d reads of /metrics, %d "
                "failed)\n", r->targets[t].url, th, rss, fds, p->scrapes, p->failed);
    }
}

void lg_report_text(FILE *f, const lg_opts *o, const lg_run *r)
{
    header(f, o, r);
    outcomes(f, &r->load);
    latencies(f, &r->load);
    per_target(f, r);
    if (r->sale)
        sale(f, r);
    if (r->rsv)
        lg_report_rsv_text(f, o, r);
    else if (r->verdict != LG_NO_VERDICT)
        items(f, r);
    if (r->carts && r->verdict != LG_NO_VERDICT)
        orders(f, &r->orders);
    lg_report_faults_text(f, r);
    if (r->verdict != LG_NO_VERDICT)
        lg_report_history_text(f, o, r);
    if (r->verdict != LG_NO_VERDICT)
        verdict(f, r);
}

static uint64_t lock_errors(const lg_tally *t)
{
    return t->counts[LG_OUT_LOCK_TIMEOUT] + t->counts[LG_OUT_LOCK_INTERRUPTED] +
           t->counts[LG_OUT_LOCK_LOST] + t->counts[LG_OUT_REDIS_UNAVAILABLE];
}

enum { ROW_REQUESTS, ROW_OK, ROW_INSUFFICIENT, ROW_LOCK, ROW_OTHER, ROW_RATE, ROW_P99, ROW_SOLD,
       ROW_VERDICT, ROW_COUNT };
static const char *const row_names[ROW_COUNT] = {
    "requests", "ok", "insufficient_stock", "lock errors", "other errors",
    "throughput req/s", "p99 ms", "sold/initial stock", "verdict",
};

static void compare_cell(const lg_run *run, int row, char *cell, size_t size)
{
    const lg_tally *t = &run->load.total;
    uint64_t total = lg_tally_requests(t);
    uint64_t ok = t->counts[LG_OUT_OK], no = t->counts[LG_OUT_INSUFFICIENT];
    long long sold = 0, stock0 = 0;
    for (int k = 0; k < run->nitems; k++) {
        sold += run->items[k].sold1 - run->items[k].sold0;
        stock0 += run->items[k].stock0;
    }
    uint64_t v = row == ROW_REQUESTS ? total
                 : row == ROW_OK     ? ok
                 : row == ROW_INSUFFICIENT ? no
                 : row == ROW_LOCK   ? lock_errors(t)
                                     : total - ok - no - lock_errors(t);
    if (row == ROW_RATE)
        snprintf(cell, size, "%.1f", rate(total, run->load.elapsed_s));
    else if (row == ROW_P99)
        snprintf(cell, size, "%.3f", ms(hist_percentile(t->all, 99)));
    else if (row == ROW_SOLD)
        snprintf(cell, size, "%lld/%lld", sold, stock0);
    else if (row == ROW_VERDICT)
        snprintf(cell, size, "%s", run->verdict == LG_PASS ? "PASS" : "FAIL");
    else
        snprintf(cell, size, "%llu", (unsigned long long)v);
}

static int expected_to_fail(const lg_run *run)
{
    return strcmp(run->label, "none") == 0;
}

/* Why each group ended as it did, in words; none's FAIL is the demonstration. */
static void compare_notes(FILE *f, const lg_run *runs, int n)
{
    for (int i = 0; i < n; i++) {
        const lg_run *r = &runs[i];
        if (expected_to_fail(r) && r->verdict == LG_FAIL)
            fprintf(f, "\n%s: FAIL, as expected. Without a lock, concurrent read-modify-write "
                       "requests overwrite each other\nand sell stock that is not there. This is "
                       "what the lock prevents, not a loadgen error:\n", r->label);
        else if (expected_to_fail(r))
            fprintf(f, "\n%s: PASS this time, although it is expected to FAIL: the race did not "
                       "show up in this run.\nRaise --concurrency or --work-ms (the servers need "
                       "--allow-work-ms) to widen it.\n", r->label);
        else if (r->verdict == LG_FAIL)
            fprintf(f, "\n%s: FAIL. This mode must hold the invariants; this is a real "
                       "violation:\n", r->label);
        for (int k = 0; k < r->nfindings; k++)
            fprintf(f, "  %s\n", r->findings[k].text);
        for (int k = 0; k < r->nexpect; k++)
            fprintf(f, "  expectation not met: %s\n", r->expect[k]);
    }
}

int lg_report_compare(FILE *f, const lg_opts *o, const lg_run *runs, int n)
{
    char shape[96];
    shape_text(o, shape, sizeof(shape));
    fprintf(f, "compare: scenario hot against %d lock mode%s, each with a fresh item: %lld "
               "requests, %d connections, stock %lld, %s, workMs %d\n\n",
            n, n == 1 ? "" : "s", o->requests, o->concurrency, o->stock, shape, o->work_ms);
    fprintf(f, "%-20s", "");
    for (int i = 0; i < n; i++)
        fprintf(f, " %14s", runs[i].label);
    fprintf(f, "\n");
    for (int row = 0; row < ROW_COUNT; row++) {
        fprintf(f, "%-20s", row_names[row]);
        for (int i = 0; i < n; i++) {
            char cell[48];
            compare_cell(&runs[i], row, cell, sizeof(cell));
            fprintf(f, " %14s", cell);
        }
        fprintf(f, "\n");
    }
    compare_notes(f, runs, n);
    int pass = LG_PASS, none_failed = -1;
    for (int i = 0; i < n; i++)
        if (expected_to_fail(&runs[i]))
            none_failed = runs[i].verdict == LG_FAIL;
        else if (runs[i].verdict != LG_PASS)
            pass = LG_FAIL;
    fprintf(f, "\nVERDICT: %s (%s%s)\n", pass == LG_PASS ? "PASS" : "FAIL",
            pass == LG_PASS ? "every locked mode held the invariants"
                            : "a mode that must hold the invariants broke them",
            none_failed == 1   ? "; none failed, as expected"
            : none_failed == 0 ? "; none passed by luck this time"
                               : "");
    return pass;
}

/* [[percentile, us], ...] as HdrHistogram lists them: LG_REPORT_PCT_STEPS
 * points per halving of the distance to 100 %, while 1/(1-p) stays within the
 * count (the data can't say more), then [100, max]; at most
 * LG_REPORT_PCT_POINTS_MAX points (report.h). */
static json_t *distribution_json(const hist *h)
{
    json_t *arr = json_array();
    uint64_t n = hist_count(h);
    for (int i = 0; arr && n > 0 && i < LG_REPORT_PCT_POINTS_MAX - 1; i++) {
        double rest = pow(0.5, (double)i / LG_REPORT_PCT_STEPS); /* 1 - p */
        if (1.0 / rest > (double)n)
            break;
        double p = 100.0 * (1.0 - rest);
        json_array_append_new(arr, json_pack("[f, I]", round(p * 1e4) / 1e4,
                                             (json_int_t)hist_percentile(h, p)));
    }
    if (arr && n > 0)
        json_array_append_new(arr, json_pack("[f, I]", 100.0, (json_int_t)hist_max(h)));
    return arr;
}

static json_t *latency_json(const hist *h)
{
    json_t *j = json_pack("{s:I, s:I, s:I, s:f}", "count", (json_int_t)hist_count(h), "min",
                          (json_int_t)hist_min(h), "max", (json_int_t)hist_max(h), "mean",
                          hist_mean(h));
    for (int i = 0; j && i < NPCTS; i++)
        json_object_set_new(j, pct_names[i], json_integer((json_int_t)hist_percentile(h, pcts[i])));
    if (j)
        json_object_set_new(j, "percentiles", distribution_json(h));
    return j;
}

/* Outcomes per time bucket, at most TIMELINE_MAX buckets:
 * {"bucketMs":w, "outcomes":{"ok":[...], ...}} (every outcome, same length). */
#define TIMELINE_MAX 200
static json_t *timeline_json(const lg_series *s)
{
    size_t f = lg_series_factor(s, TIMELINE_MAX), n = (s->n + f - 1) / f;
    json_t *outs = json_object();
    for (int o = 0; outs && o < LG_OUT_COUNT; o++) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < n; i++)
            json_array_append_new(arr, json_integer((json_int_t)lg_series_count(s, i, f, o)));
        json_object_set_new(outs, lg_outcome_name(o), arr);
    }
    return json_pack("{s:f, s:o}", "bucketMs", (double)s->width_ns * (double)f / 1e6,
                     "outcomes", outs);
}

/* The sampled stock: parallel arrays, time in ms since the load started. */
static json_t *stock_json(const lg_samples *s)
{
    json_t *t = json_array(), *stock = json_array(), *sold = json_array(),
           *reserved = json_array();
    int any = 0; /* reserved only from a stockd that reports it */
    for (int i = 0; t && stock && sold && i < s->n; i++) {
        json_array_append_new(t, json_real(round(s->s[i].t_s * 1e4) / 10.0));
        json_array_append_new(stock, json_integer(s->s[i].stock));
        json_array_append_new(sold, json_integer(s->s[i].sold));
        json_array_append_new(reserved, s->s[i].reserved < 0 ? json_null()
                                                             : json_integer(s->s[i].reserved));
        any |= s->s[i].reserved >= 0;
    }
    json_t *j = json_pack("{s:I, s:s, s:i, s:I, s:o, s:o, s:o}", "itemId", (json_int_t)s->item,
                          "source", "GET /items/{id} while the load ran, plus the reads before "
                          "and after it", "intervalMs", s->interval_ms, "failedReads",
                          (json_int_t)s->failed, "tMs", t, "stock", stock, "sold", sold);
    if (j && any)
        json_object_set_new(j, "reserved", reserved);
    else
        json_decref(reserved);
    return j;
}

/* The first explanation of each outcome that had one. */
static json_t *examples_json(const lg_result *res)
{
    json_t *j = json_object();
    for (int o = 0; j && o < LG_OUT_COUNT; o++)
        if (res->example[o][0])
            json_object_set_new(j, lg_outcome_name(o), json_string(res->example[o]));
    return j;
}

static json_t *tally_json(const lg_tally *t, double elapsed_s)
{
    json_t *outs = json_object();
    for (int o = 0; outs && o < LG_OUT_COUNT; o++)
        json_object_set_new(outs, lg_outcome_name(o), json_integer((json_int_t)t->counts[o]));
    uint64_t n = lg_tally_requests(t);
    return json_pack("{s:I, s:f, s:I, s:o, s:{s:o, s:o}}", "requests", (json_int_t)n,
                     "throughput", rate(n, elapsed_s), "retries", (json_int_t)t->retries,
                     "outcomes", outs, "latencyUs", "all", latency_json(t->all), "ok",
                     latency_json(t->ok));
}

static json_t *config_json(const lg_opts *o)
{
    json_t *j = json_pack("{s:s, s:i, s:i, s:I, s:f, s:f, s:I, s:I, s:i, s:i, s:i, s:i, s:i, s:i, "
                     "s:s?}",
                     "scenario", o->scenario, "concurrency", o->concurrency, "threads",
                     o->threads, "requests", (json_int_t)o->requests, "durationSec",
                     o->duration_s, "rate", o->rate, "stock", (json_int_t)o->stock, "item",
                     (json_int_t)o->item_id, "items", o->items, "quantityMin", o->qmin,
                     "quantityMax", o->qmax, "workMs", o->work_ms, "retries", o->retries,
                     "timeoutMs", o->timeout_ms, "get", o->get_path[0] ? o->get_path : NULL);
    if (j && lg_opts_tls(o))
        json_object_set_new(j, "tlsInsecure", json_boolean(o->insecure));
    if (j && o->api) /* --api: which profile spoke to the service */
        json_object_set_new(j, "api", json_pack("{s:s, s:s}", "file", o->api_path, "name",
                                                lg_profile_name(o->api)));
    if (j && o->lmax) {
        json_object_set_new(j, "cartLinesMin", json_integer(o->lmin));
        json_object_set_new(j, "cartLinesMax", json_integer(o->lmax));
    }
    return j;
}

static json_t *item_json(const lg_item_check *c)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I}", "id",
                     (json_int_t)c->id, "stockBefore", (json_int_t)c->stock0, "soldBefore",
                     (json_int_t)c->sold0, "stockAfter", (json_int_t)c->stock1, "soldAfter",
                     (json_int_t)c->sold1, "acknowledged", (json_int_t)c->acked_qty,
                     "acknowledgedAnswers", (json_int_t)c->acked_n, "ledgerChecked",
                     c->ledger_checked, "ledgerRows", (json_int_t)c->rows, "undetermined",
                     (json_int_t)c->undetermined_qty);
}

static json_t *orders_json(const lg_order_check *c)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "orders",
                     (json_int_t)c->orders, "lines", (json_int_t)c->lines, "acknowledged",
                     (json_int_t)c->acked, "checked", (json_int_t)c->checked,
                     "partiallyApplied", (json_int_t)c->partial_n, "acknowledgedMissingLines",
                     (json_int_t)c->acked_missing_n, "missingLines",
                     (json_int_t)c->acked_missing_lines, "refusedWithLines",
                     (json_int_t)c->refused_applied_n, "refusedLinesInLedger",
                     (json_int_t)c->refused_applied_lines);
}

static json_t *verdict_json(const lg_run *r, json_t *j)
{
    json_t *items_j = json_array(), *viol = json_array(), *notes = json_array(),
           *exp = json_array();
    for (int k = 0; k < r->nitems; k++)
        json_array_append_new(items_j, item_json(&r->items[k]));
    for (int k = 0; r->api_ids && k < r->nitems; k++) /* a string id: "id" is k + 1 */
        if (r->api_ids[k].str)
            json_object_set_new(json_array_get(items_j, (size_t)k), "apiId",
                                json_string(r->api_ids[k].str));
    for (int i = 0; i < r->nfindings; i++) {
        const lg_finding *x = &r->findings[i];
        json_array_append_new(x->violation ? viol : notes,
                              json_pack("{s:s, s:I, s:s}", "kind", lg_finding_name(x->kind),
                                        "amount", (json_int_t)x->amount, "text", x->text));
    }
    for (int i = 0; i < r->nexpect; i++)
        json_array_append_new(exp, json_string(r->expect[i]));
    json_object_set_new(j, "items", items_j);
    if (r->carts)
        json_object_set_new(j, "orders", orders_json(&r->orders));
    json_object_set_new(j, "verdict", json_string(r->verdict == LG_PASS ? "PASS" : "FAIL"));
    json_object_set_new(j, "violations", viol);
    json_object_set_new(j, "expectationsUnmet", exp);
    json_object_set_new(j, "notes", notes);
    return j;
}

static json_t *peak_json(long long v)
{
    return v < 0 ? json_null() : json_integer(v);
}

/* The flash sale's part of the JSON report: the same as its text. */
static json_t *sale_json(const lg_run *r)
{
    const lg_sale *s = r->sale;
    json_t *status = json_object(), *peaks = json_array();
    for (int st = 0; st < LG_SALE_STATUS_MAX; st++)
        if (s->status[st]) {
            char key[16];
            snprintf(key, sizeof(key), "%d", st);
            json_object_set_new(status, key, json_integer((json_int_t)s->status[st]));
        }
    for (int t = 0; t < s->ntargets; t++)
        json_array_append_new(peaks, json_pack("{s:s, s:o, s:o, s:o}", "url", r->targets[t].url,
                                               "threads", peak_json(s->peaks[t].threads),
                                               "rssBytes", peak_json(s->peaks[t].rss_bytes),
                                               "openFds", peak_json(s->peaks[t].open_fds)));
    const uint64_t *fa = s->fates;
    return json_pack("{s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:I, s:o}",
                     "buyers", s->buyers, "procs", s->procs,
                     "nofileWas", (json_int_t)s->nofile_was, "nofile", (json_int_t)s->nofile,
                     "answered", (json_int_t)fa[LG_BUYER_ANSWERED],
                     "connectFailed", (json_int_t)fa[LG_BUYER_CONNECT_FAILED],
                     "closedUnanswered", (json_int_t)fa[LG_BUYER_UNANSWERED],
                     "timedOut", (json_int_t)fa[LG_BUYER_TIMED_OUT],
                     "notFired", (json_int_t)fa[LG_BUYER_NOT_FIRED], "status", status,
                     "fireLatency", latency_json(s->fire), "health", latency_json(s->health),
                     "healthFailed", (json_int_t)s->health_failed, "peaks", peaks);
}

json_t *lg_report_json(const lg_opts *o, const lg_run *r)
{
    json_t *j = tally_json(&r->load.total, r->load.elapsed_s);
    if (j == NULL)
        return NULL;
    json_t *targets = json_array();
    for (int t = 0; t < r->load.ntargets; t++) {
        json_t *tj = tally_json(&r->load.targets[t], r->load.elapsed_s);
        json_object_set_new(tj, "url", json_string(r->targets[t].url));
        json_array_append_new(targets, tj);
    }
    json_object_set_new(j, "label", json_string(r->label));
    json_object_set_new(j, "config", config_json(o));
    json_object_set_new(j, "elapsedSec", json_real(r->load.elapsed_s));
    json_object_set_new(j, "stopped", json_boolean(r->stopped));
    json_object_set_new(j, "readBackWaitedSec", json_real(r->read_waited_s));
    json_object_set_new(j, "readBackWaitedFor", r->read_waited_s > 0 ? json_string(r->read_waited_for)
                                                                       : json_null());
    json_object_set_new(j, "perTarget", targets);
    json_object_set_new(j, "timeline", timeline_json(&r->load.total.series));
    json_object_set_new(j, "examples", examples_json(&r->load));
    if (r->nitems > 0)
        json_object_set_new(j, "stock", stock_json(&r->stock));
    if (r->sale)
        json_object_set_new(j, "flash", sale_json(r));
    if (r->rsv)
        json_object_set_new(j, "reservations", lg_report_rsv_json(o, r));
    if (r->nfaults)
        json_object_set_new(j, "faults", lg_report_faults_json(r));
    if (r->verdict != LG_NO_VERDICT && r->nitems > 0)
        json_object_set_new(j, "history", lg_report_history_json(o, r));
    if (r->verdict == LG_NO_VERDICT)
        json_object_set_new(j, "verdict", json_null());
    else
        verdict_json(r, j);
    return j;
}

json_t *lg_report_compare_json(const lg_opts *o, const lg_run *runs, int n, int verdict)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        json_t *run = lg_report_json(o, &runs[i]);
        json_object_set_new(run, "expectedToFail", json_boolean(expected_to_fail(&runs[i])));
        json_array_append_new(arr, run);
    }
    return json_pack("{s:s, s:s, s:o}", "scenario", "compare", "verdict",
                     verdict == LG_PASS ? "PASS" : "FAIL", "runs", arr);
}
