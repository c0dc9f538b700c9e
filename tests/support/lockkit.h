/* lockkit.h - what the lock's own tests share: a client of a test Redis, and
 * the arrival-order scenario, where waiters of other processes queue while a
 * key is held and must get it in the order they asked. */
#ifndef TEST_LOCKKIT_H
#define TEST_LOCKKIT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lock/dlock.h"
#include "tests/support/harness.h"

struct CMUnitTest;

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

/* A client of the lock on the Redis at 127.0.0.1:port (a helper process's). */
dlock_client *th_lock_client_at(int port);

/* The same with command_timeout_ms (0: the default), for a client that gives
 * up sooner or later than the default's 1 s. NULL when it can't be made. */
dlock_client *th_lock_client_timeout(int port, int command_timeout_ms);

/* A client of the n Redis servers r[0..n-1] as a quorum, with a 300 ms
 * command timeout; any of them that is down (pid 0) is started first
 * (empty, on its port). NULL when it can't be made. */
dlock_client *th_lock_quorum_client(th_redis *r, int n);

/* main's groups: tests run once in notify mode, then once in spin mode,
 * *wait_mode telling each test which. Returns how many failed. */
int th_lock_both_modes(const char *name, const struct CMUnitTest *tests, size_t n,
                       int *wait_mode);

/* Starts this binary as a helper process with args (NULL-terminated, at
 * most 4), for the test to stop by its PID (th_wait, th_signal). */
pid_t th_lock_helper(const char *const *args);

/* An integer command's answer (a string is read as a number, nil as 0;
 * LLONG_MIN on failure): fmt takes key and a suffix. */
long long th_lock_command_int(redisContext *rc, const char *fmt, const char *key,
                              const char *sfx);

/* A worker thread of a helper process: the process's client, a Redis
 * connection of its own, its number, the key, options (lease 2 s, wait 60 s,
 * the group's mode). Its body returns how many of its steps failed. */
struct th_lock_worker {
    dlock_client *c;
    redisContext *rc;
    int id;
    const char *key;
    dlock_opts o;
    int failures;
    int (*body)(struct th_lock_worker *w);
};

/* A helper's body: n (<= 64) workers on one client of the Redis at port.
 * Returns its exit status: 0 when no step failed, 1 when some did, 2
 * when it could not start. */
int th_lock_run_workers(int port, int n, const char *key, int mode,
                        int (*body)(struct th_lock_worker *w));

/* Runs n (<= 16) helper processes "flag port key mode" on r at once and
 * asserts each exited 0; each is stopped by its PID after a generous bound. */
void th_lock_run_helpers(const th_redis *r, const char *flag, const char *key, int mode, int n);

/* A helper's body: takes key with acquire (lease_ms, no max_renewals, notify
 * mode), says so (INCR key:held) and holds it until killed. Returns 2 when
 * it could not. th_lock_wait_held is the test's side: asserts the helper
 * holds within 10 s. */
typedef int (*th_lock_acquire_fn)(dlock_client *c, const char *key, const dlock_opts *o,
                                  dlock_handle **out);
int th_lock_hold_until_killed(int port, const char *key, int lease_ms, th_lock_acquire_fn acquire);

/* A client of r through a new proxy (*proxy; th_proxy_stop it), with a
 * 300 ms command timeout, connected. */
dlock_client *th_lock_client_behind_proxy(const th_redis *r, th_proxy **proxy);

/* An acquire with acquire (30 s lease) whose reply never came - a proxy
 * holds the script 1 s, past the client's 300 ms command timeout, then
 * delivers it, so it runs late - must not keep key for its lease: returns
 * how long client, asking once that script ran, waited for key (with
 * acquire, up to 10 s; the test fails when it got nothing). */
int64_t th_lock_unanswered_acquire(const th_redis *r, dlock_client *client, const char *key,
                                   int wait_mode, th_lock_acquire_fn acquire);
void th_lock_wait_held(const th_redis *r, const char *key);

/* Scripts r has run so far (EVALSHA calls: every libdlock script call). */
long long th_lock_script_calls(const th_redis *r);

#define TH_FIFO_MAX 8

/* While h holds key, waiters[i] (n <= TH_FIFO_MAX clients) ask for it with o,
 * one after the other, each once the one before is in line on every server
 * of servers[0..nservers-1]; then h is released. A waiter that gets the key
 * holds it 20 ms. Fills order with the waiters' indices in the order they got
 * it and returns how many did; *ms (may be NULL) is the time from the release
 * until every waiter was done. Out of order, it prints when each got the key.
 * A grant lasts the longer of the releaser's and the waiter's grace (2
 * retry_ms + 100): a waiter that claims a grant after it lapsed goes to the
 * back of the line, so give the waiters a retry_ms that a loaded machine
 * can't outlast. */
int th_lock_fifo(const th_redis *servers, int nservers, dlock_handle *h, const char *key,
                 const dlock_opts *o, dlock_client *const *waiters, int n, int *order,
                 int64_t *ms);

#endif
