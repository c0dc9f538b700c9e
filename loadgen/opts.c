/* opts.c - loadgen's flags: one table that getopt's options, --help and the
 * man page come from; two getopt passes (the scenario first, so its values
 * become the defaults the other flags override) and one clear message per
 * bad value. */
#include "loadgen/opts.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/answer.h"
#include "loadgen/http.h"
#include "loadgen/scenario.h"

/* Said before and after the flags in --help; the man page says it in its
 * own words (man/loadgen.1.in). */
static const char usage_head[] =
    "Usage: loadgen --target URL [options]\n"
    "       loadgen --scenario NAME --target URL [options]\n"
    "       loadgen --list | --help\n"
    "\n"
    "Fires concurrent POST /reduceStock requests (or POST /orders carts) at one or more\n"
    "stockd replicas, then reads every item back and checks that stock never oversold,\n"
    "no update was lost and no order was applied in part.\n"
    "\n";

static const char usage_tail[] =
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

/* getopt's values of the flags without a letter. */
enum { OPT_TARGET = 256, OPT_LIST, OPT_TIMEOUT, OPT_RETRY, OPT_STOCK, OPT_ITEMS, OPT_ITEM,
       OPT_QUANTITY, OPT_CART_LINES, OPT_WORK, OPT_JSON, OPT_HTML,
       OPT_GET, OPT_SETTLE, OPT_BUYERS, OPT_PROCS, OPT_TOKEN, OPT_TOKEN_FILE,
       OPT_CACERT, OPT_INSECURE, OPT_HOLD, OPT_SHARES, OPT_BUYER_IDS, OPT_BUYER_LIMIT,
       OPT_API, OPT_FAULT, OPT_FAULT_END, OPT_HISTORY };

/* Every flag, in --help's order. Help lines are broken where --help breaks
 * them (26 columns in); the man page joins them. */
static const lg_flag flags[] = {
    {"target", OPT_TARGET, LG_ARG_REQUIRED, "URL[,URL]", "Targets",
     "stockd base URL, http://host:port or https://host:port;\n"
     "repeatable. Connections are\n"
     "spread round-robin over the targets and kept alive, so one\n"
     "connection always talks to the same replica. For compare:\n"
     "LABEL=URL with LABEL redis, none or atomic (the lock mode)."},
    {"api", OPT_API, LG_ARG_REQUIRED, "FILE", NULL,
     "test another inventory service: FILE, a JSON profile, says\n"
     "how to buy, read its answers, create, restock and read an\n"
     "item (docs/loadgen.md; stockd's own is profiles/stockd.json).\n"
     "Without a sold count in its read the verdict compares the\n"
     "units acknowledged with the stock's fall. Not with --buyers,\n"
     "--cart-lines, --scenario reserve, --get or --work-ms"},
    {"token", OPT_TOKEN, LG_ARG_REQUIRED, "TOKEN", NULL,
     "send Authorization: Bearer TOKEN on every request: the load's,\n"
     "the set-up's (creating items needs an operator's token when\n"
     "stockd has --api-tokens-file) and the read-back's. Other\n"
     "users of the host see a flag: prefer --token-file"},
    {"token-file", OPT_TOKEN_FILE, LG_ARG_REQUIRED, "FILE", NULL,
     "--token, read from FILE's first line"},
    {"cacert", OPT_CACERT, LG_ARG_REQUIRED, "FILE", "TLS",
     "https:// targets: trust the CAs in this PEM file (default:\n"
     "the system's). A certificate that does not verify is an\n"
     "error naming why; reconnections resume the TLS session"},
    {"insecure", OPT_INSECURE, LG_ARG_NONE, "", NULL,
     "https:// targets: verify no certificate (testing only; the\n"
     "report says it was used)"},
    {"requests", 'n', LG_ARG_REQUIRED, "N", "Load",
     "total requests (default 1000); 0 = no limit, needs --duration"},
    {"duration", 'd', LG_ARG_REQUIRED, "T", NULL,
     "run for T: 30, 30s, 500ms, 2m. Given without --requests it\n"
     "alone bounds the run; with both, whichever comes first"},
    {"concurrency", 'c', LG_ARG_REQUIRED, "C", NULL,
     "connections (default 32; at least one per target)"},
    {"threads", 't', LG_ARG_REQUIRED, "T", NULL,
     "event loops, each with its share of the connections (default 2)"},
    {"rate", 'R', LG_ARG_REQUIRED, "R", NULL,
     "open loop: R requests/s in total, each connection on its own\n"
     "schedule; latency counts from the intended send time, so a\n"
     "slow server cannot hide its queueing (no coordinated omission)"},
    {"timeout-ms", OPT_TIMEOUT, LG_ARG_REQUIRED, "MS", NULL,
     "limit for one request attempt (default 30000)"},
    {"retry", OPT_RETRY, LG_ARG_OPTIONAL, "N", NULL,
     "resend a request whose attempt failed in transport (timeout,\n"
     "reset, refused) with the same requestId, up to N times\n"
     "(3 when N is not given); a replayed 200 counts once"},
    {"settle-s", OPT_SETTLE, LG_ARG_REQUIRED, "S", NULL,
     "after the load, wait up to S s (default 30) for a target to\n"
     "answer the read-back when none can be reached or each\n"
     "answers 503 with Retry-After (a database restarting); the\n"
     "report says how long it waited"},
    {"history-ms", OPT_HISTORY, LG_ARG_REQUIRED, "MS", NULL,
     "the history check: while the load runs, read the first\n"
     "item's stock every MS ms (default 5) and fail a read no\n"
     "request history explains: above initial - units acknowledged\n"
     "before the read began (stale), below initial - units invoked\n"
     "before it ended (impossible); and an ok after a sold-out\n"
     "answer for as much with the stock never read back. 0 = no\n"
     "reads, no check. Not for a flash sale or reservations"},
    {"buyers", OPT_BUYERS, LG_ARG_REQUIRED, "N", "Flash sale",
     "a flash sale (--scenario flash: 1000): N buyers, each on a\n"
     "keep-alive connection of its own from its own 127.x.y.z, all\n"
     "connected first, then fired at once, one POST /reduceStock\n"
     "of --quantity units each; --requests, --concurrency, --rate\n"
     "and --duration do not apply. Every buyer must be answered.\n"
     "The soft RLIMIT_NOFILE is raised to the hard one; more buyers\n"
     "than one process can hold is an error naming --procs"},
    {"procs", OPT_PROCS, LG_ARG_REQUIRED, "P", NULL,
     "spread the buyers over P loadgen processes (default 1), which\n"
     "connect, then fire at the same moment; one merged report"},
    {"hold-ms", OPT_HOLD, LG_ARG_REQUIRED, "MS", "Reservations (--scenario reserve)",
     "holdMs each reservation asks for (default 2000; stockd\n"
     "refuses below 1000 and above its --max-hold-ms)"},
    {"shares", OPT_SHARES, LG_ARG_REQUIRED, "C/X/L", NULL,
     "percent of buyers who confirm, cancel, and walk away letting\n"
     "the hold lapse (default 60/20/20; they must add up to 100).\n"
     "Buyer k's fate is fixed by k, spread evenly over the run"},
    {"buyer-ids", OPT_BUYER_IDS, LG_ARG_REQUIRED, "N", NULL,
     "reservations cycle through N buyerIds (default: one buyerId\n"
     "per reservation), so that a buyer may reserve more than once"},
    {"per-buyer-limit", OPT_BUYER_LIMIT, LG_ARG_REQUIRED, "N", NULL,
     "create the item with perBuyerLimit N (default none); the\n"
     "verdict checks that no buyer holds or bought more"},
    {"stock", OPT_STOCK, LG_ARG_REQUIRED, "N", "Items",
     "stock of each item loadgen creates (default 1000)"},
    {"items", OPT_ITEMS, LG_ARG_REQUIRED, "K", NULL,
     "spread the requests round-robin over K fresh items (default 1)"},
    {"item", OPT_ITEM, LG_ARG_REQUIRED, "ID", NULL,
     "use the existing item ID instead; nothing else may deduct\n"
     "from it during the run. With --api, ID may be a string, and\n"
     "--stock N sets its stock first (the profile's set_stock)"},
    {"quantity", OPT_QUANTITY, LG_ARG_REQUIRED, "Q|A-B", NULL,
     "units per request (per cart line), or uniform in A..B\n"
     "(default 1)"},
    {"cart-lines", OPT_CART_LINES, LG_ARG_REQUIRED, "N|A-B", NULL,
     "send carts: POST /orders of N (or uniform A..B) lines on\n"
     "distinct items drawn at random from the run's items, all or\n"
     "nothing; at most 32 lines and at most --items"},
    {"work-ms", OPT_WORK, LG_ARG_REQUIRED, "MS", NULL,
     "workMs to send (stockd honours it with --allow-work-ms)"},
    {"scenario", 's', LG_ARG_REQUIRED, "NAME", "Scenarios",
     "hot, spread, renew, interrupt, compare, cart, flash,\n"
     "reserve; other flags override its values"},
    {"list", OPT_LIST, LG_ARG_NONE, "", NULL,
     "list the scenarios and the stockd flags each one needs"},
    {"fault", OPT_FAULT, LG_ARG_REQUIRED, "AT:COMMAND", "Faults",
     "run COMMAND with /bin/sh -c at AT into the load (2s, 1500ms,\n"
     "or seconds: 2.5), e.g. 2s:'kill -STOP 1234' or\n"
     "1s:'docker pause stockd-2'; repeatable (at most 8). It runs\n"
     "in a process group of its own beside the load, is killed\n"
     "after 30 s, and must exit 0 or the verdict is FAIL. The\n"
     "report says when each ran, how long it took, its exit\n"
     "status and first line of output; the verdict adds a note of\n"
     "the answers before, during and after it. Not with --buyers\n"
     "or --scenario compare"},
    {"fault-end", OPT_FAULT_END, LG_ARG_REQUIRED, "AT:COMMAND", NULL,
     "undo the fault of the same rank (the 2nd --fault-end ends\n"
     "the 2nd --fault), e.g. 4s:'kill -CONT 1234'. When the run\n"
     "ends (or Ctrl-C stops it) first, it runs at once then: a\n"
     "fault never outlives its run"},
    {"json", OPT_JSON, LG_ARG_REQUIRED, "FILE", "Output",
     "also write the report as JSON to FILE: the counts and\n"
     "latencies above, outcomes per time bucket, percentile curves,\n"
     "and the first item's stock as the service answered it\n"
     "(GET /items/{id}, sampled while the load runs)"},
    {"html", OPT_HTML, LG_ARG_REQUIRED, "FILE", NULL,
     "also write it as one self-contained HTML page (inline SVG,\n"
     "no script): the verdict, throughput and errors over time,\n"
     "latency by percentile, the stock over time, outcomes per\n"
     "target; compare draws the modes side by side"},
    {"get", OPT_GET, LG_ARG_REQUIRED, "PATH", NULL,
     "raw mode, for measuring loadgen itself (bench/): GET PATH on\n"
     "every target instead of POST /reduceStock; no items, no\n"
     "verdict; 2xx counts as ok. E.g. --get /health"},
    {"help", 'h', LG_ARG_NONE, "", NULL, "print the help and exit"},
};
#define NFLAGS ((int)(sizeof(flags) / sizeof(flags[0])))

int lg_flag_count(void)
{
    return NFLAGS;
}

const lg_flag *lg_flag_at(int i)
{
    return i >= 0 && i < NFLAGS ? &flags[i] : NULL;
}

/* "--name ARG" (or "--name[=ARG]") of one flag, into buf. */
static void flag_synopsis(const lg_flag *f, char *buf, size_t size)
{
    const char *open = f->has_arg == LG_ARG_OPTIONAL ? "[=" : f->arg[0] ? " " : "";
    snprintf(buf, size, "--%s%s%s%s", f->name, open, f->arg,
             f->has_arg == LG_ARG_OPTIONAL ? "]" : "");
}

#define HELP_COLUMN 26 /* where the flags' help starts */

void lg_usage(FILE *out)
{
    fputs(usage_head, out);
    for (int i = 0; i < NFLAGS; i++) {
        const lg_flag *f = &flags[i];
        char syn[64], letter[8] = "    ";
        if (f->group)
            fprintf(out, "%s\n", f->group);
        if (f->key < 256)
            snprintf(letter, sizeof(letter), "-%c, ", f->key);
        flag_synopsis(f, syn, sizeof(syn));
        int col = fprintf(out, "  %s%s", letter, syn);
        if (!f->help[0])
            fputc('\n', out);
        for (const char *line = f->help; *line;) {
            size_t len = strcspn(line, "\n");
            if (col > HELP_COLUMN - 2) /* no room for two blanks: the help starts below */
                col = fprintf(out, "\n") - 1;
            fprintf(out, "%*s%.*s\n", HELP_COLUMN - col, "", (int)len, line);
            col = 0;
            line += len + (line[len] == '\n');
        }
    }
    fputs(usage_tail, out);
}

/* getopt_long's tables, made from flags[]; shortopts starts with ':' to tell
 * a missing value from an unknown flag. */
typedef struct getopt_spec {
    struct option longopts[NFLAGS + 1];
    char shortopts[2 * NFLAGS + 2];
} getopt_spec;

static void getopt_tables(getopt_spec *g)
{
    static const int has_arg[] = {[LG_ARG_NONE] = no_argument,
                                  [LG_ARG_REQUIRED] = required_argument,
                                  [LG_ARG_OPTIONAL] = optional_argument};
    size_t n = 0;
    g->shortopts[n++] = ':';
    for (int i = 0; i < NFLAGS; i++) {
        const lg_flag *f = &flags[i];
        g->longopts[i] = (struct option){f->name, has_arg[f->has_arg], NULL, f->key};
        if (f->key < 256) {
            g->shortopts[n++] = (char)f->key;
            if (f->has_arg == LG_ARG_REQUIRED)
                g->shortopts[n++] = ':';
        }
    }
    g->shortopts[n] = '\0';
    g->longopts[NFLAGS] = (struct option){NULL, 0, NULL, 0};
}

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
    o->history_ms = 5;
    o->procs = 1;
    o->hold_ms = 2000;
    o->share[0] = 60, o->share[1] = 20, o->share[2] = 20;
}

/* "C/X/L": three percentages adding up to 100. */
static int parse_shares(const char *value, int share[3], lg_err *err)
{
    int v[3], used = 0;
    if (sscanf(value, "%d/%d/%d%n", &v[0], &v[1], &v[2], &used) != 3 || value[used] ||
        v[0] < 0 || v[1] < 0 || v[2] < 0 || v[0] + v[1] + v[2] != 100)
        return lg_errf(err, LG_ERR_USAGE, "--shares: expected three percentages adding up to "
                       "100, confirm/cancel/lapse, like 80/0/20, got '%s'", value);
    memcpy(share, v, sizeof(v));
    return LG_OK;
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
    if (eq && lg_http_scheme(buf) == 0) {
        *eq = '\0';
        url = eq + 1;
        if (!buf[0] || strlen(buf) >= sizeof(t->label))
            return lg_errf(err, LG_ERR_USAGE, "--target: bad label in '%.*s'", (int)len, item);
        snprintf(t->label, sizeof(t->label), "%s", buf);
    }
    size_t n = strlen(url);
    while (n > 7 && url[n - 1] == '/')
        url[--n] = '\0';
    size_t scheme = lg_http_scheme(url);
    if (scheme == 0 || n <= scheme || strchr(url + scheme, '/') || n >= LG_URL_MAX)
        return lg_errf(err, LG_ERR_USAGE, "--target: expected http://host:port or "
                       "https://host:port (no path), got '%s'", url);
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

/* A bearer token into o->token: RFC 6750's b64token (which keeps a header
 * line whole), 1..LG_TOKEN_MAX characters. Errors never show it. */
static int set_token(lg_opts *o, const char *flag, const char *value, lg_err *err)
{
    size_t n = strlen(value), i = strspn(value, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
                                                "vwxyz0123456789-._~+/");
    i += strspn(value + i, "=");
    if (n == 0 || n > LG_TOKEN_MAX || i != n)
        return lg_errf(err, LG_ERR_USAGE, "%s: a token is 1..%d characters of A-Z a-z 0-9 "
                       "-._~+/ (then any =)", flag, LG_TOKEN_MAX);
    memcpy(o->token, value, n + 1);
    return LG_OK;
}

/* --token-file: its first line, without the line's end. */
static int read_token_file(lg_opts *o, const char *path, lg_err *err)
{
    char line[LG_TOKEN_MAX + 4] = "";
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return lg_errf(err, LG_ERR_USAGE, "--token-file %s: %s", path, strerror(errno));
    int got = fgets(line, sizeof(line), f) != NULL;
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    int rc = got ? set_token(o, "--token-file", line, err)
                 : lg_errf(err, LG_ERR_USAGE, "--token-file %s: empty", path);
    explicit_bzero(line, sizeof(line));
    return rc;
}

/* Which flags the command line set itself (for the --duration / --requests rule). */
typedef struct seen_flags {
    int requests, duration, work;
    const char *reserve_flag; /* a flag of reservations given ("--hold-ms"), or NULL */
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
    case OPT_HISTORY:
        return parse_int("--history-ms", arg, 0, 60000, &o->history_ms, err);
    case OPT_BUYERS:
        return parse_int("--buyers", arg, 1, LG_BUYERS_MAX, &o->buyers, err);
    case OPT_PROCS:
        return parse_int("--procs", arg, 1, LG_PROCS_MAX, &o->procs, err);
    case OPT_HOLD:
        seen->reserve_flag = "--hold-ms";
        return parse_int("--hold-ms", arg, 1, LG_HOLD_MS_MAX, &o->hold_ms, err);
    case OPT_SHARES:
        seen->reserve_flag = "--shares";
        return parse_shares(arg, o->share, err);
    case OPT_BUYER_IDS:
        seen->reserve_flag = "--buyer-ids";
        return parse_int("--buyer-ids", arg, 1, 1000000000, &o->buyer_ids, err);
    case OPT_BUYER_LIMIT:
        seen->reserve_flag = "--per-buyer-limit";
        return parse_ll("--per-buyer-limit", arg, 1, 1000000000000LL, &o->buyer_limit, err);
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
        o->stock_set = 1;
        return parse_ll("--stock", arg, 0, 1000000000000LL, &o->stock, err);
    case OPT_ITEMS:
        return parse_int("--items", arg, 1, LG_ITEMS_MAX, &o->items, err);
    case OPT_ITEM: /* an integer, checked in validate: with --api it may be a string */
        o->item_id = 1;
        return copy_path(o->item_arg, "--item", arg, err);
    case OPT_API:
        return copy_path(o->api_path, "--api", arg, err);
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
    case OPT_TOKEN:
        return set_token(o, "--token", arg, err);
    case OPT_TOKEN_FILE:
        return read_token_file(o, arg, err);
    case OPT_CACERT:
        return copy_path(o->cacert, "--cacert", arg, err);
    case OPT_INSECURE:
        o->insecure = 1;
        return LG_OK;
    case OPT_FAULT: case OPT_FAULT_END:
        return lg_fault_add(o->faults, &o->nfaults, &o->nfault_ends, c == OPT_FAULT_END, arg,
                            err);
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
    o->buyers = l->buyers;
    o->reserve = l->reserve;
    if (l->reserve) /* a buyer's fate must survive a replica killed mid-run */
        o->retries = 3;
}

/* First pass: only --scenario, --help and --list, so the scenario's values can
 * become the defaults before any other flag is applied. */
static int first_pass(lg_opts *o, int argc, char **argv, const getopt_spec *g, lg_err *err)
{
    int c;
    optind = 0; /* GNU: full re-initialisation, so parsing can run more than once */
    opterr = 0;
    while ((c = getopt_long(argc, argv, g->shortopts, g->longopts, NULL)) != -1) {
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

static int second_pass(lg_opts *o, int argc, char **argv, const getopt_spec *g, lg_err *err)
{
    seen_flags seen = {0, 0, 0, NULL};
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, g->shortopts, g->longopts, NULL)) != -1) {
        if (c == '?' || c == ':')
            return bad_option(c, argc, argv, err);
        seen.work |= c == OPT_WORK;
        int rc = apply_flag(o, c, optarg, &seen, err);
        if (rc != LG_OK)
            return rc;
    }
    if (seen.work && o->api_path[0])
        return lg_errf(err, LG_ERR_USAGE, "--work-ms is stockd's workMs: with --api write "
                       "what your service needs into the profile's buy.body");
    if (optind < argc)
        return lg_errf(err, LG_ERR_USAGE,
                       "unexpected argument '%s' (targets go after --target)", argv[optind]);
    if (seen.duration && !seen.requests)
        o->requests = 0;
    if (seen.reserve_flag && !o->reserve)
        return lg_errf(err, LG_ERR_USAGE, "%s: a flag of reservations, for --scenario reserve",
                       seen.reserve_flag);
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

/* A flash sale sends one request per buyer: the load's own shape gives way. */
static int validate_flash(lg_opts *o, lg_err *err)
{
    if (o->buyers == 0)
        return o->procs > 1 ? lg_errf(err, LG_ERR_USAGE, "--procs spreads a flash sale: it "
                                      "needs --buyers or --scenario flash") : LG_OK;
    if (o->get_path[0] || o->lmax || strcmp(o->scenario, "compare") == 0)
        return lg_errf(err, LG_ERR_USAGE, "--buyers (a flash sale) sends POST /reduceStock: "
                       "drop --get, --cart-lines or --scenario compare");
    if (o->procs > o->buyers)
        return lg_errf(err, LG_ERR_USAGE, "--procs %d is more than --buyers %d", o->procs,
                       o->buyers);
    o->requests = o->buyers;
    o->duration_s = 0;
    return LG_OK;
}

/* A reserve run has its own engine (reserve.h): one item, POST /reservations. */
static int validate_reserve(const lg_opts *o, lg_err *err)
{
    if (!o->reserve)
        return LG_OK;
    if (o->get_path[0] || o->lmax || o->buyers || o->work_ms)
        return lg_errf(err, LG_ERR_USAGE, "--scenario reserve sends reservations of one line: "
                       "drop --get, --cart-lines, --buyers and --work-ms");
    if (o->items > 1)
        return lg_errf(err, LG_ERR_USAGE, "--scenario reserve runs on one item: drop --items");
    if (o->requests == 0)
        return lg_errf(err, LG_ERR_USAGE, "--scenario reserve needs --requests (its buyers); "
                       "--duration alone does not end it");
    if (o->item_id && o->buyer_limit)
        return lg_errf(err, LG_ERR_USAGE, "--per-buyer-limit is set on the item loadgen "
                       "creates: drop --item (or set the item's perBuyerLimit with PUT /items)");
    return LG_OK;
}

/* An --api profile drives one-line buys and reads: the modes that speak
 * stockd's other routes are refused, not half-done. */
static int validate_api(lg_opts *o, lg_err *err)
{
    if (o->item_arg[0] && (!o->api_path[0] || strspn(o->item_arg, "0123456789") ==
                                                  strlen(o->item_arg)))
        return parse_ll("--item", o->item_arg, 1, 9007199254740991LL, &o->item_id, err);
    if (!o->api_path[0])
        return LG_OK;
    if (o->buyers || o->lmax || o->reserve || o->get_path[0])
        return lg_errf(err, LG_ERR_USAGE, "--api sends the profile's buy, one line each: drop "
                       "--buyers, --cart-lines, --get and --scenario flash, cart or reserve");
    o->work_ms = 0; /* a scenario's workMs is stockd's; the profile's body decides */
    return LG_OK;
}

/* Faults run beside one load; a flash sale's moment of firing and compare's
 * runs (one per mode) have no single load for them to run beside. */
static int validate_faults(const lg_opts *o, int compare, lg_err *err)
{
    if (o->nfaults && (o->buyers || compare))
        return lg_errf(err, LG_ERR_USAGE, "--fault runs beside one load: not with %s",
                       o->buyers ? "--buyers (a flash sale)" : "--scenario compare");
    return lg_fault_check(o->faults, o->nfaults, o->nfault_ends, err);
}

static int validate(lg_opts *o, lg_err *err)
{
    int compare = strcmp(o->scenario, "compare") == 0;
    int rc = validate_targets(o, compare, err);
    if (rc == LG_OK)
        rc = validate_api(o, err);
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
    if ((rc = validate_flash(o, err)) != LG_OK || (rc = validate_reserve(o, err)) != LG_OK ||
        (rc = validate_faults(o, compare, err)) != LG_OK)
        return rc;
    if (o->threads > o->concurrency)
        o->threads = o->concurrency; /* a thread without a connection would idle */
    return LG_OK;
}

int lg_opts_tls(const lg_opts *o)
{
    for (int i = 0; i < o->ntargets; i++)
        if (lg_http_scheme(o->targets[i].url) == sizeof("https://") - 1)
            return 1;
    return 0;
}

/* --cacert and --insecure: one or the other, and only for https:// targets. */
static int validate_tls(const lg_opts *o, lg_err *err)
{
    if (o->cacert[0] && o->insecure)
        return lg_errf(err, LG_ERR_USAGE, "--cacert and --insecure contradict each other");
    if ((o->cacert[0] || o->insecure) && !lg_opts_tls(o))
        return lg_errf(err, LG_ERR_USAGE, "--%s: no https:// target",
                       o->insecure ? "insecure" : "cacert");
    return LG_OK;
}

int lg_opts_parse(lg_opts *o, int argc, char **argv, lg_err *err)
{
    lg_opts_defaults(o);
    /* every flag is parsed even with --help, so `loadgen <flags> --help` checks
     * the flags (tests/it/test_docker_run.c does that for the compose file) */
    getopt_spec g;
    getopt_tables(&g);
    int rc = first_pass(o, argc, argv, &g, err);
    if (rc == LG_OK)
        rc = second_pass(o, argc, argv, &g, err);
    if (rc == LG_OK && !o->help && !o->list)
        rc = validate(o, err);
    if (rc == LG_OK && !o->help && !o->list)
        rc = validate_tls(o, err);
    return rc;
}
