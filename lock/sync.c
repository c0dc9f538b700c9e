/* sync.c - the clock and waiting helpers the lock library's threads share. */
#include "lock/sync.h"

#include <errno.h>
#include <sys/random.h>
#include <time.h>

int64_t dlock__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dlock__now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int dlock__cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

void dlock__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t at_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ms = at_ms - dlock__now_ms();
    if (ms < 0)
        ms = 0;
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

void dlock__sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int dlock__jitter_ms(int retry_ms)
{
    static _Thread_local uint64_t state;
    while (state == 0)
        if (getrandom(&state, sizeof(state), 0) != sizeof(state))
            state = 0;
    state ^= state << 13, state ^= state >> 7, state ^= state << 17; /* xorshift64 */
    return retry_ms / 2 + (int)(state % (uint64_t)(retry_ms + 1));
}
