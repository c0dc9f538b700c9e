/* scenario.c - the named contention scenarios: defaults sized to run in a few
 * seconds on a laptop against 2-3 replicas, and the expectations that make a
 * scenario fail when it did not exercise what it claims to. */
#include "loadgen/scenario.h"

#include <stdio.h>
#include <string.h>

static const lg_scenario scenarios[] = {
    {"hot", "flash sale: 64 connections, 1000 requests for one item with stock 100",
     "", "the stock runs out: some requests get insufficient_stock",
     {64, 1000, 1, 100, 1, 1, 0, 0, 0, 0, 0}},
    {"spread", "5000 requests of 1-3 units over 50 items of stock 1000 (little contention)",
     "", "", {64, 5000, 50, 1000, 1, 3, 0, 0, 0, 0, 0}},
    {"renew", "workMs 1500 longer than the lease: the watchdog must renew (16 requests, 8 items)",
     "--allow-work-ms --lease-ms 500 --redis-timeout-ms 80 (any lease below workMs; lease x "
     "max-renewals above it; Redis timeout at most lease/6)",
     "200s, no lock_lost / lock_interrupted, and 200s no faster than workMs",
     {8, 16, 8, 100, 1, 1, 1500, 0, 0, 0, 0}},
    {"interrupt",
     "workMs 3000 beyond lease x max renewals: holders are interrupted (16 requests, 8 items)",
     "--allow-work-ms --lease-ms 300 --redis-timeout-ms 50 --max-renewals 2",
     "lock_interrupted answers, none of which deducted (checked in the ledger)",
     {8, 16, 8, 100, 1, 1, 3000, 0, 0, 0, 0}},
    /* a little work widens the read-to-write window so `none` shows its race */
    {"compare",
     "hot (600 requests, workMs 2) against servers in lock modes redis, none, atomic, "
     "side by side",
     "--allow-work-ms on each; pass --target redis=URL --target none=URL --target atomic=URL",
     "redis and atomic PASS; none is expected to FAIL (no lock: the race shows)",
     {64, 600, 1, 100, 1, 1, 2, 0, 0, 0, 0}},
    /* carts over few hot items: every order takes several locks at once */
    {"cart",
     "1000 carts (POST /orders) of 1-5 lines of 1-3 units over 8 items of stock 200, "
     "64 connections",
     "", "the stock runs out (some carts get insufficient_stock) and some carts succeed; "
     "per order: all lines in the ledger or none, as answered",
     {64, 1000, 8, 200, 1, 3, 0, 1, 5, 0, 0}},
    /* the sale: every buyer at once, half of them too late */
    {"flash",
     "flash sale: 1000 buyers (--buyers), each on its own connection from its own "
     "127.x.y.z, connected first, then fired at once at one item of stock 500",
     "--max-connections above the buyers a replica gets (a descriptor limit to match); "
     "--max-connections-per-ip 0 or above 1",
     "every buyer answered (no connect failure, none closed or timed out without an "
     "answer); the stock runs out",
     {64, 1000, 1, 500, 1, 1, 0, 0, 0, 1000, 0}},
    /* the reservations: the units of buyers who walk away must come back */
    {"reserve",
     "1000 buyers (--requests) each reserve a unit of one item of stock 100 with holdMs 2000 "
     "(--hold-ms), then 60 % confirm, 20 % cancel, 20 % walk away (--shares)",
     "none beyond stockd's defaults (--sweep-ms 100)",
     "the stock runs out (insufficient_stock answers) and some reservation is held; the "
     "verdict checks the invariant, every reservation's one fate, the lapsed units back "
     "within holdMs + 1 s, the per-buyer limit",
     {32, 1000, 1, 100, 1, 1, 0, 0, 0, 0, 1}},
};

#define NSCENARIOS ((int)(sizeof(scenarios) / sizeof(scenarios[0])))

const lg_scenario *lg_scenario_at(int i)
{
    return i >= 0 && i < NSCENARIOS ? &scenarios[i] : NULL;
}

const lg_scenario *lg_scenario_find(const char *name)
{
    for (int i = 0; i < NSCENARIOS; i++)
        if (strcmp(scenarios[i].name, name) == 0)
            return &scenarios[i];
    return NULL;
}

/* A sale must actually run past the stock, or it showed nothing. */
static int expect_sellout(const char *name, const lg_expect_in *in,
                          char out[LG_EXPECT_MAX][LG_EXPECT_TEXT], int n)
{
    if (in->counts[LG_OUT_INSUFFICIENT] == 0)
        snprintf(out[n++], LG_EXPECT_TEXT,
                 "%s: the stock never ran out (no insufficient_stock answer): raise "
                 "--requests or lower --stock", name);
    return n;
}

/* Carts that all failed checked no order against the ledger. */
static int expect_cart(const lg_expect_in *in, char out[LG_EXPECT_MAX][LG_EXPECT_TEXT], int n)
{
    n = expect_sellout("cart", in, out, n);
    if (in->counts[LG_OUT_OK] == 0)
        snprintf(out[n++], LG_EXPECT_TEXT,
                 "cart: no cart succeeded: raise --stock or lower --cart-lines / --quantity");
    return n;
}

/* A sale that dropped a buyer without an answer failed that buyer, whatever
 * the ledger says. */
static int expect_flash(const lg_expect_in *in, char out[LG_EXPECT_MAX][LG_EXPECT_TEXT], int n)
{
    if (in->counts[LG_OUT_INSUFFICIENT] == 0 && in->counts[LG_OUT_TRANSPORT] == 0)
        snprintf(out[n++], LG_EXPECT_TEXT, "flash: the stock never ran out (no "
                 "insufficient_stock answer): raise --buyers or lower --stock");
    if (in->counts[LG_OUT_TRANSPORT])
        snprintf(out[n++], LG_EXPECT_TEXT,
                 "flash: %llu buyers got no answer (connect failures, connections closed or "
                 "timed out without an answer): every buyer must be answered",
                 (unsigned long long)in->counts[LG_OUT_TRANSPORT]);
    return n;
}

/* Work longer than the lease succeeds only when the watchdog renews it. */
static int expect_renew(const lg_expect_in *in, char out[LG_EXPECT_MAX][LG_EXPECT_TEXT], int n)
{
    const uint64_t *c = in->counts;
    if (c[LG_OUT_OK] == 0)
        snprintf(out[n++], LG_EXPECT_TEXT, "renew: no request succeeded");
    if (c[LG_OUT_LOCK_LOST] + c[LG_OUT_LOCK_INTERRUPTED] > 0)
        snprintf(out[n++], LG_EXPECT_TEXT,
                 "renew: %llu lock_lost and %llu lock_interrupted answers: the lease was not "
                 "renewed through workMs %d (is lease x max-renewals above it?)",
                 (unsigned long long)c[LG_OUT_LOCK_LOST],
                 (unsigned long long)c[LG_OUT_LOCK_INTERRUPTED], in->work_ms);
    if (c[LG_OUT_OK] > 0 && in->ok_min_us < (uint64_t)in->work_ms * 1000)
        snprintf(out[n++], LG_EXPECT_TEXT,
                 "renew: a 200 came after %.1f ms, faster than workMs %d: stockd ignores "
                 "workMs (start it with --allow-work-ms)",
                 (double)in->ok_min_us / 1000.0, in->work_ms);
    return n;
}

static int expect_interrupt(const lg_expect_in *in, char out[LG_EXPECT_MAX][LG_EXPECT_TEXT],
                            int n)
{
    if (in->counts[LG_OUT_LOCK_INTERRUPTED] == 0)
        snprintf(out[n++], LG_EXPECT_TEXT,
                 "interrupt: no lock_interrupted answer: start stockd with --allow-work-ms and "
                 "lease x max-renewals below workMs %d (e.g. --lease-ms 300 --redis-timeout-ms 50 "
                 "--max-renewals 2)",
                 in->work_ms);
    return n;
}

/* Reservations that never ran out of stock never made a buyer wait for a
 * lapsed unit, and none held proved nothing. */
static int expect_reserve(const lg_expect_in *in, char out[LG_EXPECT_MAX][LG_EXPECT_TEXT], int n)
{
    n = expect_sellout("reserve", in, out, n);
    if (in->counts[LG_OUT_OK] == 0)
        snprintf(out[n++], LG_EXPECT_TEXT, "reserve: no reservation was held");
    return n;
}

int lg_scenario_expect(const char *name, const lg_expect_in *in,
                       char out[LG_EXPECT_MAX][LG_EXPECT_TEXT])
{
    if (strcmp(name, "reserve") == 0)
        return expect_reserve(in, out, 0);
    if (strcmp(name, "hot") == 0 || strcmp(name, "compare") == 0)
        return expect_sellout("hot", in, out, 0); /* compare runs hot per mode */
    if (strcmp(name, "cart") == 0)
        return expect_cart(in, out, 0);
    if (strcmp(name, "flash") == 0)
        return expect_flash(in, out, 0);
    if (strcmp(name, "renew") == 0)
        return expect_renew(in, out, 0);
    if (strcmp(name, "interrupt") == 0)
        return expect_interrupt(in, out, 0);
    return 0;
}
