/* watch.c - the replicas watched during a flash sale: /health timed round
 * after round, /metrics read for the process_* peaks. Each call has its own
 * short time-out so that one hung replica cannot stall the watching of the
 * others for long; a probe that timed out counts as failed. */
#include "loadgen/watch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loadgen/api.h"
#include "loadgen/evloop.h"

#define WATCH_EVERY_MS 20
#define METRICS_EVERY 5      /* rounds between two reads of /metrics */
#define PROBE_TIMEOUT_MS 2000

struct lg_watch {
    const lg_target *targets;
    int ntargets;
    pthread_t tid;
    atomic_int stop;
    lg_sale seen; /* only its health histogram, failures and peaks are used */
};

/* One timed GET /health: its latency, or a failure. */
static void probe_health(lg_watch *w, int t)
{
    char url[LG_URL_MAX + 16];
    snprintf(url, sizeof(url), "%s/health", w->targets[t].url);
    lg_answer_full a;
    lg_err err;
    int64_t t0 = lg_now_ns();
    int rc = lg_api_call_within("GET", url, NULL, PROBE_TIMEOUT_MS, &a, &err);
    if (rc == LG_OK && a.status == 200)
        hist_record(w->seen.health, (uint64_t)(lg_now_ns() - t0) / 1000);
    else
        w->seen.health_failed++;
    lg_answer_full_free(&a);
}

static void read_metrics(lg_watch *w, int t)
{
    char url[LG_URL_MAX + 16];
    snprintf(url, sizeof(url), "%s/metrics", w->targets[t].url);
    lg_answer_full a;
    lg_err err;
    int rc = lg_api_call_within("GET", url, NULL, PROBE_TIMEOUT_MS, &a, &err);
    if (rc == LG_OK && a.status == 200) {
        lg_sale_peak_from(&w->seen, t, a.body);
        w->seen.peaks[t].scrapes++;
    } else {
        w->seen.peaks[t].failed++;
    }
    lg_answer_full_free(&a);
}

static void *watch_main(void *arg)
{
    lg_watch *w = arg;
    for (long round = 0; !atomic_load(&w->stop); round++) {
        for (int t = 0; t < w->ntargets; t++) {
            probe_health(w, t);
            if (round % METRICS_EVERY == 0)
                read_metrics(w, t);
        }
        struct timespec ts = {0, WATCH_EVERY_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (int t = 0; t < w->ntargets; t++) /* the peak may have come since the last read */
        read_metrics(w, t);
    return NULL;
}

int lg_watch_start(const lg_target *targets, int ntargets, lg_watch **out, lg_err *err)
{
    *out = NULL;
    lg_watch *w = calloc(1, sizeof(*w));
    if (w == NULL || lg_sale_init(&w->seen, ntargets) != LG_OK) {
        if (w)
            lg_sale_free(&w->seen);
        free(w);
        return lg_errf(err, LG_ERR_NOMEM, "out of memory for the watcher");
    }
    w->targets = targets;
    w->ntargets = ntargets;
    atomic_init(&w->stop, 0);
    int e = pthread_create(&w->tid, NULL, watch_main, w);
    if (e != 0) {
        lg_sale_free(&w->seen);
        free(w);
        return lg_errf(err, LG_ERR_SYS, "cannot start the watcher: %s", strerror(e));
    }
    *out = w;
    return LG_OK;
}

void lg_watch_stop(lg_watch *w, lg_sale *s)
{
    if (w == NULL)
        return;
    atomic_store(&w->stop, 1);
    pthread_join(w->tid, NULL);
    hist_merge(s->health, w->seen.health);
    s->health_failed += w->seen.health_failed;
    memcpy(s->peaks, w->seen.peaks, sizeof(s->peaks));
    lg_sale_free(&w->seen);
    free(w);
}
