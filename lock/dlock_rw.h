/* dlock_rw.h - libdlock's read-write lock: any number of readers at once,
 * or one writer, over every process that uses the key; a waiting writer
 * keeps new readers out. Each hold is a lease like a lock's. The
 * asynchronous acquires are dlock_acquire_read_async and
 * dlock_acquire_write_async (dlock_async.h); a handle is released with
 * dlock_release. Design: lock/README.md, "Read-write lock". */
#ifndef DLOCK_RW_H
#define DLOCK_RW_H

#include "dlock.h"

DLOCK_BEGIN_DECLS

/* A read or a write hold of key. Readers and writers draw fences from one
 * counter. Each hold is a lease and its handle is used as a semaphore's
 * (dlock_sem.h); no reentrancy, upgrade or downgrade (a thread asking again
 * waits like any other owner: a writer asking to read waits for itself
 * until wait_ms). Over a quorum a reader and a writer each need a majority
 * of the servers, as a lock does.
 * returns: as dlock_acquire (DLOCK_ERR_TIMEOUT: a writer held or waited, or
 *          for a writer: readers or a writer held, after wait_ms). */
int dlock_acquire_read(dlock_client *c, const char *key, const dlock_opts *opts,
                       dlock_handle **out);
int dlock_acquire_write(dlock_client *c, const char *key, const dlock_opts *opts,
                        dlock_handle **out);

DLOCK_END_DECLS

#endif
