/* quorum.h - the Redis side of the lock as one server or N independent ones
 * (Redlock). With N servers each call goes to all of them at once (sent to
 * each, then their replies awaited together: a call costs the slowest round
 * trip, not the sum) and holds when a majority agrees; lock/README.md
 * argues why the fencing tokens stay strictly increasing across different
 * majorities. With one server every call is that server's, as it always was.
 *
 * A server that stops answering (no connection, or no reply within the
 * command timeout) is left out of calls for a while (25 ms, doubling up to
 * 1 s), so that a stalled server does not make every call wait out its
 * timeout; the first call after that tries it again, and so does any call
 * for which the other servers alone could not make a majority. An answer
 * ends the time out at once.
 *
 * Over a Redis Cluster (cfg->cluster) there is no vote: each call goes to
 * the primary that owns its key's slot, and is that server's alone
 * (cluster.h); the nodes are the cluster's primaries, more of them as they
 * are found. Thread-safe. */
#ifndef DLOCK_QUORUM_H
#define DLOCK_QUORUM_H

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "lock/counters.h"
#include "lock/node.h"

/* How far a server's fence counter may lag its clock (in us) before an
 * acquisition reseeds it from the clock, with several servers. Between
 * reseeds the counters of the servers move in step (each acquisition and
 * grant adds one on each), so a majority mostly answers the same fence and
 * no write-back is needed. */
#define DLOCK_SEED_SLACK_US (10LL * 1000 * 1000)

/* How much earlier than Redis the holder considers its lease over: clock drift
 * between this host and Redis, as the Redlock paper budgets it (1% + 2 ms).
 * Here, below the lease, because a quorum's validity needs it too. */
static inline int dlock__drift_ms(int lease_ms) { return lease_ms / 100 + 2; }

typedef struct dlock_quorum dlock_quorum;

/* The servers of cfg (host:port, or node[]), none contacted yet. NULL when
 * out of memory. */
dlock_quorum *dlock__quorum_new(const dlock_config *cfg, dlock_counters *counters);
void dlock__quorum_free(dlock_quorum *q);

/* N, and server i (for the subscribers, one per server). In a cluster N
 * grows as primaries are found; server i stays server i. */
int dlock__quorum_size(const dlock_quorum *q);
dlock_node *dlock__quorum_node(dlock_quorum *q, int i);

/* 1 when a call goes to several servers and a majority decides; 0 when a
 * key has one server: one Redis, or a cluster's owner of its slot. */
int dlock__quorum_votes(const dlock_quorum *q);

/* Whether server i carries key's release channel: every server does, but
 * in a cluster only the owner of key's slot (sharded pub/sub), as the map
 * knows it now (nothing is sent: the caller may hold the client's mutex). */
int dlock__quorum_listens(dlock_quorum *q, const char *key, int i);

/* Pings every server at once; up[i] for each that answered. Returns how many
 * did, and *need how many must: a majority, or in a cluster every node that
 * owns slots (then the count is of those). When fewer, errstr says which
 * failed and why. */
int dlock__quorum_ping(dlock_quorum *q, int up[DLOCK_NODES_MAX], int *need);

/* Script s on the server of its first key argv[0] (one server: that one;
 * a cluster: the slot's owner); not for a voting quorum. The checked reply
 * (caller frees), or NULL with the error set; *sent (may be NULL) or-ed with
 * whether it may have run. */
redisReply *dlock__quorum_script(dlock_quorum *q, enum dlock_script s, int nkeys, int nargs,
                                 const char *const *argv, int *sent);

/* How many servers make a majority. */
int dlock__quorum_majority(const dlock_quorum *q);

/* The acquire script on every server (queue_score and seed_slack_us are
 * set here: a queue place of a->queue_score and the slack above with
 * several servers, the old behaviour with one). DLOCK_OK when a majority
 * granted the key within its validity (lease - elapsed - drift) and agreed
 * on out->fence: the largest fence any of them answered, written back to
 * the others by the fence script where it was lower; the holder may use it
 * only then. Otherwise the key is released where it was taken, and the result is
 * DLOCK_ERR_TIMEOUT when the others hold it or are first in line
 * (out->pttl: the soonest any of theirs expires, negative when unknown),
 * or DLOCK_ERR_REDIS / DLOCK_ERR_AUTH when too many servers failed to reach
 * a majority. out->sent tells whether the script may have run anywhere. */
int dlock__quorum_acquire(dlock_quorum *q, const dlock_node_acquire_args *a,
                          dlock_acquired *out);

/* The fence raise script on every server (a quorum's servers hold locks
 * only: a->member is 0 there). DLOCK_OK with *fence when a majority found
 * the lease ours and holds *fence: the largest fence they answered, written
 * back where lower, as an acquire's is; DLOCK_ERR_LOST when too many say it
 * is not ours for a majority to be left; else DLOCK_ERR_REDIS or
 * DLOCK_ERR_AUTH. A failed raise only ever left counters higher. */
int dlock__quorum_raise(dlock_quorum *q, const dlock_node_raise_args *a, int64_t *fence);

/* The release script on every server (a->next_score is used with several
 * servers, the server's clock with one). DLOCK_OK when a majority released
 * it, DLOCK_ERR_LOST when a majority says it was not ours, else the
 * failure (DLOCK_ERR_REDIS or DLOCK_ERR_AUTH): the caller retries.
 * *queued is 1 when a majority put a->next in line. */
int dlock__quorum_release(dlock_quorum *q, const dlock_node_release_args *a, int *queued);

/* The renew script for count leases on every server, on the caller's own
 * connections (own[i] for server i). rcs[j]: DLOCK_OK when a majority (or
 * renewals[j].need servers, when set) renewed lease j, DLOCK_ERR_LOST when
 * too many say it is not ours for that many to be left, else the failure
 * (retry soon). */
void dlock__quorum_renew(dlock_quorum *q, redisContext **own, int count,
                         const dlock_node_renewal *renewals, int *rcs);

/* Script s (argv: its nkeys keys, then its arguments; nargs in all) on
 * every server at once, for the claims that are not a lock (claim_quorum.h
 * weighs the answers); the servers left out for not answering are asked
 * too while fewer than need answered. replies[i]: server i's checked
 * reply (the caller frees it), or NULL when it failed or was not asked.
 * Returns how many answered; when fewer than need, errstr says which
 * failed and why (dlock__redis_failure() tells the code). *sent (may be
 * NULL) is set when the script may have run anywhere. */
int dlock__quorum_script_all(dlock_quorum *q, enum dlock_script s, int nkeys, int nargs,
                             const char *const *argv, int need, redisReply **replies, int *sent);

#endif
