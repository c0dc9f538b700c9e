/* reentry.h - which thread holds which key on a client: what a reentrant
 * acquire nests in, and what a non-reentrant one must refuse rather than
 * wait for itself. A key's outermost hold counts its handles and is
 * released for real only when the last of them is (lock/README.md,
 * "Reentrancy").
 * The functions taking the table are called with the client's mutex held;
 * those taking the client lock it themselves. */
#ifndef DLOCK_REENTRY_H
#define DLOCK_REENTRY_H

#include "lock/lease.h"

typedef struct dlock_holds dlock_holds;

dlock_holds *dlock__holds_new(void);    /* NULL when out of memory */
void dlock__holds_free(dlock_holds *t); /* every hold must have ended */

/* Registers h, which has just got its key (from Redis or by hand-off), as
 * an outermost hold of the thread that acquired it, with one handle. */
void dlock__holds_add(dlock_holds *t, dlock_handle *h);

/* Ends the handle *h's part in its hold. Returns 1 when the key stays held
 * by other handles of the hold (a nested *h is freed; an outermost one
 * lives on until they are released, though its caller must no longer use
 * it); 0 when the hold ends: *h is then its outermost handle, out of the
 * table, to be released for real. */
int dlock__holds_leave(dlock_holds *t, dlock_handle **h);

/* When the calling thread holds key on c (its lease not lost: a lost hold
 * holds nothing), a handle nested in that hold (o->reentrant) or a prompt
 * refusal (DLOCK_ERR_INVALID). Returns 1 with *rc (and on DLOCK_OK *out)
 * set when the thread holds key, 0 when it doesn't. */
int dlock__reenter(dlock_client *c, const char *key, const dlock_opts *o, dlock_handle **out,
                   int *rc);

/* DLOCK_OK when the calling thread holds none of the n keys on c, else
 * DLOCK_ERR_INVALID naming one: a multi-lock never nests. */
int dlock__holds_none(dlock_client *c, const char *const *keys, int n);

#endif
