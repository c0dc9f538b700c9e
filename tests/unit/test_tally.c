/* test_tally.c - the per-address counts (server/tally.h): each address
 * counted under its limit, counts given back, no limit, many threads. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "server/proxies.h"
#include "server/tally.h"

static proxies_addr addr(const char *text)
{
    proxies_addr a;
    assert_int_equal(proxies_addr_parse(&a, text, strlen(text)), 0);
    return a;
}

static void test_each_address_is_counted_under_its_limit(void **state)
{
    (void)state;
    tally *t = tally_new();
    assert_non_null(t);
    proxies_addr a = addr("203.0.113.5"), b = addr("2001:db8::5");
    assert_int_equal(tally_take(t, &a, 2), 1);
    assert_int_equal(tally_take(t, &a, 2), 1);
    assert_int_equal(tally_take(t, &a, 2), 0); /* the third */
    assert_int_equal(tally_count(t, &a), 2);
    assert_int_equal(tally_take(t, &b, 2), 1); /* another address: its own count */
    tally_give(t, &a);
    assert_int_equal(tally_take(t, &a, 2), 1); /* one given back: room again */
    tally_give(t, &a), tally_give(t, &a), tally_give(t, &b);
    assert_int_equal(tally_count(t, &a), 0);
    assert_int_equal(tally_count(t, &b), 0);
    for (int i = 0; i < 1000; i++) /* 0: no limit */
        assert_int_equal(tally_take(t, &a, 0), 1);
    assert_int_equal(tally_count(t, &a), 1000);
    tally_free(t);
}

#define THREADS 4
#define ROUNDS 20000

struct worker {
    tally *t;
    proxies_addr a;
};

/* Takes and gives back ROUNDS times: what each connection does. */
static void *take_and_give(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < ROUNDS; i++)
        if (tally_take(w->t, &w->a, 0) == 1)
            tally_give(w->t, &w->a);
    return NULL;
}

/* Threads taking and giving back on one address: every count comes back
 * (a lost update would leave the address short of room for good). */
static void test_counts_taken_and_given_on_many_threads_come_back_to_zero(void **state)
{
    (void)state;
    tally *t = tally_new();
    assert_non_null(t);
    pthread_t th[THREADS];
    struct worker w = {t, addr("203.0.113.5")};
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, take_and_give, &w), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(tally_count(t, &w.a), 0);
    tally_free(t);
}

static void test_free_of_null_is_a_no_op(void **state)
{
    (void)state;
    tally_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_address_is_counted_under_its_limit),
        cmocka_unit_test(test_counts_taken_and_given_on_many_threads_come_back_to_zero),
        cmocka_unit_test(test_free_of_null_is_a_no_op),
    };
    return cmocka_run_group_tests_name("tally", tests, NULL, NULL);
}
