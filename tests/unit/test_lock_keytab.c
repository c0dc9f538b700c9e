/* test_lock_keytab.c - a key's FIFO of waiters (lock/keytab.c), with no
 * Redis and no thread: waiters join at the tail, leave from anywhere with
 * the links around them mended, and the one woken is always the head, so
 * that as each leaves the waiters are woken in the order they joined. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "lock/keytab.h"
#include "lock/runner.h"

enum { N = 8 };

/* An entry and N waiters, each an asynchronous acquire's whose task is
 * stepping: a wake then only marks it to step again (runner.h), which the
 * test reads without a runner's threads. */
struct line {
    struct dlock_entry *e;
    struct dlock_waiter w[N];
    struct dlock_task task[N];
};

static struct line *line_new(void)
{
    struct line *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    l->e = dlock__keytab_spare("stock:lock:{1}");
    assert_non_null(l->e);
    for (int i = 0; i < N; i++) {
        l->task[i].running = 1;
        l->w[i].task = &l->task[i];
    }
    return l;
}

static void line_free(struct line *l)
{
    free(l->e);
    free(l);
}

/* The FIFO from head to tail as waiter numbers, checking each link both
 * ways; returns its length. */
static int walk(const struct line *l, int order[N])
{
    int n = 0;
    const struct dlock_waiter *prev = NULL;
    for (const struct dlock_waiter *w = l->e->head; w; prev = w, w = w->next) {
        assert_true(n < N);
        assert_ptr_equal(w->prev, prev);
        order[n++] = (int)(w - l->w);
    }
    assert_ptr_equal(l->e->tail, prev);
    return n;
}

/* Which waiters were woken since the last look (their bit), cleared. */
static unsigned woken(struct line *l)
{
    unsigned bits = 0;
    for (int i = 0; i < N; i++) {
        if (l->task[i].rewake)
            bits |= 1u << i;
        l->task[i].rewake = 0;
    }
    return bits;
}

static void test_waiters_line_up_in_the_order_they_join(void **state)
{
    (void)state;
    struct line *l = line_new();
    int order[N];
    assert_int_equal(walk(l, order), 0);
    for (int i = 0; i < N; i++) {
        dlock__queue_push(l->e, &l->w[i]);
        assert_ptr_equal(l->e->head, &l->w[0]);
        assert_ptr_equal(l->e->tail, &l->w[i]);
    }
    assert_int_equal(walk(l, order), N);
    for (int i = 0; i < N; i++)
        assert_int_equal(order[i], i);
    line_free(l);
}

static void test_a_waiter_leaves_from_the_middle_and_the_line_closes_up(void **state)
{
    (void)state;
    struct line *l = line_new();
    int order[N];
    for (int i = 0; i < N; i++)
        dlock__queue_push(l->e, &l->w[i]);
    dlock__queue_remove(l->e, &l->w[3]);
    dlock__queue_remove(l->e, &l->w[4]); /* the neighbour of a gap just closed */
    assert_null(l->w[3].prev);
    assert_null(l->w[3].next);
    assert_int_equal(walk(l, order), N - 2);
    int want[] = {0, 1, 2, 5, 6, 7};
    for (int i = 0; i < N - 2; i++)
        assert_int_equal(order[i], want[i]);
    dlock__queue_push(l->e, &l->w[3]); /* one that left joins again: at the tail */
    assert_int_equal(walk(l, order), N - 1);
    assert_int_equal(order[N - 2], 3);
    line_free(l);
}

static void test_the_head_and_the_tail_leave_and_the_ends_move(void **state)
{
    (void)state;
    struct line *l = line_new();
    int order[N];
    for (int i = 0; i < 3; i++)
        dlock__queue_push(l->e, &l->w[i]);
    dlock__queue_remove(l->e, &l->w[0]);
    assert_ptr_equal(l->e->head, &l->w[1]);
    dlock__queue_remove(l->e, &l->w[2]);
    assert_ptr_equal(l->e->tail, &l->w[1]);
    assert_int_equal(walk(l, order), 1);
    dlock__queue_remove(l->e, &l->w[1]); /* the last one: the line is empty */
    assert_null(l->e->head);
    assert_null(l->e->tail);
    dlock__queue_push(l->e, &l->w[5]);
    assert_int_equal(walk(l, order), 1);
    assert_int_equal(order[0], 5);
    line_free(l);
}

static void test_only_the_head_is_woken_so_waiters_wake_in_join_order(void **state)
{
    (void)state;
    struct line *l = line_new();
    int perm[N] = {5, 2, 7, 0, 3, 6, 1, 4}; /* they join in this order */
    dlock__entry_wake_head(l->e); /* nobody waits: nothing to wake */
    for (int i = 0; i < N; i++)
        dlock__queue_push(l->e, &l->w[perm[i]]);
    assert_int_equal(woken(l), 0);
    for (int i = 0; i < N; i++) {
        dlock__entry_wake_head(l->e);
        assert_int_equal(woken(l), 1u << perm[i]);
        dlock__queue_remove(l->e, l->e->head); /* it took its turn */
    }
    assert_null(l->e->head);
    dlock__entry_wake_head(l->e);
    assert_int_equal(woken(l), 0);
    line_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_waiters_line_up_in_the_order_they_join),
        cmocka_unit_test(test_a_waiter_leaves_from_the_middle_and_the_line_closes_up),
        cmocka_unit_test(test_the_head_and_the_tail_leave_and_the_ends_move),
        cmocka_unit_test(test_only_the_head_is_woken_so_waiters_wake_in_join_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
