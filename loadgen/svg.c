/* svg.c - scales, ticks and inline SVG for the HTML report. Coordinates are
 * written with one decimal: the viewBox is a few hundred units wide, so that
 * is finer than a pixel and keeps the file small. */
#include "loadgen/svg.h"

#include <math.h>
#include <string.h>

/* left, right, top, bottom margins around the plot area */
#define PAD_L 52
#define PAD_R 28
#define PAD_T 22
#define PAD_B 38

void lg_svg_escape(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        switch (ch) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(ch < 0x20 || ch == 0x7f ? ' ' : ch, f);
        }
    }
}

/* 1, 2 or 5 times a power of ten, at least raw. */
static double nice_step(double raw)
{
    double mag = pow(10, floor(log10(raw)));
    double norm = raw / mag;
    return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
}

int lg_svg_ticks(double *lo, double *hi, int max, double *out, int cap)
{
    if (!isfinite(*lo) || !isfinite(*hi) || *lo >= *hi || max < 2)
        return 0;
    double step = nice_step((*hi - *lo) / (max - 1)), first, top;
    for (;;) { /* moving the ends out to whole steps may need a wider step */
        first = floor(*lo / step + 1e-9) * step;
        top = ceil(*hi / step - 1e-9) * step;
        if ((top - first) / step + 0.5 < max) /* (span in steps + 1) ticks, float-safe */
            break;
        step = nice_step(step * 1.01);
    }
    int n = 0;
    for (double v = first; v <= top + step * 1e-6 && n < cap; v = first + step * n)
        out[n++] = fabs(v) < step * 1e-9 ? 0 : v;
    *lo = first;
    *hi = top;
    return n;
}

double lg_svg_pct_x(double p)
{
    return p >= 100 ? INFINITY : log10(1.0 / (1.0 - p / 100.0));
}

void lg_svg_pct_label(double x, char *buf, size_t size)
{
    double p = 100.0 * (1.0 - pow(10, -x));
    if (fabs(x - round(x)) < 1e-9 && x < 9.5) {
        /* whole decades: 90, 99, 99.9 ... printed with as many nines as x */
        int d = (int)round(x);
        snprintf(buf, size, "%.*f%%", d > 2 ? d - 2 : 0, p);
        return;
    }
    snprintf(buf, size, "%.4g%%", p);
}

void lg_svg_num(double v, char *buf, size_t size)
{
    double a = fabs(v);
    const char *unit = "";
    if (a >= 999.5e3)
        v /= 1e6, a /= 1e6, unit = "M";
    else if (a >= 999.5)
        v /= 1e3, a /= 1e3, unit = "k";
    if (a == 0)
        snprintf(buf, size, "0");
    else
        snprintf(buf, size, a >= 100 ? "%.0f%s" : "%.3g%s", v, unit);
}

void lg_chart_begin(lg_chart *c, FILE *f, double w, double h, double x0, double x1, double y0,
                    double y1, const char *label)
{
    *c = (lg_chart){f, w, h, PAD_L, w - PAD_R, PAD_T, h - PAD_B, x0, x1, y0, y1};
    fprintf(f, "<svg viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"", w, h);
    lg_svg_escape(f, label);
    fprintf(f, "\">\n");
}

double lg_chart_x(const lg_chart *c, double x)
{
    return c->left + (x - c->x0) / (c->x1 - c->x0) * (c->right - c->left);
}

double lg_chart_y(const lg_chart *c, double y)
{
    return c->bottom - (y - c->y0) / (c->y1 - c->y0) * (c->bottom - c->top);
}

void lg_chart_xtick(const lg_chart *c, double x, const char *label)
{
    double px = lg_chart_x(c, x);
    if (!isfinite(px))
        return;
    fprintf(c->f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", px,
            c->top, px, c->bottom);
    fprintf(c->f, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", px,
            c->bottom + 15);
    lg_svg_escape(c->f, label);
    fputs("</text>\n", c->f);
}

void lg_chart_ytick(const lg_chart *c, double y, const char *label)
{
    double py = lg_chart_y(c, y);
    if (!isfinite(py))
        return;
    fprintf(c->f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>",
            c->left, py, c->right, py);
    fprintf(c->f, "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", c->left - 6,
            py + 4);
    lg_svg_escape(c->f, label);
    fputs("</text>\n", c->f);
}

void lg_chart_axes(const lg_chart *c, const char *xtitle, const char *ytitle)
{
    fprintf(c->f, "<path class=\"axis\" d=\"M%.1f %.1fV%.1fH%.1f\"/>\n", c->left, c->top,
            c->bottom, c->right);
    fprintf(c->f, "<text class=\"title\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
            (c->left + c->right) / 2, c->h - 6);
    lg_svg_escape(c->f, xtitle);
    fprintf(c->f, "</text>\n<text class=\"title\" x=\"%.1f\" y=\"%.1f\">", 6.0, c->top - 9);
    lg_svg_escape(c->f, ytitle);
    fputs("</text>\n", c->f);
}

void lg_chart_line(const lg_chart *c, const double *xs, const double *ys, int n,
                   const char *color, double width, const char *dash, int step)
{
    int open = 0;
    for (int i = 0; i < n; i++) {
        double px = lg_chart_x(c, xs[i]), py = lg_chart_y(c, ys[i]);
        if (!isfinite(px) || !isfinite(py))
            continue;
        if (!open) {
            fprintf(c->f, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\"%s%s%s "
                          "stroke-linejoin=\"round\" d=\"M%.1f %.1f", color, width,
                    dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "", px,
                    py);
            open = 1;
        } else if (step) {
            fprintf(c->f, "H%.1fV%.1f", px, py);
        } else {
            fprintf(c->f, "L%.1f %.1f", px, py);
        }
    }
    if (open)
        fputs("\"/>\n", c->f);
}

void lg_chart_rect(const lg_chart *c, double x0, double x1, double ya, double yb,
                   const char *color)
{
    double px0 = lg_chart_x(c, x0), px1 = lg_chart_x(c, x1);
    double pya = lg_chart_y(c, ya), pyb = lg_chart_y(c, yb);
    if (!isfinite(px0) || !isfinite(px1) || !isfinite(pya) || !isfinite(pyb))
        return;
    fprintf(c->f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n",
            fmin(px0, px1), fmin(pya, pyb), fabs(px1 - px0), fabs(pyb - pya), color);
}

void lg_chart_text(const lg_chart *c, double x, double y, const char *anchor, const char *cls,
                   const char *text)
{
    double px = lg_chart_x(c, x), py = lg_chart_y(c, y);
    if (!isfinite(px) || !isfinite(py))
        return;
    fprintf(c->f, "<text class=\"%s\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">", cls, px, py,
            anchor);
    lg_svg_escape(c->f, text);
    fputs("</text>\n", c->f);
}

void lg_chart_end(const lg_chart *c)
{
    fputs("</svg>\n", c->f);
}
