/* metrics.c - stockd's counters and their Prometheus text rendering. */
#include "metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static const int tracked_status[] = {200, 201, 400, 404, 405, 409, 413, 500, 503, 0};
#define NSTATUS (sizeof(tracked_status) / sizeof(tracked_status[0])) /* last: any other */
#define OUTCOMES_MAX 32

/* Lines per order: the bucket bounds (the last is +Inf). */
static const int line_bounds[] = {1, 2, 3, 4, 5, 8, 16, 32, -1};
#define LINE_BUCKETS (sizeof(line_bounds) / sizeof(line_bounds[0]))
/* Batches and orders per group-commit transaction. */
static const int group_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, -1};
#define GROUP_BUCKETS (sizeof(group_bounds) / sizeof(group_bounds[0]))

struct metrics {
    const char *const *outcome_names;
    int noutcomes;
    _Atomic uint64_t requests[ROUTE_COUNT][NSTATUS];
    _Atomic uint64_t reduce_outcomes[OUTCOMES_MAX]; /* POST /reduceStock */
    _Atomic uint64_t order_outcomes[OUTCOMES_MAX];  /* every order, either endpoint */
    _Atomic uint64_t units_deducted;
    _Atomic uint64_t lines[LINE_BUCKETS], lines_sum;             /* lines per order */
    _Atomic uint64_t multi_wait[DLOCK_WAIT_BUCKETS], multi_wait_ms, multi_waits;
    _Atomic uint64_t commit_batches[GROUP_BUCKETS], commit_batches_sum; /* per transaction */
    _Atomic uint64_t commit_orders[GROUP_BUCKETS], commit_orders_sum;
};

/* Counts value into the first bucket whose bound holds it (bounds end with -1: +Inf). */
static void observe(_Atomic uint64_t *buckets, const int *bounds, int n, int64_t value)
{
    int b = 0;
    while (b < n - 1 && value > bounds[b])
        b++;
    atomic_fetch_add(&buckets[b], 1);
}

metrics *metrics_new(const char *const *outcome_names, int noutcomes)
{
    if (noutcomes > OUTCOMES_MAX)
        return NULL;
    metrics *m = calloc(1, sizeof(*m));
    if (m) {
        m->outcome_names = outcome_names;
        m->noutcomes = noutcomes;
    }
    return m;
}

void metrics_free(metrics *m) { free(m); }

void metrics_request(metrics *m, enum route_id route, int status)
{
    size_t s = 0;
    while (s < NSTATUS - 1 && tracked_status[s] != status)
        s++;
    atomic_fetch_add(&m->requests[route < ROUTE_COUNT ? route : ROUTE_NOT_FOUND][s], 1);
}

void metrics_reduce(metrics *m, int outcome)
{
    if (outcome >= 0 && outcome < m->noutcomes)
        atomic_fetch_add(&m->reduce_outcomes[outcome], 1);
}

void metrics_order(metrics *m, int outcome, int nlines, int64_t units)
{
    if (outcome >= 0 && outcome < m->noutcomes)
        atomic_fetch_add(&m->order_outcomes[outcome], 1);
    observe(m->lines, line_bounds, (int)LINE_BUCKETS, nlines);
    atomic_fetch_add(&m->lines_sum, (uint64_t)nlines);
    atomic_fetch_add(&m->units_deducted, (uint64_t)units);
}

void metrics_multilock_wait(metrics *m, int64_t ms)
{
    observe(m->multi_wait, dlock_wait_bucket_ms, DLOCK_WAIT_BUCKETS, ms);
    atomic_fetch_add(&m->multi_wait_ms, (uint64_t)(ms > 0 ? ms : 0));
    atomic_fetch_add(&m->multi_waits, 1);
}

void metrics_commit(metrics *m, int batches, int orders)
{
    observe(m->commit_batches, group_bounds, (int)GROUP_BUCKETS, batches);
    atomic_fetch_add(&m->commit_batches_sum, (uint64_t)batches);
    observe(m->commit_orders, group_bounds, (int)GROUP_BUCKETS, orders);
    atomic_fetch_add(&m->commit_orders_sum, (uint64_t)orders);
}

struct buf {
    char *data;
    size_t len, cap;
    int failed;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !b->failed; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n + 1;
        char *grown = realloc(b->data, cap);
        if (grown == NULL)
            b->failed = 1;
        else
            b->data = grown, b->cap = cap;
    }
}

static void put_counter(struct buf *b, const char *name, const char *help, uint64_t v)
{
    put(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

/* One series of a histogram family, with labels ("" or `k="v",...`):
 * cumulative buckets (bounds end with -1: +Inf, each divided by scale for
 * the le label), _sum (also divided) and _count. */
static void put_histogram_series(struct buf *b, const char *name, const char *labels,
                                 const uint64_t *buckets, const int *bounds, int n, double scale,
                                 uint64_t sum, uint64_t count)
{
    const char *sep = labels[0] ? "," : "";
    uint64_t cumulative = 0;
    for (int i = 0; i < n; i++) {
        cumulative += buckets[i];
        if (bounds[i] < 0)
            put(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                (unsigned long long)cumulative);
        else
            put(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, bounds[i] / scale,
                (unsigned long long)cumulative);
    }
    if (labels[0])
        put(b, "%s_sum{%s} %g\n%s_count{%s} %llu\n", name, labels, sum / scale, name, labels,
            (unsigned long long)count);
    else
        put(b, "%s_sum %g\n%s_count %llu\n", name, sum / scale, name, (unsigned long long)count);
}

/* A histogram family of one unlabelled series. */
static void put_histogram(struct buf *b, const char *name, const char *help,
                          const uint64_t *buckets, const int *bounds, int n, double scale,
                          uint64_t sum, uint64_t count)
{
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    put_histogram_series(b, name, "", buckets, bounds, n, scale, sum, count);
}

/* Copies atomic counters for rendering. */
static void load_all(uint64_t *out, _Atomic uint64_t *in, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = atomic_load(&in[i]);
}

static void render_lock(struct buf *b, dlock_client *locks)
{
    dlock_stats s;
    dlock_stats_read(locks, &s);
    put_counter(b, "stockd_lock_acquired_total", "Lock acquisitions that succeeded.", s.acquired);
    put_counter(b, "stockd_lock_handoffs_total",
                "Acquisitions handed over by a local holder, without Redis.", s.handoffs);
    put_counter(b, "stockd_lock_wait_timeouts_total", "Lock waits that gave up after wait-ms.",
                s.timeouts);
    put_counter(b, "stockd_lock_renewals_total", "Watchdog lease renewals.", s.renewals);
    put_counter(b, "stockd_lock_interrupts_total", "Holders interrupted after max renewals.",
                s.interrupts);
    put_counter(b, "stockd_lock_lost_total", "Holders that lost their lease.", s.lost);
    put_counter(b, "stockd_lock_redis_errors_total", "Redis commands that failed.",
                s.redis_errors);
    put_counter(b, "stockd_lock_redis_connects_total", "Redis connections opened or attempted.",
                s.connects);
    put_counter(b, "stockd_lock_orphaned_total",
                "Lock tokens whose acquire or release may have run unanswered, given up in the "
                "background.", s.orphaned);
    put_counter(b, "stockd_lock_orphans_dropped_total",
                "Of those, dropped untried because too many were in doubt at once.",
                s.orphans_dropped);
    put_histogram(b, "stockd_lock_wait_seconds", "Time spent acquiring a lock.",
                  s.wait_buckets, dlock_wait_bucket_ms, DLOCK_WAIT_BUCKETS, 1000.0,
                  s.wait_sum_ms, s.wait_count);
}

/* Each Redis server's state, labelled node="host:port". */
static void render_nodes(struct buf *b, dlock_client *locks)
{
    int n = dlock_node_count(locks);
    dlock_node_info info[DLOCK_NODES_MAX];
    for (int i = 0; i < n; i++)
        dlock_node_info_read(locks, i, &info[i]);
    put(b, "# HELP stockd_redis_up Whether the Redis server answered its last call.\n"
           "# TYPE stockd_redis_up gauge\n");
    for (int i = 0; i < n; i++)
        put(b, "stockd_redis_up{node=\"%s\"} %d\n", info[i].name, info[i].up);
    put(b, "# HELP stockd_redis_calls_total Calls sent to the Redis server.\n"
           "# TYPE stockd_redis_calls_total counter\n");
    for (int i = 0; i < n; i++)
        put(b, "stockd_redis_calls_total{node=\"%s\"} %llu\n", info[i].name,
            (unsigned long long)info[i].calls);
    put(b, "# HELP stockd_redis_errors_total Calls to the Redis server that failed (no "
           "answer in time, no connection, or an error reply).\n"
           "# TYPE stockd_redis_errors_total counter\n");
    for (int i = 0; i < n; i++)
        put(b, "stockd_redis_errors_total{node=\"%s\"} %llu\n", info[i].name,
            (unsigned long long)info[i].errors);
    put(b, "# HELP stockd_redis_latency_seconds Round trip of the answered calls.\n"
           "# TYPE stockd_redis_latency_seconds histogram\n");
    for (int i = 0; i < n; i++) {
        char labels[DLOCK_HOST_MAX + 32];
        snprintf(labels, sizeof(labels), "node=\"%s\"", info[i].name);
        uint64_t answered = 0;
        for (int k = 0; k < DLOCK_LATENCY_BUCKETS; k++)
            answered += info[i].latency_buckets[k];
        put_histogram_series(b, "stockd_redis_latency_seconds", labels, info[i].latency_buckets,
                             dlock_latency_bucket_us, DLOCK_LATENCY_BUCKETS, 1e6,
                             info[i].latency_sum_us, answered);
    }
}

/* Results by outcome, one labelled counter family. */
static void put_outcomes(struct buf *b, const metrics *m, const char *name, const char *help,
                         _Atomic uint64_t *counts)
{
    put(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (int o = 0; o < m->noutcomes; o++)
        put(b, "%s{outcome=\"%s\"} %llu\n", name, m->outcome_names[o],
            (unsigned long long)atomic_load(&counts[o]));
}

static void render_orders(struct buf *b, metrics *m)
{
    uint64_t lines[LINE_BUCKETS], waits[DLOCK_WAIT_BUCKETS], orders = 0;
    put_outcomes(b, m, "stockd_reduce_total", "/reduceStock results, by outcome.",
                 m->reduce_outcomes);
    put_outcomes(b, m, "stockd_orders_total", "Orders (either endpoint), by outcome.",
                 m->order_outcomes);
    load_all(lines, m->lines, (int)LINE_BUCKETS);
    for (size_t i = 0; i < LINE_BUCKETS; i++)
        orders += lines[i];
    put_histogram(b, "stockd_order_lines", "Lines per order.", lines, line_bounds,
                  (int)LINE_BUCKETS, 1.0, atomic_load(&m->lines_sum), orders);
    load_all(waits, m->multi_wait, DLOCK_WAIT_BUCKETS);
    put_histogram(b, "stockd_multilock_wait_seconds",
                  "Time spent acquiring the locks of an order of several items as one.", waits,
                  dlock_wait_bucket_ms, DLOCK_WAIT_BUCKETS, 1000.0,
                  atomic_load(&m->multi_wait_ms), atomic_load(&m->multi_waits));
    uint64_t groups[GROUP_BUCKETS], commits = 0;
    load_all(groups, m->commit_batches, (int)GROUP_BUCKETS);
    for (size_t i = 0; i < GROUP_BUCKETS; i++)
        commits += groups[i];
    put_histogram(b, "stockd_commit_batches", "Batches (each one lock hold) per group-commit "
                  "transaction.", groups, group_bounds, (int)GROUP_BUCKETS, 1.0,
                  atomic_load(&m->commit_batches_sum), commits);
    load_all(groups, m->commit_orders, (int)GROUP_BUCKETS);
    put_histogram(b, "stockd_commit_orders", "Orders per group-commit transaction.", groups,
                  group_bounds, (int)GROUP_BUCKETS, 1.0, atomic_load(&m->commit_orders_sum),
                  commits);
    put_counter(b, "stockd_units_deducted_total", "Units of stock deducted.",
                atomic_load(&m->units_deducted));
}

char *metrics_render(metrics *m, const metrics_extra *x, size_t *len)
{
    struct buf b = {malloc(4096), 0, 4096, 0};
    b.failed = b.data == NULL;
    put(&b, "# HELP stockd_http_requests_total HTTP requests answered, by route and status.\n"
            "# TYPE stockd_http_requests_total counter\n");
    for (int r = 0; r < ROUTE_COUNT; r++)
        for (size_t s = 0; s < NSTATUS; s++) {
            uint64_t v = atomic_load(&m->requests[r][s]);
            if (v == 0)
                continue;
            if (tracked_status[s])
                put(&b, "stockd_http_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                    route_name(r), tracked_status[s], (unsigned long long)v);
            else
                put(&b, "stockd_http_requests_total{route=\"%s\",status=\"other\"} %llu\n",
                    route_name(r), (unsigned long long)v);
        }
    render_orders(&b, m);
    put_counter(&b, "stockd_http_deadline_closed_total",
                "Connections closed because a request line, headers or body came too slowly.",
                x->reaped);
    put(&b, "# HELP stockd_inflight_requests Requests being handled.\n"
            "# TYPE stockd_inflight_requests gauge\nstockd_inflight_requests %lld\n",
        (long long)x->inflight);
    if (x->locks) {
        render_lock(&b, x->locks);
        render_nodes(&b, x->locks);
    }
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    *len = b.len;
    return b.data;
}
