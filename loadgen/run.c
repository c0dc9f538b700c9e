/* run.c - one loadgen run from set-up to verdict. The verdict reads the
 * service's own state after every request has finished: nothing is concluded
 * from loadgen's counters alone. */
#include "loadgen/run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "loadgen/evloop.h"
#include "loadgen/flash.h"
#include "loadgen/reserve.h"

#define TICK_MS 250
#define SETTLE_LATER_MS 1000      /* stockd's Retry-After */
#define SETTLE_UNREACHABLE_MS 250 /* no target could be reached */

/* a line keeps its item's index in 24 bits */
_Static_assert(LG_ITEMS_MAX <= LG_LINE_ITEM_MAX + 1, "--items outgrows lg_line.item");

static void make_run_id(char *buf, size_t size)
{
    unsigned int r;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = (unsigned int)time(NULL) ^ ((unsigned int)getpid() << 16);
    snprintf(buf, size, "lg%08x", r);
}

/* item k's state from base: through the --api profile, or stockd's GET
 * /items/{id} (with its ledger rows when ledger is not NULL). */
static int read_item(const lg_opts *o, const lg_run *r, const char *base, int k,
                     long long rows, int timeout_ms, lg_item_state *st, lg_ledger **ledger,
                     lg_err *err)
{
    if (ledger)
        *ledger = NULL;
    if (o->api)
        return lg_profile_read(o->api, base, &r->api_ids[k], timeout_ms, st, err);
    return lg_api_get_item(base, r->items[k].id, rows, timeout_ms, st, ledger, err);
}

/* With --api: item k's id, from --item (restocked first when --stock was
 * given) or made by the profile's create. */
static int api_item(const lg_opts *o, lg_run *r, int k, const char *name, lg_err *err)
{
    const char *base = r->targets[0].url;
    lg_profile_id *id = &r->api_ids[k];
    int rc;
    if (o->item_arg[0]) {
        rc = lg_profile_id_parse(o->item_arg, k, id, err);
        if (rc == LG_OK && o->stock_set && !lg_profile_has(o->api, LG_PROFILE_SET_STOCK))
            rc = lg_errf(err, LG_ERR_USAGE, "--item with --stock sets the stock with the "
                         "profile's set_stock, which it does not have");
        if (rc == LG_OK && o->stock_set)
            rc = lg_profile_set_stock(o->api, base, id, o->stock, err);
        return rc;
    }
    if (!lg_profile_has(o->api, LG_PROFILE_CREATE))
        return lg_errf(err, LG_ERR_USAGE, "the profile has no create: give an existing item "
                       "with --item");
    rc = lg_profile_create(o->api, base, name, o->stock, id, err);
    if (rc == LG_OK && id->str)
        id->num = k + 1;
    return rc;
}

/* Creates the run's items (or takes --item) and reads their initial state. */
static int setup_items(const lg_opts *o, lg_run *r, const char *run_id, lg_err *err)
{
    const char *base = r->targets[0].url;
    r->nitems = o->item_id ? 1 : o->items;
    r->items = calloc((size_t)r->nitems, sizeof(*r->items));
    if (r->items == NULL ||
        (o->api && (r->api_ids = calloc((size_t)r->nitems, sizeof(*r->api_ids))) == NULL))
        return lg_errf(err, LG_ERR_NOMEM, "out of memory for %d items", r->nitems);
    for (int k = 0; k < r->nitems; k++) {
        long long id = o->item_id;
        char name[96];
        snprintf(name, sizeof(name), "loadgen %s #%d", run_id, k + 1);
        int rc = o->api ? api_item(o, r, k, name, err)
                 : id   ? LG_OK
                        : lg_api_create_item(base, name, o->stock, o->buyer_limit, &id, err);
        if (o->api)
            id = r->api_ids[k].num;
        r->items[k].id = id; /* read_item's, before lg_item_check_init sets it again */
        lg_item_state st;
        if (rc == LG_OK)
            rc = read_item(o, r, base, k, 1, 0, &st, NULL, err);
        if (rc != LG_OK)
            return rc;
        lg_item_check_init(&r->items[k], id);
        r->items[k].stock0 = st.stock;
        r->items[k].sold0 = st.sold;
        r->items[k].orders0 = st.order_count;
        r->items[k].judge_orders = o->api && lg_profile_has_orders(o->api);
    }
    return LG_OK;
}

/* Replicas must share one database, or the verdict would read a different
 * inventory than the one the load changed. */
static int check_shared(const lg_opts *o, lg_run *r, lg_err *err)
{
    for (int t = 1; t < r->ntargets; t++) {
        lg_item_state st;
        lg_err e;
        lg_err_clear(&e);
        if (read_item(o, r, r->targets[t].url, 0, 1, 0, &st, NULL, &e) != LG_OK)
            return lg_errf(err, e.code,
                           "%s does not see item %lld created through %s (do the replicas "
                           "share one --db?): %s",
                           r->targets[t].url, r->items[0].id, r->targets[0].url, e.msg);
    }
    return LG_OK;
}

static int probe_targets(const lg_opts *o, const lg_run *r, lg_err *err)
{
    for (int t = 0; t < r->ntargets; t++) {
        long status;
        int rc = lg_api_probe(r->targets[t].url, o->get_path, &status, err);
        if (rc != LG_OK)
            return rc;
    }
    return LG_OK;
}

static void load_cfg(const lg_opts *o, const lg_run *r, const long long *ids,
                     const char *run_id, lg_load_cfg *c)
{
    memset(c, 0, sizeof(*c));
    c->targets = r->targets;
    c->ntargets = r->ntargets;
    c->raw = o->get_path[0] != '\0';
    c->path = o->get_path;
    c->concurrency = o->concurrency;
    c->threads = o->threads;
    c->requests = o->requests;
    c->duration_s = o->duration_s;
    c->rate = o->rate;
    c->timeout_ms = o->timeout_ms;
    c->retries = o->retries;
    c->shape = (lg_shape){.item_ids = ids, .nitems = r->nitems, .qmin = o->qmin,
                          .qmax = o->qmax, .lmin = o->lmin, .lmax = o->lmax,
                          .work_ms = o->work_ms, .api = o->api, .api_ids = r->api_ids};
    c->run_id = run_id;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double load_clock(void *arg)
{
    lg_progress p;
    lg_load_progress(arg, &p);
    return p.elapsed_s;
}

/* The sampler's read of item 0 through an --api profile. */
typedef struct api_read {
    const lg_profile *api;
    const lg_profile_id *id;
} api_read;

static int read_api(void *arg, const char *base, int timeout_ms, lg_item_state *st, lg_err *err)
{
    const api_read *a = arg;
    return lg_profile_read(a->api, base, a->id, timeout_ms, st, err);
}

/* Starts the --fault commands beside the load (none: *f NULL). */
static int faults_start(const lg_opts *o, int64_t start_ns, lg_faults **f, lg_err *err)
{
    return lg_faults_start(o->faults, o->nfaults, start_ns, 0, f, err);
}

/* Runs the load to its end, ticking the caller a few times a second, with the
 * first item's stock sampled meanwhile when a report will show it (sample)
 * or the history check reads it (every history_ms ms); not in raw mode: no
 * item. Unasked, its reads would only add load. */
static int drive(const lg_opts *o, const lg_load_cfg *c, int sample, int history_ms,
                 lg_tick_fn tick, void *arg, lg_run *r, lg_err *err)
{
    lg_load *l;
    lg_sampler *sampler = NULL;
    lg_faults *faults = NULL;
    int rc = lg_load_start(c, &l, err);
    if (rc != LG_OK)
        return rc;
    int faulting = faults_start(o, lg_load_start_ns(l), &faults, err); /* the load's clock */
    if (faulting != LG_OK)
        lg_load_stop(l, 2); /* the run fails with the faults' error, after the join */
    lg_sampler_cfg sc = {.targets = r->targets, .ntargets = r->ntargets,
                         .item = r->nitems > 0 ? r->items[0].id : 0, .clock = load_clock,
                         .clock_arg = l, .every_ms = history_ms};
    sample |= history_ms > 0;
    api_read ar = {c->shape.api, r->api_ids};
    if (ar.api && r->nitems > 0)
        sc.read = read_api, sc.read_arg = &ar;
    int sampling = sample && r->nitems > 0 ? lg_sampler_start(&sc, &sampler, err) : LG_OK;
    if (sampling != LG_OK)
        lg_load_stop(l, 2); /* the run fails with the sampler's error, after the join */
    int stop = 0, waited = 0;
    while (!lg_load_finished(l)) {
        sleep_ms(10);
        if (faults && lg_load_exhausted(l))
            lg_faults_stop(faults); /* ends due now: the last requests may wait on them */
        if ((waited += 10) < TICK_MS)
            continue;
        waited = 0;
        lg_progress p;
        lg_load_progress(l, &p);
        int want = tick ? tick(&p, arg) : 0;
        if (want > stop) {
            stop = want;
            r->stopped = 1;
            lg_load_stop(l, stop == 2);
            lg_faults_stop(faults); /* Ctrl-C: undo the faults at once */
        }
    }
    if (tick) {
        lg_progress p;
        lg_load_progress(l, &p);
        tick(&p, arg);
    }
    lg_sampler_stop(sampler, &r->stock, &r->reads);
    lg_faults_join(faults, &r->faults, &r->nfaults);
    lg_err join_err;
    rc = lg_load_join(l, &r->load, sampling == LG_OK && faulting == LG_OK ? err : &join_err);
    return faulting != LG_OK ? faulting : sampling != LG_OK ? sampling : rc;
}

/* A flash sale instead of the load: the buyers' records become the load's. */
static int flash(const lg_opts *o, const lg_load_cfg *c, lg_run *r, lg_err *err)
{
    lg_flash_cfg fc = {.targets = r->targets, .ntargets = r->ntargets, .buyers = o->buyers,
                       .procs = o->procs, .run_id = c->run_id, .shape = &c->shape,
                       .timeout_ms = o->timeout_ms};
    return lg_flash_run(&fc, r->sale, &r->load, err);
}

/* A sale's descriptors are checked before anything is created for it. */
static int flash_limits(const lg_opts *o, lg_run *r, lg_err *err)
{
    r->sale = calloc(1, sizeof(*r->sale));
    if (r->sale == NULL || lg_sale_init(r->sale, r->ntargets) != LG_OK)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory");
    return lg_flash_limits(o->buyers, o->procs, r->sale, err);
}

static lg_rec *find_rec(void *arg, const char *request_id, lg_line **lines)
{
    return lg_result_find(arg, request_id, lines);
}

/* GET /items/{id} from the first target that answers: a replica may have
 * been stopped or killed during the run (the fault scenarios do that), and
 * every replica reads the same database. When none answers, each being
 * unreachable or asking to be asked again (503 with Retry-After: a database
 * restarting after a fault), asks again every second or so until --settle-s
 * has passed since the read-back first had to wait; r notes the wait. */
static int get_item_any(const lg_opts *o, lg_run *r, int k, long long rows,
                        lg_item_state *st, lg_ledger **ledger, lg_err *err)
{
    for (;;) {
        int rc = LG_OK;
        for (int t = 0; t < r->ntargets; t++)
            if ((rc = read_item(o, r, r->targets[t].url, k, rows, 0, st, ledger, err)) == LG_OK)
                return LG_OK;
        if (rc != LG_ERR_TRANSPORT && rc != LG_ERR_LATER)
            return rc;
        int64_t now = lg_now_ns();
        if (r->settle_until_ns == 0) {
            r->settle_until_ns = now + (int64_t)o->settle_s * 1000000000;
            snprintf(r->read_waited_for, sizeof(r->read_waited_for), "%s", err->msg);
        }
        int pause_ms = rc == LG_ERR_LATER ? SETTLE_LATER_MS : SETTLE_UNREACHABLE_MS;
        if (now + (int64_t)pause_ms * 1000000 > r->settle_until_ns) {
            char was[LG_ERR_MSG_MAX];
            snprintf(was, sizeof(was), "%s", err->msg);
            return lg_errf(err, rc, "%.400s; gave up reading back after waiting %d s "
                           "(--settle-s)", was, o->settle_s);
        }
        sleep_ms(pause_ms);
        r->read_waited_s += (double)(lg_now_ns() - now) / 1e9;
    }
}

/* Reads item k after the run and reconciles the ledger rows written during it. */
static int read_back(const lg_opts *o, lg_run *r, int k, lg_err *err)
{
    lg_item_check *c = &r->items[k];
    /* each line of a request adds at most one row, so this usually reads them all */
    long long wanted = c->acked_n + c->undetermined_n + c->refused_n + 16;
    lg_item_state st;
    lg_ledger *ledger = NULL;
    int rc = get_item_any(o, r, k, wanted, &st, o->api ? NULL : &ledger, err);
    long long delta = rc == LG_OK ? st.order_count - c->orders0 : 0;
    if (rc == LG_OK && !o->api && delta > wanted) {
        lg_ledger_free(ledger);
        ledger = NULL;
        rc = get_item_any(o, r, k, delta, &st, &ledger, err);
        delta = rc == LG_OK ? st.order_count - c->orders0 : 0;
    }
    if (rc != LG_OK)
        return rc;
    c->stock1 = st.stock;
    c->sold1 = st.sold;
    c->orders1 = st.order_count;
    if (ledger == NULL) /* --api: a profile gives totals at most, no rows */
        return LG_OK;
    size_t n;
    const lg_ledger_row *rows = lg_ledger_rows(ledger, &n);
    if (delta >= 0 && (size_t)delta <= n)
        lg_verdict_ledger(c, k, rows, (size_t)delta, find_rec, &r->load);
    lg_ledger_free(ledger);
    return LG_OK;
}

static void expectations(const lg_opts *o, lg_run *r)
{
    lg_expect_in in;
    memcpy(in.counts, r->load.total.counts, sizeof(in.counts));
    in.ok_min_us = hist_count(r->load.total.ok) ? hist_min(r->load.total.ok) : 0;
    in.work_ms = o->work_ms;
    r->nexpect = lg_scenario_expect(o->buyers ? "flash" : o->scenario, &in, r->expect);
}

/* A finding on an item with a string id names it as the service does:
 * "item 1: ..." becomes "item sku-7: ...". */
static void name_string_id(const lg_item_check *c, const lg_profile_id *id, lg_finding *f)
{
    char prefix[40], text[sizeof(f->text)];
    int n = snprintf(prefix, sizeof(prefix), "item %lld: ", c->id);
    if (id->str == NULL || strncmp(f->text, prefix, (size_t)n) != 0)
        return;
    snprintf(text, sizeof(text), "item %s: %s", id->str, f->text + n);
    memcpy(f->text, text, sizeof(text));
}

/* Judges every item, then (for carts) the orders, into r->findings. */
static int judge_all(lg_run *r, lg_err *err)
{
    r->findings = calloc((size_t)(r->nitems + 1) * LG_FINDING_COUNT, sizeof(*r->findings));
    if (r->findings == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory for findings");
    int v;
    for (int k = 0; k < r->nitems; k++) {
        lg_finding *f = r->findings + r->nfindings;
        int n = lg_verdict_judge(&r->items[k], f, LG_FINDING_COUNT, &v);
        for (int i = 0; r->api_ids && i < n; i++)
            name_string_id(&r->items[k], &r->api_ids[k], &f[i]);
        r->nfindings += n;
        r->violations += v;
    }
    if (r->carts) {
        r->nfindings += lg_verdict_judge_orders(&r->orders, r->findings + r->nfindings,
                                                LG_FINDING_COUNT, &v);
        r->violations += v;
    }
    return LG_OK;
}

static double reserve_clock(void *arg)
{
    return (double)(lg_now_ns() - *(const int64_t *)arg) / 1e9;
}

static int totals_of(const lg_opts *o, lg_run *r, lg_rsv_totals *t, lg_err *err)
{
    lg_item_state st;
    int rc = get_item_any(o, r, 0, 1, &st, NULL, err);
    *t = (lg_rsv_totals){st.stock, st.reserved, st.sold, st.returned};
    return rc;
}

/* After the buyers, the item is watched until every hold has run out (and its
 * grace), so the last lapses are checked too; then read once more. */
static int reserve_settle(const lg_opts *o, const lg_reserve_cfg *c, lg_run *r, lg_err *err)
{
    int64_t until = 0, t0 = lg_now_ns();
    for (long long k = 0; k < r->nrsv; k++) {
        int64_t t = lg_rsv_release_by(&r->rsv[k], c->hold_ms, LG_RESERVE_GRACE_MS);
        if (t != INT64_MAX && t > until)
            until = t;
    }
    uint64_t done = lg_tally_requests(&r->load.total);
    uint64_t bad = done - r->load.total.counts[LG_OUT_OK];
    for (int waited = 0; !r->stopped && lg_now_ns() - c->start_ns < until; waited += 10) {
        sleep_ms(10);
        if (c->tick && waited % TICK_MS == 0 && c->tick((long long)done, (long long)bad,
                                                         c->tick_arg) > 0)
            r->stopped = 1; /* the user stopped waiting: the checks cover what was read */
    }
    r->rsv_waited_s = (double)(lg_now_ns() - t0) / 1e9;
    double a = reserve_clock((void *)&c->start_ns);
    int rc = totals_of(o, r, &r->rsv_after, err);
    lg_rsv_totals *t = &r->rsv_after;
    lg_sample x = {0, t->available, t->sold, t->reserved, t->returned, a,
                   reserve_clock((void *)&c->start_ns)};
    x.t_s = (x.t0_s + x.t1_s) / 2;
    if (rc == LG_OK)
        lg_samples_push(&r->stock, &x);
    return rc;
}

/* The run's tick, for a reserve run's engine. */
typedef struct reserve_tick {
    lg_tick_fn tick;
    void *arg;
    int64_t start_ns;
} reserve_tick;

static int reserve_ticked(long long done, long long errors, void *arg)
{
    reserve_tick *t = arg;
    lg_progress p = {(uint64_t)done, (uint64_t)errors, (double)(lg_now_ns() - t->start_ns) / 1e9};
    return t->tick(&p, t->arg);
}

/* A reserve run instead of the load: buyers, the wait for the last holds
 * (not when the user stopped it), every reservation read back. */
static int reserve(const lg_opts *o, lg_run *r, const char *run_id, lg_tick_fn tick, void *arg,
                   lg_err *err)
{
    lg_reserve_cfg c = {.targets = r->targets, .ntargets = r->ntargets,
                        .item_id = r->items[0].id, .buyers = o->requests,
                        .buyer_ids = o->buyer_ids, .concurrency = o->concurrency,
                        .rate = o->rate, .qmin = o->qmin, .qmax = o->qmax,
                        .hold_ms = o->hold_ms, .timeout_ms = o->timeout_ms,
                        .retries = o->retries, .run_id = run_id};
    memcpy(c.share, o->share, sizeof(c.share));
    r->rsv = calloc((size_t)o->requests, sizeof(*r->rsv));
    if (r->rsv == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory for %lld reservations", o->requests);
    r->nrsv = o->requests;
    int rc = totals_of(o, r, &r->rsv_before, err);
    lg_sampler *sampler = NULL;
    c.start_ns = lg_now_ns();
    reserve_tick rt = {tick, arg, c.start_ns};
    if (tick)
        c.tick = reserve_ticked, c.tick_arg = &rt;
    if (rc == LG_OK)
        rc = lg_sampler_start(&(lg_sampler_cfg){.targets = r->targets, .ntargets = r->ntargets,
                                                .item = r->items[0].id, .clock = reserve_clock,
                                                .clock_arg = &c.start_ns},
                              &sampler, err);
    lg_faults *faults = NULL;
    if (rc == LG_OK)
        rc = faults_start(o, c.start_ns, &faults, err);
    if (rc == LG_OK)
        rc = lg_reserve_run(&c, r->rsv, &r->load, &r->stopped, err);
    lg_faults_join(faults, &r->faults, &r->nfaults); /* the buyers are done: undo the faults */
    if (rc == LG_OK)
        rc = reserve_settle(o, &c, r, err);
    lg_samples tail;
    lg_samples_init(&tail, r->items[0].id);
    lg_sampler_stop(sampler, &tail, NULL);
    lg_samples *last = &r->stock; /* the settle's read goes after the sampler's */
    if (rc == LG_OK && last->n > 1) {
        lg_sample fin = last->s[--last->n];
        for (int i = 0; i < tail.n; i++)
            lg_samples_push(last, &tail.s[i]);
        lg_samples_push(last, &fin);
    }
    return rc == LG_OK ? lg_reserve_read(&c, r->rsv, err) : rc;
}

/* A note per fault that ran, from the answers around it; each fault command
 * that failed or never ran is an unmet expectation: the run did not test what
 * it meant to (a replica that was never paused), or left the service as it
 * should not. */
static int judge_faults(lg_run *r, lg_err *err)
{
    if (r->nfaults == 0)
        return LG_OK;
    lg_finding *more = realloc(r->findings, (size_t)(r->nfindings + r->nfaults) * sizeof(*more));
    if (more == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory for the faults' notes");
    r->findings = more;
    for (int i = 0; i < r->nfaults; i++) {
        const lg_fault_result *f = &r->faults[i];
        double t0, t1;
        long long in_history = lg_fault_span(f, r->load.start_ns, &t0, &t1) == 0
                                   ? lg_fault_history_in(&r->history, t0, t1) : -1;
        if (lg_fault_note(f, i, &r->load.total.series, r->load.start_ns, r->load.elapsed_s,
                          in_history, &r->findings[r->nfindings]) == 0)
            r->nfindings++;
        if (r->nexpect < LG_EXPECT_MAX)
            r->nexpect += lg_fault_never_ran(f, i, r->load.elapsed_s, r->expect[r->nexpect],
                                             LG_EXPECT_TEXT);
        for (int end = 0; end < 2 && r->nexpect < LG_EXPECT_MAX; end++)
            r->nexpect += lg_fault_failure(f, i, end, r->expect[r->nexpect], LG_EXPECT_TEXT);
    }
    return LG_OK;
}

static int judge_reserve(const lg_opts *o, lg_run *r, lg_err *err)
{
    r->findings = calloc(LG_FINDING_COUNT, sizeof(*r->findings));
    if (r->findings == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory for findings");
    lg_rsv_in in = {.r = r->rsv, .n = (size_t)r->nrsv, .hold_ms = o->hold_ms,
                    .grace_ms = LG_RESERVE_GRACE_MS, .limit = o->buyer_limit,
                    .nbuyers = o->buyer_ids ? o->buyer_ids : (int)r->nrsv,
                    .before = r->rsv_before, .after = r->rsv_after, .samples = &r->stock,
                    .stopped = r->stopped};
    int v = 0;
    r->nfindings = lg_rsv_judge(&in, r->findings, LG_FINDING_COUNT, &v, &r->rsv_sum);
    if (r->nfindings < 0)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory checking the reservations");
    r->violations = v;
    if (o->history_ms > 0) /* no check: cancels and lapses give units back */
        snprintf(r->history.skipped, sizeof(r->history.skipped),
                 "reservations give units back (cancels, lapses): the stock may rise");
    lg_item_check *c = &r->items[0];
    c->stock1 = r->rsv_after.available;
    c->sold1 = r->rsv_after.sold;
    expectations(o, r);
    int rc = judge_faults(r, err);
    if (rc != LG_OK)
        return rc;
    r->verdict = r->violations || r->nexpect ? LG_FAIL : LG_PASS;
    return LG_OK;
}

/* The history check of the first item's reads (history.h); its findings join
 * the verdict's. Skipped, saying why, where the stock may rise (reservations
 * give units back) or no request times were kept (a flash sale's buyers). */
static int judge_history(const lg_opts *o, lg_run *r, lg_err *err)
{
    if (o->history_ms == 0 || r->nitems == 0)
        return LG_OK;
    const char *skip = o->buyers ? "a flash sale's buyers keep no request times" : NULL;
    lg_history_in in = {.batches = r->load.batches, .nbatch = r->load.nbatch, .item = 0,
                        .id = r->items[0].id, .initial = r->items[0].stock0,
                        .reads = r->reads.r, .nreads = r->reads.n, .failed = r->reads.failed,
                        .interval_ms = o->history_ms, .every = r->reads.every,
                        .run_id = r->load.run_id, .skip = skip};
    lg_history_check(&in, &r->history); /* no memory: skipped, saying so; the verdict stands */
    lg_finding *grown = realloc(r->findings, (size_t)(r->nfindings + 3) * sizeof(*grown));
    if (grown == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory for findings");
    r->findings = grown;
    int v;
    int n = lg_history_judge(&r->history, r->findings + r->nfindings, 3, &v);
    for (int i = 0; r->api_ids && i < n; i++) /* item 0's, named as the service does */
        name_string_id(&r->items[0], &r->api_ids[0], &r->findings[r->nfindings + i]);
    r->nfindings += n;
    r->violations += v;
    return LG_OK;
}

static int judge(const lg_opts *o, lg_run *r, lg_err *err)
{
    if (r->rsv)
        return judge_reserve(o, r, err);
    lg_result *res = &r->load;
    if (lg_verdict_answers(r->items, r->nitems, res->batches, res->nbatch) != LG_OK)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory checking the answers");
    double read_s = 0;
    for (int k = 0; k < r->nitems; k++) {
        int64_t t0 = lg_now_ns();
        int rc = read_back(o, r, k, err);
        if (rc != LG_OK)
            return rc;
        if (k == 0) /* stamped like a sample, on the run's clock: after every sample */
            read_s = (double)((t0 + lg_now_ns()) / 2 - res->start_ns) / 1e9;
    }
    lg_samples_add(&r->stock, read_s, r->items[0].stock1, r->items[0].sold1);
    lg_verdict_missing(r->items, r->nitems, res->batches, res->nbatch);
    if (r->carts)
        lg_verdict_orders(r->items, r->nitems, res->batches, res->nbatch, res->run_id,
                          &r->orders);
    int rc = judge_all(r, err);
    if (rc == LG_OK)
        rc = judge_history(o, r, err);
    if (rc != LG_OK)
        return rc;
    if (strcmp(r->label, "none") != 0) /* the race defeats any scenario premise */
        expectations(o, r);
    if ((rc = judge_faults(r, err)) != LG_OK)
        return rc;
    r->verdict = r->violations || r->nexpect ? LG_FAIL : LG_PASS;
    return LG_OK;
}

int lg_run_exec(const lg_opts *o, const lg_target *targets, int ntargets, const char *label,
                lg_tick_fn tick, void *arg, lg_run *out, lg_err *err)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->label, sizeof(out->label), "%s", label ? label : "");
    out->targets = targets;
    out->ntargets = ntargets;
    out->verdict = LG_NO_VERDICT;
    out->carts = o->lmax > 0;
    char run_id[16];
    make_run_id(run_id, sizeof(run_id));
    int raw = o->get_path[0] != '\0';
    int rc = o->buyers ? flash_limits(o, out, err) : LG_OK;
    if (rc == LG_OK)
        rc = raw ? probe_targets(o, out, err) : setup_items(o, out, run_id, err);
    if (rc == LG_OK && !raw)
        rc = check_shared(o, out, err);
    long long *ids = calloc((size_t)(out->nitems ? out->nitems : 1), sizeof(*ids));
    if (rc == LG_OK && ids == NULL)
        rc = lg_errf(err, LG_ERR_NOMEM, "out of memory");
    for (int k = 0; rc == LG_OK && k < out->nitems; k++)
        ids[k] = out->items[k].id;
    if (rc == LG_OK && out->nitems > 0) {
        lg_samples_init(&out->stock, ids[0]);
        lg_samples_add(&out->stock, 0, out->items[0].stock0, out->items[0].sold0);
    }
    lg_load_cfg cfg;
    load_cfg(o, out, ids, run_id, &cfg);
    if (rc == LG_OK && o->buyers)
        rc = flash(o, &cfg, out, err);
    else if (rc == LG_OK && o->reserve)
        rc = reserve(o, out, run_id, tick, arg, err);
    else if (rc == LG_OK)
        rc = drive(o, &cfg, o->json_path[0] || o->html_path[0], o->history_ms, tick, arg, out,
                   err);
    free(ids);
    if (rc == LG_OK && !raw)
        rc = judge(o, out, err);
    if (rc != LG_OK)
        lg_run_free(out);
    return rc;
}

void lg_run_free(lg_run *r)
{
    lg_result_free(&r->load);
    lg_reads_free(&r->reads);
    lg_history_free(&r->history);
    free(r->items);
    for (int k = 0; r->api_ids && k < r->nitems; k++)
        lg_profile_id_free(&r->api_ids[k]);
    free(r->api_ids);
    r->api_ids = NULL;
    free(r->findings);
    free(r->rsv);
    r->rsv = NULL;
    free(r->faults);
    r->faults = NULL;
    r->nfaults = 0;
    if (r->sale)
        lg_sale_free(r->sale);
    free(r->sale);
    r->items = NULL;
    r->findings = NULL;
    r->sale = NULL;
}
