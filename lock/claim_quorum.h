/* claim_quorum.h - the Redis side of a claim that is not a lock (a
 * semaphore's permit, a read-write lock's reader or writer), on one server
 * or on N independent ones (Redlock): an attempt holds when enough servers
 * granted it within its validity, a give-back goes to every server. With
 * one server each call is that server's, as it always was. The rules and
 * their arithmetic are argued in lock/README.md ("Semaphores and read-write
 * locks over a quorum"). Thread-safe. */
#ifndef DLOCK_CLAIM_QUORUM_H
#define DLOCK_CLAIM_QUORUM_H

#include <stdint.h>

#include "lock/lease.h"

/* How many of q's N servers must grant a claim of which up to permits may
 * be held at once (0: a reader or a writer), for a lease's need: 0 (a
 * majority, or the one server) for a read-write lock and for one permit;
 * for P >= 2 permits floor(N P / (P + 1)) + 1, the least count c with
 * (P + 1) c > N P, so that P + 1 holders would need more permits than the
 * N servers have. At most N. */
int dlock__claim_quorum_need(const dlock_quorum *q, int permits);

/* The seed slack (in us, as text) an acquire script passes to next_fence
 * (scripts.c): the lock's with several servers, so that their counters
 * stay in step, 0 with one. */
void dlock__claim_quorum_slack(dlock_quorum *q, char out[24]);

/* One attempt for l: its acquire script s (argv: nkeys keys, the second
 * the fence counter, then the arguments; nargs in all), which answers
 * {1, fence} or {0, ms until worth trying again}. With several servers it
 * holds when l->need of them granted it (0: a majority) within its
 * validity (lease - elapsed - drift) and a majority holds the largest
 * fence answered (written back where lower); otherwise it is given back
 * where taken. Returns DLOCK_OK (l->fence and l->acquired_ms set),
 * DLOCK_ERR_TIMEOUT (*pttl: ms until it is worth trying again, negative
 * when unknown), DLOCK_ERR_REDIS or DLOCK_ERR_AUTH when too many servers
 * failed for l->need to be reached (errstr names them). Sets l->sent when
 * the script may have run. */
int dlock__claim_quorum_try(dlock_quorum *q, struct dlock_lease *l, enum dlock_script s,
                            int nkeys, int nargs, const char *const *argv, int64_t *pttl);

/* Script s on every server, its replies ignored: what a writer that stops
 * waiting undoes, wherever its attempts left it. */
void dlock__claim_quorum_undo(dlock_quorum *q, enum dlock_script s, int nkeys, int nargs,
                              const char *const *argv);

/* Gives l back to Redis for good, whatever its kind: a lock's by
 * dlock__lease_give_back; a permit's, reader's or writer's by its release
 * script on every server. Returns DLOCK_OK (it was ours on l->need servers,
 * or a majority), DLOCK_ERR_LOST (not on enough of them), DLOCK_ERR_REDIS or
 * DLOCK_ERR_AUTH (too few answered: try again). */
int dlock__claim_quorum_give_back(dlock_quorum *q, const struct dlock_lease *l);

#endif
