/* reentry.c - the client's table of outermost holds by key, the count of
 * handles that keeps a hold alive until its last one is released, and the
 * acquire-side rule: nest, or refuse. The table is hashed by key and
 * chained through the handles themselves, so a hold allocates nothing. */
#include "lock/reentry.h"

#include <stdlib.h>
#include <string.h>

#include "lock/client.h"
#include "lock/err.h"
#include "lock/sync.h"

#define BUCKETS 1024

struct dlock_holds {
    dlock_handle *bucket[BUCKETS];
};

static unsigned bucket_of(const char *key)
{
    return (unsigned)(dlock__hash(key, strlen(key)) % BUCKETS);
}

dlock_holds *dlock__holds_new(void) { return calloc(1, sizeof(dlock_holds)); }

void dlock__holds_free(dlock_holds *t) { free(t); }

void dlock__holds_add(dlock_holds *t, dlock_handle *h)
{
    h->held_bucket = bucket_of(h->lease->key);
    dlock_handle **b = &t->bucket[h->held_bucket];
    h->holds = 1;
    h->held_next = *b;
    *b = h;
}

/* Whether h's hold is gone for good: the watchdog found the key gone, or
 * its lease ran out with nothing to renew it. Past its local deadline while
 * the watchdog's renewal is late, it may still hold: asking Redis then
 * would wait for our own token. */
static int gone(const dlock_handle *h)
{
    const struct dlock_lease *l = h->lease;
    return l->lost || (!l->watched && dlock__now_ms() >= l->valid_until_ms);
}

/* The calling thread's outermost hold of key, unless gone, or NULL. */
static dlock_handle *find(dlock_holds *t, const char *key)
{
    pthread_t self = pthread_self();
    for (dlock_handle *h = t->bucket[bucket_of(key)]; h; h = h->held_next)
        if (pthread_equal(h->thread, self) && strcmp(h->lease->key, key) == 0 && !gone(h))
            return h;
    return NULL;
}

/* A new handle nested in the outermost hold o, or NULL when out of memory. */
static dlock_handle *nest(dlock_handle *o)
{
    dlock_opts none = {0}; /* a nested hold's own options rule nothing: o's do */
    dlock_handle *h = dlock__handle_new(o->client, &none);
    if (h == NULL)
        return NULL;
    h->outer = o;
    o->holds++;
    return h;
}

int dlock__holds_leave(dlock_holds *t, dlock_handle **h)
{
    dlock_handle *o = (*h)->outer ? (*h)->outer : *h;
    if (o != *h) { /* a nested handle ends here, whatever the order of releases */
        dlock__handle_free(*h);
        *h = o;
    }
    if (--o->holds > 0)
        return 1;
    dlock_handle **p = &t->bucket[o->held_bucket];
    while (*p && *p != o)
        p = &(*p)->held_next;
    if (*p)
        *p = o->held_next;
    return 0;
}

int dlock__reenter(dlock_client *c, const char *key, const dlock_opts *o, dlock_handle **out,
                   int *rc)
{
    pthread_mutex_lock(&c->mu);
    dlock_handle *held = find(c->holds, key);
    /* past its local deadline (a renewal late), the hold may be gone: never
     * nest in it, and never wait in Redis for our own token either */
    int ran_out = held && dlock__holder_state(held, dlock__now_ms()) == DLOCK_ERR_LOST;
    dlock_handle *h = held && o->reentrant && !ran_out ? nest(held) : NULL;
    pthread_mutex_unlock(&c->mu);
    if (held == NULL)
        return 0;
    if (!o->reentrant) /* at once: waiting would only be for itself */
        *rc = dlock__fail(DLOCK_ERR_INVALID, "lock %s is already held by this thread, and "
                          "reentrant is 0", key);
    else if (ran_out)
        *rc = dlock__fail(DLOCK_ERR_INVALID, "lock %s: this thread's hold ran past its lease "
                          "(its renewal is late); release it before asking again", key);
    else if (h == NULL)
        *rc = dlock__fail(DLOCK_ERR_NOMEM, "out of memory");
    else
        *out = h, *rc = DLOCK_OK;
    return 1;
}

int dlock__holds_none(dlock_client *c, const char *const *keys, int n)
{
    int i = 0;
    pthread_mutex_lock(&c->mu);
    while (i < n && find(c->holds, keys[i]) == NULL)
        i++;
    pthread_mutex_unlock(&c->mu);
    if (i == n)
        return DLOCK_OK;
    /* its renewal, max_renewals and interruption are the set's, which they
     * can't be for a key another hold rules */
    return dlock__fail(DLOCK_ERR_INVALID, "lock %s is already held by this thread: a "
                       "multi-lock can't nest in another hold", keys[i]);
}
