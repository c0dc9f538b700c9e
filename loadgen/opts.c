/* opts.c - parses and validates loadgen's flags: two getopt passes (the
 * scenario first, so its values become the defaults the other flags override)
 * and one clear message per bad value. */
#include "loadgen/opts.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/answer.h"
#include "loadgen/scenario.h"

static const char usage[] =
    "Usage: loadgen --target URL [options]\n"
    "       loadgen --scenario NAME --target URL [options]\n"
    "       loadgen --list | --help\n"
    "\n"
    "Fires concurrent POST /reduceStock requests (or POST /orders carts) at one or more\n"
    "stockd replicas, then reads every item back and checks that stock never oversold,\n"
    "no update was lost and no order was applied in part.\n"
    "\n"
    "Targets\n"
    "      --target URL[,URL]  stockd base URL, http://host:port; repeatable. Connections are\n"
    "                          spread round-robin over the targets and kept alive, so one\n"
    "                          connection always talks to the same replica. For compare:\n"
    "                          LABEL=URL with LABEL redis, none or atomic (the lock mode).\n"
    "Load\n"
    "  -n, --requests N        total requests (default 1000); 0 = no limit, needs --duration\n"
    "  -d, --duration T        run for T: 30, 30s, 500ms, 2m. Given without --requests it\n"
    "                          alone bounds the run; with both, whichever comes first\n"
    "  -c, --concurrency C     connections (default 32; at least one per target)\n"
    "  -t, --threads T         event loops, each with its share of the connections (default 2)\n"
    "  -R, --rate R            open loop: R requests/s in total, each connection on its own\n"
    "                          schedule; latency counts from the intended send time, so a\n"
    "                          slow server cannot hide its queueing (no coordinated omission)\n"
    "      --timeout-ms MS     limit for one request attempt (default 30000)\n"
    "      --retry[=N]         resend a request whose attempt failed in transport (timeout,\n"
    "                          reset, refused) with the same requestId, up to N times\n"
    "                          (3 when N is not given); a replayed 200 counts once\n"
    "      --settle-s S        after the load, wait up to S s (default 30) for a target to\n"
    "                          answer the read-back when none can be reached or each\n"
    "                          answers 503 with Retry-After (a database restarting); the\n"
    "                          report says how long it waited\n"
    "Items\n"
    "      --stock N           stock of each item loadgen creates (default 1000)\n"
    "      --items K           spread the requests round-robin over K fresh items (default 1)\n"
    "      --item ID           use the existing item ID instead; nothing else may deduct\n"
    "                          from it during the run\n"
    "      --quantity Q|A-B    units per request (per cart line), or uniform in A..B\n"
    "                          (default 1)\n"
    "      --cart-lines N|A-B  send carts: POST /orders of N (or uniform A..B) lines on\n"
    "                          distinct items drawn at random from the run's items, all or\n"
    "                          nothing; at most 32 lines and at most --items\n"
    "      --work-ms MS        workMs to send (stockd honours it with --allow-work-ms)\n"
    "Scenarios\n"
    "  -s, --scenario NAME     hot, spread, renew, interrupt, compare, cart; other flags\n"
    "                          override its values\n"
    "      --list              list the scenarios and the stockd flags each one needs\n"
    "Output\n"
    "      --json FILE         also write the report as JSON to FILE: the counts and\n"
    "                          latencies above, outcomes per time bucket, percentile curves,\n"
    "                          and the first item's stock as the service answered it\n"
    "                          (GET /items/{id}, sampled while the load runs)\n"
    "      --html FILE         also write it as one self-contained HTML page (inline SVG,\n"
    "                          no script): the verdict, throughput and errors over time,\n"
    "                          latency by percentile, the stock over time, outcomes per\n"
    "                          target; compare draws the modes side by side\n"
    "      --get PATH          raw mode, for measuring loadgen itself (bench/): GET PATH on\n"
    "                          every target instead of POST /reduceStock; no items, no\n"
    "                          verdict; 2xx counts as ok. E.g. --get /health\n"
    "  -h, --help              this text\n"
    "\n"
    "Verdict (read back after the load: GET /items/{id} with the ledger rows of the run)\n"
    "  oversold by X     stock < 0, or more sold or acknowledged than the initial stock\n"
    "  lost updates Y    initial stock != stock + sold, or two 200s report the same\n"
    "                    remaining stock, or one reports less than the final stock\n"
    "  unacknowledged Z  ledger rows of this run's requests that got no 200 (e.g. a\n"
    "                    lock_interrupted request that deducted) or of no request at all\n"
    "  unrecorded W      200s with no ledger row; and insufficient_stock answers that\n"
    "                    were false. A request whose answer was lost in transport is\n"
    "                    noted, not a violation (--retry settles it).\n"
    "  carts, per order  partially applied (some lines in the ledger, not all, whatever\n"
    "                    the answer); acknowledged with a line missing; refused or\n"
    "                    failed with a line in the ledger. The checks above run per\n"
    "                    item over the carts' lines; a refusal's short lines are checked\n"
    "                    like single refusals.\n"
    "\n"
    "A live progress line goes to stderr when it is a terminal.\n"
    "Exit status: 0 VERDICT: PASS, 1 VERDICT: FAIL (a broken invariant or an unmet scenario\n"
    "expectation), 2 usage or set-up error (bad flag, target unreachable, item not created).\n"
    "In raw mode: 0 when every request got an answer, 1 otherwise.\n";

const char *lg_usage_text(void)
{
    return usage;
}

enum { OPT_TARGET = 256, OPT_LIST, OPT_TIMEOUT, OPT_RETRY, OPT_STOCK, OPT_ITEMS, OPT_ITEM,
       OPT_QUANTITY, OPT_CART_LINES, OPT_WORK, OPT_JSON, OPT_HTML,
       OPT_GET, OPT_SETTLE };

static const struct option longopts[] = {
    {"target", required_argument, NULL, OPT_TARGET},
    {"requests", required_argument, NULL, 'n'},
    {"duration", required_argument, NULL, 'd'},
    {"concurrency", required_argument, NULL, 'c'},
    {"threads", required_argument, NULL, 't'},
    {"rate", required_argument, NULL, 'R'},
    {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
    {"retry", optional_argument, NULL, OPT_RETRY},
    {"settle-s", required_argument, NULL, OPT_SETTLE},
    {"stock", required_argument, NULL, OPT_STOCK},
    {"items", required_argument, NULL, OPT_ITEMS},
    {"item", required_argument, NULL, OPT_ITEM},
    {"quantity", required_argument, NULL, OPT_QUANTITY},
    {"cart-lines", required_argument, NULL, OPT_CART_LINES},
    {"work-ms", required_argument, NULL, OPT_WORK},
    {"scenario", required_argument, NULL, 's'},
    {"list", no_argument, NULL, OPT_LIST},
    {"json", required_argument, NULL, OPT_JSON},
    {"html", required_argument, NULL, OPT_HTML},
    {"get", required_argument, NULL, OPT_GET},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static const char shortopts[] = ":n:d:c:t:R:s:h";

void lg_opts_defaults(lg_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->requests = 1000;
    o->concurrency = 32;
    o->threads = 2;
    o->stock = 1000;
    o->items = 1;
    o->qmin = o->qmax = 1;
    o->timeout_ms = 30000;
    o->settle_s = 30;
}

/* Strict integer: all of value, within [min, max]. */
static int parse_ll(const char *flag, const char *value, long long min, long long max,
                    long long *out, lg_err *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno || end == value || *end || v < min || v > max)
        return lg_errf(err, LG_ERR_USAGE, "%s: expected an integer from %lld to %lld, got '%s'",
                       flag, min, max, value);
    *out = v;
    return LG_OK;
}

static int parse_int(const char *flag, const char *value, long long min, long long max,
                     int *out, lg_err *err)
{
    long long v;
    int rc = parse_ll(flag, value, min, max, &v, err);
    if (rc == LG_OK)
        *out = (int)v;
    return rc;
}

/* "30", "30s", "500ms", "2m", "1h" into seconds. */
static int parse_duration(const char *value, double *out, lg_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    double unit = strcmp(end, "") == 0 || strcmp(end, "s") == 0 ? 1
                  : strcmp(end, "ms") == 0                      ? 0.001
                  : strcmp(end, "m") == 0                       ? 60
                  : strcmp(end, "h") == 0                       ? 3600
                                                                : -1;
    if (errno || end == value || unit < 0 || !isfinite(v) || v <= 0 || v * unit > 86400 * 7)
        return lg_errf(err, LG_ERR_USAGE,
                       "--duration: expected a positive time like 30, 30s, 500ms or 2m "
                       "(at most 7 days), got '%s'", value);
    *out = v * unit;
    return LG_OK;
}

static int parse_rate(const char *value, double *out, lg_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(v) || v <= 0 || v > 1e7)
        return lg_errf(err, LG_ERR_USAGE,
                       "--rate: expected requests per second above 0 (at most 1e7), got '%s'",
                       value);
    *out = v;
    return LG_OK;
}

/* "N" or "A-B", each in [min, max], into *lo and *hi. */
static int parse_range(const char *flag, const char *value, int min, int max, int *lo, int *hi,
                       lg_err *err)
{
    char a[32], b[32];
    const char *dash = strchr(value, '-');
    if (dash == NULL || dash == value) {
        int rc = parse_int(flag, value, min, max, lo, err);
        *hi = *lo;
        return rc;
    }
    snprintf(a, sizeof(a), "%.*s", (int)(dash - value), value);
    snprintf(b, sizeof(b), "%s", dash + 1);
    if (parse_int(flag, a, min, max, lo, err) || parse_int(flag, b, min, max, hi, err))
        return LG_ERR_USAGE;
    if (*hi < *lo)
        return lg_errf(err, LG_ERR_USAGE, "%s: range '%s' runs backwards", flag, value);
    return LG_OK;
}

/* One "[LABEL=]URL" of a --target value. */
static int add_target(lg_opts *o, const char *item, size_t len, lg_err *err)
{
    char buf[LG_LABEL_MAX + LG_URL_MAX];
    if (len == 0 || len >= sizeof(buf))
        return lg_errf(err, LG_ERR_USAGE, "--target: empty or over-long URL in the list");
    if (o->ntargets == LG_MAX_TARGETS)
        return lg_errf(err, LG_ERR_USAGE, "--target: at most %d targets", LG_MAX_TARGETS);
    snprintf(buf, sizeof(buf), "%.*s", (int)len, item);
    lg_target *t = &o->targets[o->ntargets];
    memset(t, 0, sizeof(*t));
    char *url = buf, *eq = strchr(buf, '=');
    if (eq && strncmp(buf, "http://", 7) != 0) {
        *eq = '\0';
        url = eq + 1;
        if (!buf[0] || strlen(buf) >= sizeof(t->label))
            return lg_errf(err, LG_ERR_USAGE, "--target: bad label in '%.*s'", (int)len, item);
        snprintf(t->label, sizeof(t->label), "%s", buf);
    }
    size_t n = strlen(url);
    while (n > 7 && url[n - 1] == '/')
        url[--n] = '\0';
    if (strncmp(url, "http://", 7) != 0 || n <= 7 || strchr(url + 7, '/') || n >= LG_URL_MAX)
        return lg_errf(err, LG_ERR_USAGE,
                       "--target: expected http://host:port (no path), got '%s'", url);
    snprintf(t->url, sizeof(t->url), "%s", url);
    o->ntargets++;
    return LG_OK;
}

int lg_opts_add_targets(lg_opts *o, const char *value, lg_err *err)
{
    for (const char *p = value;; p++) {
        size_t len = strcspn(p, ",");
        int rc = add_target(o, p, len, err);
        if (rc != LG_OK)
            return rc;
        p += len;
        if (*p == '\0')
            return LG_OK;
    }
}

static int copy_path(char *dst, const char *flag, const char *value, lg_err *err)
{
    if (!value[0] || strlen(value) >= LG_PATH_MAX)
        return lg_errf(err, LG_ERR_USAGE, "%s: expected a value of 1..%d characters", flag,
                       LG_PATH_MAX - 1);
    snprintf(dst, LG_PATH_MAX, "%s", value);
    return LG_OK;
}

/* Which flags the command line set itself (for the --duration / --requests rule). */
typedef struct seen_flags {
    int requests, duration;
} seen_flags;

static int apply_load_flag(lg_opts *o, int c, const char *arg, seen_flags *seen, lg_err *err)
{
    switch (c) {
    case 'n':
        seen->requests = 1;
        return parse_ll("--requests", arg, 0, 1000000000LL, &o->requests, err);
    case 'd':
        seen->duration = 1;
        return parse_duration(arg, &o->duration_s, err);
    case 'c':
        return parse_int("--concurrency", arg, 1, 10000, &o->concurrency, err);
    case 't':
        return parse_int("--threads", arg, 1, 256, &o->threads, err);
    case 'R':
        return parse_rate(arg, &o->rate, err);
    case OPT_TIMEOUT:
        return parse_int("--timeout-ms", arg, 1, 3600000, &o->timeout_ms, err);
    case OPT_RETRY:
        o->retries = 3;
        return arg ? parse_int("--retry", arg, 0, 100, &o->retries, err) : LG_OK;
    case OPT_SETTLE:
        return parse_int("--settle-s", arg, 0, 3600, &o->settle_s, err);
    }
    return 1; /* not a load flag */
}

static int apply_flag(lg_opts *o, int c, const char *arg, seen_flags *seen, lg_err *err)
{
    int rc = apply_load_flag(o, c, arg, seen, err);
    if (rc != 1)
        return rc;
    switch (c) {
    case OPT_TARGET:
        return lg_opts_add_targets(o, arg, err);
    case OPT_STOCK:
        return parse_ll("--stock", arg, 0, 1000000000000LL, &o->stock, err);
    case OPT_ITEMS:
        return parse_int("--items", arg, 1, LG_ITEMS_MAX, &o->items, err);
    case OPT_ITEM:
        return parse_ll("--item", arg, 1, 9007199254740991LL, &o->item_id, err);
    case OPT_QUANTITY:
        return parse_range("--quantity", arg, 1, 1000000, &o->qmin, &o->qmax, err);
    case OPT_CART_LINES:
        return parse_range("--cart-lines", arg, 1, LG_ORDER_LINES_MAX, &o->lmin, &o->lmax, err);
    case OPT_WORK:
        return parse_int("--work-ms", arg, 0, 3600000, &o->work_ms, err);
    case OPT_JSON:
        return copy_path(o->json_path, "--json", arg, err);
    case OPT_HTML:
        return copy_path(o->html_path, "--html", arg, err);
    case OPT_GET:
        if (arg[0] != '/')
            return lg_errf(err, LG_ERR_USAGE, "--get: expected a path starting with '/', got '%s'",
                           arg);
        return copy_path(o->get_path, "--get", arg, err);
    case 's': case 'h': case OPT_LIST:
        return LG_OK; /* handled in the first pass */
    }
    return lg_errf(err, LG_ERR_USAGE, "internal: unhandled option %d", c);
}

static int bad_option(int c, int argc, char **argv, lg_err *err)
{
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    if (c == ':')
        return lg_errf(err, LG_ERR_USAGE, "option '%s' needs a value (see --help)", arg);
    if (optopt)
        return lg_errf(err, LG_ERR_USAGE, "unknown option '-%c' (see --help)", optopt);
    return lg_errf(err, LG_ERR_USAGE, "unknown option '%s' (see --help)", arg);
}

/* Makes the scenario's load o's defaults (before any flag is applied). */
static void apply_scenario(const lg_scenario *s, lg_opts *o)
{
    const lg_scenario_load *l = &s->load;
    snprintf(o->scenario, sizeof(o->scenario), "%s", s->name);
    o->concurrency = l->concurrency;
    o->requests = l->requests;
    o->items = l->items;
    o->stock = l->stock;
    o->qmin = l->qmin, o->qmax = l->qmax;
    o->work_ms = l->work_ms;
    o->lmin = l->lmin, o->lmax = l->lmax;
}

/* First pass: only --scenario, --help and --list, so the scenario's values can
 * become the defaults before any other flag is applied. */
static int first_pass(lg_opts *o, int argc, char **argv, lg_err *err)
{
    int c;
    optind = 0; /* GNU: full re-initialisation, so parsing can run more than once */
    opterr = 0;
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        if (c == 'h')
            o->help = 1;
        else if (c == OPT_LIST)
            o->list = 1;
        else if (c == 's') {
            const lg_scenario *s = lg_scenario_find(optarg);
            if (s == NULL)
                return lg_errf(err, LG_ERR_USAGE,
                               "--scenario: unknown scenario '%s' (loadgen --list shows them)",
                               optarg);
            apply_scenario(s, o);
        }
    }
    return LG_OK;
}

static int second_pass(lg_opts *o, int argc, char **argv, lg_err *err)
{
    seen_flags seen = {0, 0};
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        if (c == '?' || c == ':')
            return bad_option(c, argc, argv, err);
        int rc = apply_flag(o, c, optarg, &seen, err);
        if (rc != LG_OK)
            return rc;
    }
    if (optind < argc)
        return lg_errf(err, LG_ERR_USAGE,
                       "unexpected argument '%s' (targets go after --target)", argv[optind]);
    if (seen.duration && !seen.requests)
        o->requests = 0;
    return LG_OK;
}

/* Checks targets against the mode: labels only in compare, where every target
 * has one, and enough connections for every target (of each group). */
static int validate_targets(const lg_opts *o, int compare, lg_err *err)
{
    if (o->ntargets == 0)
        return lg_errf(err, LG_ERR_USAGE,
                       "no --target given (e.g. --target http://127.0.0.1:8080)");
    int per_group_max = 0;
    for (int i = 0; i < o->ntargets; i++) {
        if (compare != (o->targets[i].label[0] != '\0'))
            return lg_errf(err, LG_ERR_USAGE,
                           compare ? "compare: every target needs a label, e.g. "
                                     "--target none=%s"
                                   : "--target: a LABEL= prefix (%s) only means something "
                                     "with --scenario compare",
                           compare ? o->targets[i].url : o->targets[i].label);
        int same = 0;
        for (int j = 0; j < o->ntargets; j++)
            same += strcmp(o->targets[i].label, o->targets[j].label) == 0;
        if (same > per_group_max)
            per_group_max = same;
    }
    if (o->concurrency < per_group_max)
        return lg_errf(err, LG_ERR_USAGE,
                       "--concurrency %d is below the number of targets (%d): every target "
                       "needs at least one connection", o->concurrency, per_group_max);
    return LG_OK;
}

static int validate(lg_opts *o, lg_err *err)
{
    int compare = strcmp(o->scenario, "compare") == 0;
    int rc = validate_targets(o, compare, err);
    if (rc != LG_OK)
        return rc;
    if (o->requests == 0 && o->duration_s == 0)
        return lg_errf(err, LG_ERR_USAGE, "--requests 0 needs --duration to end the run");
    if (o->item_id && o->items > 1)
        return lg_errf(err, LG_ERR_USAGE, "--item and --items %d exclude each other", o->items);
    if (o->item_id && compare)
        return lg_errf(err, LG_ERR_USAGE, "compare creates a fresh item per server: drop --item");
    if (o->get_path[0] && o->scenario[0])
        return lg_errf(err, LG_ERR_USAGE, "--get (raw mode) runs no scenario: drop --scenario");
    if (o->get_path[0] && o->lmax)
        return lg_errf(err, LG_ERR_USAGE, "--get (raw mode) sends no carts: drop --cart-lines");
    int nitems = o->item_id ? 1 : o->items;
    if (o->lmax > nitems)
        return lg_errf(err, LG_ERR_USAGE,
                       "--cart-lines: a cart of %d lines needs %d distinct items, the run has %d "
                       "(raise --items)", o->lmax, o->lmax, nitems);
    if (o->threads > o->concurrency)
        o->threads = o->concurrency; /* a thread without a connection would idle */
    return LG_OK;
}

int lg_opts_parse(lg_opts *o, int argc, char **argv, lg_err *err)
{
    lg_opts_defaults(o);
    /* every flag is parsed even with --help, so `loadgen <flags> --help` checks
     * the flags (tests/it/test_docker.c does that for the compose file) */
    int rc = first_pass(o, argc, argv, err);
    if (rc == LG_OK)
        rc = second_pass(o, argc, argv, err);
    if (rc == LG_OK && !o->help && !o->list)
        rc = validate(o, err);
    return rc;
}
