/* metrics.c - stockd's counters and their Prometheus text rendering. */
#include "metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static const int tracked_status[] = {200, 201, 400, 404, 405, 409, 413, 500, 503, 0};
#define NSTATUS (sizeof(tracked_status) / sizeof(tracked_status[0])) /* last: any other */
#define OUTCOMES_MAX 32

struct metrics {
    const char *const *outcome_names;
    int noutcomes;
    _Atomic uint64_t requests[ROUTE_COUNT][NSTATUS];
    _Atomic uint64_t outcomes[OUTCOMES_MAX];
    _Atomic uint64_t units_deducted;
};

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

void metrics_outcome(metrics *m, int outcome, int ok, int64_t quantity)
{
    if (outcome >= 0 && outcome < m->noutcomes)
        atomic_fetch_add(&m->outcomes[outcome], 1);
    if (ok)
        atomic_fetch_add(&m->units_deducted, (uint64_t)quantity);
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
    put(b, "# HELP stockd_lock_wait_seconds Time spent acquiring a lock.\n"
           "# TYPE stockd_lock_wait_seconds histogram\n");
    uint64_t cumulative = 0;
    for (int i = 0; i < DLOCK_WAIT_BUCKETS; i++) {
        cumulative += s.wait_buckets[i];
        if (dlock_wait_bucket_ms[i] < 0)
            put(b, "stockd_lock_wait_seconds_bucket{le=\"+Inf\"} %llu\n",
                (unsigned long long)cumulative);
        else
            put(b, "stockd_lock_wait_seconds_bucket{le=\"%g\"} %llu\n",
                dlock_wait_bucket_ms[i] / 1000.0, (unsigned long long)cumulative);
    }
    put(b, "stockd_lock_wait_seconds_sum %.3f\nstockd_lock_wait_seconds_count %llu\n",
        s.wait_sum_ms / 1000.0, (unsigned long long)s.wait_count);
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
    put(&b, "# HELP stockd_reduce_total /reduceStock results, by outcome.\n"
            "# TYPE stockd_reduce_total counter\n");
    for (int o = 0; o < m->noutcomes; o++)
        put(&b, "stockd_reduce_total{outcome=\"%s\"} %llu\n", m->outcome_names[o],
            (unsigned long long)atomic_load(&m->outcomes[o]));
    put_counter(&b, "stockd_units_deducted_total", "Units of stock deducted.",
                atomic_load(&m->units_deducted));
    put_counter(&b, "stockd_http_deadline_closed_total",
                "Connections closed because a request line, headers or body came too slowly.",
                x->reaped);
    put(&b, "# HELP stockd_inflight_requests Requests being handled.\n"
            "# TYPE stockd_inflight_requests gauge\nstockd_inflight_requests %lld\n",
        (long long)x->inflight);
    if (x->locks)
        render_lock(&b, x->locks);
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    *len = b.len;
    return b.data;
}
