/* keytab.c - per-key state for notify mode, in a chained hash table. Entries
 * live only while a thread holds or waits for the key, so the table stays as
 * small as the process's concurrency. */
#include "lock/keytab.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lock/runner.h"

#define BUCKETS 1024

struct dlock_keytab {
    struct dlock_entry *bucket[BUCKETS];
};

uint64_t dlock__hash(const char *key, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)key[i]) * 1099511628211ULL;
    return h;
}

static size_t hash(const char *key, size_t len)
{
    return (size_t)(dlock__hash(key, len) % BUCKETS);
}

dlock_keytab *dlock__keytab_new(void) { return calloc(1, sizeof(dlock_keytab)); }

void dlock__keytab_free(dlock_keytab *t) { free(t); }

struct dlock_entry *dlock__keytab_find(dlock_keytab *t, const char *key, size_t len)
{
    for (struct dlock_entry *e = t->bucket[hash(key, len)]; e; e = e->hnext)
        if (strncmp(e->key, key, len) == 0 && e->key[len] == '\0')
            return e;
    return NULL;
}

struct dlock_entry *dlock__keytab_spare(const char *key)
{
    size_t len = strlen(key);
    struct dlock_entry *e = calloc(1, sizeof(*e) + len + 1);
    if (e)
        memcpy(e->key, key, len + 1);
    return e;
}

struct dlock_entry *dlock__keytab_ref(dlock_keytab *t, const char *key,
                                      struct dlock_entry **spare)
{
    size_t len = strlen(key);
    struct dlock_entry *e = dlock__keytab_find(t, key, len);
    if (e == NULL) {
        if (spare && *spare)
            e = *spare, *spare = NULL;
        else if ((e = dlock__keytab_spare(key)) == NULL)
            return NULL;
        size_t b = hash(key, len);
        e->hnext = t->bucket[b];
        t->bucket[b] = e;
    }
    e->refs++;
    return e;
}

void dlock__keytab_unref(dlock_keytab *t, struct dlock_entry *e)
{
    if (--e->refs > 0)
        return;
    struct dlock_entry **p = &t->bucket[hash(e->key, strlen(e->key))];
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    free(e);
}

void dlock__keytab_each(dlock_keytab *t, void (*fn)(struct dlock_entry *e, void *arg), void *arg)
{
    for (size_t b = 0; b < BUCKETS; b++)
        for (struct dlock_entry *e = t->bucket[b]; e; e = e->hnext)
            fn(e, arg);
}

void dlock__queue_push(struct dlock_entry *e, struct dlock_waiter *w)
{
    w->next = NULL;
    w->prev = e->tail;
    if (e->tail)
        e->tail->next = w;
    else
        e->head = w;
    e->tail = w;
}

void dlock__waiter_wake(struct dlock_waiter *w)
{
    if (w->task)
        dlock__runner_wake(w->task);
    else
        pthread_cond_signal(&w->cv);
}

void dlock__entry_wake_head(struct dlock_entry *e)
{
    if (e->head)
        dlock__waiter_wake(e->head);
}

void dlock__queue_remove(struct dlock_entry *e, struct dlock_waiter *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        e->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        e->tail = w->prev;
    w->prev = w->next = NULL;
}
