/* orphans.h - tokens whose state in Redis is unknown: an acquire or release
 * that was sent but whose reply never came (a timeout, a broken connection)
 * may still run, now or later. One thread per client runs the release
 * script for each such token (dlock__lease_give_back): a lock's as "given
 * up": if the key is ours it is released, and the token is marked gone (for
 * DLOCK_KEEP_LEASES leases), so an acquire of it still on its way can never
 * take the key. It is tried (backing off to every 2 s) until Redis answers,
 * however long Redis is out of reach: only the gone mark stops an acquire
 * that arrives after that. A permit's, reader's or writer's token goes by
 * its own release, which has no gone mark, so it is tried again until its
 * lease would have run out: an acquire that lands late holds at most until
 * the next try (one that lands later still, after an outage longer than the
 * lease, holds for its lease). While Redis does not answer, the tokens
 * share one backoff: a try after 50 ms, 100, ... then one each 2 s, however
 * many wait. The tries use the client's pool, not the watchdog's
 * connections, so lease renewals never wait behind them.
 *
 * Only tokens that may have reached Redis belong here: when nothing was sent
 * (Redis refused the connection) there is nothing to undo. */
#ifndef DLOCK_ORPHANS_H
#define DLOCK_ORPHANS_H

#include "lock/counters.h"
#include "lock/lease.h"
#include "lock/quorum.h"

#define DLOCK_ORPHANS_MAX 1024 /* tokens in doubt at once; beyond, the oldest is dropped */

typedef struct dlock_orphans dlock_orphans;

/* Starts the thread, releasing through q's servers. NULL when out of memory
 * or threads. */
dlock_orphans *dlock__orphans_start(dlock_quorum *q, dlock_counters *counters);

/* Stops and joins the thread; tokens still pending are dropped (their leases
 * expire on their own). NULL is a no-op. */
void dlock__orphans_stop(dlock_orphans *o);

/* Takes over l (not watched, not held; freed here): its first try is at
 * once. Thread-safe; the client's mutex may be held (this module has its own). */
void dlock__orphans_add(dlock_orphans *o, struct dlock_lease *l);

#endif
