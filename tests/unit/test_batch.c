/* test_batch.c - the group-commit queues: who leads a key's queue, what a
 * batch takes (in arrival order, the leader's first, within its limits),
 * who leads next; and the queue of batches waiting for a transaction: one
 * committer at a time, who takes what joined meanwhile. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "server/batch.h"

struct req {
    batch_link link;
    int index;
};

static void test_first_leads_the_rest_wait_in_order(void **state)
{
    (void)state;
    batch_queues *q = batch_new();
    struct req r[5];
    for (int i = 0; i < 5; i++) {
        r[i] = (struct req){.link = {.key = 7}, .index = i};
        assert_int_equal(batch_join(q, &r[i].link), i == 0);
    }
    batch_link *got[8];
    assert_int_equal(batch_take(q, 7, got, 3, NULL, NULL), 3);
    for (int i = 0; i < 3; i++)
        assert_ptr_equal(got[i], &r[i].link); /* the leader's own first */
    assert_ptr_equal(batch_promote(q, 7), &r[3].link); /* the next waiting leads */
    assert_int_equal(batch_take(q, 7, got, 8, NULL, NULL), 2);
    assert_ptr_equal(got[0], &r[3].link);
    assert_null(batch_promote(q, 7)); /* nobody waits: the key has no leader */
    struct req late = {.link = {.key = 7}};
    assert_int_equal(batch_join(q, &late.link), 1); /* so the next arrival leads */
    assert_int_equal(batch_take(q, 7, got, 8, NULL, NULL), 1);
    assert_null(batch_promote(q, 7));
    batch_free(q);
}

static void test_keys_are_queued_apart(void **state)
{
    (void)state;
    batch_queues *q = batch_new();
    struct req a = {.link = {.key = 1}}, b = {.link = {.key = 257}}, a2 = {.link = {.key = 1}};
    assert_int_equal(batch_join(q, &a.link), 1);
    assert_int_equal(batch_join(q, &b.link), 1); /* same bucket, another key */
    assert_int_equal(batch_join(q, &a2.link), 0);
    batch_link *got[4];
    assert_int_equal(batch_take(q, 257, got, 4, NULL, NULL), 1);
    assert_ptr_equal(got[0], &b.link);
    assert_null(batch_promote(q, 257));
    assert_int_equal(batch_take(q, 1, got, 4, NULL, NULL), 2);
    assert_null(batch_promote(q, 1));
    batch_free(q);
}

/* fits: at most *left more, counting each link it sees. */
static int fits_count(const batch_link *l, void *arg)
{
    (void)l;
    int *left = arg;
    return (*left)-- > 0;
}

static void test_fits_stops_a_batch_but_the_first_is_taken(void **state)
{
    (void)state;
    batch_queues *q = batch_new();
    struct req r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (struct req){.link = {.key = 3}};
        batch_join(q, &r[i].link);
    }
    batch_link *got[4];
    int left = 0; /* refuses even the first, which is taken anyway */
    assert_int_equal(batch_take(q, 3, got, 4, fits_count, &left), 1);
    left = 2; /* sees the first (counted) and one more */
    assert_int_equal(batch_take(q, 3, got, 4, fits_count, &left), 2);
    assert_ptr_equal(got[0], &r[1].link);
    assert_int_equal(batch_take(q, 3, got, 4, NULL, NULL), 1);
    assert_null(batch_promote(q, 3));
    batch_free(q);
}

struct job {
    batch_commit_link link;
    int n;
};

static void test_one_committer_takes_what_joined_meanwhile(void **state)
{
    (void)state;
    batch_commits *c = batch_commits_new();
    struct job j[4] = {{.n = 1}, {.n = 1}, {.n = 1}, {.n = 1}};
    assert_int_equal(batch_commit_join(c, &j[0].link), 1); /* commits now */
    assert_int_equal(batch_commit_join(c, &j[1].link), 0); /* a transaction is in flight */
    batch_commit_link *got[4];
    assert_int_equal(batch_commit_take(c, got, 4, NULL, NULL), 2);
    assert_ptr_equal(got[0], &j[0].link);
    assert_int_equal(batch_commit_join(c, &j[2].link), 0); /* joins the committer's next */
    assert_int_equal(batch_commit_done(c), 1);
    assert_int_equal(batch_commit_take(c, got, 4, NULL, NULL), 1);
    assert_ptr_equal(got[0], &j[2].link);
    assert_int_equal(batch_commit_done(c), 0); /* none waits: the next join commits */
    assert_int_equal(batch_commit_join(c, &j[3].link), 1);
    assert_int_equal(batch_commit_take(c, got, 4, NULL, NULL), 1);
    assert_int_equal(batch_commit_done(c), 0);
    batch_commits_free(c);
}

/* Many threads join one key; whoever leads takes a batch, serves it and
 * promotes the next, which leads in turn (on the promoting thread): every
 * request is served once, and one leader at a time. */
#define RACERS 4
#define EACH 5000
static struct req racer_reqs[RACERS][EACH];
static _Atomic int served[RACERS * EACH], leaders_now, leaders_max;
static batch_queues *race_q;

static void lead(batch_link *l)
{
    while (l) {
        int now = atomic_fetch_add(&leaders_now, 1) + 1;
        for (int m = atomic_load(&leaders_max);
             now > m && !atomic_compare_exchange_weak(&leaders_max, &m, now);) {
        }
        batch_link *got[64];
        int n = batch_take(race_q, 9, got, 64, NULL, NULL);
        for (int i = 0; i < n; i++)
            atomic_fetch_add(&served[((struct req *)got[i])->index], 1);
        atomic_fetch_sub(&leaders_now, 1);
        l = batch_promote(race_q, 9);
    }
}

static void *racer(void *arg)
{
    struct req *r = arg;
    for (int i = 0; i < EACH; i++)
        if (batch_join(race_q, &r[i].link) == 1)
            lead(&r[i].link);
    return NULL;
}

static void test_racing_joins_are_each_served_once_by_one_leader(void **state)
{
    (void)state;
    race_q = batch_new();
    pthread_t t[RACERS];
    for (int k = 0; k < RACERS; k++) {
        for (int i = 0; i < EACH; i++)
            racer_reqs[k][i] = (struct req){.link = {.key = 9}, .index = k * EACH + i};
        pthread_create(&t[k], NULL, racer, racer_reqs[k]);
    }
    for (int k = 0; k < RACERS; k++)
        pthread_join(t[k], NULL);
    for (int i = 0; i < RACERS * EACH; i++)
        assert_int_equal(atomic_load(&served[i]), 1);
    assert_int_equal(atomic_load(&leaders_max), 1);
    batch_free(race_q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_leads_the_rest_wait_in_order),
        cmocka_unit_test(test_keys_are_queued_apart),
        cmocka_unit_test(test_fits_stops_a_batch_but_the_first_is_taken),
        cmocka_unit_test(test_one_committer_takes_what_joined_meanwhile),
        cmocka_unit_test(test_racing_joins_are_each_served_once_by_one_leader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
