/* verdict.c - the checker: compares what the service says it holds (stock,
 * sold, ledger rows) with what it told this run's requests, and names every
 * broken invariant with its size. */
#include "loadgen/verdict.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/err.h"

static const char *const finding_names[LG_FINDING_COUNT] = {
    "oversold", "lost_updates", "stock_leak", "unacknowledged_deductions",
    "unrecorded_acknowledgements", "false_refusals", "partially_applied_orders",
    "acknowledged_orders_missing_lines", "refused_orders_with_lines", "undetermined",
    "invariant", "reservation_fates", "late_returns", "buyer_limit", "reservations_unknown",
    "unexplained_deductions", "sold_after_sold_out", "stale_reads", "impossible_reads", "fault",
};

const char *lg_finding_name(int kind)
{
    return kind >= 0 && kind < LG_FINDING_COUNT ? finding_names[kind] : "unknown";
}

void lg_item_check_init(lg_item_check *c, long long id)
{
    memset(c, 0, sizeof(*c));
    c->id = id;
    c->min_ok_remaining = -1;
    c->min_409_remaining = -1;
}

/* Whether a definitive answer refused the order (nothing may have been deducted). */
static int refused(int outcome)
{
    return outcome != LG_OUT_OK && !LG_OUT_UNDETERMINED(outcome);
}

static void tally_line(lg_item_check *c, int outcome, const lg_line *l)
{
    if (outcome == LG_OUT_OK) {
        c->acked_qty += l->quantity;
        c->acked_n++;
        /* an --api profile's ok may say no remaining stock (-1): nothing to check */
        if (l->remaining >= 0 && (c->min_ok_remaining < 0 || l->remaining < c->min_ok_remaining))
            c->min_ok_remaining = l->remaining;
    } else if (LG_OUT_UNDETERMINED(outcome)) {
        c->undetermined_qty += l->quantity;
        c->undetermined_n++;
    } else {
        c->refused_n++;
    }
    /* only the lines the refusal named short carry a claim to check */
    if (outcome == LG_OUT_INSUFFICIENT && l->remaining >= 0) {
        if (l->remaining >= l->quantity)
            c->bad_409++;
        if (c->min_409_remaining < 0 || l->remaining < c->min_409_remaining)
            c->min_409_remaining = l->remaining;
    }
}

/* Calls fn(arg, rec, line) for every line of every record whose item index is
 * below nitems. */
typedef void (*line_fn)(void *arg, const lg_rec *r, lg_line *l);

static void each_line(const lg_batch *batches, int nbatch, int nitems, line_fn fn, void *arg)
{
    for (int b = 0; b < nbatch; b++)
        for (size_t i = 0; i < batches[b].nrecs; i++) {
            const lg_rec *r = &batches[b].recs[i];
            lg_line *lines = lg_rec_lines(&batches[b], r);
            for (int k = 0; k < r->nlines; k++)
                if ((int)lines[k].item < nitems)
                    fn(arg, r, &lines[k]);
        }
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Under mutual exclusion every deduction leaves a distinct remaining stock
 * (stock strictly falls), so a value reported twice means two holders worked
 * from the same stale read: a lost update seen from the client side alone. */
static void count_dup_remaining(lg_item_check *c, long long *vals, size_t n)
{
    if (n < 2)
        return;
    qsort(vals, n, sizeof(*vals), cmp_ll);
    for (size_t i = 1; i < n; i++)
        if (vals[i] == vals[i - 1])
            c->dup_remaining++;
}

/* The acknowledged lines' `remaining` values, per item. */
typedef struct remaining_sets {
    lg_item_check *items;
    long long **vals;
    size_t *fill;
} remaining_sets;

static void tally_one(void *arg, const lg_rec *r, lg_line *l)
{
    tally_line(&((lg_item_check *)arg)[l->item], r->outcome, l);
}

static void collect_remaining(void *arg, const lg_rec *r, lg_line *l)
{
    remaining_sets *s = arg;
    if (r->outcome == LG_OUT_OK && l->remaining >= 0) /* -1: the answer said none */
        s->vals[l->item][s->fill[l->item]++] = l->remaining;
}

int lg_verdict_answers(lg_item_check *items, int nitems, const lg_batch *batches, int nbatch)
{
    each_line(batches, nbatch, nitems, tally_one, items);
    remaining_sets s = {items, calloc((size_t)nitems, sizeof(*s.vals)),
                        calloc((size_t)nitems, sizeof(*s.fill))};
    int rc = s.vals && s.fill ? LG_OK : LG_ERR_NOMEM;
    for (int k = 0; rc == LG_OK && k < nitems; k++)
        if (items[k].acked_n > 0 &&
            (s.vals[k] = malloc((size_t)items[k].acked_n * sizeof(long long))) == NULL)
            rc = LG_ERR_NOMEM;
    if (rc == LG_OK)
        each_line(batches, nbatch, nitems, collect_remaining, &s);
    for (int k = 0; rc == LG_OK && k < nitems; k++)
        count_dup_remaining(&items[k], s.vals[k], s.fill[k]);
    for (int k = 0; s.vals && k < nitems; k++)
        free(s.vals[k]);
    free(s.vals);
    free(s.fill);
    return rc;
}

/* The line of item among a record's lines, or NULL. */
static lg_line *line_of(lg_line *lines, int n, int item)
{
    for (int k = 0; k < n; k++)
        if ((int)lines[k].item == item)
            return &lines[k];
    return NULL;
}

/* Classifies one ledger row against the line of its requestId on this item. */
static void ledger_row(lg_item_check *c, const lg_ledger_row *row, const lg_rec *r, lg_line *l)
{
    if (r == NULL || l == NULL || l->quantity != row->quantity) {
        c->foreign_rows++;
        c->foreign_rows_qty += row->quantity;
        return;
    }
    if (l->seen > 0) {
        c->dup_rows++;
        c->dup_rows_qty += row->quantity;
    } else if (r->outcome == LG_OUT_OK) {
        c->matched_qty += row->quantity;
    } else if (LG_OUT_UNDETERMINED(r->outcome)) {
        c->undetermined_rows++;
        c->undetermined_rows_qty += row->quantity;
    } else {
        c->refused_rows_by[r->outcome]++;
        c->refused_rows_qty += row->quantity;
    }
    if (l->seen < 255)
        l->seen++;
}

void lg_verdict_ledger(lg_item_check *c, int item, const lg_ledger_row *rows, size_t n,
                       lg_rec_lookup lookup, void *arg)
{
    c->ledger_checked = 1;
    c->rows = (long long)n;
    for (size_t i = 0; i < n; i++) {
        lg_line *lines = NULL;
        lg_rec *r = rows[i].request_id ? lookup(arg, rows[i].request_id, &lines) : NULL;
        ledger_row(c, &rows[i], r, r ? line_of(lines, r->nlines, item) : NULL);
    }
}

static void count_missing(void *arg, const lg_rec *r, lg_line *l)
{
    lg_item_check *c = &((lg_item_check *)arg)[l->item];
    if (r->outcome != LG_OUT_OK || l->seen || !c->ledger_checked)
        return;
    c->missing_n++;
    c->missing_qty += l->quantity;
}

void lg_verdict_missing(lg_item_check *items, int nitems, const lg_batch *batches, int nbatch)
{
    each_line(batches, nbatch, nitems, count_missing, items);
}

/* Whether every item the order has a line on had its ledger read row by row. */
static int order_checkable(const lg_item_check *items, int nitems, const lg_line *lines, int n)
{
    for (int k = 0; k < n; k++)
        if ((int)lines[k].item >= nitems || !items[lines[k].item].ledger_checked)
            return 0;
    return 1;
}

/* Keeps the first example of a violation: which request, how many of its lines
 * the ledger holds, and what it was answered. */
static void example(char *buf, const char *run_id, int b, size_t i, int seen, int n,
                    int outcome)
{
    if (buf[0] == '\0')
        snprintf(buf, LG_ORDER_EXAMPLE_MAX, "%s-%d-%zu answered %s, %d of %d lines in the ledger",
                 run_id, b, i, lg_outcome_name(outcome), seen, n);
}

/* Checks one order whose lines' items were all reconciled. */
static void check_order(lg_order_check *c, const lg_line *lines, int n, int outcome,
                        const char *run_id, int b, size_t i)
{
    int seen = 0;
    for (int k = 0; k < n; k++)
        seen += lines[k].seen > 0;
    c->checked++;
    if (seen > 0 && seen < n) { /* whatever the answer: a transaction is all or nothing */
        c->partial_n++;
        example(c->partial_example, run_id, b, i, seen, n, outcome);
    }
    if (outcome == LG_OUT_OK && seen < n) {
        c->acked_missing_n++;
        c->acked_missing_lines += n - seen;
        example(c->acked_missing_example, run_id, b, i, seen, n, outcome);
    }
    if (refused(outcome) && seen > 0) {
        c->refused_applied_n++;
        c->refused_applied_lines += seen;
        example(c->refused_applied_example, run_id, b, i, seen, n, outcome);
    }
}

void lg_verdict_orders(const lg_item_check *items, int nitems, const lg_batch *batches,
                       int nbatch, const char *run_id, lg_order_check *out)
{
    memset(out, 0, sizeof(*out));
    for (int b = 0; b < nbatch; b++)
        for (size_t i = 0; i < batches[b].nrecs; i++) {
            const lg_rec *r = &batches[b].recs[i];
            const lg_line *lines = lg_rec_lines(&batches[b], r);
            out->orders++;
            out->lines += r->nlines;
            out->acked += r->outcome == LG_OUT_OK;
            if (order_checkable(items, nitems, lines, r->nlines))
                check_order(out, lines, r->nlines, r->outcome, run_id, b, i);
        }
}

static long long max3(long long a, long long b, long long c)
{
    long long m = a > b ? a : b;
    return m > c ? m : c;
}

/* Appends a finding when there is room; returns the new count. */
__attribute__((format(printf, 6, 7))) static int add(lg_finding *out, int n, int max, int kind,
                                                      long long amount, const char *fmt, ...)
{
    if (n >= max)
        return n;
    out[n].kind = kind;
    out[n].violation = kind != LG_N_UNDETERMINED;
    out[n].amount = amount;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out[n].text, sizeof(out[n].text), fmt, ap);
    va_end(ap);
    return n + 1;
}

/* Invariants on the stock itself: never below zero, never more sold than there
 * was, and stock + sold constant. */
static int judge_stock(const lg_item_check *c, lg_finding *out, int n, int max)
{
    long long sold = c->sold1 - c->sold0;
    long long over = max3(-c->stock1, sold - c->stock0, c->acked_qty - c->stock0);
    if (over > 0)
        n = add(out, n, max, LG_V_OVERSOLD, over,
                "item %lld: oversold by %lld: initial stock %lld, final stock %lld, "
                "sold %lld, acknowledged %lld",
                c->id, over, c->stock0, c->stock1, sold, c->acked_qty);
    long long drift = c->stock1 + sold - c->stock0;
    /* stock never rises during a run: a 200 that saw less than what is left now
     * was overwritten by a stale write */
    int raised = c->min_ok_remaining >= 0 && c->stock1 > c->min_ok_remaining;
    long long lost = drift > 0 ? drift : c->dup_remaining > 0 ? c->dup_remaining : 1;
    if (drift > 0 || c->dup_remaining > 0 || raised)
        n = add(out, n, max, LG_V_LOST_UPDATES, lost,
                "item %lld: lost updates %lld: stock %lld + sold %lld = %lld vs initial %lld; "
                "%lld answers repeated a remaining stock another answer reported; lowest "
                "remaining acknowledged %lld vs final stock %lld",
                c->id, lost, c->stock1, sold, c->stock1 + sold, c->stock0, c->dup_remaining,
                c->min_ok_remaining, c->stock1);
    else if (drift < 0)
        n = add(out, n, max, LG_V_STOCK_LEAK, -drift,
                "item %lld: stock leak %lld: stock %lld + sold %lld = %lld is below the "
                "initial %lld (stock fell with no ledger row)",
                c->id, -drift, c->stock1, sold, c->stock1 + sold, c->stock0);
    return n;
}

/* Names the error answers whose requests still left a ledger row. */
static void refused_text(const lg_item_check *c, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int o = 0; o < LG_OUT_COUNT && used < size; o++)
        if (c->refused_rows_by[o] > 0)
            used += (size_t)snprintf(buf + used, size - used, "%s%lld answered %s",
                                     used ? ", " : "", c->refused_rows_by[o],
                                     lg_outcome_name(o));
}

/* Ledger rows against 200 answers, row by row when the ledger was read. */
static int judge_ledger(const lg_item_check *c, lg_finding *out, int n, int max)
{
    long long unacked = c->refused_rows_qty + c->foreign_rows_qty + c->dup_rows_qty;
    char refused[160];
    refused_text(c, refused, sizeof(refused));
    if (unacked > 0)
        n = add(out, n, max, LG_V_UNACKED, unacked,
                "item %lld: unacknowledged deductions %lld units: ledger rows of requests "
                "that got an error (%s), %lld duplicate rows for one requestId, %lld rows "
                "from no request of this run",
                c->id, unacked, refused[0] ? refused : "none", c->dup_rows, c->foreign_rows);
    if (c->missing_qty > 0)
        n = add(out, n, max, LG_V_UNRECORDED, c->missing_qty,
                "item %lld: %lld acknowledged units (%lld answers of 200) have no ledger row",
                c->id, c->missing_qty, c->missing_n);
    if (c->undetermined_rows_qty > 0)
        n = add(out, n, max, LG_N_UNDETERMINED, c->undetermined_rows_qty,
                "item %lld: note: %lld units were deducted for %lld requests whose answer "
                "was lost (transport error or malformed answer); not a violation, --retry "
                "settles them",
                c->id, c->undetermined_rows_qty, c->undetermined_rows);
    return n;
}

/* Without the rows: sold must equal acknowledged, up to the undetermined requests. */
static int judge_totals(const lg_item_check *c, lg_finding *out, int n, int max)
{
    long long diff = (c->sold1 - c->sold0) - c->acked_qty;
    if (diff > c->undetermined_qty)
        n = add(out, n, max, LG_V_UNACKED, diff - c->undetermined_qty,
                "item %lld: unacknowledged deductions %lld units: sold %lld, acknowledged "
                "%lld, at most %lld undetermined",
                c->id, diff - c->undetermined_qty, c->sold1 - c->sold0, c->acked_qty,
                c->undetermined_qty);
    else if (diff > 0)
        n = add(out, n, max, LG_N_UNDETERMINED, diff,
                "item %lld: note: up to %lld units may be deductions whose answer was lost "
                "(%lld requests undetermined); not a violation, --retry settles them",
                c->id, diff, c->undetermined_n);
    if (diff < 0)
        n = add(out, n, max, LG_V_UNRECORDED, -diff,
                "item %lld: %lld acknowledged units are missing from sold (sold %lld, "
                "acknowledged %lld)",
                c->id, -diff, c->sold1 - c->sold0, c->acked_qty);
    return n;
}

/* A refusal is false when it contradicts itself (remaining >= requested) or
 * when the stock later stood higher than it claimed: stock never rises in a run. */
static int judge_refusals(const lg_item_check *c, lg_finding *out, int n, int max)
{
    long long above = c->min_409_remaining >= 0 && c->stock1 > c->min_409_remaining;
    char tail[120] = "";
    if (above)
        snprintf(tail, sizeof(tail), "; one claimed %lld remaining, below the final stock %lld",
                 c->min_409_remaining, c->stock1);
    if (c->bad_409 > 0 || above)
        n = add(out, n, max, LG_V_FALSE_REFUSAL, c->bad_409 + above,
                "item %lld: false refusals: %lld insufficient_stock answers reported "
                "remaining >= requested%s",
                c->id, c->bad_409, tail);
    return n;
}

/* The outside verdict (an --api profile whose read has no sold count): the
 * stock's fall is all there is to hold the answers against. Every unit
 * acknowledged must show in it; every unit of it must be acknowledged or at
 * least undetermined. */
static int judge_outside(const lg_item_check *c, lg_finding *out, int n, int max)
{
    long long drop = c->stock0 - c->stock1;
    long long over = c->acked_qty - c->stock0 > -c->stock1 ? c->acked_qty - c->stock0
                                                           : -c->stock1;
    if (over > 0)
        n = add(out, n, max, LG_V_OVERSOLD, over,
                "item %lld: oversold by %lld: initial stock %lld, final stock %lld, "
                "acknowledged %lld",
                c->id, over, c->stock0, c->stock1, c->acked_qty);
    long long lost = c->acked_qty - drop;
    int raised = c->min_ok_remaining >= 0 && c->stock1 > c->min_ok_remaining;
    if (lost > 0 || c->dup_remaining > 0 || raised)
        n = add(out, n, max, LG_V_LOST_UPDATES,
                lost > 0 ? lost : c->dup_remaining > 0 ? c->dup_remaining : 1,
                "item %lld: lost updates: %lld units acknowledged but the stock fell by %lld "
                "(%lld -> %lld); %lld answers repeated a remaining stock another answer "
                "reported; lowest remaining acknowledged %lld vs final stock %lld",
                c->id, c->acked_qty, drop, c->stock0, c->stock1, c->dup_remaining,
                c->min_ok_remaining, c->stock1);
    long long unexplained = drop - c->acked_qty - c->undetermined_qty;
    if (unexplained > 0)
        n = add(out, n, max, LG_V_UNEXPLAINED, unexplained,
                "item %lld: unexplained deductions %lld units: the stock fell by %lld, "
                "%lld units were acknowledged and at most %lld undetermined",
                c->id, unexplained, drop, c->acked_qty, c->undetermined_qty);
    else if (drop > c->acked_qty)
        n = add(out, n, max, LG_N_UNDETERMINED, drop - c->acked_qty,
                "item %lld: note: up to %lld units may be deductions whose answer was lost "
                "(%lld requests undetermined); not a violation, --retry settles them",
                c->id, drop - c->acked_qty, c->undetermined_n);
    return n;
}

int lg_verdict_judge(const lg_item_check *c, lg_finding *out, int max, int *violations)
{
    int n;
    if (c->sold0 < 0 || c->sold1 < 0)
        n = judge_outside(c, out, 0, max);
    else if (c->ledger_checked)
        n = judge_ledger(c, out, judge_stock(c, out, 0, max), max);
    else
        n = judge_totals(c, out, judge_stock(c, out, 0, max), max);
    n = judge_refusals(c, out, n, max);
    if (violations) {
        *violations = 0;
        for (int i = 0; i < n; i++)
            *violations += out[i].violation;
    }
    return n;
}

int lg_verdict_judge_orders(const lg_order_check *c, lg_finding *out, int max, int *violations)
{
    int n = 0;
    if (c->partial_n > 0)
        n = add(out, n, max, LG_V_PARTIAL_ORDERS, c->partial_n,
                "orders: %lld partially applied (some of their lines are in the ledger, others "
                "not), e.g. %s",
                c->partial_n, c->partial_example);
    if (c->acked_missing_n > 0)
        n = add(out, n, max, LG_V_ACKED_MISSING_LINES, c->acked_missing_n,
                "orders: %lld acknowledged orders miss %lld lines in the ledger, e.g. %s",
                c->acked_missing_n, c->acked_missing_lines, c->acked_missing_example);
    if (c->refused_applied_n > 0)
        n = add(out, n, max, LG_V_REFUSED_WITH_LINES, c->refused_applied_n,
                "orders: %lld refused or failed orders left %lld lines in the ledger, e.g. %s",
                c->refused_applied_n, c->refused_applied_lines, c->refused_applied_example);
    if (violations)
        *violations = n;
    return n;
}
