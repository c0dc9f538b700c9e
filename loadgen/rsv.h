/* rsv.h - what a reserve run (--scenario reserve) remembers of each
 * reservation, and the verdict over those records, the item's totals before
 * and after, and the item read while the run went (sample.h). Pure functions
 * over plain structs: reserve.c fills the records over HTTP; unit tests feed
 * hand-made ones.
 *
 * The checks (docs/loadgen.md, "Reservations", says why each is sound):
 *   available + reserved + sold - returned is the same after the run, and at
 *   every sample, as before it                               (else INVARIANT)
 *   available, reserved >= 0; no more sold than there was      (else OVERSOLD)
 *   units sold during the run == units of the reservations that read
 *   confirmed at the end                                        (else FATES)
 *   each reservation one fate, the one its buyer chose: confirmed when its
 *   confirm was answered 201/200, cancelled when its cancel was, expired when
 *   the buyer walked away; no reservationId answered to two requests (FATES)
 *   at each sample, reserved is at most what reservations could still hold
 *   then: a lapsed one up to holdMs + grace after its 201 came (LATE_RETURN)
 *   no buyer holds or bought more than the item's perBuyerLimit (BUYER_LIMIT)
 *
 * Thread safety: none needed; call after the run's threads have ended. */
#ifndef LG_RSV_H
#define LG_RSV_H

#include <stddef.h>
#include <stdint.h>

#include "loadgen/sample.h"
#include "loadgen/verdict.h"

/* How late after its hold a lapsed reservation's units may come back (the
 * issue's promise: within holdMs + 1 s). */
#define LG_RESERVE_GRACE_MS 1000

/* What the buyer meant to do once the reservation was held. */
enum lg_rsv_plan { LG_RSV_CONFIRM, LG_RSV_CANCEL, LG_RSV_LAPSE };

/* A reservation's state as GET /reservations/{id} read it at the end. */
enum lg_rsv_state {
    LG_RSV_UNREAD = 0, /* not read (no reservation, or the read failed) */
    LG_RSV_HELD,
    LG_RSV_CONFIRMED,
    LG_RSV_CANCELLED,
    LG_RSV_EXPIRED,
    LG_RSV_MISSING,     /* 404 reservation_not_found: a reservation answered 201 is gone */
    LG_RSV_STATE_OTHER, /* a state the contract does not name */
};

/* What the answer to one step said. */
enum lg_rsv_step {
    LG_STEP_NONE = 0,   /* not sent */
    LG_STEP_OK,         /* 201 (200 replayed): held, confirmed or cancelled as asked */
    LG_STEP_REFUSED,    /* a definitive error: code says which */
    LG_STEP_UNKNOWN,    /* no usable answer after every retry: it may or may not have happened */
};

/* One buyer's reservation. Times are ns since the run's start (the clock of
 * the samples: lg_samples' seconds * 1e9). */
typedef struct lg_rsv {
    long long id;        /* reservationId, 0 when none was answered */
    int buyer;           /* index of its buyerId */
    int quantity;
    uint8_t plan;        /* enum lg_rsv_plan */
    uint8_t reserve;     /* enum lg_rsv_step of POST /reservations */
    uint8_t step;        /* enum lg_rsv_step of the confirm or cancel */
    uint8_t state;       /* enum lg_rsv_state, read at the end */
    uint8_t outcome;     /* enum lg_outcome of POST /reservations */
    char code[40];       /* the error code of a refused reserve or step ("" when none) */
    int64_t sent_ns;     /* POST /reservations first sent */
    int64_t held_ns;     /* its 201/200 arrived */
    int64_t step_ns;     /* the confirm's or cancel's answer arrived */
    long long expires_ms; /* expiresAt, ms since the epoch on the server's clock; 0 unknown */
    long long order_id;  /* the order a confirmed one became (GET), 0 none */
} lg_rsv;

/* The item's totals; -1 where the server said nothing. */
typedef struct lg_rsv_totals {
    long long available, reserved, sold, returned;
} lg_rsv_totals;

typedef struct lg_rsv_in {
    const lg_rsv *r;
    size_t n;
    int hold_ms, grace_ms;   /* what each asked for; how late a lapsed unit may come back */
    long long limit;         /* the item's perBuyerLimit, 0 none */
    int nbuyers;             /* buyer indexes are 0..nbuyers-1 */
    lg_rsv_totals before, after; /* after: read once every hold had run out */
    const lg_samples *samples; /* the item while the run went (t0/t1 set); may be NULL */
    int stopped;             /* the user stopped the run before every hold ran out: a
                                reservation still held is a note, not a wrong fate */
} lg_rsv_in;

/* What the checks found, for the report. */
typedef struct lg_rsv_summary {
    long long reservations;               /* answered 201/200 with an id */
    long long by_state[LG_RSV_STATE_OTHER + 1];
    long long confirmed_units, lapsed_units;
    long long refused_stock, refused_limit, refused_other, unknown;
    long long sold;                       /* sold - returned, after less before */
    long long late_samples;               /* samples where reserved exceeded what could be held */
    double worst_late_s;                  /* the sample where it exceeded most, its time */
    long long worst_excess;
    long long over_limit_buyers;
} lg_rsv_summary;

/* The deadline by which reservation r no longer holds its units: its
 * confirm's or cancel's answer when that was OK, else its 201's arrival +
 * hold_ms + grace_ms; INT64_MAX when it is unknown whether it was held. */
int64_t lg_rsv_release_by(const lg_rsv *r, int hold_ms, int grace_ms);

/* Runs every check above: writes up to max findings (kinds LG_V_OVERSOLD,
 * LG_V_INVARIANT, LG_V_FATES, LG_V_LATE_RETURN, LG_V_BUYER_LIMIT, LG_N_*; at
 * most LG_FINDING_COUNT) into out and returns how many; *violations gets how
 * many are violations, *sum the counts. Returns -1 only when out of memory
 * (the buyer tallies). */
int lg_rsv_judge(const lg_rsv_in *in, lg_finding *out, int max, int *violations,
                 lg_rsv_summary *sum);

/* "held", "confirmed", ... into the enum; LG_RSV_STATE_OTHER for others. */
int lg_rsv_state_of(const char *name);
const char *lg_rsv_state_name(int state);

/* "2026-11-29T07:10:00.123Z" (RFC 3339, Z or +hh:mm) into ms since the
 * epoch; -1 when it is not one. */
long long lg_rsv_parse_time(const char *s);

#endif
