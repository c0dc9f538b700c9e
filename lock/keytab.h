/* keytab.h - per-key state for notify mode: the FIFO of local waiters, the
 * local holder, and the key's release-channel subscription. Every function is
 * called with the client's mutex held. */
#ifndef DLOCK_KEYTAB_H
#define DLOCK_KEYTAB_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "lock/internal.h"

struct dlock_handle;

enum dlock_sub_state {
    DLOCK_SUB_NONE,    /* not asked for */
    DLOCK_SUB_PENDING, /* SUBSCRIBE sent, not confirmed yet */
    DLOCK_SUB_ACTIVE,  /* confirmed: releases from now on wake the queue head */
    DLOCK_SUB_FAILED,  /* no subscriber connection: waiters poll every retry_ms */
};

/* A waiter for a key, in its FIFO: a thread (woken on cv) or an
 * asynchronous acquire (woken through its task). */
struct dlock_waiter {
    struct dlock_waiter *prev, *next;
    struct dlock_handle *h; /* the handle it will hold */
    const dlock_opts *o;    /* its options */
    struct dlock_lease *spare; /* the lease it asks Redis with: made by the waiter when it
                                * first contends, or by a releasing holder that puts it in
                                * line (queue.c); the waiter's to free */
    int granted;            /* set by a holder that handed its lease to h */
    int contending;         /* in Redis right now, without the mutex */
    int64_t deadline;       /* of its wait */
    int phase;              /* queue.c: what its turn waits for ... */
    int64_t phase_until;    /* ... until when ... */
    unsigned long seen;     /* ... and the releases seen before it */
    struct dlock_task *task; /* an asynchronous acquire's, else NULL */
    int here;                /* ... whose call a grant ends: a hand-off may step it to its
                              * end inside the release (runner.h: dlock__runner_step_here) */
    pthread_cond_t cv;       /* a thread's */
};

/* Where a releasing holder's putting of the head in Redis's line stands. */
enum dlock_requeue {
    DLOCK_REQUEUE_NONE,
    DLOCK_REQUEUE_PENDING, /* the release is on its way: the head waits for it */
    DLOCK_REQUEUE_DONE,    /* it put wait_token in line */
};

struct dlock_entry {
    struct dlock_entry *hnext; /* hash chain */
    int refs;                  /* the holder and the waiters */
    struct dlock_waiter *head, *tail;
    struct dlock_handle *holder; /* the local holder, NULL when none */
    int sub_state[DLOCK_NODES_MAX]; /* enum dlock_sub_state, per server */
    unsigned long releases;      /* bumped on every release heard of (published or local),
                                  * so a head busy in Redis doesn't miss one */
    char wait_token[DLOCK_TOKEN_LEN + 1]; /* the token the head waits in Redis's queue with */
    unsigned others[DLOCK_NODES_MAX]; /* grants to other processes' tokens heard, per
                                  * server, since this process last took the key from
                                  * Redis: how many processes take turns with it */
    int requeue;                 /* enum dlock_requeue, for wait_token */
    char granted[DLOCK_TOKEN_LEN + 1]; /* a grant heard for this token (the head's) ... */
    int64_t granted_fence;       /* ... with this fence (0: none heard) ... */
    int granted_ms;              /* ... this lease on the key ... */
    int64_t granted_after;       /* ... made after this (dlock__now_ms), as its message
                                  * says: the stamp of the script that last queued it */
    unsigned long requeue_seen;  /* releases when that release was sent */
    char key[];
};

typedef struct dlock_keytab dlock_keytab;

/* FNV-1a of len bytes of key: the bucket hash of this table and the
 * subscriber's channel table. */
uint64_t dlock__hash(const char *key, size_t len);

dlock_keytab *dlock__keytab_new(void);     /* NULL when out of memory */
void dlock__keytab_free(dlock_keytab *t);  /* every entry must be gone */

/* The key's entry, created when missing, with one more reference. NULL when
 * out of memory. spare (may be NULL): an entry made beforehand for key
 * (dlock__keytab_spare), used instead of allocating (*spare is then NULL). */
struct dlock_entry *dlock__keytab_ref(dlock_keytab *t, const char *key,
                                      struct dlock_entry **spare);

/* An entry for key, for dlock__keytab_ref to use when key has none by then:
 * what a wait that may not allocate later makes at its start. NULL when out
 * of memory; freed with free() when unused. */
struct dlock_entry *dlock__keytab_spare(const char *key);

/* Drops a reference; the entry is freed at zero. */
void dlock__keytab_unref(dlock_keytab *t, struct dlock_entry *e);

/* The key's entry or NULL (no reference taken). */
struct dlock_entry *dlock__keytab_find(dlock_keytab *t, const char *key, size_t len);

/* Calls fn for every entry. */
void dlock__keytab_each(dlock_keytab *t, void (*fn)(struct dlock_entry *e, void *arg), void *arg);

/* FIFO of waiters. */
void dlock__queue_push(struct dlock_entry *e, struct dlock_waiter *w);
void dlock__queue_remove(struct dlock_entry *e, struct dlock_waiter *w);

/* Wakes w: what it waits for may have happened. */
void dlock__waiter_wake(struct dlock_waiter *w);

/* Wakes the head of e's queue, if any: it may be its turn to contend. */
void dlock__entry_wake_head(struct dlock_entry *e);

#endif
