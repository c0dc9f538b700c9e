/* reaper.c - deadlines for HTTP connections that send too slowly: a list of
 * open connections, each with its current deadline, scanned every TICK_MS by
 * one thread. */
#include "server/reaper.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#define TICK_MS 50

struct reaper_conn {
    reaper_conn *prev, *next;
    reaper *r;
    int fd;
    int64_t deadline_ms; /* 0: none; guarded by the reaper's mutex */
    int reaped;
};

struct reaper {
    int idle_ms, request_ms;
    pthread_t thread;
    pthread_mutex_t mu; /* guards the list, every deadline and stop */
    pthread_cond_t wake;
    reaper_conn *head;
    int stop;
    _Atomic uint64_t reaped;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Shuts down every connection past its deadline (mutex held). The socket is
 * still open: the server removes a connection from the list before closing it. */
static void reap(reaper *r, int64_t now)
{
    for (reaper_conn *c = r->head; c; c = c->next)
        if (c->deadline_ms && now >= c->deadline_ms && !c->reaped) {
            shutdown(c->fd, SHUT_RDWR);
            c->reaped = 1;
            atomic_fetch_add(&r->reaped, 1);
        }
}

static void *run(void *arg)
{
    reaper *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L)
            ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&r->wake, &r->mu, &ts);
        reap(r, now_ms());
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

reaper *reaper_start(int idle_ms, int request_ms)
{
    reaper *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->idle_ms = idle_ms;
    r->request_ms = request_ms;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&r->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&r->thread, NULL, run, r) != 0) {
        pthread_cond_destroy(&r->wake);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
    }
    return r;
}

void reaper_stop(reaper *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    while (r->head) {
        reaper_conn *c = r->head;
        r->head = c->next;
        free(c);
    }
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

reaper_conn *reaper_conn_started(reaper *r, int fd)
{
    reaper_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->r = r;
    c->fd = fd;
    c->deadline_ms = now_ms() + r->idle_ms;
    pthread_mutex_lock(&r->mu);
    c->next = r->head;
    if (r->head)
        r->head->prev = c;
    r->head = c;
    pthread_mutex_unlock(&r->mu);
    return c;
}

/* Sets c's deadline to ms from now (0: none). */
static void set_deadline(reaper_conn *c, int ms)
{
    if (c == NULL)
        return;
    int64_t at = ms ? now_ms() + ms : 0;
    pthread_mutex_lock(&c->r->mu);
    c->deadline_ms = at;
    pthread_mutex_unlock(&c->r->mu);
}

void reaper_request_line(reaper_conn *c) { set_deadline(c, c ? c->r->request_ms : 0); }
void reaper_request_read(reaper_conn *c) { set_deadline(c, 0); }
void reaper_request_done(reaper_conn *c) { set_deadline(c, c ? c->r->idle_ms : 0); }

void reaper_conn_closed(reaper *r, reaper_conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        r->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&r->mu);
    free(c);
}

uint64_t reaper_reaped(reaper *r) { return atomic_load(&r->reaped); }
