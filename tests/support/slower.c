/* slower.c - how much slower than a quiet machine timing bounds must allow
 * for, now: a sanitizer's factor times the load measured once per test
 * binary, so that a bound that says "not starved" or "not hung" holds on a
 * busy 2-core machine as on an idle one. Declared in harness.h (TH_SLOWER). */
#include "tests/support/harness.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define SLOWER_MAX 10  /* beyond this a bound detects nothing any more */
#define SAMPLE_MS 20   /* one timed stretch of CPU work */
#define SAMPLES 5      /* the busiest counts: load comes in bursts */

static int slower;
static pthread_once_t measured = PTHREAD_ONCE_INIT;

static double seconds(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wall time over this thread's CPU time for about SAMPLE_MS of CPU work: 1
 * when the thread had a core to itself, 2 when it got half of one. Measured
 * against itself, it needs no calibration for the CPU's speed. */
static double wall_per_cpu(void)
{
    double w0 = seconds(CLOCK_MONOTONIC), c0 = seconds(CLOCK_THREAD_CPUTIME_ID), c1;
    volatile unsigned long x = 0;
    do {
        for (int i = 0; i < 100000; i++)
            x += (unsigned long)i * 2654435761u;
    } while ((c1 = seconds(CLOCK_THREAD_CPUTIME_ID)) - c0 < SAMPLE_MS / 1e3);
    return (seconds(CLOCK_MONOTONIC) - w0) / (c1 - c0);
}

static void measure(void)
{
    const char *forced = getenv("TH_SLOWER");
    double load = 1;
    if (forced && atoi(forced) > 0) {
        load = atoi(forced);
    } else {
        for (int i = 0; i < SAMPLES; i++) {
            double r = wall_per_cpu();
            load = r > load ? r : load;
        }
        /* a run queue longer than the cores, over the last minute: what a
         * short sample can miss between the bursts of a sanitizer suite */
        double avg[1];
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (getloadavg(avg, 1) == 1 && cores > 0 && avg[0] / (double)cores > load)
            load = avg[0] / (double)cores;
    }
    int n = (int)ceil(load * TH_SANITIZER_SLOWER - 0.05); /* 1.02 is still 1 */
    slower = n < 1 ? 1 : n > SLOWER_MAX ? SLOWER_MAX : n;
    fprintf(stderr, "harness: timing bounds x%d (load %.2f%s, sanitizer x%d)\n", slower, load,
            forced ? ", from TH_SLOWER" : "", TH_SANITIZER_SLOWER);
}

int th_slower(void)
{
    pthread_once(&measured, measure);
    return slower;
}
