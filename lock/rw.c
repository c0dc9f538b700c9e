/* rw.c - the read-write lock (dlock_acquire_read / _write, and their
 * _async): readers are members of a ZSET scored by their lease deadline, as
 * a semaphore's permits are (renewed and released by its scripts), the
 * writer holds key:writer as a lock holds its key, and waiting writers
 * register in key:writers, which keeps new readers out (scripts.c). Over a
 * quorum a reader and a writer each need a majority (claim_quorum.h): two
 * majorities share a server, which lets one of them in only. The waiting,
 * the handle and the release are every claim's (claim.c); only the
 * attempts are this file's. */
#include <stdio.h>

#include "lock/claim.h"
#include "lock/claim_quorum.h"
#include "lock/dlock_async.h"
#include "lock/dlock_rw.h"
#include "lock/err.h"
#include "lock/sync.h"

#define RW_WRITER ":writer"   /* the writer's token, PX its lease */
#define RW_WAITING ":writers" /* waiting writers -> until when their wish stands */

/* The script's keys for l's lock: readers, fence, writer, waiting writers. */
struct rw_keys {
    dlock_names n;
    char writer[DLOCK_KEY_MAX + sizeof(RW_WRITER)];
    char waiting[DLOCK_KEY_MAX + sizeof(RW_WAITING)];
};

static void rw_keys_of(const char *key, struct rw_keys *k)
{
    dlock_names_of(key, &k->n);
    snprintf(k->writer, sizeof(k->writer), "%s%s", key, RW_WRITER);
    snprintf(k->waiting, sizeof(k->waiting), "%s%s", key, RW_WAITING);
}

/* One attempt with script s, whose ARGV are token, lease_ms, keep_ms and,
 * for a writer, how long its wish to write stands: a jittered retry can
 * come 1.5 retry_ms later, so the grace the lock gives a queued waiter; 0
 * for a fail-fast try (wait 0), which keeps no reader out. */
static int rw_try(dlock_client *c, struct dlock_lease *l, enum dlock_script s, int wait,
                  int64_t *pttl)
{
    struct rw_keys k;
    char lease[24], keep[24], wish[24], slack[24];
    rw_keys_of(l->key, &k);
    snprintf(lease, sizeof(lease), "%d", l->lease_ms);
    snprintf(keep, sizeof(keep), "%d", dlock__keep_ms(l->lease_ms));
    snprintf(wish, sizeof(wish), "%d", wait ? dlock__grace_ms(l->retry_ms) : 0);
    dlock__claim_quorum_slack(c->nodes, slack);
    const char *argv[] = {l->key, k.n.fence, k.writer, k.waiting, l->token, lease, keep, wish,
                          slack};
    return dlock__claim_quorum_try(c->nodes, l, s, 4, 9, argv, pttl);
}

static int read_try(dlock_client *c, struct dlock_lease *l, const struct dlock_claim *cl,
                    int wait, int64_t *pttl)
{
    (void)cl;
    return rw_try(c, l, DLOCK_SCRIPT_RW_READ, wait, pttl);
}

static int write_try(dlock_client *c, struct dlock_lease *l, const struct dlock_claim *cl,
                     int wait, int64_t *pttl)
{
    (void)cl;
    return rw_try(c, l, DLOCK_SCRIPT_RW_WRITE, wait, pttl);
}

/* A writer that stops waiting withdraws its wish at once, so the readers
 * it kept out need not wait for the wish to run out; its error stays. */
static void write_give_up(dlock_client *c, struct dlock_lease *l)
{
    struct rw_keys k;
    rw_keys_of(l->key, &k);
    const char *argv[] = {k.writer, k.waiting, l->token, k.n.channel};
    dlock__claim_quorum_undo(c->nodes, DLOCK_SCRIPT_RW_WRITE_RELEASE, 2, 4, argv);
}

static const struct dlock_claim reader = {"read lock", "a writer holds or waits",
                                          DLOCK_LEASE_READ, NULL, 0, read_try, NULL};
static const struct dlock_claim writer = {"write lock", "readers or a writer still hold",
                                          DLOCK_LEASE_WRITE, RW_WRITER, 0, write_try,
                                          write_give_up};

int dlock_acquire_read(dlock_client *c, const char *key, const dlock_opts *opts,
                       dlock_handle **out)
{
    return dlock__claim_acquire(c, key, &reader, opts, out);
}

int dlock_acquire_write(dlock_client *c, const char *key, const dlock_opts *opts,
                        dlock_handle **out)
{
    return dlock__claim_acquire(c, key, &writer, opts, out);
}

int dlock_acquire_read_async(dlock_client *c, const char *key, const dlock_opts *opts,
                             dlock_req *req)
{
    return dlock__claim_acquire_async(c, key, &reader, opts, req);
}

int dlock_acquire_write_async(dlock_client *c, const char *key, const dlock_opts *opts,
                              dlock_req *req)
{
    return dlock__claim_acquire_async(c, key, &writer, opts, req);
}
