/* lockkit.h - what the lock's own tests share: a client of a test Redis, and
 * the arrival-order scenario, where waiters of other processes queue while a
 * key is held and must get it in the order they asked. */
#ifndef TEST_LOCKKIT_H
#define TEST_LOCKKIT_H

#include <stdint.h>

#include "lock/dlock.h"
#include "tests/harness.h"

/* A client of the lock on Redis r, with the defaults: another process, as far
 * as the lock can tell, from every other client. NULL when it can't be made. */
dlock_client *th_lock_client(const th_redis *r);

/* A lock suite's groups: main names the suite's Redis and client once
 * (th_lock_suite), then runs each group with th_lock_group_setup, which
 * starts the Redis on first use (the suite stops it at the end) and makes
 * the group's client, and th_lock_group_teardown, which frees it. */
void th_lock_suite(th_redis *r, dlock_client **c);
int th_lock_group_setup(void **state);
int th_lock_group_teardown(void **state);

/* Options for a lock test: the defaults with lease_ms and wait_ms as given,
 * quick retries (10 ms), in wait_mode. */
dlock_opts th_lock_opts(int lease_ms, int wait_ms, int wait_mode);

#define TH_FIFO_MAX 8

/* While h holds key, waiters[i] (n <= TH_FIFO_MAX clients) ask for it with o,
 * one after the other, each once the one before is in line on every server
 * of servers[0..nservers-1]; then h is released. A waiter that gets the key
 * holds it 20 ms. Fills order with the waiters' indices in the order they got
 * it and returns how many did; *ms (may be NULL) is the time from the release
 * until every waiter was done. */
int th_lock_fifo(const th_redis *servers, int nservers, dlock_handle *h, const char *key,
                 const dlock_opts *o, dlock_client *const *waiters, int n, int *order,
                 int64_t *ms);

#endif
