/* verdict.h - decides from the service's own state whether stock oversold or an
 * update was lost. Pure functions over plain structs: the run fills in the
 * item states read over HTTP and the per-request records; unit tests feed
 * hand-made ones.
 *
 * Invariants checked per item (stock0/sold0 before the run, stock1/sold1 after,
 * sold = sold1 - sold0, acked = sum of quantities of this run's 200 answers,
 * each request counted once even when replayed):
 *   stock1 >= 0 and nothing sold or acknowledged beyond stock0   (else OVERSOLD)
 *   stock0 == stock1 + sold                        (else LOST_UPDATES / STOCK_LEAK)
 *   no two 200s report the same remaining stock, none below the final stock
 *                                                  (else LOST_UPDATES)
 *   acked == sold, row by row when the ledger was read        (else UNACKED /
 *                                                               UNRECORDED)
 *   every insufficient_stock answer was true       (else FALSE_REFUSAL)
 * Thread safety: none needed; call after the load threads have ended. */
#ifndef LG_VERDICT_H
#define LG_VERDICT_H

#include <stddef.h>
#include <stdint.h>

#include "loadgen/answer.h"

/* What loadgen remembers of one request (one requestId), for the verdict. */
typedef struct lg_rec {
    long long remaining; /* `remaining` of the final 200 / 409 insufficient answer, else -1 */
    int32_t quantity;    /* quantity asked */
    int32_t item;        /* index of the item in the run's item list */
    uint8_t outcome;     /* enum lg_outcome of the final attempt */
    uint8_t seen;        /* set by lg_verdict_ledger: ledger rows found for it (saturates) */
} lg_rec;

/* One ledger row of GET /items/{id}: request_id NULL when the row has none. */
typedef struct lg_ledger_row {
    const char *request_id;
    long long quantity;
} lg_ledger_row;

typedef struct lg_item_check {
    long long id;                   /* the item's id on the server */
    long long stock0, sold0, orders0; /* before the run */
    long long stock1, sold1, orders1; /* after the run */

    /* from this run's answers (lg_verdict_answers) */
    long long acked_qty, acked_n;               /* 200s */
    long long undetermined_qty, undetermined_n; /* transport errors / malformed answers */
    long long refused_n;                        /* definitive error answers */
    long long dup_remaining;   /* 200s reporting a `remaining` that another 200 reported */
    long long min_ok_remaining; /* lowest `remaining` in a 200, -1 if none */
    long long bad_409;         /* insufficient_stock answers with remaining >= requested */
    long long min_409_remaining; /* lowest `remaining` in an insufficient answer, -1 if none */

    /* from the ledger rows written during the run (lg_verdict_ledger) */
    int ledger_checked;                /* 1 when every row since the run began was read */
    long long rows, matched_qty;       /* rows read; units matched to a 200 of this run */
    long long refused_rows_by[LG_OUT_COUNT]; /* rows of requests answered with that error */
    long long refused_rows_qty;
    long long undetermined_rows, undetermined_rows_qty; /* rows of requests with no answer */
    long long foreign_rows, foreign_rows_qty; /* rows of no request of this run, or whose
                                                 item or quantity differ from the request's */
    long long dup_rows, dup_rows_qty;   /* a second row for the same requestId */
    long long missing_n, missing_qty;   /* 200s of this run with no ledger row */
} lg_item_check;

enum lg_finding_kind {
    LG_V_OVERSOLD,      /* negative stock, or more sold/acknowledged than the initial stock */
    LG_V_LOST_UPDATES,  /* deductions the stock does not reflect (stale reads or writes) */
    LG_V_STOCK_LEAK,    /* stock fell by more than the ledger records */
    LG_V_UNACKED,       /* ledger deductions no 200 of this run answered */
    LG_V_UNRECORDED,    /* 200 answers with no ledger row */
    LG_V_FALSE_REFUSAL, /* insufficient_stock answered while stock was available */
    LG_N_UNDETERMINED,  /* a note, not a violation: rows of requests whose answer was lost */
    LG_FINDING_COUNT
};

typedef struct lg_finding {
    int kind;         /* enum lg_finding_kind */
    int violation;    /* 1: the invariant is broken (FAIL); 0: a note */
    long long amount; /* units (or answers, for FALSE_REFUSAL) */
    char text[320];   /* one line, starting with "item <id>: " */
} lg_finding;

/* Zeroes c and sets its id, min_ok_remaining and min_409_remaining (-1). */
void lg_item_check_init(lg_item_check *c, long long id);

/* Tallies the records of nbatch arrays (one per load thread) into items[rec.item]
 * (records with an item index outside 0..nitems-1 are ignored). Also counts
 * repeated `remaining` values among 200s, which needs a sort per item.
 * Returns 0 or LG_ERR_NOMEM. */
int lg_verdict_answers(lg_item_check *items, int nitems, lg_rec *const *recs,
                       const size_t *nrecs, int nbatch);

/* Finds the record of a requestId of this run, or NULL when it is not one. */
typedef lg_rec *(*lg_rec_lookup)(void *arg, const char *request_id);

/* Reconciles the ledger rows written during the run for item c (index item in the
 * run's list) with the records: marks each matching record seen and counts
 * matched, refused, undetermined, foreign and duplicate rows. Sets
 * c->ledger_checked. Call lg_verdict_missing after every item was reconciled. */
void lg_verdict_ledger(lg_item_check *c, int item, const lg_ledger_row *rows, size_t n,
                       lg_rec_lookup lookup, void *arg);

/* Counts 200s whose item was reconciled but that no ledger row matched. */
void lg_verdict_missing(lg_item_check *items, int nitems, lg_rec *const *recs,
                        const size_t *nrecs, int nbatch);

/* Judges one item: writes up to max findings (at most LG_FINDING_COUNT are
 * ever produced) and returns how many; *violations (may be NULL) gets how many
 * of them are violations. */
int lg_verdict_judge(const lg_item_check *c, lg_finding *out, int max, int *violations);

/* Stable snake_case name of a finding kind ("oversold", "lost_updates", ...). */
const char *lg_finding_name(int kind);

#endif
