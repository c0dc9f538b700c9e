/* asynckit.c - what the lock's asynchronous suites share (see asynckit.h):
 * a run of asynchronous waiters, a tiny executor, threads from /proc. */
#include "tests/support/asynckit.h"

#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/support/harness.h"

/* ---- a run of asynchronous waiters ---- */

void th_run_done(dlock_req *req)
{
    struct th_waiter *w = req->data;
    struct th_run *r = w->run;
    pthread_mutex_lock(&r->mu);
    r->twice += w->calls++ > 0;
    w->rc = req->rc;
    if (req->rc == DLOCK_OK) { /* held from now until a worker releases it */
        for (int k = 0; k < w->nkeys; k++) {
            int now = atomic_fetch_add(&r->holding[w->keys[k]], 1) + 1;
            if (now > r->limit)
                atomic_fetch_add(&r->overlaps, 1);
            for (int most = atomic_load(&r->most); now > most;)
                atomic_compare_exchange_weak(&r->most, &most, now);
        }
        r->order[r->granted++] = w->id;
        r->queued[r->tail] = w;
        r->queue[r->tail++] = req->h;
    } else {
        r->failed++;
        r->closed += req->rc == DLOCK_ERR_CLOSED;
        r->timeouts += req->rc == DLOCK_ERR_TIMEOUT;
        r->twice += req->h != NULL || req->err[0] == '\0'; /* counted off the test's thread */
    }
    r->ended++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* A worker: holds each granted handle a moment, then releases it; its
 * holders on each of its keys are counted from the grant to the release. */
static void *release_granted(void *arg)
{
    struct th_run *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (r->head == r->tail && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->head == r->tail)
            break;
        dlock_handle *h = r->queue[r->head];
        struct th_waiter *w = r->queued[r->head++];
        pthread_mutex_unlock(&r->mu);
        if (dlock_check(h) != DLOCK_OK)
            atomic_fetch_add(&r->bad_releases, 1);
        usleep(r->limit > 1 ? 2000 : 0); /* permits overlap more when held a while */
        for (int k = 0; k < w->nkeys; k++)
            atomic_fetch_sub(&r->holding[w->keys[k]], 1);
        if (dlock_release(h) != DLOCK_OK)
            atomic_fetch_add(&r->bad_releases, 1);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

struct th_waiter *th_run_start(struct th_run *r, int n)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->n = n;
    r->limit = 1;
    r->order = calloc((size_t)n, sizeof(*r->order));
    r->queue = calloc((size_t)n, sizeof(*r->queue));
    r->queued = calloc((size_t)n, sizeof(*r->queued));
    struct th_waiter *w = calloc((size_t)n, sizeof(*w));
    assert_true(r->order && r->queue && r->queued && w);
    for (int i = 0; i < n; i++)
        w[i] = (struct th_waiter){.req = {.done = th_run_done, .data = &w[i]}, .run = r, .id = i,
                               .nkeys = 1};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&r->worker[i], NULL, release_granted, r), 0);
    return w;
}

void th_run_wait_for(struct th_run *r, int n, int bound_ms)
{
    int64_t end = th_now_ms() + (int64_t)bound_ms * TH_SLOWER;
    pthread_mutex_lock(&r->mu);
    while (r->ended < n && th_now_ms() < end) {
        pthread_mutex_unlock(&r->mu);
        usleep(10000);
        pthread_mutex_lock(&r->mu);
    }
    int ended = r->ended;
    pthread_mutex_unlock(&r->mu);
    assert_int_equal(ended, n);
}

void th_run_wait(struct th_run *r, int bound_ms) { th_run_wait_for(r, r->n, bound_ms); }

void th_run_end(struct th_run *r, struct th_waiter *w)
{
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < 2; i++)
        pthread_join(r->worker[i], NULL);
    assert_int_equal(r->twice, 0);
    assert_int_equal(atomic_load(&r->overlaps), 0);
    assert_int_equal(atomic_load(&r->bad_releases), 0);
    free(r->order);
    free(r->queue);
    free(r->queued);
    free(w);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

/* ---- the executor ---- */

struct th_exec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    dlock_req *head, *tail;
    int posts, held, stop, started;
    pthread_t thread, self; /* self: as the thread itself saw it, before start returned */
};

static void *run(void *arg)
{
    th_exec *e = arg;
    pthread_mutex_lock(&e->mu);
    e->self = pthread_self();
    e->started = 1;
    pthread_cond_broadcast(&e->cv);
    for (;;) {
        while (!e->stop && (e->head == NULL || e->held))
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->head == NULL || e->held)
            break;
        dlock_req *req = e->head;
        if ((e->head = req->next) == NULL)
            e->tail = NULL;
        pthread_mutex_unlock(&e->mu);
        req->done(req);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

th_exec *th_exec_start(void)
{
    th_exec *e = calloc(1, sizeof(*e));
    assert_non_null(e);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    assert_int_equal(pthread_create(&e->thread, NULL, run, e), 0);
    pthread_mutex_lock(&e->mu);
    while (!e->started)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    return e;
}

void th_exec_stop(th_exec *e)
{
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    e->held = 0;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

void th_exec_post(void *ctx, dlock_req *req)
{
    th_exec *e = ctx;
    pthread_mutex_lock(&e->mu);
    req->next = NULL;
    if (e->tail)
        e->tail->next = req;
    else
        e->head = req;
    e->tail = req;
    e->posts++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

int th_exec_is_mine(th_exec *e) { return pthread_equal(pthread_self(), e->self); }

int th_exec_posts(th_exec *e)
{
    pthread_mutex_lock(&e->mu);
    int n = e->posts;
    pthread_mutex_unlock(&e->mu);
    return n;
}

void th_exec_hold(th_exec *e, int hold)
{
    pthread_mutex_lock(&e->mu);
    e->held = hold;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

int th_thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

char th_thread_state(int tid)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *st = strrchr(buf, ')'); /* the name may hold spaces, not a ')' last */
    return st && st[1] == ' ' ? st[2] : 0;
}

/* Whether every thread of this process but the caller sleeps (state S in
 * /proc) right now. */
static int others_sleep(void)
{
    int self = (int)gettid(), all = 1;
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *de; all && d && (de = readdir(d));) {
        int tid = atoi(de->d_name);
        char st = de->d_name[0] == '.' || tid == self ? 'S' : th_thread_state(tid);
        all = st == 'S' || st == 0; /* gone meanwhile: not running */
    }
    if (d)
        closedir(d);
    return all;
}

long th_threads_sleeps(void)
{
    int self = (int)gettid();
    long sum = 0;
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *de; d && (de = readdir(d));) {
        int tid = atoi(de->d_name);
        char path[64], line[128];
        if (de->d_name[0] == '.' || tid == self)
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
        FILE *f = fopen(path, "r");
        long n = 0;
        while (f && fgets(line, sizeof(line), f))
            if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
                break;
        if (f)
            fclose(f);
        sum += n;
    }
    if (d)
        closedir(d);
    return sum;
}

int th_threads_idle(int bound_ms)
{
    for (int waited = 0, seen = 0; waited < bound_ms; waited += 20) {
        seen = others_sleep() ? seen + 1 : 0;
        if (seen == 5)
            return 1;
        usleep(20000);
    }
    return 0;
}
