/* html.c - the page around the charts: the verdict banner, the run's facts,
 * the tables, and for compare the modes side by side. Reads the JSON report
 * only, so whatever it shows is in --json too. */
#include "loadgen/html.h"

#include <math.h>
#include <string.h>

#include "loadgen/html_chart.h"
#include "loadgen/svg.h"

static const char css[] =
    "body{font-family:sans-serif;margin:0;background:#f4f5f7;color:#1d2330}"
    "main{max-width:1180px;margin:0 auto;padding:18px 24px 28px}"
    ".verdict{display:flex;align-items:center;gap:22px;padding:14px 22px;border-radius:10px;"
    "color:#fff}"
    ".verdict.pass{background:#1e8a4c}.verdict.fail{background:#c0392b}"
    ".verdict.none{background:#5b6472}"
    ".word{font-size:46px;font-weight:700;letter-spacing:1px}"
    ".verdict p{margin:3px 0}.lead{font-size:17px;font-weight:600}"
    ".verdict ul{margin:6px 0 0;padding-left:18px;font-size:14px}"
    ".chip{display:inline-block;padding:2px 9px;margin:4px 6px 0 0;border-radius:10px;"
    "font-size:13px;font-weight:600;background:rgba(255,255,255,.22)}"
    ".facts{font-size:13px;color:#3a4354;margin:10px 2px 0;line-height:1.5}"
    ".grid{display:grid;grid-template-columns:1fr 1fr;gap:14px;margin-top:14px}"
    "figure{margin:0;background:#fff;border:1px solid #dde1e7;border-radius:8px;"
    "padding:10px 14px 10px}"
    "h2{font-size:15px;margin:0 0 2px}h3{font-size:14px;margin:14px 0 4px}"
    ".sub{font-size:12px;color:#5b6472;margin:0 0 4px}"
    "svg{width:100%;height:auto;display:block}"
    "svg text{font-family:sans-serif}.tick{font-size:11px;fill:#5b6472}"
    ".title{font-size:11px;fill:#3a4354}.inbar{font-size:11px;fill:#fff}"
    ".label{font-size:11px;fill:#1d2330}"
    ".grid line,line.grid{stroke:#e8ebef}.axis{stroke:#9aa3af;fill:none}"
    ".legend{font-size:12px;display:flex;flex-wrap:wrap;gap:3px 14px;margin-top:4px}"
    ".legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:5px;"
    "vertical-align:-2px}"
    ".legend i.dash{height:0;border-top:2px dashed;border-radius:0;width:16px;"
    "vertical-align:3px;background:none!important}"
    "section{margin-top:14px;background:#fff;border:1px solid #dde1e7;border-radius:8px;"
    "padding:10px 14px}"
    "table{border-collapse:collapse;font-size:13px}"
    "th,td{padding:3px 10px;text-align:right;border-bottom:1px solid #eceef2}"
    "th:first-child,td:first-child{text-align:left}"
    "ul.plain{margin:4px 0;padding-left:18px;font-size:13px}"
    "table.bars{width:70%}td.bar{text-align:left;width:55%}"
    "td.bar i{display:inline-block;height:11px;border-radius:2px;vertical-align:-1px}"
    "footer{font-size:12px;color:#5b6472;margin-top:14px}";

/* what the lock-error column of compare counts */
static const char *const lock_outcomes[] = {"lock_timeout", "lock_interrupted", "lock_lost",
                                            "redis_unavailable"};

static const char *verdict_of(const json_t *run)
{
    const char *v = lg_json_str(run, "verdict");
    return v[0] ? v : "NONE";
}

static const char *verdict_class(const char *v)
{
    return strcmp(v, "PASS") == 0 ? "pass" : strcmp(v, "FAIL") == 0 ? "fail" : "none";
}

static void page_begin(FILE *f, const char *what, const char *verdict)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>",
          f);
    fputs("loadgen: ", f);
    lg_html_text(f, what);
    fputs(" - ", f);
    lg_html_text(f, verdict);
    fprintf(f, "</title>\n<style>%s</style>\n</head><body><main>\n", css);
}

static void page_end(FILE *f)
{
    fputs("<footer>Made by loadgen --html from the same data as its --json report. The stock "
          "is read from the service (GET /items/{id}) while the load runs; latencies count "
          "from when each request was (due to be) sent.</footer>\n</main></body></html>\n",
          f);
}

/* One <li> per string of the array at key, each after prefix. */
static void list_items(FILE *f, const json_t *run, const char *key, const char *field,
                       const char *prefix)
{
    const json_t *arr = json_object_get(run, key), *x;
    size_t i;
    json_array_foreach(arr, i, x) {
        fputs("<li>", f);
        fputs(prefix, f);
        lg_html_text(f, field ? lg_json_str(x, field) : json_string_value(x));
        fputs("</li>\n", f);
    }
}

static void findings(FILE *f, const json_t *run, const char *cls)
{
    fprintf(f, "<ul class=\"%s\">\n", cls);
    list_items(f, run, "violations", "text", "");
    list_items(f, run, "expectationsUnmet", NULL, "expectation not met: ");
    list_items(f, run, "notes", "text", "note: ");
    fputs("</ul>\n", f);
}

/* "1000 requests over 3 targets in 0.077 s (12.9k req/s)" */
static void run_summary(FILE *f, const json_t *run)
{
    char rate[32];
    lg_svg_num(lg_json_num(run, "throughput"), rate, sizeof(rate));
    size_t nt = json_array_size(json_object_get(run, "perTarget"));
    fprintf(f, "%.0f requests over %zu target%s in %.3f s (%s req/s)",
            lg_json_num(run, "requests"), nt, nt == 1 ? "" : "s", lg_json_num(run, "elapsedSec"),
            rate);
}

/* Units sold out of the initial stock over the run's items. */
static void sold_of(const json_t *run, double *sold, double *stock)
{
    const json_t *it;
    size_t i;
    *sold = *stock = 0;
    json_array_foreach(json_object_get(run, "items"), i, it) {
        *sold += lg_json_num(it, "soldAfter") - lg_json_num(it, "soldBefore");
        *stock += lg_json_num(it, "stockBefore");
    }
}

static void banner_single(FILE *f, const json_t *run)
{
    const char *v = verdict_of(run);
    const json_t *cfg = json_object_get(run, "config");
    fprintf(f, "<header class=\"verdict %s\"><div class=\"word\">", verdict_class(v));
    lg_html_text(f, strcmp(v, "NONE") == 0 ? "NO VERDICT" : v);
    fputs("</div><div>\n", f);
    if (strcmp(v, "PASS") == 0 && json_object_get(run, "reservations"))
        fputs("<p class=\"lead\">No stock oversold, the totals add up, every reservation "
              "has its one fate and every lapsed hold came back in time.</p>\n", f);
    else if (strcmp(v, "PASS") == 0)
        fputs("<p class=\"lead\">No stock oversold, no update lost: the service's ledger "
              "matches every answer.</p>\n", f);
    else if (strcmp(v, "FAIL") == 0)
        fputs("<p class=\"lead\">An invariant broke, or the run did not show what its "
              "scenario claims:</p>\n", f);
    else {
        fputs("<p class=\"lead\">Raw mode (GET ", f);
        lg_html_text(f, lg_json_str(cfg, "get"));
        fputs(") only measures: no items, no verdict.</p>\n", f);
    }
    fputs("<p>", f);
    const char *scn = lg_json_str(cfg, "scenario");
    if (scn[0]) {
        fputs("scenario ", f);
        lg_html_text(f, scn);
        fputs(": ", f);
    }
    run_summary(f, run);
    if (json_object_get(run, "items")) {
        double sold, stock;
        sold_of(run, &sold, &stock);
        fprintf(f, "; sold %.0f of %.0f", sold, stock);
    }
    fputs("</p>\n", f);
    findings(f, run, "");
    fputs("</div></header>\n", f);
}

static void facts(FILE *f, const json_t *run)
{
    const json_t *cfg = json_object_get(run, "config"), *t;
    size_t i;
    fputs("<p class=\"facts\">Targets: ", f);
    json_array_foreach(json_object_get(run, "perTarget"), i, t) {
        fputs(i ? ", " : "", f);
        lg_html_text(f, lg_json_str(t, "url"));
    }
    fprintf(f, ". %.0f connections on %.0f threads", lg_json_num(cfg, "concurrency"),
            lg_json_num(cfg, "threads"));
    if (lg_json_num(cfg, "rate") > 0)
        fprintf(f, ", open loop at %.0f req/s", lg_json_num(cfg, "rate"));
    if (json_object_get(run, "items"))
        fprintf(f, "; %zu item%s, quantity %.0f-%.0f, workMs %.0f",
                json_array_size(json_object_get(run, "items")),
                json_array_size(json_object_get(run, "items")) == 1 ? "" : "s",
                lg_json_num(cfg, "quantityMin"), lg_json_num(cfg, "quantityMax"),
                lg_json_num(cfg, "workMs"));
    fprintf(f, "; %.0f retries.</p>\n", lg_json_num(run, "retries"));
}

static void latency_row(FILE *f, const char *name, const json_t *lat)
{
    static const char *const cols[] = {"min", "p50", "p90", "p99", "p99.9", "max"};
    fputs("<tr><td>", f);
    lg_html_text(f, name);
    fprintf(f, "</td><td>%.0f</td>", lg_json_num(lat, "count"));
    for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++)
        fprintf(f, "<td>%.3f</td>", /* "p99.9" is a key, not a path */
                json_number_value(json_object_get(lat, cols[i])) / 1000.0);
    fputs("</tr>\n", f);
}

/* Latency table and the first explanation of each kind of error. */
static void tables(FILE *f, const json_t *run)
{
    const json_t *t;
    size_t i;
    fputs("<section><h2>Latency (ms)</h2><table><tr><th></th><th>count</th><th>min</th>"
          "<th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>\n", f);
    latency_row(f, "all answers", lg_json_at(run, "latencyUs.all"));
    latency_row(f, "ok only", lg_json_at(run, "latencyUs.ok"));
    if (json_array_size(json_object_get(run, "perTarget")) > 1)
        json_array_foreach(json_object_get(run, "perTarget"), i, t)
            latency_row(f, lg_json_str(t, "url"), lg_json_at(t, "latencyUs.all"));
    fputs("</table>\n", f);
    const char *key;
    const json_t *text;
    if (json_object_size(json_object_get(run, "examples")) > 0) {
        fputs("<h3>First answer of each kind that explained itself</h3><ul class=\"plain\">\n",
              f);
        json_object_foreach((json_t *)json_object_get(run, "examples"), key, text) {
            fputs("<li>", f);
            lg_html_text(f, key);
            fputs(": ", f);
            lg_html_text(f, json_string_value(text));
            fputs("</li>\n", f);
        }
        fputs("</ul>\n", f);
    }
    fputs("</section>\n", f);
}

static void charts(FILE *f, const lg_html_run *runs, int n)
{
    fputs("<div class=\"grid\">\n", f);
    lg_html_throughput(f, runs, n);
    lg_html_latency(f, runs, n);
    lg_html_stock(f, runs, n);
    if (n == 1 && lg_json_at(runs[0].run, "history.series"))
        lg_html_history(f, runs[0].run);
    /* a reserve run's units held over time; any stockd now reports reserved,
     * which a sale of orders alone keeps at 0: no chart for it */
    if (n == 1 && json_object_get(runs[0].run, "reservations") &&
        lg_json_at(runs[0].run, "stock.reserved"))
        lg_html_held(f, runs[0].run);
    lg_html_outcomes(f, runs, n);
    fputs("</div>\n", f);
}

/* ---- the flash sale (--buyers): the "flash" object of the report ---- */

/* A row: name, a count (or "-" when negative: never read), and a bar of
 * value over max in color. */
static void bar_row(FILE *f, const char *name, double shown, const char *unit, double value,
                    double max, const char *color)
{
    fputs("<tr><td>", f);
    lg_html_text(f, name);
    if (shown < 0)
        fputs("</td><td>-</td><td class=\"bar\"></td></tr>\n", f);
    else
        fprintf(f, "</td><td>%.*f%s</td><td class=\"bar\"><i style=\"width:%.1f%%;"
                "background:%s\"></i></td></tr>\n", shown == floor(shown) ? 0 : 1, shown, unit,
                max > 0 && value > 0 ? 100 * value / max : 0, color);
}

/* Each buyer's fate, then the answers by HTTP status. */
static void flash_fates(FILE *f, const json_t *fl)
{
    static const char *const fates[][2] = {{"answered", "answered"},
                                           {"connectFailed", "connect failed"},
                                           {"closedUnanswered", "closed unanswered"},
                                           {"timedOut", "timed out"},
                                           {"notFired", "not fired"}};
    double buyers = lg_json_num(fl, "buyers");
    fputs("<h3>Each buyer's fate</h3><table class=\"bars\">\n", f);
    for (size_t i = 0; i < sizeof(fates) / sizeof(fates[0]); i++) {
        double n = lg_json_num(fl, fates[i][0]);
        bar_row(f, fates[i][1], n, "", n, buyers, i == 0 ? "#1e8a4c" : "#c0392b");
    }
    fputs("</table>\n<h3>Status mix</h3><table class=\"bars\">\n", f);
    const char *code;
    const json_t *v;
    json_object_foreach((json_t *)json_object_get(fl, "status"), code, v) {
        double n = json_number_value(v);
        const char *color = code[0] == '2' ? "#1e8a4c" : code[0] == '4' ? "#d68910" : "#c0392b";
        bar_row(f, code, n, "", n, lg_json_num(fl, "answered"), color);
    }
    fputs("</table>\n", f);
}

/* Each replica's threads, memory and descriptors at their peak. */
static void flash_peaks(FILE *f, const json_t *fl)
{
    static const struct { const char *key, *name, *unit; double scale; } cols[] = {
        {"threads", "threads", "", 1}, {"rssBytes", "resident memory", " MiB", 1048576},
        {"openFds", "open descriptors", "", 1}};
    const json_t *peaks = json_object_get(fl, "peaks"), *p;
    size_t i;
    for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++) {
        double max = 0;
        json_array_foreach(peaks, i, p) {
            double v = json_number_value(json_object_get(p, cols[c].key));
            max = v > max ? v : max;
        }
        fprintf(f, "<h3>Each replica's %s at its peak</h3><table class=\"bars\">\n",
                cols[c].name);
        json_array_foreach(peaks, i, p) {
            const json_t *v = json_object_get(p, cols[c].key);
            double x = json_is_number(v) ? json_number_value(v) : -1;
            bar_row(f, lg_json_str(p, "url"), x < 0 ? -1 : x / cols[c].scale, cols[c].unit, x,
                    max, lg_html_color((int)i, ""));
        }
        fputs("</table>\n", f);
    }
}

/* The sale's own section: who got what, how fast from the fire, how /health
 * answered meanwhile, and what the replicas spent. Answers over time are the
 * throughput chart above. */
static void flash_section(FILE *f, const json_t *run)
{
    const json_t *fl = json_object_get(run, "flash");
    if (!json_is_object(fl))
        return;
    double procs = lg_json_num(fl, "procs");
    fprintf(f, "<section><h2>Flash sale</h2><p class=\"sub\">%.0f buyers, a connection each "
            "from %.0f process%s, fired at once; answers over time are the first chart.</p>\n",
            lg_json_num(fl, "buyers"), procs, procs == 1 ? "" : "es");
    flash_fates(f, fl);
    fputs("<h3>Latency (ms)</h3><table><tr><th></th><th>count</th><th>min</th><th>p50</th>"
          "<th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>\n", f);
    latency_row(f, "from the fire", json_object_get(fl, "fireLatency"));
    latency_row(f, "GET /health meanwhile", json_object_get(fl, "health"));
    fprintf(f, "</table>\n<p class=\"sub\">/health probes without a 200 in time: %.0f</p>\n",
            lg_json_num(fl, "healthFailed"));
    flash_peaks(f, fl);
    fputs("</section>\n", f);
}

static void page_single(FILE *f, const json_t *run)
{
    const char *scn = lg_json_str(json_object_get(run, "config"), "scenario");
    page_begin(f, scn[0] ? scn : "run", verdict_of(run));
    banner_single(f, run);
    facts(f, run);
    lg_html_run one = {run, "", lg_html_color(0, "")};
    charts(f, &one, 1);
    lg_html_faults(f, run);
    flash_section(f, run);
    tables(f, run);
    page_end(f);
}

/* The overall line of compare, from each mode's verdict and whether it was
 * expected to fail. */
static void banner_compare(FILE *f, const json_t *doc, const lg_html_run *runs, int n)
{
    const char *v = lg_json_str(doc, "verdict");
    fprintf(f, "<header class=\"verdict %s\"><div class=\"word\">", verdict_class(v));
    lg_html_text(f, v);
    fputs("</div><div>\n", f);
    fprintf(f, "<p class=\"lead\">%s</p>\n<p>",
            strcmp(v, "PASS") == 0 ? "Every mode that locks held the invariants."
                                   : "A mode that must hold the invariants broke them.");
    for (int i = 0; i < n; i++) {
        const char *rv = verdict_of(runs[i].run);
        int expected = json_is_true(json_object_get(runs[i].run, "expectedToFail"));
        fputs("<span class=\"chip\">", f);
        lg_html_text(f, runs[i].label);
        fputc(' ', f);
        lg_html_text(f, rv);
        fprintf(f, "%s</span>",
                !expected                   ? ""
                : strcmp(rv, "FAIL") == 0   ? ", as expected without a lock"
                                            : ", by luck: expected to fail");
    }
    const json_t *cfg = n > 0 ? json_object_get(runs[0].run, "config") : NULL;
    fprintf(f, "</p>\n<p>Scenario hot against each lock mode, each with a fresh item of stock "
               "%.0f: %.0f requests on %.0f connections, workMs %.0f.</p>\n</div></header>\n",
            lg_json_num(cfg, "stock"), lg_json_num(cfg, "requests"),
            lg_json_num(cfg, "concurrency"), lg_json_num(cfg, "workMs"));
}

static void compare_cell(FILE *f, const json_t *run, int row)
{
    const json_t *outs = json_object_get(run, "outcomes");
    double total = lg_json_num(run, "requests"), ok = lg_json_num(outs, "ok");
    double no = lg_json_num(outs, "insufficient_stock"), lock = 0, sold, stock;
    for (size_t i = 0; i < sizeof(lock_outcomes) / sizeof(lock_outcomes[0]); i++)
        lock += lg_json_num(outs, lock_outcomes[i]);
    sold_of(run, &sold, &stock);
    double v[] = {total, ok, no, lock, total - ok - no - lock, lg_json_num(run, "throughput"),
                  lg_json_num(lg_json_at(run, "latencyUs.all"), "p99") / 1000.0};
    fputs("<td>", f);
    if (row < 5)
        fprintf(f, "%.0f", v[row]);
    else if (row < 7)
        fprintf(f, "%.*f", row == 5 ? 1 : 3, v[row]);
    else if (row == 7)
        fprintf(f, "%.0f/%.0f", sold, stock);
    else
        lg_html_text(f, verdict_of(run));
    fputs("</td>", f);
}

static void compare_table(FILE *f, const lg_html_run *runs, int n)
{
    static const char *const rows[] = {"requests", "ok", "insufficient_stock", "lock errors",
                                       "other errors", "throughput req/s", "p99 ms",
                                       "sold/initial stock", "verdict"};
    fputs("<section><h2>Side by side</h2><table><tr><th></th>", f);
    for (int i = 0; i < n; i++) {
        fputs("<th>", f);
        lg_html_text(f, runs[i].label);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (int r = 0; r < (int)(sizeof(rows) / sizeof(rows[0])); r++) {
        fprintf(f, "<tr><td>%s</td>", rows[r]);
        for (int i = 0; i < n; i++)
            compare_cell(f, runs[i].run, r);
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
    for (int i = 0; i < n; i++) {
        if (json_array_size(json_object_get(runs[i].run, "violations")) +
                json_array_size(json_object_get(runs[i].run, "expectationsUnmet")) +
                json_array_size(json_object_get(runs[i].run, "notes")) ==
            0)
            continue;
        int expected = json_is_true(json_object_get(runs[i].run, "expectedToFail")) &&
                       strcmp(verdict_of(runs[i].run), "FAIL") == 0;
        fputs("<h3>", f);
        lg_html_text(f, runs[i].label);
        fputs(": ", f);
        lg_html_text(f, verdict_of(runs[i].run));
        fprintf(f, "%s</h3>\n",
                expected ? ", as expected: without a lock, concurrent requests overwrite each "
                           "other and sell stock that is not there" : "");
        findings(f, runs[i].run, "plain");
    }
    fputs("</section>\n", f);
}

static void page_compare(FILE *f, const json_t *doc)
{
    const json_t *arr = json_object_get(doc, "runs");
    int n = (int)json_array_size(arr);
    lg_html_run runs[LG_HTML_RUNS_MAX];
    if (n > LG_HTML_RUNS_MAX)
        n = LG_HTML_RUNS_MAX;
    for (int i = 0; i < n; i++) {
        const json_t *run = json_array_get(arr, (size_t)i);
        runs[i] = (lg_html_run){run, lg_json_str(run, "label"),
                                lg_html_color(i, lg_json_str(run, "label"))};
    }
    page_begin(f, "compare", lg_json_str(doc, "verdict"));
    banner_compare(f, doc, runs, n);
    if (n > 0)
        charts(f, runs, n);
    compare_table(f, runs, n);
    page_end(f);
}

static void page_error(FILE *f, const json_t *doc)
{
    page_begin(f, "error", "no report");
    fputs("<header class=\"verdict fail\"><div class=\"word\">ERROR</div><div><p "
          "class=\"lead\">loadgen could not run: ", f);
    lg_html_text(f, lg_json_str(doc, "error"));
    fputs("</p></div></header>\n", f);
    page_end(f);
}

int lg_html_write(FILE *f, const json_t *doc)
{
    if (json_object_get(doc, "error"))
        page_error(f, doc);
    else if (json_object_get(doc, "runs"))
        page_compare(f, doc);
    else
        page_single(f, doc);
    return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}
