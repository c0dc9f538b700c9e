/* sync.h - the clock and waiting helpers the lock library's threads share:
 * CLOCK_MONOTONIC milli- and microseconds (wall-clock jumps must not stretch or cut a
 * lease or a wait), condition variables on that clock, a sleep that does not
 * end early, and the jitter that keeps waiters from retrying in step. */
#ifndef DLOCK_SYNC_H
#define DLOCK_SYNC_H

#include <pthread.h>
#include <stdint.h>

/* Milliseconds on CLOCK_MONOTONIC. */
int64_t dlock__now_ms(void);

/* Microseconds on CLOCK_MONOTONIC: for latencies and hold times. */
int64_t dlock__now_us(void);

/* Initialises a condition variable whose timed waits use CLOCK_MONOTONIC.
 * Returns 0 or an errno value. */
int dlock__cond_init(pthread_cond_t *cv);

/* Waits on cv (mu held) until signalled or until the monotonic at_ms. */
void dlock__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t at_ms);

/* Sleeps ms milliseconds, resuming after signals. */
void dlock__sleep_ms(int64_t ms);

/* A pause of 0.5x..1.5x retry_ms, from a per-thread random generator. */
int dlock__jitter_ms(int retry_ms);

#endif
