/* timers.c - the runner's timer heap, a pairing heap: arming melds one
 * node in, taking the first melds its children in two passes (pairs left
 * to right, then right to left, without recursion however many there are),
 * and any other node leaves by being cut from its parent with its own
 * subtree, whose children are melded and put back. */
#include "lock/timers.h"

#include <stddef.h>

/* a's and b's roots (without siblings) melded: the later one becomes the
 * first child of the earlier. */
static struct dlock_timer *meld(struct dlock_timer *a, struct dlock_timer *b)
{
    if (a == NULL || b == NULL)
        return a ? a : b;
    if (b->until < a->until) {
        struct dlock_timer *t = a;
        a = b, b = t;
    }
    b->sibling = a->child;
    if (a->child)
        a->child->prev = b;
    b->prev = a;
    a->child = b;
    return a;
}

/* One heap of a list of sibling heaps. */
static struct dlock_timer *meld_siblings(struct dlock_timer *first)
{
    struct dlock_timer *pairs = NULL;
    while (first) {
        struct dlock_timer *a = first, *b = a->sibling;
        first = b ? b->sibling : NULL;
        a->sibling = a->prev = NULL;
        if (b)
            b->sibling = b->prev = NULL;
        a = meld(a, b);
        a->sibling = pairs; /* a list of its own, for the second pass */
        pairs = a;
    }
    struct dlock_timer *root = NULL;
    while (pairs) {
        struct dlock_timer *next = pairs->sibling;
        pairs->sibling = NULL;
        root = meld(root, pairs);
        pairs = next;
    }
    return root;
}

void dlock__timers_arm(struct dlock_timer **root, struct dlock_timer *t, int64_t until)
{
    t->until = until;
    t->child = t->sibling = t->prev = NULL;
    t->armed = 1;
    *root = meld(*root, t);
}

void dlock__timers_disarm(struct dlock_timer **root, struct dlock_timer *t)
{
    struct dlock_timer *rest = meld_siblings(t->child);
    if (t == *root) {
        *root = rest;
    } else {
        if (t->prev->child == t)
            t->prev->child = t->sibling;
        else
            t->prev->sibling = t->sibling;
        if (t->sibling)
            t->sibling->prev = t->prev;
        *root = meld(*root, rest);
    }
    t->child = t->sibling = t->prev = NULL;
    t->armed = 0;
}
