/* internal.h - what the lock library's files share: the client and handle
 * structs, the error buffer, the clock. Not installed; see dlock.h for the API. */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "dlock.h"
#include "pool.h"
#include "watchdog.h"

struct dlock_client {
    dlock_pool *pool;
    dlock_watchdog *wd;
    struct {
        _Atomic uint64_t acquired, timeouts, renewals, interrupts, lost, redis_errors;
        _Atomic uint64_t wait_count, wait_sum_ms, wait_buckets[DLOCK_WAIT_BUCKETS];
    } stats;
};

/* A held lock. Fields below `mu-protected` are read and written under the
 * watchdog's mutex; the rest are fixed at acquisition. */
struct dlock_handle {
    dlock_client *client;
    int lease_ms;
    int max_renewals;
    int64_t fence;
    char token[DLOCK_TOKEN_LEN + 1];
    /* mu-protected */
    struct dlock_handle *prev, *next; /* watchdog list, while watched */
    int watched, renewing, interrupted, lost;
    int renewals;
    int64_t next_renew_ms;  /* when the watchdog renews next */
    int64_t valid_until_ms; /* local lease deadline on CLOCK_MONOTONIC */
    pthread_cond_t wake;    /* dlock_sleep waits here */
    char key[];
};

/* Sets the calling thread's error text (printf-style) and returns code. */
int dlock_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* How much earlier than Redis the holder considers its lease over: clock drift
 * between this host and Redis, as the Redlock paper budgets it (1% + 2 ms). */
static inline int dlock_drift_ms(int lease_ms) { return lease_ms / 100 + 2; }

static inline int64_t dlock_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Absolute CLOCK_MONOTONIC time for pthread_cond_timedwait, ms from now. */
static inline struct timespec dlock_deadline_ts(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

/* A condition variable that times out on CLOCK_MONOTONIC (wall-clock jumps
 * must not stretch or cut lock waits). */
int dlock_cond_init(pthread_cond_t *cv);

#endif
