/* lockkit.c - helpers of the lock's integration tests (see lockkit.h). */
#include "lockkit.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

dlock_client *th_lock_client(const th_redis *r)
{
    dlock_config cfg;
    dlock_config_defaults(&cfg);
    cfg.port = r->port;
    dlock_client *c;
    return dlock_client_new(&cfg, &c) == DLOCK_OK ? c : NULL;
}

static th_redis *suite_redis; /* the running suite's, named by its main */
static dlock_client **suite_client;

void th_lock_suite(th_redis *r, dlock_client **c)
{
    suite_redis = r;
    suite_client = c;
}

int th_lock_group_setup(void **state)
{
    (void)state;
    if (suite_redis->pid == 0 && th_redis_start(suite_redis) != 0)
        return -1;
    return (*suite_client = th_lock_client(suite_redis)) ? 0 : -1;
}

int th_lock_group_teardown(void **state)
{
    (void)state;
    dlock_client_free(*suite_client);
    *suite_client = NULL;
    return 0;
}

dlock_opts th_lock_opts(int lease_ms, int wait_ms, int wait_mode)
{
    dlock_opts o;
    dlock_opts_defaults(&o);
    o.lease_ms = lease_ms;
    o.wait_ms = wait_ms;
    o.retry_ms = 10;
    o.wait_mode = wait_mode;
    return o;
}

struct fifo_waiter {
    dlock_client *c;
    const char *key;
    const dlock_opts *o;
    int id, *order, *n;
    pthread_mutex_t *mu;
};

static void *fifo_wait(void *arg)
{
    struct fifo_waiter *f = arg;
    dlock_handle *h;
    if (dlock_acquire(f->c, f->key, f->o, &h) == DLOCK_OK) {
        pthread_mutex_lock(f->mu);
        f->order[(*f->n)++] = f->id;
        pthread_mutex_unlock(f->mu);
        th_sleep_ms(20);
        dlock_release(h);
    }
    return NULL;
}

int th_lock_fifo(const th_redis *servers, int nservers, dlock_handle *h, const char *key,
                 const dlock_opts *o, dlock_client *const *waiters, int n, int *order,
                 int64_t *ms)
{
    assert_true(n <= TH_FIFO_MAX);
    dlock_names names;
    dlock_names_of(key, &names);
    pthread_t t[TH_FIFO_MAX];
    struct fifo_waiter f[TH_FIFO_MAX];
    int got = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    for (int i = 0; i < n; i++) {
        f[i] = (struct fifo_waiter){waiters[i], key, o, i, order, &got, &mu};
        pthread_create(&t[i], NULL, fifo_wait, &f[i]);
        for (int k = 0; k < nservers; k++) /* in line on every server first */
            while (th_redis_int(&servers[k], "ZCARD %s", names.queue) != i + 1)
                th_sleep_ms(2);
    }
    int64_t t0 = th_now_ms();
    assert_int_equal(dlock_release(h), DLOCK_OK);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    if (ms)
        *ms = th_now_ms() - t0;
    return got;
}
