/* handle.c - what a holder asks of its handle (dlock.h): whether it still
 * holds, a sleep that wakes on a loss, and each key's fence, hand-off
 * number and token; the same for a multi-lock's parts and a nested hold's
 * outermost one (lease.h: dlock_holder_at). */
#include "lock/client.h"
#include "lock/sync.h"

int dlock_check(dlock_handle *h)
{
    pthread_mutex_lock(&h->client->mu);
    int st = dlock_holder_state(h, dlock_now_ms());
    pthread_mutex_unlock(&h->client->mu);
    return st;
}

int dlock_sleep(dlock_handle *h, int ms)
{
    dlock_client *c = h->client;
    if (h->outer) /* the watchdog wakes the outermost hold */
        h = h->outer;
    /* now is cut to the millisecond: one more never sleeps short */
    int64_t now = dlock_now_ms(), end = now + (ms > 0 ? ms + 1 : 0);
    int st;
    pthread_mutex_lock(&c->mu);
    while ((st = dlock_holder_state(h, now)) == DLOCK_OK && now < end) {
        /* also wake when the local lease deadline passes: that is a loss too */
        int64_t until = dlock_holder_valid_until(h);
        dlock_cond_wait_until(&h->wake, &c->mu, end < until ? end : until);
        now = dlock_now_ms();
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

int dlock_key_count(const dlock_handle *h) { return h->parts ? h->nparts : 1; }
int64_t dlock_fence_at(const dlock_handle *h, int i)
{
    return dlock_holder_at(h, i)->lease->fence;
}
int dlock_handoff_seq_at(const dlock_handle *h, int i) { return dlock_holder_at(h, i)->seq; }
const char *dlock_key_at(const dlock_handle *h, int i)
{
    return dlock_holder_at(h, i)->lease->key;
}
int64_t dlock_fence(const dlock_handle *h) { return dlock_fence_at(h, 0); }
int dlock_handoff_seq(const dlock_handle *h) { return dlock_handoff_seq_at(h, 0); }
const char *dlock_key(const dlock_handle *h) { return dlock_key_at(h, 0); }
const char *dlock_token(const dlock_handle *h) { return dlock_holder_at(h, 0)->lease->token; }

int dlock_renewals(const dlock_handle *h)
{
    int most = 0;
    pthread_mutex_lock(&h->client->mu);
    for (int i = 0; i < dlock_key_count(h); i++) {
        const dlock_handle *p = dlock_holder_at(h, i);
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
