/* dlock_async.h - libdlock's asynchronous calls, shaped like libuv's: a
 * call takes a request the caller owns (struct dlock_req, embedded in the
 * caller's own, as a uv_work_t is), returns at once, and ends by running
 * the request's done exactly once - where the caller asked (cfg.post: its
 * own executor or loop), or else on one of libdlock's few threads. Acquires
 * of every kind, their withdrawal (dlock_cancel), a sleep under a lock and
 * a release, none of them holding a thread while it waits.
 *
 * Where done runs. cfg.post NULL: on one of libdlock's cfg.async_threads
 * threads, never inside a caller's libdlock call. cfg.post set: libdlock
 * calls post(post_ctx, req) once the call has ended (rc, h and err filled;
 * libdlock's own state for it freed or detached: req->priv is no longer
 * used), and the caller's executor calls req->done(req) on a thread of the
 * caller's. post is called from libdlock's threads, or from inside a
 * libdlock call on the caller's own thread (a hand-off, below), never with
 * the client's mutex held; it must not block, fail or call libdlock.
 * Exception: dlock_client_free ends the calls still pending with
 * DLOCK_ERR_CLOSED and calls their done itself, not through post, before
 * it returns.
 *
 * Hand-offs go straight to the caller's executor. With post set, a
 * release (blocking or asynchronous) that hands its lease to a waiting
 * asynchronous acquire of a single key (or of a multi-lock's last key)
 * completes that waiter inside the release and posts it from the releasing
 * thread, without waking one of libdlock's; a multi-lock with keys still to
 * take goes on on libdlock's threads.
 *
 * What allocates. An acquire allocates all its wait needs at the call
 * (handles, leases, a key's entry; DLOCK_ERR_NOMEM there), and nothing
 * after: its wait cannot fail half-way. A sleep, a release and a cancel
 * never allocate (their state lives in the handle or the request). Design
 * and examples: lock/README.md, "Asynchronous calls". */
#ifndef DLOCK_ASYNC_H
#define DLOCK_ASYNC_H

#include "dlock.h"

DLOCK_BEGIN_DECLS

/* Each call takes a struct dlock_req, whose fields and done (dlock_req_fn)
 * are declared in dlock_base.h, beneath dlock.h. */

/* Asks for key as dlock_acquire does, and returns at once. The wait holds no
 * thread: in notify mode it queues in the key's local FIFO with the blocking
 * waiters, in the order asked, woken by a grant, a hand-off or a release; in
 * spin mode it retries on a timer. Fairness, fencing, renewal and
 * max_renewals are dlock_acquire's. The hold belongs to no thread:
 * opts->reentrant is ignored, and a thread that asks for a key it holds waits
 * for its own release.
 * returns: DLOCK_OK, asked: done runs exactly once, later, never inside this
 *          call. DLOCK_ERR_INVALID (key, req or req->done NULL; a bad key or
 *          opts) or DLOCK_ERR_NOMEM: done never runs.
 * runs on: any thread; done where cfg.post says (above).
 * owns:    key and opts are copied; req is lent until done runs; in done,
 *          req->h (rc DLOCK_OK) is the caller's, to release from any thread.
 * errors:  in done, DLOCK_ERR_TIMEOUT, _REDIS, _AUTH, _CANCELLED or _CLOSED,
 *          req->h NULL and req->err saying why. */
int dlock_acquire_async(dlock_client *c, const char *key, const dlock_opts *opts, dlock_req *req);

/* dlock_acquire_multi asynchronously: the keys are asked for one after the
 * other in the blocking one's order, each once the one before is held, under
 * one wait_ms.
 * returns: as dlock_acquire_async; DLOCK_ERR_INVALID also for what
 *          dlock_acquire_multi refuses (no keys, too many, one twice).
 * runs on: any thread; done where cfg.post says.
 * owns:    keys are copied; req as dlock_acquire_async.
 * errors:  as dlock_acquire_async; the keys taken went back before done. */
int dlock_acquire_multi_async(dlock_client *c, const char *const *keys, int n,
                              const dlock_opts *opts, dlock_req *req);

/* dlock_sem_acquire (dlock_sem.h) asynchronously: one of permits_total
 * permits of key, waiting as the blocking one does.
 * returns: as dlock_acquire_async; DLOCK_ERR_INVALID also for
 *          permits_total < 1.
 * runs on: any thread; done where cfg.post says.
 * owns:    as dlock_acquire_async (req->h a permit's holder).
 * errors:  as dlock_acquire_async. */
int dlock_sem_acquire_async(dlock_client *c, const char *key, int permits_total,
                            const dlock_opts *opts, dlock_req *req);

/* dlock_acquire_read and dlock_acquire_write (dlock_rw.h) asynchronously:
 * a waiting writer keeps new readers out, asynchronous or blocking.
 * returns: as dlock_acquire_async.
 * runs on: any thread; done where cfg.post says.
 * owns:    as dlock_acquire_async (req->h a reader's or the writer's holder).
 * errors:  as dlock_acquire_async; a writer that stops waiting withdraws its
 *          wish to write. */
int dlock_acquire_read_async(dlock_client *c, const char *key, const dlock_opts *opts,
                             dlock_req *req);
int dlock_acquire_write_async(dlock_client *c, const char *key, const dlock_opts *opts,
                              dlock_req *req);

/* Withdraws req's call if it still waits (an acquire, or a sleep): its done
 * runs soon (through post or libdlock's threads) with DLOCK_ERR_CANCELLED,
 * holding nothing - a key a multi-lock had taken, or a grant that came
 * meanwhile, goes back (a token in doubt to the orphans thread, as usual); a
 * sleep's hold is left as it was.
 * returns: DLOCK_OK, withdrawn. DLOCK_ERR_INVALID: req does not wait (any
 *          more): its result is decided (done ran, or will run, with it), or
 *          it is a release's; nothing changes.
 * runs on: any thread, once the call that took req returned; never from
 *          inside done.
 * owns:    nothing; the caller keeps req alive during the call. */
int dlock_cancel(dlock_req *req);

/* dlock_sleep without a thread: done runs after ms with DLOCK_OK, or as soon
 * as h is interrupted or lost (the watchdog wakes it; so does the local lease
 * deadline) with what dlock_sleep would return. Works on every kind of
 * handle as dlock_sleep does; h stays held.
 * returns: DLOCK_OK: done will run. DLOCK_ERR_INVALID (h, req or req->done
 *          NULL, ms < 0, h's hold sleeping already): done never runs.
 * runs on: any thread; done where cfg.post says.
 * owns:    the sleep lives in h (one a hold at a time; never allocates); req
 *          is lent until done runs, whose req->h is NULL. Release h only
 *          after done ran (dlock_release refuses a sleeping hold).
 * errors:  in done, DLOCK_ERR_INTERRUPTED, _LOST, _CANCELLED or _CLOSED. */
int dlock_sleep_async(dlock_handle *h, int ms, dlock_req *req);

/* dlock_release without waiting for Redis, for every kind of handle (lock,
 * multi-lock, permit, reader, writer, nested hold): a hand-off to a local
 * waiter happens now, on the caller's thread; a release in Redis runs on
 * libdlock's threads, as a task that lives in the handle (queueing it never
 * allocates and can't fail). It is never withdrawn, not even by
 * dlock_client_free. h NULL: nothing to release.
 * returns: nothing; done (if req) runs once with what dlock_release would
 *          return, req->h NULL. With h NULL it runs at once, inside this call
 *          (there is no client to post through).
 * runs on: any thread; done where cfg.post says.
 * owns:    h is the library's from now on; req (may be NULL: the result is
 *          not wanted) is lent until done runs.
 * errors:  in done, as dlock_release: DLOCK_ERR_LOST, _INTERRUPTED, _REDIS
 *          (the token goes to the orphans thread, as usual), _AUTH, or
 *          DLOCK_ERR_INVALID for a hold that sleeps (nothing released). */
void dlock_release_async(dlock_handle *h, dlock_req *req);

DLOCK_END_DECLS

#endif
