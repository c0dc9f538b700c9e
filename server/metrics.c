/* metrics.c - stockd's counters and their Prometheus text rendering. */
#include "server/metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/procinfo.h"

static const int tracked_status[] = {200, 201, 400, 401, 403, 404, 405, 409, 413, 429, 500, 503, 0};
#define NSTATUS (sizeof(tracked_status) / sizeof(tracked_status[0])) /* last: any other */
#define OUTCOMES_MAX 32

/* Lines per order: the bucket bounds (the last is +Inf). */
static const int line_bounds[] = {1, 2, 3, 4, 5, 8, 16, 32, -1};
#define LINE_BUCKETS (sizeof(line_bounds) / sizeof(line_bounds[0]))
/* Batches and orders per group-commit transaction. */
static const int group_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, -1};
#define GROUP_BUCKETS (sizeof(group_bounds) / sizeof(group_bounds[0]))
/* Hand-offs between threads per order: the door's event thread to a service
 * thread and back is 2; a lock asked through Redis, a timer, a cart add. */
static const int handoff_bounds[] = {0, 1, 2, 3, 4, 5, 6, -1};
#define HANDOFF_BUCKETS (sizeof(handoff_bounds) / sizeof(handoff_bounds[0]))
/* Request latency, microseconds: from 0.1 ms (a /health) to 10 s (past any wait-ms). */
static const int latency_bounds[] = {100,    250,    500,     1000,    2500,    5000,
                                     10000,  25000,  50000,   100000,  250000,  500000,
                                     1000000, 2500000, 5000000, 10000000, -1};
#define LATENCY_BUCKETS (sizeof(latency_bounds) / sizeof(latency_bounds[0]))
/* A lapsed reservation's lag, ms past its expiresAt when given back: the
 * promise is 1 s. */
static const int sweep_lag_bounds[] = {10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000,
                                       30000, 60000, -1};
#define SWEEP_LAG_BUCKETS (sizeof(sweep_lag_bounds) / sizeof(sweep_lag_bounds[0]))

struct metrics {
    const char *const *outcome_names;
    int noutcomes;
    _Atomic uint64_t requests[ROUTE_COUNT][NSTATUS];
    _Atomic uint64_t latency[ROUTE_COUNT][LATENCY_BUCKETS], latency_sum_us[ROUTE_COUNT];
    _Atomic uint64_t reduce_outcomes[OUTCOMES_MAX]; /* POST /reduceStock */
    _Atomic uint64_t order_outcomes[OUTCOMES_MAX];  /* every order, either endpoint */
    _Atomic uint64_t units_deducted;
    _Atomic uint64_t lines[LINE_BUCKETS], lines_sum;             /* lines per order */
    _Atomic uint64_t multi_wait[DLOCK_WAIT_BUCKETS], multi_wait_ms;
    _Atomic uint64_t commit_batches[GROUP_BUCKETS], commit_batches_sum; /* per transaction */
    _Atomic uint64_t commit_orders[GROUP_BUCKETS], commit_orders_sum;
    _Atomic uint64_t batch_orders[GROUP_BUCKETS], batch_orders_sum; /* per lock hold */
    _Atomic uint64_t handoffs[HANDOFF_BUCKETS], handoffs_sum;     /* per order */
    _Atomic uint64_t reservations[METRICS_RES_COUNT]; /* transitions, by result */
    _Atomic uint64_t orders_cancelled, buyer_limit_refusals;
    _Atomic uint64_t sweep_passes, expired;                        /* the expiry sweep */
    _Atomic uint64_t sweep_lag[SWEEP_LAG_BUCKETS], sweep_lag_ms;
    _Atomic uint64_t client_sources[METRICS_CLIENT_SOURCES];      /* behind a proxy */
    _Atomic uint64_t per_address_refusals[METRICS_PER_ADDRESS_COUNT];
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

void metrics_request(metrics *m, enum route_id route, int status, int64_t us)
{
    size_t s = 0;
    while (s < NSTATUS - 1 && tracked_status[s] != status)
        s++;
    if (route >= ROUTE_COUNT)
        route = ROUTE_NOT_FOUND;
    atomic_fetch_add(&m->requests[route][s], 1);
    observe(m->latency[route], latency_bounds, (int)LATENCY_BUCKETS, us);
    atomic_fetch_add(&m->latency_sum_us[route], (uint64_t)(us > 0 ? us : 0));
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
}

void metrics_commit(metrics *m, int batches, int orders)
{
    observe(m->commit_batches, group_bounds, (int)GROUP_BUCKETS, batches);
    atomic_fetch_add(&m->commit_batches_sum, (uint64_t)batches);
    observe(m->commit_orders, group_bounds, (int)GROUP_BUCKETS, orders);
    atomic_fetch_add(&m->commit_orders_sum, (uint64_t)orders);
}

void metrics_batch(metrics *m, int orders)
{
    observe(m->batch_orders, group_bounds, (int)GROUP_BUCKETS, orders);
    atomic_fetch_add(&m->batch_orders_sum, (uint64_t)orders);
}

void metrics_handoffs(metrics *m, int n)
{
    observe(m->handoffs, handoff_bounds, (int)HANDOFF_BUCKETS, n);
    atomic_fetch_add(&m->handoffs_sum, (uint64_t)n);
}

void metrics_sweep_pass(metrics *m) { atomic_fetch_add(&m->sweep_passes, 1); }

void metrics_reservations_expired(metrics *m, int n, const int64_t *lag_ms)
{
    for (int i = 0; i < n; i++) {
        int64_t lag = lag_ms[i] > 0 ? lag_ms[i] : 0; /* a clock that stepped: never negative */
        observe(m->sweep_lag, sweep_lag_bounds, (int)SWEEP_LAG_BUCKETS, lag);
        atomic_fetch_add(&m->sweep_lag_ms, (uint64_t)lag);
    }
    atomic_fetch_add(&m->expired, (uint64_t)(n > 0 ? n : 0));
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

/* Units (v) per the family's unit: 1, or a power of ten (1000 for
 * milliseconds to seconds). */
enum scale { SCALE_ONE = 1, SCALE_MILLI = 1000, SCALE_MICRO = 1000000 };

/* v / scale in decimal, exact and without trailing zeros ("0.0005", "12",
 * "1234567.89"): %g would round sums past six digits. */
static const char *scaled(char out[32], uint64_t v, enum scale scale)
{
    unsigned long long whole = v / (uint64_t)scale, frac = v % (uint64_t)scale;
    int digits = scale == SCALE_MICRO ? 6 : scale == SCALE_MILLI ? 3 : 0;
    while (digits > 0 && frac % 10 == 0 && frac > 0)
        frac /= 10, digits--;
    if (frac == 0)
        snprintf(out, 32, "%llu", whole);
    else
        snprintf(out, 32, "%llu.%0*llu", whole, digits, frac);
    return out;
}

/* One series of a histogram family, with labels ("" or `k="v",...`):
 * cumulative buckets (bounds end with -1: +Inf), _sum and _count (the +Inf
 * bucket, so the two always agree). Bounds and sum are in units of 1/scale of
 * the family's unit. */
static void put_histogram_series(struct buf *b, const char *name, const char *labels,
                                 const uint64_t *buckets, const int *bounds, int n,
                                 enum scale scale, uint64_t sum)
{
    const char *sep = labels[0] ? "," : "";
    char num[32];
    uint64_t cumulative = 0;
    for (int i = 0; i < n; i++) {
        cumulative += buckets[i];
        put(b, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, labels, sep,
            bounds[i] < 0 ? "+Inf" : scaled(num, (uint64_t)bounds[i], scale),
            (unsigned long long)cumulative);
    }
    const char *open = labels[0] ? "{" : "", *close = labels[0] ? "}" : "";
    put(b, "%s_sum%s%s%s %s\n%s_count%s%s%s %llu\n", name, open, labels, close,
        scaled(num, sum, scale), name, open, labels, close, (unsigned long long)cumulative);
}

static void put_family(struct buf *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A histogram family of one unlabelled series. */
static void put_histogram(struct buf *b, const char *name, const char *help,
                          const uint64_t *buckets, const int *bounds, int n, enum scale scale,
                          uint64_t sum)
{
    put_family(b, name, "histogram", help);
    put_histogram_series(b, name, "", buckets, bounds, n, scale, sum);
}

#define HIST_MAX 32 /* buckets of any histogram here */
_Static_assert(LATENCY_BUCKETS <= HIST_MAX && GROUP_BUCKETS <= HIST_MAX &&
                   LINE_BUCKETS <= HIST_MAX && DLOCK_WAIT_BUCKETS <= HIST_MAX &&
                   SWEEP_LAG_BUCKETS <= HIST_MAX,
               "a histogram has more buckets than HIST_MAX");

/* One series of this process's own atomic counters. */
static void put_atomic_series(struct buf *b, const char *name, const char *labels,
                              _Atomic uint64_t *buckets, const int *bounds, int n,
                              enum scale scale, _Atomic uint64_t *sum)
{
    uint64_t copy[HIST_MAX];
    for (int i = 0; i < n; i++)
        copy[i] = atomic_load(&buckets[i]);
    put_histogram_series(b, name, labels, copy, bounds, n, scale, atomic_load(sum));
}

static void put_atomic_histogram(struct buf *b, const char *name, const char *help,
                                 _Atomic uint64_t *buckets, const int *bounds, int n,
                                 enum scale scale, _Atomic uint64_t *sum)
{
    put_family(b, name, "histogram", help);
    put_atomic_series(b, name, "", buckets, bounds, n, scale, sum);
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
                  s.wait_buckets, dlock_wait_bucket_ms, DLOCK_WAIT_BUCKETS, SCALE_MILLI,
                  s.wait_sum_ms);
    put_histogram(b, "stockd_lock_hold_seconds",
                  "Time a lock was held, from acquisition to release (a multi-lock is one hold).",
                  s.hold_buckets, dlock_hold_bucket_us, DLOCK_HOLD_BUCKETS, SCALE_MICRO,
                  s.hold_sum_us);
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
        snprintf(labels, sizeof(labels), "node=\"%.*s\"", (int)sizeof(info[i].name),
                 info[i].name);
        put_histogram_series(b, "stockd_redis_latency_seconds", labels, info[i].latency_buckets,
                             dlock_latency_bucket_us, DLOCK_LATENCY_BUCKETS, SCALE_MICRO,
                             info[i].latency_sum_us);
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
    put_outcomes(b, m, "stockd_reduce_total", "/reduceStock results, by outcome.",
                 m->reduce_outcomes);
    put_outcomes(b, m, "stockd_orders_total", "Orders (either endpoint), by outcome.",
                 m->order_outcomes);
    put_atomic_histogram(b, "stockd_order_lines", "Lines per order.", m->lines, line_bounds,
                         (int)LINE_BUCKETS, SCALE_ONE, &m->lines_sum);
    put_atomic_histogram(b, "stockd_multilock_wait_seconds",
                         "Time spent acquiring the locks of an order of several items as one.",
                         m->multi_wait, dlock_wait_bucket_ms, DLOCK_WAIT_BUCKETS, SCALE_MILLI,
                         &m->multi_wait_ms);
    put_atomic_histogram(b, "stockd_batch_orders",
                         "Orders committed per lock hold under group commit (the batch size).",
                         m->batch_orders, group_bounds, (int)GROUP_BUCKETS, SCALE_ONE,
                         &m->batch_orders_sum);
    put_atomic_histogram(b, "stockd_commit_batches",
                         "Batches (each one lock hold) per group-commit transaction.",
                         m->commit_batches, group_bounds, (int)GROUP_BUCKETS, SCALE_ONE,
                         &m->commit_batches_sum);
    put_atomic_histogram(b, "stockd_commit_orders", "Orders per group-commit transaction.",
                         m->commit_orders, group_bounds, (int)GROUP_BUCKETS, SCALE_ONE,
                         &m->commit_orders_sum);
    put_counter(b, "stockd_units_deducted_total", "Units of stock deducted.",
                atomic_load(&m->units_deducted));
    put_atomic_histogram(b, "stockd_order_handoffs",
                         "Hand-offs between threads per order, from its door to its answer.",
                         m->handoffs, handoff_bounds, (int)HANDOFF_BUCKETS, SCALE_ONE,
                         &m->handoffs_sum);
}

void metrics_reservation(metrics *m, enum metrics_reservation result)
{
    if (result < METRICS_RES_COUNT)
        atomic_fetch_add(&m->reservations[result], 1);
}

void metrics_order_cancelled(metrics *m) { atomic_fetch_add(&m->orders_cancelled, 1); }

void metrics_client_source(metrics *m, int source)
{
    if (source >= 0 && source < METRICS_CLIENT_SOURCES)
        atomic_fetch_add(&m->client_sources[source], 1);
}

void metrics_per_address_refusal(metrics *m, enum metrics_per_address limit)
{
    atomic_fetch_add(&m->per_address_refusals[limit], 1);
}

void metrics_buyer_limit_refusal(metrics *m) { atomic_fetch_add(&m->buyer_limit_refusals, 1); }

/* The reservations' series: one family of transitions by result (held,
 * confirmed and cancelled by requests; expired by the sweep), then the
 * sweep's own. */
static void render_reservations(struct buf *b, metrics *m, int64_t held)
{
    static const char *const results[METRICS_RES_COUNT] = {"held", "confirmed", "cancelled"};
    put_family(b, "stockd_reservations_total", "counter",
               "Reservations' transitions made by this replica, by result.");
    for (int i = 0; i < METRICS_RES_COUNT; i++)
        put(b, "stockd_reservations_total{result=\"%s\"} %llu\n", results[i],
            (unsigned long long)atomic_load(&m->reservations[i]));
    put(b, "stockd_reservations_total{result=\"expired\"} %llu\n",
        (unsigned long long)atomic_load(&m->expired));
    put_counter(b, "stockd_orders_cancelled_total", "Orders cancelled (their units returned).",
                atomic_load(&m->orders_cancelled));
    put_counter(b, "stockd_buyer_limit_refusals_total",
                "Requests refused because a buyer would pass an item's per-buyer limit.",
                atomic_load(&m->buyer_limit_refusals));
    if (held >= 0)
        put(b, "# HELP stockd_reservations_held Reservations held now (lapsed ones not yet given "
               "back included), as the database says.\n# TYPE stockd_reservations_held gauge\n"
               "stockd_reservations_held %lld\n", (long long)held);
    put_counter(b, "stockd_reservation_sweeps_total",
                "Passes of the expiry sweep (looks for lapsed reservations) this replica made.",
                atomic_load(&m->sweep_passes));
    put_atomic_histogram(b, "stockd_reservation_sweep_lag_seconds",
                         "How long after its expiresAt a lapsed reservation's units were given "
                         "back (the database's clock).", m->sweep_lag, sweep_lag_bounds,
                         (int)SWEEP_LAG_BUCKETS, SCALE_MILLI, &m->sweep_lag_ms);
}

/* Behind a proxy: where client addresses came from, and the per-address limits. */
static void render_clients(struct buf *b, metrics *m)
{
    static const char *const sources[METRICS_CLIENT_SOURCES] = {"peer", "forwarded", "ignored"};
    static const char *const limits[METRICS_PER_ADDRESS_COUNT] = {"connections", "in_flight"};
    put_family(b, "stockd_http_client_address_total", "counter",
               "Requests by where their client's address came from: the connection's peer, "
               "X-Forwarded-For from a --trusted-proxies peer, or the peer because it sent "
               "X-Forwarded-For untrusted (ignored).");
    for (int i = 0; i < METRICS_CLIENT_SOURCES; i++)
        put(b, "stockd_http_client_address_total{source=\"%s\"} %llu\n", sources[i],
            (unsigned long long)atomic_load(&m->client_sources[i]));
    put_family(b, "stockd_http_per_address_refusals_total", "counter",
               "Refusals for --max-connections-per-ip, by limit: a peer's connections, or a "
               "forwarded client's requests in flight (429).");
    for (int i = 0; i < METRICS_PER_ADDRESS_COUNT; i++)
        put(b, "stockd_http_per_address_refusals_total{limit=\"%s\"} %llu\n", limits[i],
            (unsigned long long)atomic_load(&m->per_address_refusals[i]));
}

static void render_http(struct buf *b, metrics *m)
{
    put_family(b, "stockd_http_requests_total", "counter",
               "HTTP requests answered, by route and status.");
    for (int r = 0; r < ROUTE_COUNT; r++)
        for (size_t s = 0; s < NSTATUS; s++) {
            uint64_t v = atomic_load(&m->requests[r][s]);
            char status[16];
            snprintf(status, sizeof(status), tracked_status[s] ? "%d" : "other",
                     tracked_status[s]);
            if (v)
                put(b, "stockd_http_requests_total{route=\"%s\",status=\"%s\"} %llu\n",
                    route_name(r), status, (unsigned long long)v);
        }
    put_family(b, "stockd_http_request_duration_seconds", "histogram",
               "Time from a request's last byte to its answer, by route.");
    for (int r = 0; r < ROUTE_COUNT; r++) {
        char labels[64];
        snprintf(labels, sizeof(labels), "route=\"%s\"", route_name(r));
        put_atomic_series(b, "stockd_http_request_duration_seconds", labels, m->latency[r],
                          latency_bounds, (int)LATENCY_BUCKETS, SCALE_MICRO,
                          &m->latency_sum_us[r]);
    }
    render_clients(b, m);
}

/* The process_* series every Prometheus client library exports. */
static void render_process(struct buf *b)
{
    procinfo p;
    if (procinfo_read(&p) != 0)
        return; /* no /proc: leave them out rather than report zeros */
    put(b, "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
           "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.2f\n",
        p.cpu_seconds);
    put(b, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
           "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %llu\n",
        (unsigned long long)p.resident_bytes);
    put(b, "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
           "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes %llu\n",
        (unsigned long long)p.virtual_bytes);
    put(b, "# HELP process_open_fds Number of open file descriptors.\n"
           "# TYPE process_open_fds gauge\nprocess_open_fds %lld\n",
        (long long)p.open_fds);
    put(b, "# HELP process_max_fds Maximum number of open file descriptors.\n"
           "# TYPE process_max_fds gauge\nprocess_max_fds %lld\n",
        (long long)p.max_fds);
    put(b, "# HELP process_threads Number of OS threads in the process.\n"
           "# TYPE process_threads gauge\nprocess_threads %lld\n",
        (long long)p.threads);
    put(b, "# HELP process_start_time_seconds Start time of the process since unix epoch in "
           "seconds.\n# TYPE process_start_time_seconds gauge\n"
           "process_start_time_seconds %.2f\n",
        p.start_time);
}

char *metrics_render(metrics *m, const metrics_extra *x, size_t *len)
{
    struct buf b = {malloc(4096), 0, 4096, 0};
    b.failed = b.data == NULL;
    render_http(&b, m);
    render_orders(&b, m);
    render_reservations(&b, m, x->reservations_held);
    put_counter(&b, "stockd_http_deadline_closed_total",
                "Connections closed because a request line, headers or body came too slowly.",
                x->reaped);
    put_counter(&b, "stockd_service_tasks_total",
                "Tasks run on the service threads (each a hand-off to one of them).", x->tasks);
    put(&b, "# HELP stockd_inflight_requests Requests being handled or answered.\n"
            "# TYPE stockd_inflight_requests gauge\nstockd_inflight_requests %lld\n",
        (long long)x->inflight);
    if (x->storage_node && x->storage_node[0])
        put(&b, "# HELP stockd_storage_node_info The database server this replica writes to "
                "(host:port).\n# TYPE stockd_storage_node_info gauge\n"
                "stockd_storage_node_info{node=\"%s\"} 1\n", x->storage_node);
    if (x->locks) {
        render_lock(&b, x->locks);
        render_nodes(&b, x->locks);
    }
    render_process(&b);
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    *len = b.len;
    return b.data;
}
