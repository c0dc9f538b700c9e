/* test_lock_timers.c - the lock's task runner's timer heap (lock/timers.c,
 * a pairing heap): timers come out in the order they are due, whatever the
 * order they were armed in; any one of them, root, leaf or inner, can be
 * taken out and the rest still come out in order; and many random times,
 * armed and disarmed at random, agree with a plain scan at every step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "lock/timers.h"

enum { MANY = 5000 };

/* A small deterministic generator, so that a failure can be replayed. */
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next_random(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Takes every timer out from the first, checking each is due no earlier
 * than the one before; returns how many came out. */
static int drain_in_order(struct dlock_timer **root)
{
    int n = 0;
    int64_t last = INT64_MIN;
    while (*root) {
        struct dlock_timer *t = *root;
        assert_true(t->armed);
        assert_null(t->prev);
        assert_true(t->until >= last);
        last = t->until;
        dlock__timers_disarm(root, t);
        assert_false(t->armed);
        n++;
    }
    return n;
}

static void test_timers_come_out_in_the_order_they_are_due(void **state)
{
    (void)state;
    static struct dlock_timer t[64];
    struct dlock_timer *root = NULL;
    int64_t at[64];
    for (int i = 0; i < 64; i++) { /* armed in a scrambled order: i * 37 mod 64 */
        at[i] = 1000 + (i * 37) % 64;
        dlock__timers_arm(&root, &t[i], at[i]);
        assert_int_equal(root->until, 1000); /* armed first, and due first */
    }
    for (int64_t due = 1000; due < 1064; due++) {
        assert_non_null(root);
        assert_int_equal(root->until, due);
        dlock__timers_disarm(&root, root);
    }
    assert_null(root);
}

static void test_equal_times_all_come_out(void **state)
{
    (void)state;
    static struct dlock_timer t[100];
    struct dlock_timer *root = NULL;
    for (int i = 0; i < 100; i++)
        dlock__timers_arm(&root, &t[i], i % 3 ? 500 : 400);
    assert_int_equal(drain_in_order(&root), 100);
}

static void test_any_timer_can_be_taken_out_and_the_rest_stay_in_order(void **state)
{
    (void)state;
    enum { N = 200 };
    static struct dlock_timer t[N];
    /* Each position in turn: the root, a first child, a later sibling, a leaf
     * deep down - whatever shape the pairing left after some firsts were taken. */
    for (int gone = 0; gone < N; gone++) {
        struct dlock_timer *root = NULL;
        for (int i = 0; i < N; i++)
            dlock__timers_arm(&root, &t[i], (int64_t)(next_random() % 1000));
        /* take a few firsts out, so that the heap has pairs melded under the root */
        for (int k = 0; k < 3; k++)
            dlock__timers_disarm(&root, root);
        int left = N - 3;
        if (t[gone].armed) {
            dlock__timers_disarm(&root, &t[gone]);
            left--;
        }
        assert_false(t[gone].armed);
        for (int i = gone % 7; i < N; i += 7) /* and more, from where that left them */
            if (t[i].armed) {
                dlock__timers_disarm(&root, &t[i]);
                left--;
            }
        assert_int_equal(drain_in_order(&root), left);
    }
}

/* Many random times, armed and disarmed (anywhere) at random: the first is
 * always the earliest armed, as a plain scan finds it. */
static void test_many_random_times_agree_with_a_plain_scan(void **state)
{
    (void)state;
    static struct dlock_timer t[MANY];
    struct dlock_timer *root = NULL;
    int armed = 0;
    for (int step = 0; step < 20 * MANY; step++) {
        struct dlock_timer *x = &t[next_random() % MANY];
        if (!x->armed) {
            dlock__timers_arm(&root, x, (int64_t)(next_random() % 100000));
            armed++;
        } else if (next_random() % 2) {
            dlock__timers_disarm(&root, x); /* anywhere in the heap */
            armed--;
        } else if (root) {
            dlock__timers_disarm(&root, root); /* the first, as the runner takes it */
            armed--;
        }
        if (step % 97 == 0) { /* a scan now and then: it costs MANY */
            int64_t least = INT64_MAX;
            int count = 0;
            for (int i = 0; i < MANY; i++)
                if (t[i].armed) {
                    count++;
                    least = t[i].until < least ? t[i].until : least;
                }
            assert_int_equal(count, armed);
            if (count)
                assert_int_equal(root->until, least);
            else
                assert_null(root);
        }
    }
    assert_int_equal(drain_in_order(&root), armed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timers_come_out_in_the_order_they_are_due),
        cmocka_unit_test(test_equal_times_all_come_out),
        cmocka_unit_test(test_any_timer_can_be_taken_out_and_the_rest_stay_in_order),
        cmocka_unit_test(test_many_random_times_agree_with_a_plain_scan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
