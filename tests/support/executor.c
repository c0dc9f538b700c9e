/* executor.c - a tiny executor for the lock's asynchronous calls (see
 * executor.h). */
#include "tests/support/executor.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

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
