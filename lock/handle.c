/* handle.c - what a holder asks of its handle (dlock.h): whether it still
 * holds, a sleep that wakes on a loss (a thread's, or a task's that holds
 * no thread: dlock_sleep_async), and each key's fence, hand-off number and
 * token; the same for a multi-lock's parts and a nested hold's outermost
 * one (lease.h: dlock__holder_at). */
#include <stddef.h>

#include "lock/client.h"
#include "lock/dlock.h"
#include "lock/dlock_async.h"
#include "lock/err.h"
#include "lock/sync.h"

int dlock_check(dlock_handle *h)
{
    pthread_mutex_lock(&h->client->mu);
    int st = dlock__holder_state(h, dlock__now_ms());
    pthread_mutex_unlock(&h->client->mu);
    return st;
}

int dlock_sleep(dlock_handle *h, int ms)
{
    dlock_client *c = h->client;
    if (h->outer) /* the watchdog wakes the outermost hold */
        h = h->outer;
    /* now is cut to the millisecond: one more never sleeps short */
    int64_t now = dlock__now_ms(), end = now + (ms > 0 ? ms + 1 : 0);
    int st;
    pthread_mutex_lock(&c->mu);
    while ((st = dlock__holder_state(h, now)) == DLOCK_OK && now < end) {
        /* also wake when the local lease deadline passes: that is a loss too */
        int64_t until = dlock__holder_valid_until(h);
        dlock__cond_wait_until(&h->wake, &c->mu, end < until ? end : until);
        now = dlock__now_ms();
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* An asynchronous sleep: a task that lives in the sleeping handle. */
static dlock_handle *sleeping(struct dlock_task *t)
{
    return (dlock_handle *)((char *)t - offsetof(dlock_handle, task));
}

/* The sleep's step (mu held): over when its time is up, or as soon as the
 * hold is interrupted or lost (the watchdog wakes it; so does the local
 * lease deadline, its latest time), or it is told to stop. */
static int sleep_step(struct dlock_task *t, int64_t *until)
{
    dlock_handle *h = sleeping(t), *hold = h->outer ? h->outer : h;
    int64_t now = dlock__now_ms();
    int st = dlock__task_stop(t);
    if (st == DLOCK_OK && (st = dlock__holder_state(hold, now)) == DLOCK_OK && now < h->sleep_end) {
        int64_t valid = dlock__holder_valid_until(hold);
        *until = h->sleep_end < valid ? h->sleep_end : valid;
        return DLOCK_TASK_WAIT;
    }
    hold->sleeper = NULL;
    h->async_rc = st;
    return DLOCK_TASK_DONE;
}

static void sleep_end(struct dlock_task *t, enum dlock_end where)
{
    dlock_handle *h = sleeping(t);
    dlock_req *req = h->req;
    dlock_runner *r = h->client->runner;
    dlock__req_note(req, h->async_rc);
    req->h = NULL;
    dlock__runner_deliver(r, req, where); /* the last touch: done may release h */
}

int dlock_sleep_async(dlock_handle *h, int ms, dlock_req *req)
{
    if (h == NULL || ms < 0 || req == NULL || req->done == NULL)
        return dlock__fail(DLOCK_ERR_INVALID, "a sleep needs a handle, ms >= 0 and a request "
                           "with done");
    dlock_client *c = h->client;
    dlock_handle *hold = h->outer ? h->outer : h; /* the one the watchdog wakes */
    pthread_mutex_lock(&c->mu);
    int free_now = hold->sleeper == NULL;
    if (free_now) {
        hold->sleeper = &h->task;
        h->req = req;
        h->sleep_end = dlock__now_ms() + (ms > 0 ? ms + 1 : 0); /* as dlock_sleep's */
        h->task = (struct dlock_task){.step = sleep_step, .end = sleep_end};
        dlock__runner_add(c->runner, &h->task, req, 0);
    }
    pthread_mutex_unlock(&c->mu);
    return free_now ? DLOCK_OK
                    : dlock__fail(DLOCK_ERR_INVALID, "the hold sleeps already (dlock_sleep_async)");
}

int dlock_key_count(const dlock_handle *h) { return h->parts ? h->nparts : 1; }
int64_t dlock_fence_at(const dlock_handle *h, int i)
{
    return dlock__holder_at(h, i)->lease->fence;
}
int dlock_handoff_seq_at(const dlock_handle *h, int i) { return dlock__holder_at(h, i)->seq; }
const char *dlock_key_at(const dlock_handle *h, int i)
{
    return dlock__holder_at(h, i)->lease->key;
}
int64_t dlock_fence(const dlock_handle *h) { return dlock_fence_at(h, 0); }
int dlock_handoff_seq(const dlock_handle *h) { return dlock_handoff_seq_at(h, 0); }
const char *dlock_key(const dlock_handle *h) { return dlock_key_at(h, 0); }
const char *dlock_token(const dlock_handle *h) { return dlock__holder_at(h, 0)->lease->token; }

int dlock_renewals(const dlock_handle *h)
{
    int most = 0;
    pthread_mutex_lock(&h->client->mu);
    for (int i = 0; i < dlock_key_count(h); i++) {
        const dlock_handle *p = dlock__holder_at(h, i);
        int n = p->lease->renewals - p->renewals_at_start;
        most = n > most ? n : most;
    }
    pthread_mutex_unlock(&h->client->mu);
    return most;
}

int dlock_hold_count(const dlock_handle *h)
{
    const dlock_handle *o = h->outer ? h->outer : h;
    pthread_mutex_lock(&h->client->mu);
    int n = o->parts ? 1 : o->holds;
    pthread_mutex_unlock(&h->client->mu);
    return n;
}
