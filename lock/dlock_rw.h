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

/* Takes a read or a write hold of key, waiting as dlock_acquire does; each
 * hold a lease, its handle used as a semaphore's (dlock_sem.h). Readers and
 * writers draw fences from one counter. No reentrancy, upgrade or downgrade:
 * a thread asking again waits as any owner (a writer asking to read waits
 * for itself). Over a quorum, each needs a majority, as a lock does.
 * returns: DLOCK_OK, *out the holder.
 * owns:    as dlock_acquire.
 * errors:  as dlock_acquire: DLOCK_ERR_TIMEOUT after wait_ms, for a reader
 *          while a writer held or waited, for a writer while anyone held. */
int dlock_acquire_read(dlock_client *c, const char *key, const dlock_opts *opts,
                       dlock_handle **out);
int dlock_acquire_write(dlock_client *c, const char *key, const dlock_opts *opts,
                        dlock_handle **out);

DLOCK_END_DECLS

#endif
