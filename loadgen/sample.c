/* sample.c - reads one item's stock from the service while the load runs,
 * on a thread that only sleeps and asks, so the load's loops never wait for
 * it. */
#include "loadgen/sample.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAP_MS 5 /* how often the thread looks at its stop flag */

struct lg_sampler {
    lg_sampler_cfg c;
    lg_samples got;
    lg_reads reads;     /* every read, with c.every_ms */
    double chart_t0_s;  /* the last read the chart got */
    atomic_int stop;
    pthread_t tid;
};

void lg_samples_init(lg_samples *s, long long item)
{
    memset(s, 0, sizeof(*s));
    s->item = item;
    s->interval_ms = LG_SAMPLE_FIRST_MS;
}

void lg_samples_push(lg_samples *s, const lg_sample *x)
{
    if (s->n == LG_SAMPLES_MAX) {
        for (int i = 1; i < LG_SAMPLES_MAX / 2; i++)
            s->s[i] = s->s[2 * i];
        s->n = LG_SAMPLES_MAX / 2;
        s->interval_ms *= 2;
    }
    s->s[s->n++] = *x;
}

void lg_samples_add(lg_samples *s, double t_s, long long stock, long long sold)
{
    lg_sample x = {t_s, stock, sold, -1, -1, t_s, t_s};
    lg_samples_push(s, &x);
}

static void nap(double s)
{
    if (s > NAP_MS / 1000.0)
        s = NAP_MS / 1000.0;
    struct timespec ts = {0, (long)(s * 1e9)};
    nanosleep(&ts, NULL);
}

/* One GET of the item from the first target that answers; 0 when none did
 * (or the sampler was stopped before one did). */
static int take(lg_sampler *p)
{
    double t0 = p->c.clock(p->c.clock_arg);
    for (int t = 0; t < p->c.ntargets && !atomic_load(&p->stop); t++) {
        lg_item_state st;
        lg_err err;
        if (p->c.read(p->c.read_arg, p->c.targets[t].url, LG_SAMPLE_TIMEOUT_MS, &st, &err) ==
            LG_OK) {
            double t1 = p->c.clock(p->c.clock_arg);
            lg_sample x = {(t0 + t1) / 2, st.stock, st.sold, st.reserved, st.returned, t0, t1};
            if (p->c.every_ms > 0) {
                lg_read rd = {(int64_t)(t0 * 1e9), (int64_t)(t1 * 1e9), st.stock};
                lg_reads_add(&p->reads, &rd); /* out of memory: counted failed */
                /* the chart keeps its own pace, or thinning would leave it uneven */
                if (p->got.n > 0 && t0 - p->chart_t0_s < p->got.interval_ms / 1000.0)
                    return 1;
                p->chart_t0_s = t0;
            }
            lg_samples_push(&p->got, &x);
            return 1;
        }
    }
    if (!atomic_load(&p->stop)) /* a read cut short by the stop did not fail */
        p->got.failed++;
    return 0;
}

static void *sampler_main(void *arg)
{
    lg_sampler *p = arg;
    double next = 0;
    while (!atomic_load(&p->stop)) {
        double now = p->c.clock(p->c.clock_arg);
        if (now < next) {
            nap(next - now);
            continue;
        }
        take(p);
        next = now + (p->c.every_ms > 0 ? p->c.every_ms : p->got.interval_ms) / 1000.0;
    }
    return NULL;
}

int lg_sample_read_stockd(void *arg, const char *base, int timeout_ms, lg_item_state *st,
                          lg_err *err)
{
    return lg_api_get_item(base, *(const long long *)arg, 1, timeout_ms, st, NULL, err);
}

int lg_sampler_start(const lg_sampler_cfg *c, lg_sampler **out, lg_err *err)
{
    *out = NULL;
    lg_sampler *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return lg_errf(err, LG_ERR_NOMEM, "out of memory for the stock sampler");
    p->c = *c;
    if (p->c.read == NULL) { /* stockd's GET, of the item the sampler keeps */
        p->c.read = lg_sample_read_stockd;
        p->c.read_arg = &p->got.item;
    }
    lg_samples_init(&p->got, c->item);
    atomic_init(&p->stop, 0);
    int e = pthread_create(&p->tid, NULL, sampler_main, p);
    if (e != 0) {
        free(p);
        return lg_errf(err, LG_ERR_SYS, "cannot start the stock sampler: %s", strerror(e));
    }
    *out = p;
    return LG_OK;
}

void lg_sampler_stop(lg_sampler *p, lg_samples *into, lg_reads *reads)
{
    if (p == NULL)
        return;
    atomic_store(&p->stop, 1);
    pthread_join(p->tid, NULL);
    p->reads.failed += p->got.failed;
    p->reads.interval_ms = p->c.every_ms;
    if (reads)
        *reads = p->reads;
    else
        lg_reads_free(&p->reads);
    into->failed += p->got.failed;
    for (int i = 0; i < p->got.n; i++)
        lg_samples_push(into, &p->got.s[i]);
    if (p->got.interval_ms > into->interval_ms)
        into->interval_ms = p->got.interval_ms;
    free(p);
}
