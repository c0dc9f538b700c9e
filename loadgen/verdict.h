/* verdict.h - decides from the service's own state whether stock oversold, an
 * update was lost or an order was applied in part. Pure functions over plain
 * structs: the run fills in the item states read over HTTP and the
 * per-request records; unit tests feed hand-made ones.
 *
 * A request is an order of one line (POST /reduceStock) or of several lines on
 * distinct items (POST /orders). Invariants checked per item, over the lines of
 * that item (stock0/sold0 before the run, stock1/sold1 after, sold = sold1 -
 * sold0, acked = sum of the quantities of this item's lines in orders answered
 * 200/201, each request counted once even when replayed):
 *   stock1 >= 0 and nothing sold or acknowledged beyond stock0   (else OVERSOLD)
 *   stock0 == stock1 + sold                        (else LOST_UPDATES / STOCK_LEAK)
 *   no two acknowledged lines report the same remaining stock, none below the
 *   final stock                                    (else LOST_UPDATES)
 *   acked == sold, line by line when the ledger was read      (else UNACKED /
 *                                                               UNRECORDED)
 *   every line an insufficient_stock answer named short was short
 *                                                  (else FALSE_REFUSAL)
 * Without a sold count (sold0 or sold1 -1: an --api profile that reads the stock
 * alone), the outside verdict, with drop = stock0 - stock1:
 *   stock1 >= 0 and acked <= stock0               (else OVERSOLD)
 *   acked <= drop, remaining values distinct and none below the final stock
 *                                                  (else LOST_UPDATES)
 *   drop <= acked + undetermined units             (else UNEXPLAINED)
 * and per order, over the items whose ledger was read (lg_verdict_orders):
 *   all of its lines are in the ledger or none, whatever the answer
 *                                                  (else PARTIAL_ORDERS)
 *   an acknowledged order has every line            (else ACKED_MISSING_LINES)
 *   a refused or failed order has none             (else REFUSED_WITH_LINES)
 * Thread safety: none needed; call after the load threads have ended. */
#ifndef LG_VERDICT_H
#define LG_VERDICT_H

#include <stddef.h>
#include <stdint.h>

#include "loadgen/answer.h"

/* The largest item index a line can hold (its 24-bit field). */
#define LG_LINE_ITEM_MAX ((1 << 24) - 1)

/* One line of a request: an item and the quantity asked of it, and what the
 * answer and the ledger said of it. 16 bytes, since a run keeps one per line
 * of up to millions of requests. */
typedef struct lg_line {
    long long remaining; /* the item's stock the final 200/201 reported after this line;
                            in a 409 insufficient_stock the remaining it claimed for this
                            line when it named the line short; else -1 */
    int32_t quantity;    /* quantity asked */
    uint32_t item : 24;  /* index of the item in the run's item list */
    uint32_t seen : 8;   /* set by lg_verdict_ledger: ledger rows found for it (saturates) */
} lg_line;

/* What loadgen remembers of one request (one requestId): its outcome and where
 * its lines are in its batch's line array. 8 bytes. */
typedef struct lg_rec {
    uint32_t first; /* index of its first line in lg_batch.lines */
    uint8_t nlines; /* 1..LG_ORDER_LINES_MAX */
    uint8_t outcome; /* enum lg_outcome of the final attempt */
} lg_rec;

/* The records of one load thread and the lines they point into. */
typedef struct lg_batch {
    lg_rec *recs;
    size_t nrecs;
    lg_line *lines;
    size_t nlines;
    /* [nrecs] each, or NULL when the run kept no times (a flash sale): ns
     * since the load's start (lg_result.start_ns) of the request's first send
     * and of its final answer (or of giving up on it), for the history check */
    int64_t *sent_ns, *done_ns;
} lg_batch;

/* The lines of record r of batch b. */
static inline lg_line *lg_rec_lines(const lg_batch *b, const lg_rec *r)
{
    return b->lines + r->first;
}

/* One ledger row of GET /items/{id}: request_id NULL when the row has none. */
typedef struct lg_ledger_row {
    const char *request_id;
    long long quantity;
} lg_ledger_row;

/* What one item's lines say, before and after the run. Counts of answers
 * are counts of this item's lines in them. */
typedef struct lg_item_check {
    long long id;                   /* the item's id on the server */
    long long stock0, sold0, orders0; /* before the run (sold, orders -1: not read) */
    long long stock1, sold1, orders1; /* after the run */

    /* from this run's answers (lg_verdict_answers) */
    long long acked_qty, acked_n;               /* lines of 200/201 orders */
    long long undetermined_qty, undetermined_n; /* lines of transport errors / malformed answers */
    long long refused_n;                        /* lines of definitive error answers */
    long long dup_remaining;   /* acknowledged lines reporting a `remaining` another reported */
    long long min_ok_remaining; /* lowest `remaining` of an acknowledged line, -1 if none */
    long long bad_409;         /* lines named short with remaining >= the quantity asked */
    long long min_409_remaining; /* lowest `remaining` of a line named short, -1 if none */

    /* from the ledger rows written during the run (lg_verdict_ledger) */
    int ledger_checked;                /* 1 when every row since the run began was read */
    long long rows, matched_qty;       /* rows read; units matched to an acknowledged line */
    long long refused_rows_by[LG_OUT_COUNT]; /* rows of requests answered with that error */
    long long refused_rows_qty;
    long long undetermined_rows, undetermined_rows_qty; /* rows of requests with no answer */
    long long foreign_rows, foreign_rows_qty; /* rows of no request of this run, or whose
                                                 item or quantity differ from its lines' */
    long long dup_rows, dup_rows_qty;   /* a second row for the same requestId */
    long long missing_n, missing_qty;   /* acknowledged lines with no ledger row */
} lg_item_check;

/* Buffer size for naming one request in a finding ("<run_id>-<batch>-<seq>"). */
#define LG_ORDER_EXAMPLE_MAX 96

/* What the orders of a run say (lg_verdict_orders). An order is checked when
 * the ledger of every item it has a line on was read row by row. Each of the
 * three violations keeps its first example, naming the request. */
typedef struct lg_order_check {
    long long orders, lines;   /* requests of the run and their lines */
    long long acked;           /* orders answered 200/201 */
    long long checked;         /* orders checked against the ledger */
    long long partial_n;       /* orders with some lines in the ledger and others not */
    long long acked_missing_n, acked_missing_lines; /* acknowledged, lines not in the ledger */
    long long refused_applied_n, refused_applied_lines; /* refused or failed, lines in it */
    char partial_example[LG_ORDER_EXAMPLE_MAX];
    char acked_missing_example[LG_ORDER_EXAMPLE_MAX];
    char refused_applied_example[LG_ORDER_EXAMPLE_MAX];
} lg_order_check;

enum lg_finding_kind {
    LG_V_OVERSOLD,      /* negative stock, or more sold/acknowledged than the initial stock */
    LG_V_LOST_UPDATES,  /* deductions the stock does not reflect (stale reads or writes) */
    LG_V_STOCK_LEAK,    /* stock fell by more than the ledger records */
    LG_V_UNACKED,       /* ledger deductions no 200 of this run answered */
    LG_V_UNRECORDED,    /* acknowledged lines with no ledger row */
    LG_V_FALSE_REFUSAL, /* insufficient_stock answered while stock was available */
    LG_V_PARTIAL_ORDERS,        /* orders applied in part: some lines, not all */
    LG_V_ACKED_MISSING_LINES,   /* acknowledged orders with a line missing from the ledger */
    LG_V_REFUSED_WITH_LINES,    /* refused or failed orders that left a line in the ledger */
    LG_N_UNDETERMINED,  /* a note, not a violation: rows of requests whose answer was lost */
    /* reservations (rsv.h) */
    LG_V_INVARIANT,     /* available + reserved + sold - returned moved */
    LG_V_FATES,         /* a reservation without its one fate, or sold != confirmed */
    LG_V_LATE_RETURN,   /* more units reserved than could still be held: a lapse came late */
    LG_V_BUYER_LIMIT,   /* a buyer held or bought more than perBuyerLimit */
    LG_N_RESERVE,       /* a note: reservations whose fate loadgen could not learn */
    /* the outside verdict (--api without a sold count) and the history check (history.h) */
    LG_V_UNEXPLAINED,   /* stock fell by more than the acknowledged and undetermined units */
    LG_V_SOLD_AFTER_SOLD_OUT, /* a success begun after a sold-out answer, stock never back */
    LG_V_STALE_READ,    /* a read above the band: acknowledged deductions missing from it */
    LG_V_IMPOSSIBLE_READ, /* a read below the band: more deducted than was ever asked */
    LG_N_FAULT,         /* a note: what the run saw around a --fault */
    LG_FINDING_COUNT
};

typedef struct lg_finding {
    int kind;         /* enum lg_finding_kind */
    int violation;    /* 1: the invariant is broken (FAIL); 0: a note */
    long long amount; /* units (answers for FALSE_REFUSAL, orders for the order kinds) */
    char text[320];   /* one line, starting with "item <id>: " or "orders: " */
} lg_finding;

/* Zeroes c and sets its id, min_ok_remaining and min_409_remaining (-1). */
void lg_item_check_init(lg_item_check *c, long long id);

/* Tallies the lines of the records of nbatch batches (one per load thread) into
 * items[line.item] (lines with an item index outside 0..nitems-1 are ignored).
 * Also counts repeated `remaining` values among acknowledged lines, which needs
 * a sort per item. Returns 0 or LG_ERR_NOMEM. */
int lg_verdict_answers(lg_item_check *items, int nitems, const lg_batch *batches, int nbatch);

/* Finds the record of a requestId of this run and sets *lines to its lines, or
 * returns NULL when it is not one. */
typedef lg_rec *(*lg_rec_lookup)(void *arg, const char *request_id, lg_line **lines);

/* Reconciles the ledger rows written during the run for item c (index item in
 * the run's list) with the records: marks the line of each matching record
 * seen and counts matched, refused, undetermined, foreign and duplicate rows.
 * Sets c->ledger_checked. Call lg_verdict_missing (and lg_verdict_orders)
 * after every item was reconciled. */
void lg_verdict_ledger(lg_item_check *c, int item, const lg_ledger_row *rows, size_t n,
                       lg_rec_lookup lookup, void *arg);

/* Counts acknowledged lines whose item was reconciled but that no row matched. */
void lg_verdict_missing(lg_item_check *items, int nitems, const lg_batch *batches, int nbatch);

/* The per-order checks, after lg_verdict_ledger ran for every item it could:
 * zeroes *out and fills it. run_id names the requests in the examples
 * ("<run_id>-<batch>-<seq>", as the load sent them). */
void lg_verdict_orders(const lg_item_check *items, int nitems, const lg_batch *batches,
                       int nbatch, const char *run_id, lg_order_check *out);

/* Judges one item: writes up to max findings (at most LG_FINDING_COUNT are
 * ever produced) and returns how many; *violations (may be NULL) gets how many
 * of them are violations. */
int lg_verdict_judge(const lg_item_check *c, lg_finding *out, int max, int *violations);

/* Judges the orders the same way (at most 3 findings, all violations). */
int lg_verdict_judge_orders(const lg_order_check *c, lg_finding *out, int max, int *violations);

/* Stable snake_case name of a finding kind ("oversold", "lost_updates", ...). */
const char *lg_finding_name(int kind);

#endif
