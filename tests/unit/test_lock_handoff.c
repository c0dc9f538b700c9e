/* test_lock_handoff.c - how long a turn is (lock/queue.c's
 * dlock__handoff_bound, the rule of lock/README.md "How long a turn is"): a
 * lease taken from Redis makes handoff_max hand-offs when no other process
 * takes turns with the key, else max(1, 1.5 (q + 1)(n + 1) / q - 1) of them,
 * never more than handoff_max; none when handoff_max is 0. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lock/queue.h"

/* The README's rule, in floating point (a count of hand-offs is whole). */
static int rule(int handoff_max, int q, int n)
{
    if (q == 0 || handoff_max == 0)
        return handoff_max;
    double turn = floor(1.5 * (q + 1) * (n + 1) / q) - 1;
    return turn < 1 ? 1 : turn > handoff_max ? handoff_max : (int)turn;
}

static void test_alone_on_the_key_a_lease_makes_handoff_max(void **state)
{
    (void)state;
    for (int n = 0; n < 100; n++) {
        assert_int_equal(dlock__handoff_bound(8, 0, n), 8);
        assert_int_equal(dlock__handoff_bound(3, 0, n), 3);
    }
}

static void test_handoff_max_0_never_hands_off(void **state)
{
    (void)state;
    for (int q = 0; q < 20; q++)
        for (int n = 0; n < 20; n++)
            assert_int_equal(dlock__handoff_bound(0, q, n), 0);
}

/* The README's examples: two workers in each of four processes make turns
 * of 4 holders (3 hand-offs), eight in each make handoff_max's. */
static void test_the_readmes_examples(void **state)
{
    (void)state;
    assert_int_equal(dlock__handoff_bound(8, 3, 1), 3);
    assert_int_equal(dlock__handoff_bound(8, 3, 7), 8);
    assert_int_equal(dlock__handoff_bound(8, 1, 1), 5); /* two processes, two workers each */
}

static void test_however_many_others_a_lease_makes_one_hand_off(void **state)
{
    (void)state;
    assert_int_equal(dlock__handoff_bound(8, 1000, 0), 1);
    assert_int_equal(dlock__handoff_bound(8, 2, 0), 1);
    assert_int_equal(dlock__handoff_bound(1, 1000, 1000), 1);
}

/* More local waiters never shorten a turn, more other processes never
 * lengthen it, and it stays within 1..handoff_max: the rule, everywhere. */
static void test_the_bound_follows_the_rule_over_a_grid(void **state)
{
    (void)state;
    for (int max = 1; max <= 16; max *= 2)
        for (int q = 1; q <= 64; q++)
            for (int n = 0; n <= 64; n++) {
                int b = dlock__handoff_bound(max, q, n);
                assert_int_equal(b, rule(max, q, n));
                assert_in_range(b, 1, max);
                assert_true(b <= dlock__handoff_bound(max, q, n + 1));
                assert_true(b >= dlock__handoff_bound(max, q + 1, n));
            }
    /* the largest counts it is given (q is capped at 1000) do not overflow */
    assert_int_equal(dlock__handoff_bound(8, 1000, 1 << 30), 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alone_on_the_key_a_lease_makes_handoff_max),
        cmocka_unit_test(test_handoff_max_0_never_hands_off),
        cmocka_unit_test(test_the_readmes_examples),
        cmocka_unit_test(test_however_many_others_a_lease_makes_one_hand_off),
        cmocka_unit_test(test_the_bound_follows_the_rule_over_a_grid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
