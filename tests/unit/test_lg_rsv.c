/* test_lg_rsv.c - the verdict of a reserve run fed hand-made runs: a clean
 * sale passes; then each way a broken service shows up (the invariant moved,
 * oversold, a reservation with the wrong fate or two fates, sold without a
 * confirmed reservation, lapsed units back late, a buyer past the limit)
 * must fail, and what loadgen could not learn stays a note. Also the plans'
 * shares and the parsing of expiresAt. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loadgen/reserve.h"
#include "loadgen/rsv.h"

#define MS 1000000LL /* ns */
#define HOLD 2000
#define MAXR 64

typedef struct fake {
    lg_rsv r[MAXR];
    size_t n;
    lg_samples samples;
    lg_rsv_in in;
    lg_finding out[LG_FINDING_COUNT];
    lg_rsv_summary sum;
    int nfind, violations;
} fake;

/* A reservation of quantity 1 by buyer `buyer`, held at held_ms; its plan
 * done at step_ms (confirm or cancel), read back in its due state. */
static lg_rsv *add(fake *f, int plan, int buyer, long long held_ms, long long step_ms)
{
    lg_rsv *r = &f->r[f->n];
    memset(r, 0, sizeof(*r));
    r->id = 100 + (long long)f->n++;
    r->buyer = buyer;
    r->quantity = 1;
    r->plan = (uint8_t)plan;
    r->reserve = LG_STEP_OK;
    r->outcome = 0;
    r->sent_ns = (held_ms - 1) * MS;
    r->held_ns = held_ms * MS;
    if (plan != LG_RSV_LAPSE) {
        r->step = LG_STEP_OK;
        r->step_ns = step_ms * MS;
    }
    r->state = plan == LG_RSV_CONFIRM ? LG_RSV_CONFIRMED
               : plan == LG_RSV_CANCEL ? LG_RSV_CANCELLED : LG_RSV_EXPIRED;
    return r;
}

static void sample(fake *f, double t_s, long long avail, long long reserved, long long sold)
{
    lg_sample x = {t_s, avail, sold, reserved, 0, t_s - 0.001, t_s + 0.001};
    lg_samples_push(&f->samples, &x);
}

/* Stock 3: a confirm, a cancel whose unit a third buyer confirms, and a
 * lapse, sampled as a correct service moves: sold 2, one unit available. */
static fake *clean_sale(void)
{
    fake *f = calloc(1, sizeof(*f));
    lg_samples_init(&f->samples, 7);
    add(f, LG_RSV_CONFIRM, 0, 10, 20);
    add(f, LG_RSV_CANCEL, 1, 10, 30);
    add(f, LG_RSV_LAPSE, 2, 10, 0);
    add(f, LG_RSV_CONFIRM, 3, 40, 50);
    sample(f, 0.000, 3, 0, 0);
    sample(f, 0.015, 0, 3, 0);
    sample(f, 0.045, 0, 2, 1);
    sample(f, 1.000, 0, 1, 2);
    sample(f, 2.500, 1, 0, 2); /* the lapse came back by hold + 1 s after 10 ms */
    f->in = (lg_rsv_in){.r = f->r, .n = 0, .hold_ms = HOLD, .grace_ms = LG_RESERVE_GRACE_MS,
                        .nbuyers = 4, .before = {3, 0, 0, 0}, .after = {1, 0, 2, 0},
                        .samples = &f->samples};
    return f;
}

static void judge(fake *f)
{
    f->in.r = f->r;
    f->in.n = f->n;
    f->nfind = lg_rsv_judge(&f->in, f->out, LG_FINDING_COUNT, &f->violations, &f->sum);
    assert_true(f->nfind >= 0);
}

static const lg_finding *find(const fake *f, int kind)
{
    for (int i = 0; i < f->nfind; i++)
        if (f->out[i].kind == kind)
            return &f->out[i];
    return NULL;
}

static void test_a_clean_sale_passes(void **state)
{
    (void)state;
    fake *f = clean_sale();
    judge(f);
    for (int i = 0; i < f->nfind; i++)
        print_message("%s\n", f->out[i].text);
    assert_int_equal(f->violations, 0);
    assert_int_equal(f->sum.reservations, 4);
    assert_int_equal(f->sum.by_state[LG_RSV_CONFIRMED], 2);
    assert_int_equal(f->sum.by_state[LG_RSV_EXPIRED], 1);
    assert_int_equal(f->sum.sold, 2);
    free(f);
}

static void test_a_moved_invariant_fails(void **state)
{
    (void)state;
    fake *f = clean_sale();
    f->in.after.available = 2; /* a unit appeared from nowhere */
    judge(f);
    assert_non_null(find(f, LG_V_INVARIANT));
    assert_true(f->violations > 0);
    free(f);
}

static void test_a_sample_off_the_invariant_fails(void **state)
{
    (void)state;
    fake *f = clean_sale();
    f->samples.s[2].reserved = 3; /* counted twice for a moment */
    judge(f);
    const lg_finding *x = find(f, LG_V_INVARIANT);
    assert_non_null(x);
    assert_non_null(strstr(x->text, "at 0.045 s"));
    free(f);
}

static void test_selling_more_than_there_was_fails(void **state)
{
    (void)state;
    fake *f = clean_sale();
    add(f, LG_RSV_CONFIRM, 4, 60, 70);
    add(f, LG_RSV_CONFIRM, 5, 60, 70);
    f->in.after = (lg_rsv_totals){-1, 0, 4, 0};
    judge(f);
    assert_non_null(find(f, LG_V_OVERSOLD));
    free(f);
}

static void test_a_confirmed_reservation_reading_expired_fails(void **state)
{
    (void)state;
    fake *f = clean_sale();
    f->r[0].state = LG_RSV_EXPIRED;
    judge(f);
    const lg_finding *x = find(f, LG_V_FATES);
    assert_non_null(x);
    assert_non_null(strstr(x->text, "reservation 100 (planned confirm) reads expired"));
    free(f);
}

static void test_a_reservation_answered_201_then_not_found_fails(void **state)
{
    (void)state;
    fake *f = clean_sale();
    f->r[1].state = LG_RSV_MISSING;
    judge(f);
    const lg_finding *x = find(f, LG_V_FATES);
    assert_non_null(x);
    assert_non_null(strstr(x->text, "reads missing"));
    free(f);
}

static void test_a_lapse_that_was_confirmed_by_nobody_fails(void **state)
{
    (void)state;
    fake *f = clean_sale();
    f->r[2].state = LG_RSV_CONFIRMED;
    judge(f);
    assert_non_null(find(f, LG_V_FATES));
    free(f);
}

static void test_one_reservation_answered_to_two_requests_fails(void **state)
{
    (void)state;
    fake *f = clean_sale();
    f->r[3].id = f->r[0].id;
    judge(f);
    const lg_finding *x = find(f, LG_V_FATES);
    assert_non_null(x);
    assert_non_null(strstr(x->text, "answered to two"));
    free(f);
}

static void test_sold_units_without_a_confirmed_reservation_fail(void **state)
{
    (void)state;
    fake *f = clean_sale();
    f->in.after = (lg_rsv_totals){0, 0, 3, 0}; /* the lapsed unit was sold to nobody */
    f->samples.n--;
    judge(f);
    const lg_finding *x = find(f, LG_V_FATES);
    assert_non_null(x);
    assert_non_null(strstr(x->text, "3 units sold"));
    free(f);
}

static void test_a_lapsed_unit_back_late_fails(void **state)
{
    (void)state;
    fake *f = clean_sale();
    /* 10 ms + hold 2000 + grace 1000: still reserved at 3.1 s is late */
    sample(f, 3.100, 0, 1, 2);
    judge(f);
    const lg_finding *x = find(f, LG_V_LATE_RETURN);
    assert_non_null(x);
    assert_int_equal(x->amount, 1);
    assert_int_equal(f->sum.late_samples, 1);
    free(f);
}

static void test_a_lapsed_unit_back_just_within_the_grace_passes(void **state)
{
    (void)state;
    fake *f = clean_sale();
    sample(f, 2.990, 0, 1, 2); /* 10 ms + 3000 ms: not yet due */
    f->samples.s[f->samples.n - 1].t_s = 2.990;
    judge(f);
    assert_null(find(f, LG_V_LATE_RETURN));
    free(f);
}

static void test_a_unit_held_after_its_cancel_was_answered_fails(void **state)
{
    (void)state;
    fake *f = clean_sale();
    f->r[2].plan = LG_RSV_CANCEL; /* the lapse was a cancel answered at 20 ms ... */
    f->r[2].step = LG_STEP_OK;
    f->r[2].step_ns = 20 * MS;
    f->r[2].state = LG_RSV_CANCELLED;
    /* ... so at 1 s no unit could still be held, let alone 2 */
    f->samples.s[3] = (lg_sample){1.0, 0, 1, 2, 0, 0.999, 1.001};
    judge(f);
    assert_non_null(find(f, LG_V_LATE_RETURN));
    free(f);
}

static void test_a_buyer_past_the_limit_fails(void **state)
{
    (void)state;
    fake *f = clean_sale();
    f->in.limit = 1;
    f->r[3].buyer = 0; /* buyer 0 confirmed twice */
    judge(f);
    const lg_finding *x = find(f, LG_V_BUYER_LIMIT);
    assert_non_null(x);
    assert_non_null(strstr(x->text, "buyer 0 has 2 units"));
    f->r[1].buyer = 2; /* cancelled and expired ones do not count */
    f->r[3].buyer = 3;
    judge(f);
    assert_null(find(f, LG_V_BUYER_LIMIT));
    free(f);
}

static void test_lost_answers_are_notes_not_violations(void **state)
{
    (void)state;
    fake *f = clean_sale();
    f->r[0].step = LG_STEP_UNKNOWN; /* its confirm's answer was lost: it confirmed */
    f->r[1].state = LG_RSV_UNREAD;
    judge(f);
    assert_int_equal(f->violations, 0);
    const lg_finding *x = find(f, LG_N_RESERVE);
    assert_non_null(x);
    assert_int_equal(x->violation, 0);
    free(f);
}

static void test_a_hold_still_held_is_a_note_only_when_the_run_was_stopped(void **state)
{
    (void)state;
    fake *f = clean_sale();
    f->r[2].state = LG_RSV_HELD;
    judge(f);
    assert_non_null(find(f, LG_V_FATES));
    f->in.stopped = 1;
    judge(f);
    assert_null(find(f, LG_V_FATES));
    assert_non_null(find(f, LG_N_RESERVE));
    free(f);
}

static void test_a_confirm_told_expired_must_read_expired(void **state)
{
    (void)state;
    fake *f = clean_sale();
    lg_rsv *r = &f->r[3];
    r->step = LG_STEP_REFUSED;
    snprintf(r->code, sizeof(r->code), "reservation_expired");
    judge(f); /* it reads confirmed although the service said expired */
    assert_non_null(find(f, LG_V_FATES));
    free(f);
}

static void test_every_hundred_buyers_take_exactly_the_shares(void **state)
{
    (void)state;
    int share[3] = {80, 0, 20}, n[3] = {0, 0, 0};
    for (long long k = 500; k < 600; k++)
        n[lg_reserve_plan(share, k)]++;
    assert_int_equal(n[LG_RSV_CONFIRM], 80);
    assert_int_equal(n[LG_RSV_CANCEL], 0);
    assert_int_equal(n[LG_RSV_LAPSE], 20);
}

static void test_expires_at_is_read_as_rfc_3339(void **state)
{
    (void)state;
    assert_int_equal(lg_rsv_parse_time("1970-01-01T00:00:01.500Z"), 1500);
    assert_int_equal(lg_rsv_parse_time("1970-01-01T01:00:00+01:00"), 0);
    assert_int_equal(lg_rsv_parse_time("2026-11-29T07:10:00Z"), 1795936200000LL);
    assert_int_equal(lg_rsv_parse_time("2026-11-29 07:10:00Z"), -1);
    assert_int_equal(lg_rsv_parse_time("2026-11-29T07:10:00"), -1);
    assert_int_equal(lg_rsv_state_of("expired"), LG_RSV_EXPIRED);
    assert_int_equal(lg_rsv_state_of("gone"), LG_RSV_STATE_OTHER);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_clean_sale_passes),
        cmocka_unit_test(test_a_moved_invariant_fails),
        cmocka_unit_test(test_a_sample_off_the_invariant_fails),
        cmocka_unit_test(test_selling_more_than_there_was_fails),
        cmocka_unit_test(test_a_confirmed_reservation_reading_expired_fails),
        cmocka_unit_test(test_a_reservation_answered_201_then_not_found_fails),
        cmocka_unit_test(test_a_lapse_that_was_confirmed_by_nobody_fails),
        cmocka_unit_test(test_one_reservation_answered_to_two_requests_fails),
        cmocka_unit_test(test_sold_units_without_a_confirmed_reservation_fail),
        cmocka_unit_test(test_a_lapsed_unit_back_late_fails),
        cmocka_unit_test(test_a_lapsed_unit_back_just_within_the_grace_passes),
        cmocka_unit_test(test_a_unit_held_after_its_cancel_was_answered_fails),
        cmocka_unit_test(test_a_buyer_past_the_limit_fails),
        cmocka_unit_test(test_lost_answers_are_notes_not_violations),
        cmocka_unit_test(test_a_hold_still_held_is_a_note_only_when_the_run_was_stopped),
        cmocka_unit_test(test_a_confirm_told_expired_must_read_expired),
        cmocka_unit_test(test_every_hundred_buyers_take_exactly_the_shares),
        cmocka_unit_test(test_expires_at_is_read_as_rfc_3339),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
