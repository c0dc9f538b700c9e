/* timers.h - the runner's timer heap: a pairing heap of timers by the time
 * each is due, linked through the timers themselves (embedded in what waits:
 * a task), so that arming one never allocates or fails, and any timer can
 * leave it, not only the first. Knows nothing of tasks; not thread-safe:
 * its owner's lock guards it. */
#ifndef DLOCK_TIMERS_H
#define DLOCK_TIMERS_H

#include <stdint.h>

struct dlock_timer {
    struct dlock_timer *child, *sibling, *prev; /* prev: the left sibling, or the parent
                                                 * of a first child; NULL at the root */
    int64_t until;                              /* when it is due */
    int armed;                                  /* in a heap */
};

/* Arms t (not armed) to be due at until in the heap *root (NULL: empty):
 * *root is then the earliest-due timer. */
void dlock__timers_arm(struct dlock_timer **root, struct dlock_timer *t, int64_t until);

/* Takes t (armed in *root, anywhere in it) out of the heap. */
void dlock__timers_disarm(struct dlock_timer **root, struct dlock_timer *t);

#endif
