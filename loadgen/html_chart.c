/* html_chart.c - the four charts of the report, drawn with svg.h from the
 * JSON report's timeline, latency percentiles, stock samples and per-target
 * outcomes. A chart with nothing to show says so instead of drawing axes
 * around nothing. */
#include "loadgen/html_chart.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/answer.h"
#include "loadgen/report.h"
#include "loadgen/sample.h"
#include "loadgen/svg.h"

#define W 560        /* viewBox width of every chart */
#define H 290        /* and height, but for the outcome bars */
#define BINS_MAX 60  /* bars of the throughput chart */
#define TICKS_MAX 16
#define PCT_MAX LG_REPORT_PCT_POINTS_MAX /* points of one percentile curve */

/* by enum lg_outcome: ok green, refusals grey-blue, the errors warm to dark */
static const char *const outcome_colors[LG_OUT_COUNT] = {
    "#2e9d5b", "#9aa5b8", "#f0a030", "#e0702c", "#d43d51", "#8e44ad",
    "#b07aa1", "#a93226", "#6c5b7b", "#3d4451", "#bcbd22",
};

static const char *const palette[] = {"#2f6fbf", "#e08a1e", "#7b52ab", "#17a2b8", "#8c564b",
                                      "#e377c2"};
#define NPALETTE ((int)(sizeof(palette) / sizeof(palette[0])))

const char *lg_html_color(int i, const char *label)
{
    if (strcmp(label, "redis") == 0)
        return "#2f6fbf";
    if (strcmp(label, "none") == 0)
        return "#d64541";
    if (strcmp(label, "atomic") == 0)
        return "#2e9d5b";
    return palette[i % NPALETTE];
}

/* s with its URL schemes cut out, into buf. */
static const char *no_scheme(const char *s, char *buf, size_t size)
{
    snprintf(buf, size, "%s", s ? s : "");
    char *p;
    while ((p = strstr(buf, "http://")) || (p = strstr(buf, "https://"))) {
        char *rest = strstr(p, "//") + 2;
        memmove(p, rest, strlen(rest) + 1);
    }
    return buf;
}

void lg_html_text(FILE *f, const char *s)
{
    char buf[1024];
    lg_svg_escape(f, no_scheme(s, buf, sizeof(buf)));
}

const json_t *lg_json_at(const json_t *o, const char *path)
{
    char key[64];
    for (const char *p = path; o && *p;) {
        size_t len = strcspn(p, ".");
        snprintf(key, sizeof(key), "%.*s", (int)len, p);
        o = json_object_get(o, key);
        p += len + (p[len] == '.');
    }
    return o;
}

double lg_json_num(const json_t *o, const char *path)
{
    const json_t *j = lg_json_at(o, path);
    return json_is_number(j) ? json_number_value(j) : 0;
}

const char *lg_json_str(const json_t *o, const char *path)
{
    const char *s = json_string_value(lg_json_at(o, path));
    return s ? s : "";
}

static void figure_begin(FILE *f, const char *title, const char *sub)
{
    fprintf(f, "<figure><h2>%s</h2><p class=\"sub\">", title);
    lg_html_text(f, sub);
    fputs("</p>\n", f);
}

/* A legend entry; dashed draws a dashed line instead of a swatch. */
static void legend_item(FILE *f, const char *color, const char *name, int dashed)
{
    fprintf(f, "<span><i%s style=\"background:%s;border-color:%s\"></i>",
            dashed ? " class=\"dash\"" : "", color, color);
    lg_html_text(f, name);
    fputs("</span>", f);
}

/* The outcomes that occurred (seen[o] > 0), and the end of the figure. */
static void outcome_legend(FILE *f, const double *seen)
{
    fputs("<div class=\"legend\">", f);
    for (int o = 0; o < LG_OUT_COUNT; o++)
        if (seen[o] > 0)
            legend_item(f, outcome_colors[o], lg_outcome_name(o), 0);
    fputs("</div></figure>\n", f);
}

static void nothing(FILE *f, const char *why)
{
    fputs("<p class=\"sub\">", f);
    lg_html_text(f, why);
    fputs("</p></figure>\n", f);
}

/* Time axis unit: ms for runs under 2 s, else s. Returns the divisor of ms. */
static double time_unit(double max_ms, const char **title)
{
    *title = max_ms < 2000 ? "time since the load started (ms)"
                           : "time since the load started (s)";
    return max_ms < 2000 ? 1 : 1000;
}

static void y_ticks(const lg_chart *c, const double *ticks, int n)
{
    char buf[32];
    for (int i = 0; i < n; i++) {
        lg_svg_num(ticks[i], buf, sizeof(buf));
        lg_chart_ytick(c, ticks[i], buf);
    }
}

static void x_ticks(const lg_chart *c, double lo, double hi)
{
    double t[TICKS_MAX];
    char buf[32];
    int n = lg_svg_ticks(&lo, &hi, 8, t, TICKS_MAX);
    for (int i = 0; i < n; i++)
        if (t[i] <= c->x1 + 1e-9) {
            lg_svg_num(t[i], buf, sizeof(buf));
            lg_chart_xtick(c, t[i], buf);
        }
}

#define FAULT_COLOR "#d43d51"
#define FAULT_MIN_PX 2.0

/* Over chart c, whose x axis is time in units of unit_ms, a shaded band per
 * --fault of run's "faults" array, from its command's start to its end
 * command's end (a fault without an end still shows as a thin one). */
static void fault_spans(const lg_chart *c, const json_t *run, double unit_ms)
{
    const json_t *faults = json_object_get(run, "faults"), *x;
    size_t i;
    json_array_foreach(faults, i, x) {
        const json_t *span = json_object_get(x, "spanSec");
        if (json_array_size(span) != 2)
            continue;
        double t0 = json_number_value(json_array_get(span, 0)) * 1e3 / unit_ms;
        double t1 = json_number_value(json_array_get(span, 1)) * 1e3 / unit_ms;
        double px0 = lg_chart_x(c, fmin(t0, c->x1)), px1 = lg_chart_x(c, fmin(t1, c->x1));
        double top = lg_chart_y(c, c->y1), bottom = lg_chart_y(c, c->y0);
        if (!isfinite(px0) || !isfinite(px1) || !isfinite(top) || !isfinite(bottom))
            continue;
        fprintf(c->f, "<rect class=\"fault\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                "fill=\"%s\" fill-opacity=\"0.14\" stroke=\"%s\" stroke-opacity=\"0.5\"/>\n",
                px0, top, fmax(px1 - px0, FAULT_MIN_PX), bottom - top, FAULT_COLOR, FAULT_COLOR);
        char label[32];
        snprintf(label, sizeof(label), "fault %zu", i + 1);
        fprintf(c->f, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s</text>\n",
                px0 + 3, top + 12, FAULT_COLOR, label);
    }
}

/* The run's timeline regrouped into at most BINS_MAX bins: start and end
 * (ms) and the count of each outcome. The last bin ends with the run. */
typedef struct bin {
    double t0, t1;
    double c[LG_OUT_COUNT];
} bin;

static int bins_of(const json_t *run, bin *out)
{
    double w = lg_json_num(run, "timeline.bucketMs"), end = lg_json_num(run, "elapsedSec") * 1e3;
    const json_t *outs = lg_json_at(run, "timeline.outcomes");
    size_t n = json_array_size(json_object_get(outs, lg_outcome_name(LG_OUT_OK))), k = 1;
    if (!(w > 0))
        return 0;
    while ((n + k - 1) / k > BINS_MAX)
        k *= 2;
    int nb = (int)((n + k - 1) / k);
    for (int i = 0; i < nb; i++) {
        bin *b = &out[i];
        b->t0 = (double)i * (double)k * w;
        b->t1 = fmin(b->t0 + (double)k * w, end);
        if (b->t1 <= b->t0)
            b->t1 = b->t0 + (double)k * w;
        for (int o = 0; o < LG_OUT_COUNT; o++) {
            const json_t *arr = json_object_get(outs, lg_outcome_name(o));
            b->c[o] = 0;
            for (size_t j = (size_t)i * k; j < ((size_t)i + 1) * k && j < n; j++)
                b->c[o] += (double)json_integer_value(json_array_get(arr, j));
        }
    }
    return nb;
}

static double bin_rate(const bin *b, int outcome)
{
    double sum = 0;
    for (int o = 0; o < LG_OUT_COUNT; o++)
        sum += outcome < 0 || o == outcome ? b->c[o] : 0;
    return sum / ((b->t1 - b->t0) / 1e3);
}

/* Axes for time (ms) against answers per second. */
static void rate_axes(lg_chart *c, FILE *f, double end_ms, double ymax)
{
    const char *xt;
    double u = time_unit(end_ms, &xt), t[TICKS_MAX], lo = 0;
    int nt = lg_svg_ticks(&lo, &ymax, 6, t, TICKS_MAX);
    lg_chart_begin(c, f, W, H, 0, end_ms / u, 0, ymax, "answers per second over the run");
    y_ticks(c, t, nt);
    x_ticks(c, 0, end_ms / u);
}

/* One run: each bin's answers per second, stacked by outcome. */
static void stacked_rates(FILE *f, const json_t *run, const bin *b, int nb, double end_ms)
{
    double ymax = 1, seen[LG_OUT_COUNT] = {0};
    const char *xt;
    double u = time_unit(end_ms, &xt);
    for (int i = 0; i < nb; i++)
        ymax = fmax(ymax, bin_rate(&b[i], -1));
    lg_chart c;
    rate_axes(&c, f, end_ms, ymax);
    fault_spans(&c, run, u);
    for (int i = 0; i < nb; i++) {
        double y = 0, gap = (b[i].t1 - b[i].t0) * 0.08;
        for (int o = 0; o < LG_OUT_COUNT; o++) {
            double r = bin_rate(&b[i], o);
            seen[o] += b[i].c[o];
            if (r > 0)
                lg_chart_rect(&c, b[i].t0 / u, (b[i].t1 - gap) / u, y, y + r, outcome_colors[o]);
            y += r;
        }
    }
    lg_chart_axes(&c, xt, "answers/s");
    lg_chart_end(&c);
    outcome_legend(f, seen);
}

/* Several runs: one line of all answers per second each. */
static void rate_lines(FILE *f, const lg_html_run *runs, int n, bin *b)
{
    double end = 1, ymax = 1, xs[BINS_MAX], ys[BINS_MAX];
    for (int r = 0; r < n; r++) {
        end = fmax(end, lg_json_num(runs[r].run, "elapsedSec") * 1e3);
        int nb = bins_of(runs[r].run, b);
        for (int i = 0; i < nb; i++)
            ymax = fmax(ymax, bin_rate(&b[i], -1));
    }
    const char *xt;
    double u = time_unit(end, &xt);
    lg_chart c;
    rate_axes(&c, f, end, ymax);
    for (int r = 0; r < n; r++) {
        int nb = bins_of(runs[r].run, b);
        for (int i = 0; i < nb; i++)
            xs[i] = (b[i].t0 + b[i].t1) / 2 / u, ys[i] = bin_rate(&b[i], -1);
        lg_chart_line(&c, xs, ys, nb, runs[r].color, 2, NULL, 0);
    }
    lg_chart_axes(&c, xt, "answers/s");
    lg_chart_end(&c);
    fputs("<div class=\"legend\">", f);
    for (int r = 0; r < n; r++)
        legend_item(f, runs[r].color, runs[r].label, 0);
    fputs("</div></figure>\n", f);
}

void lg_html_throughput(FILE *f, const lg_html_run *runs, int n)
{
    bin b[BINS_MAX];
    int nb = bins_of(runs[0].run, b);
    char sub[160];
    if (n > 1)
        snprintf(sub, sizeof(sub), "all answers per second, one line per mode");
    else
        snprintf(sub, sizeof(sub), "answers per second by outcome, stacked, in bins of %.3g ms",
                 nb > 0 ? b[0].t1 - b[0].t0 : 0);
    figure_begin(f, "Throughput and errors over the run", sub);
    if (nb == 0) {
        nothing(f, "No answer was timed.");
        return;
    }
    if (n == 1)
        stacked_rates(f, runs[0].run, b, nb, lg_json_num(runs[0].run, "elapsedSec") * 1e3);
    else
        rate_lines(f, runs, n, b);
}

/* A percentile curve: x on HdrHistogram's axis, y in ms. The [100, max]
 * point is drawn at 1/(1-p) = count, the last rank the data resolves. A
 * longer list than loadgen writes loses its first points, never the tail and
 * the max. */
static int curve(const json_t *lat, double *xs, double *ys)
{
    const json_t *pts = json_object_get(lat, "percentiles");
    double count = lg_json_num(lat, "count");
    size_t size = json_array_size(pts);
    int n = 0;
    for (size_t i = size > PCT_MAX ? size - PCT_MAX : 0; i < size; i++) {
        const json_t *pt = json_array_get(pts, i);
        double p = json_number_value(json_array_get(pt, 0));
        xs[n] = p >= 100 ? log10(fmax(count, 1)) : lg_svg_pct_x(p);
        ys[n++] = json_number_value(json_array_get(pt, 1)) / 1000.0;
    }
    return n;
}

typedef struct line {
    const json_t *lat;
    const char *name, *color, *dash;
    double width;
} line;

/* The curves of the chart: per run all answers; for one run also ok only
 * and, thinner, each target. */
static int latency_lines(const lg_html_run *runs, int n, line *out, int max)
{
    int k = 0;
    for (int r = 0; r < n && k < max; r++)
        out[k++] = (line){lg_json_at(runs[r].run, "latencyUs.all"),
                          n > 1 ? runs[r].label : "all answers", runs[r].color, NULL, 2.2};
    if (n > 1)
        return k;
    if (k < max)
        out[k++] = (line){lg_json_at(runs[0].run, "latencyUs.ok"), "ok only",
                          outcome_colors[LG_OUT_OK], "6 4", 1.8};
    const json_t *targets = json_object_get(runs[0].run, "perTarget"), *t;
    size_t i;
    if (json_array_size(targets) > 1)
        json_array_foreach(targets, i, t) if (k < max) out[k++] =
            (line){lg_json_at(t, "latencyUs.all"), lg_json_str(t, "url"),
                   palette[1 + (int)i % (NPALETTE - 1)], NULL, 1};
    return k;
}

static void pct_ticks(const lg_chart *c, double xmax)
{
    char buf[32];
    lg_chart_xtick(c, 0, "0%");
    lg_chart_xtick(c, log10(2), "50%");
    for (int d = 1; d <= (int)xmax; d++) {
        lg_svg_pct_label(d, buf, sizeof(buf));
        lg_chart_xtick(c, d, buf);
    }
}

void lg_html_latency(FILE *f, const lg_html_run *runs, int n)
{
    line lines[LG_HTML_RUNS_MAX + 8];
    int nl = latency_lines(runs, n, lines, (int)(sizeof(lines) / sizeof(lines[0])));
    double xmax = 2, ymax = 0, xs[PCT_MAX], ys[PCT_MAX], t[TICKS_MAX];
    for (int l = 0; l < nl; l++) {
        xmax = fmax(xmax, ceil(log10(fmax(lg_json_num(lines[l].lat, "count"), 1)) - 1e-9));
        ymax = fmax(ymax, lg_json_num(lines[l].lat, "max") / 1000.0);
    }
    figure_begin(f, "Latency by percentile",
                 "milliseconds at each percentile; the x axis is 1/(1-p) on a log scale, as "
                 "HdrHistogram plots it");
    if (!(ymax > 0)) {
        nothing(f, "No answer was timed.");
        return;
    }
    double lo = 0;
    int nt = lg_svg_ticks(&lo, &ymax, 6, t, TICKS_MAX);
    lg_chart c;
    lg_chart_begin(&c, f, W, H, 0, xmax, 0, ymax, "latency by percentile");
    y_ticks(&c, t, nt);
    pct_ticks(&c, xmax);
    for (int l = nl - 1; l >= 0; l--) /* the main curve last, on top */
        lg_chart_line(&c, xs, ys, curve(lines[l].lat, xs, ys), lines[l].color, lines[l].width,
                      lines[l].dash, 0);
    lg_chart_axes(&c, "percentile", "ms");
    lg_chart_end(&c);
    fputs("<div class=\"legend\">", f);
    for (int l = 0; l < nl; l++)
        legend_item(f, lines[l].color, lines[l].name, lines[l].dash != NULL);
    fputs("</div></figure>\n", f);
}

/* The stock samples of a run as times (ms) and two curves: the stock read,
 * and initial stock - units sold since (what the ledger says is left). */
static int stock_points(const json_t *run, double *t, double *stock, double *ledger, int max)
{
    const json_t *s = json_object_get(run, "stock");
    const json_t *item = json_array_get(json_object_get(run, "items"), 0);
    double stock0 = lg_json_num(item, "stockBefore"), sold0 = lg_json_num(item, "soldBefore");
    int n = (int)json_array_size(json_object_get(s, "tMs"));
    n = n < max ? n : max;
    for (int i = 0; i < n; i++) {
        t[i] = json_number_value(json_array_get(json_object_get(s, "tMs"), (size_t)i));
        stock[i] = json_number_value(json_array_get(json_object_get(s, "stock"), (size_t)i));
        /* an --api profile without a sold count has no ledger: its line is the stock's */
        ledger[i] = sold0 < 0 ? stock[i]
                              : stock0 - (json_number_value(json_array_get(
                                              json_object_get(s, "sold"), (size_t)i)) - sold0);
    }
    return n;
}

typedef struct stock_curves {
    double t[LG_SAMPLES_MAX], stock[LG_SAMPLES_MAX], ledger[LG_SAMPLES_MAX];
    int n;
} stock_curves;

static void stock_legend(FILE *f, const lg_html_run *runs, int n)
{
    fputs("<div class=\"legend\">", f);
    for (int r = 0; r < n; r++) {
        char name[96];
        snprintf(name, sizeof(name), "%s%sstock read", runs[r].label, n > 1 ? ": " : "");
        legend_item(f, runs[r].color, name, 0);
    }
    legend_item(f, n > 1 ? "#5b6472" : "#1d2330", "initial stock - sold (the ledger)", 1);
    fputs("</div></figure>\n", f);
}

void lg_html_stock(FILE *f, const lg_html_run *runs, int n)
{
    char sub[240];
    size_t items = json_array_size(json_object_get(runs[0].run, "items"));
    snprintf(sub, sizeof(sub), "item %.0f%s, read with GET /items/{id} while the load ran (%zu "
             "reads); the two lines part where updates are lost, and the ledger's drops below 0 "
             "where stock was oversold",
             lg_json_num(runs[0].run, "stock.itemId"), n > 1 ? " and the other modes' items"
                                                      : items > 1 ? ", the first of the run's"
                                                                  : "",
             json_array_size(lg_json_at(runs[0].run, "stock.tMs")));
    figure_begin(f, items > 1 ? "Stock of the run's first item over time"
                              : "Stock of the hot item over time", sub);
    stock_curves *sc = calloc((size_t)n, sizeof(*sc));
    double end = 1, lo = 0, hi = 1, t[TICKS_MAX];
    for (int r = 0; sc && r < n; r++) {
        sc[r].n = stock_points(runs[r].run, sc[r].t, sc[r].stock, sc[r].ledger,
                               LG_SAMPLES_MAX);
        for (int i = 0; i < sc[r].n; i++) {
            end = fmax(end, sc[r].t[i]);
            hi = fmax(hi, fmax(sc[r].stock[i], sc[r].ledger[i]));
            lo = fmin(lo, fmin(sc[r].stock[i], sc[r].ledger[i]));
        }
    }
    if (sc == NULL || sc[0].n == 0) {
        free(sc);
        nothing(f, "No item: nothing was sampled.");
        return;
    }
    const char *xt;
    double u = time_unit(end, &xt);
    int nt = lg_svg_ticks(&lo, &hi, 6, t, TICKS_MAX);
    lg_chart c;
    lg_chart_begin(&c, f, W, H, 0, end / u, lo, hi, "stock over time");
    y_ticks(&c, t, nt);
    x_ticks(&c, 0, end / u);
    fault_spans(&c, runs[0].run, u);
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < sc[r].n; i++)
            sc[r].t[i] /= u;
        lg_chart_line(&c, sc[r].t, sc[r].stock, sc[r].n, runs[r].color, 3, NULL, 1);
        lg_chart_line(&c, sc[r].t, sc[r].ledger, sc[r].n, n > 1 ? runs[r].color : "#1d2330",
                      1.4, "5 4", 1);
    }
    lg_chart_axes(&c, xt, "units");
    lg_chart_end(&c);
    free(sc);
    stock_legend(f, runs, n);
}

/* The i-th number of the array key of s, NAN when it is not a number. */
static double sample_num(const json_t *s, const char *key, size_t i)
{
    const json_t *v = json_array_get(json_object_get(s, key), i);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* The history check's reads ("history.series": thinned for drawing, the
 * reads outside the band all kept up to a bound) against the band their
 * requests allow: above its top is a stale read, below its bottom an
 * impossible one, each marked. */
void lg_html_history(FILE *f, const json_t *run)
{
    const json_t *h = json_object_get(run, "history"), *s = json_object_get(h, "series");
    size_t n = json_array_size(json_object_get(s, "t0Ms"));
    char sub[320];
    snprintf(sub, sizeof(sub), "item %.0f read every %.0f ms while the load ran (%.0f reads, "
             "%zu drawn): each read must lie between initial - units invoked before it ended "
             "(bottom) and initial - units acknowledged before it began (top); %.0f above, "
             "%.0f below", lg_json_num(h, "itemId"), lg_json_num(h, "intervalMs"),
             lg_json_num(h, "reads"), n, lg_json_num(h, "stale"), lg_json_num(h, "impossible"));
    figure_begin(f, "Reads against the history's band", sub);
    double *t = malloc((n ? n : 1) * 4 * sizeof(*t));
    if (n == 0 || t == NULL) {
        free(t);
        nothing(f, "No history check ran: nothing to draw.");
        return;
    }
    double *v = t + n, *lo = v + n, *hi = lo + n, end = 1, ymin = 0, ymax = 1, ticks[TICKS_MAX];
    for (size_t i = 0; i < n; i++) {
        t[i] = (sample_num(s, "t0Ms", i) + sample_num(s, "t1Ms", i)) / 2;
        v[i] = sample_num(s, "stock", i);
        lo[i] = sample_num(s, "low", i);
        hi[i] = sample_num(s, "high", i);
        end = fmax(end, t[i]);
        ymin = fmin(ymin, fmin(v[i], lo[i]));
        ymax = fmax(ymax, fmax(v[i], hi[i]));
    }
    const char *xt;
    double u = time_unit(end, &xt), dy = (ymax - ymin) / 80;
    int nt = lg_svg_ticks(&ymin, &ymax, 6, ticks, TICKS_MAX);
    lg_chart c;
    lg_chart_begin(&c, f, W, H, 0, end / u, ymin, ymax, "reads against the band");
    y_ticks(&c, ticks, nt);
    x_ticks(&c, 0, end / u);
    fault_spans(&c, run, u);
    for (size_t i = 0; i < n; i++)
        t[i] /= u;
    lg_chart_line(&c, t, hi, (int)n, "#2c9a5a", 1.4, "5 4", 1);
    lg_chart_line(&c, t, lo, (int)n, "#9aa5b8", 1.4, "5 4", 1);
    lg_chart_line(&c, t, v, (int)n, "#2f6fbf", 2, NULL, 0);
    for (size_t i = 0; i < n; i++)
        if (v[i] > hi[i] || v[i] < lo[i])
            lg_chart_rect(&c, t[i] - end / u / 300, t[i] + end / u / 300, v[i] - dy, v[i] + dy,
                          v[i] > hi[i] ? "#d43d51" : "#8e44ad");
    lg_chart_axes(&c, xt, "units");
    lg_chart_end(&c);
    free(t);
    fputs("<div class=\"legend\">", f);
    legend_item(f, "#2f6fbf", "stock read", 0);
    legend_item(f, "#2c9a5a", "initial - acknowledged before the read", 1);
    legend_item(f, "#9aa5b8", "initial - invoked before its end", 1);
    legend_item(f, "#d43d51", "stale read", 0);
    legend_item(f, "#8e44ad", "impossible read", 0);
    fputs("</div></figure>\n", f);
}

/* The i-th number of the stock samples' array key, NAN when it is null. */
static double sample_at(const json_t *s, const char *key, size_t i)
{
    const json_t *v = json_array_get(json_object_get(s, key), i);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

void lg_html_held(FILE *f, const json_t *run)
{
    static const char *const keys[] = {"stock", "reserved", "sold"};
    static const char *const names[] = {"available", "reserved", "sold"};
    static const char *const colors[] = {"#2f6fdf", "#e08a1e", "#2c9a5a"};
    const json_t *s = json_object_get(run, "stock");
    size_t n = json_array_size(json_object_get(s, "tMs"));
    n = n < LG_SAMPLES_MAX ? n : LG_SAMPLES_MAX;
    figure_begin(f, "Available, reserved and sold over time",
                 "GET /items/{id} while the buyers reserved, confirmed, cancelled and walked "
                 "away, and until every hold had run out (+ 1 s): what a lapsed hold gives "
                 "back moves from reserved to available");
    static double t[LG_SAMPLES_MAX], y[3][LG_SAMPLES_MAX];
    double end = 1, lo = 0, hi = 1, ticks[TICKS_MAX];
    for (size_t i = 0; i < n; i++) {
        t[i] = sample_at(s, "tMs", i);
        end = fmax(end, t[i]);
        for (int k = 0; k < 3; k++) {
            y[k][i] = sample_at(s, keys[k], i);
            if (isfinite(y[k][i]))
                hi = fmax(hi, y[k][i]);
        }
    }
    if (n == 0) {
        nothing(f, "No item: nothing was sampled.");
        return;
    }
    const char *xt;
    double u = time_unit(end, &xt);
    for (size_t i = 0; i < n; i++)
        t[i] /= u;
    int nt = lg_svg_ticks(&lo, &hi, 6, ticks, TICKS_MAX);
    lg_chart c;
    lg_chart_begin(&c, f, W, H, 0, end / u, lo, hi, "available, reserved and sold over time");
    y_ticks(&c, ticks, nt);
    x_ticks(&c, 0, end / u);
    for (int k = 0; k < 3; k++)
        lg_chart_line(&c, t, y[k], (int)n, colors[k], 2.5, NULL, 1);
    lg_chart_axes(&c, xt, "units");
    lg_chart_end(&c);
    fputs("<div class=\"legend\">", f);
    for (int k = 0; k < 3; k++)
        legend_item(f, colors[k], names[k], 0);
    fputs("</div></figure>\n", f);
}

/* One bar: a target's outcomes left to right, counts inside when they fit. */
static void outcome_bar(const lg_chart *c, const json_t *outs, double row)
{
    double x = 0;
    char buf[32];
    for (int o = 0; o < LG_OUT_COUNT; o++) {
        double v = lg_json_num(outs, lg_outcome_name(o));
        if (v <= 0)
            continue;
        lg_chart_rect(c, x, x + v, row + 0.42, row + 0.9, outcome_colors[o]);
        if (lg_chart_x(c, x + v) - lg_chart_x(c, x) > 30) {
            lg_svg_num(v, buf, sizeof(buf));
            lg_chart_text(c, x + v / 2, row + 0.78, "middle", "inbar", buf);
        }
        x += v;
    }
}

void lg_html_outcomes(FILE *f, const lg_html_run *runs, int n)
{
    double rows = 0, max = 1, seen[LG_OUT_COUNT] = {0}, t[TICKS_MAX];
    const json_t *tg;
    size_t i;
    for (int r = 0; r < n; r++)
        json_array_foreach(json_object_get(runs[r].run, "perTarget"), i, tg) {
            rows++;
            max = fmax(max, lg_json_num(tg, "requests"));
            for (int o = 0; o < LG_OUT_COUNT; o++)
                seen[o] += lg_json_num(json_object_get(tg, "outcomes"), lg_outcome_name(o));
        }
    figure_begin(f, n > 1 ? "Outcomes per mode and target" : "Outcomes per target",
                 "final outcome of each request, by the target its connection talked to");
    double lo = 0;
    int nt = lg_svg_ticks(&lo, &max, 6, t, TICKS_MAX);
    lg_chart c;
    lg_chart_begin(&c, f, W, 70 + 40 * rows, 0, max, rows, 0, "outcomes per target");
    c.left = 14; /* labels go above the bars, not beside them */
    char buf[32];
    for (int k = 0; k < nt; k++) {
        lg_svg_num(t[k], buf, sizeof(buf));
        lg_chart_xtick(&c, t[k], buf);
    }
    double row = 0;
    for (int r = 0; r < n; r++)
        json_array_foreach(json_object_get(runs[r].run, "perTarget"), i, tg) {
            char label[300], shown[300];
            snprintf(label, sizeof(label), "%s%s%s: %.0f requests", runs[r].label,
                     runs[r].label[0] ? " · " : "", lg_json_str(tg, "url"),
                     lg_json_num(tg, "requests"));
            lg_chart_text(&c, 0, row + 0.32, "start", "label",
                          no_scheme(label, shown, sizeof(shown)));
            outcome_bar(&c, json_object_get(tg, "outcomes"), row++);
        }
    lg_chart_axes(&c, "requests", "");
    lg_chart_end(&c);
    outcome_legend(f, seen);
}
