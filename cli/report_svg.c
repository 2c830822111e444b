/* Inline SVG charts (report_svg.h). Layout in plain numbers: a chart is
 * W wide, a left margin for labels, a plot area, a bottom margin for the
 * axis; every coordinate is printed with one decimal. */
#include "report_svg.h"

#include <math.h>
#include <string.h>

#define W 760.0
#define LEFT 230.0
#define RIGHT 90.0
#define TOP 34.0
#define BOTTOM 44.0
#define ROW 18.0

void rsvg_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            if ((unsigned char)*s < 0x20 && *s != '\n' && *s != '\t') fputc('?', f); /* XML forbids them */
            else fputc(*s, f);
        }
    }
}

static void begin(FILE *f, const char *kind, double h, size_t points, const char *title)
{
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f "
            "%.0f\" data-kind=\"%s\" data-points=\"%zu\" role=\"img\">\n<title>", W, h, W, h, kind, points);
    rsvg_text(f, title);
    fprintf(f, "</title>\n<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", W, h);
    fprintf(f, "<text x=\"8\" y=\"20\" class=\"t\">");
    rsvg_text(f, title);
    fprintf(f, "</text>\n");
}

static void end(FILE *f) { fputs("</svg>\n", f); }

static void label(FILE *f, double x, double y, const char *anchor, const char *cls, const char *s)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" class=\"%s\">", x, y, anchor, cls);
    rsvg_text(f, s);
    fputs("</text>\n", f);
}

static void number(FILE *f, double x, double y, const char *anchor, double v)
{
    char b[64];
    snprintf(b, sizeof b, "%.4g", v);
    label(f, x, y, anchor, "n", b);
}

/* A round-ish upper end for an axis from 0. */
static double nice_top(double v)
{
    if (!(v > 0) || !isfinite(v)) return 1;
    double p = pow(10, floor(log10(v))), m = v / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

void rsvg_bars(FILE *f, const char *title, const char *x_label, const char *const *labels, const double *values,
               const double *err, size_t n, double ref, const char *ref_label)
{
    double top = ref > 0 ? ref : 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(values[i])) top = fmax(top, values[i] + (err && isfinite(err[i]) ? err[i] : 0));
    top = nice_top(top);
    double plot = W - LEFT - RIGHT, h = TOP + ROW * (double)n + BOTTOM;
    begin(f, "bars", h, n, title);
    for (size_t i = 0; i < n; i++) {
        double y = TOP + ROW * (double)i;
        label(f, LEFT - 6, y + ROW * 0.7, "end", "l", labels[i]);
        double v = isfinite(values[i]) && values[i] > 0 ? values[i] : 0, len = v / top * plot;
        fprintf(f, "<rect class=\"pt\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#4a78b5\"><title>",
                LEFT, y + 2, len, ROW - 4);
        rsvg_text(f, labels[i]);
        fprintf(f, ": %.6g", values[i]);
        if (err && isfinite(err[i])) fprintf(f, " +- %.3g", err[i]);
        fputs("</title></rect>\n", f);
        if (err && isfinite(err[i]) && err[i] > 0)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222\"/>\n",
                    LEFT + fmax(0, v - err[i]) / top * plot, y + ROW / 2, LEFT + (v + err[i]) / top * plot, y + ROW / 2);
        number(f, LEFT + len + 4, y + ROW * 0.7, "start", values[i]);
    }
    double ay = TOP + ROW * (double)n;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", LEFT, ay, LEFT + plot, ay);
    number(f, LEFT, ay + 14, "middle", 0);
    number(f, LEFT + plot, ay + 14, "middle", top);
    label(f, LEFT + plot / 2, ay + 32, "middle", "a", x_label);
    if (ref > 0) {
        double x = LEFT + ref / top * plot;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c0392b\" stroke-dasharray=\"4 3\"/>\n",
                x, TOP - 4, x, ay);
        label(f, x, TOP - 8, "middle", "r", ref_label ? ref_label : "");
    }
    end(f);
}

void rsvg_scatter(FILE *f, const char *title, const char *x_label, const char *y_label, const rsvg_series *s,
                  size_t n_series, int log_y)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    size_t points = 0;
    for (size_t k = 0; k < n_series; k++)
        for (size_t i = 0; i < s[k].n; i++) {
            points++;
            if (!isfinite(s[k].x[i]) || !isfinite(s[k].y[i])) continue;
            if (log_y && !(s[k].y[i] > 0)) log_y = 0;
            x0 = fmin(x0, s[k].x[i]), x1 = fmax(x1, s[k].x[i]), y0 = fmin(y0, s[k].y[i]), y1 = fmax(y1, s[k].y[i]);
        }
    if (!(x0 <= x1)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    if (log_y) y0 = log10(y0), y1 = log10(y1);
    double dx = x1 - x0 > 0 ? (x1 - x0) * 0.05 : 0.5, dy = y1 - y0 > 0 ? (y1 - y0) * 0.05 : 0.5;
    x0 -= dx, x1 += dx, y0 -= dy, y1 += dy;
    double left = 70, plot_w = W - left - RIGHT - 80, plot_h = 300, h = TOP + plot_h + BOTTOM + 14 * (double)n_series;
    begin(f, "scatter", h, points, title);
#define PX(v) (left + ((v) - x0) / (x1 - x0) * plot_w)
#define PY(v) (TOP + plot_h - ((log_y ? log10(v) : (v)) - y0) / (y1 - y0) * plot_h)
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n", left, TOP,
            plot_w, plot_h);
    for (size_t k = 0; k < n_series; k++) {
        const rsvg_series *r = &s[k];
        if (r->line && r->n > 1) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", r->color);
            for (size_t i = 0; i < r->n; i++)
                if (isfinite(r->x[i]) && isfinite(r->y[i])) fprintf(f, "%.1f,%.1f ", PX(r->x[i]), PY(r->y[i]));
            fputs("\"/>\n", f);
        }
        for (size_t i = 0; i < r->n; i++) {
            if (!isfinite(r->x[i]) || !isfinite(r->y[i])) {
                fprintf(f, "<g class=\"pt\"/>\n"); /* counted, not drawn */
                continue;
            }
            fprintf(f, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"><title>", PX(r->x[i]),
                    PY(r->y[i]), r->line ? "2" : "4.5", r->color);
            rsvg_text(f, r->labels ? r->labels[i] : r->name);
            fprintf(f, ": (%.4g, %.4g)</title></circle>\n", r->x[i], r->y[i]);
            if (r->labels && !r->line) label(f, PX(r->x[i]) + 6, PY(r->y[i]) - 6, "start", "n", r->labels[i]);
        }
        double ly = TOP + plot_h + BOTTOM + 14 * (double)k;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/>\n", left, ly - 9, r->color);
        label(f, left + 16, ly, "start", "l", r->name);
    }
    number(f, left, TOP + plot_h + 14, "middle", x0 + dx);
    number(f, left + plot_w, TOP + plot_h + 14, "middle", x1 - dx);
    number(f, left - 4, TOP + plot_h, "end", log_y ? pow(10, y0 + dy) : y0 + dy);
    number(f, left - 4, TOP + 10, "end", log_y ? pow(10, y1 - dy) : y1 - dy);
    label(f, left + plot_w / 2, TOP + plot_h + 30, "middle", "a", x_label);
    char yl[160];
    snprintf(yl, sizeof yl, "%s%s", y_label, log_y ? " (log scale)" : "");
    fprintf(f, "<text x=\"14\" y=\"%.1f\" text-anchor=\"middle\" class=\"a\" transform=\"rotate(-90 14 %.1f)\">",
            TOP + plot_h / 2, TOP + plot_h / 2);
    rsvg_text(f, yl);
    fputs("</text>\n", f);
#undef PX
#undef PY
    end(f);
}

void rsvg_histogram(FILE *f, const char *title, const char *x_label, const double *counts, size_t n, double lo,
                    double hi, const double *grid, size_t n_grid, double mark, int log_counts)
{
    double top = 0;
    for (size_t i = 0; i < n; i++) top = fmax(top, log_counts ? log10(1 + counts[i]) : counts[i]);
    if (!(top > 0)) top = 1;
    double left = 60, plot_w = W - left - 40, plot_h = 150, h = TOP + plot_h + BOTTOM;
    begin(f, "histogram", h, n, title);
    double bw = plot_w / (double)(n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        double v = log_counts ? log10(1 + counts[i]) : counts[i], bh = v / top * plot_h;
        double a = lo + (hi - lo) * (double)i / (double)n, b = lo + (hi - lo) * (double)(i + 1) / (double)n;
        int out = mark > 0 && (b <= -mark || a >= mark);
        fprintf(f, "<rect class=\"pt\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>[%.4g, "
                "%.4g): %.0f</title></rect>\n", left + bw * (double)i, TOP + plot_h - bh, bw > 1 ? bw - 0.5 : bw, bh,
                out ? "#c0392b" : "#4a78b5", a, b, counts[i]);
    }
    for (size_t k = 0; k < n_grid; k++) {
        if (!(grid[k] >= lo && grid[k] <= hi)) continue;
        double x = left + (grid[k] - lo) / (hi - lo) * plot_w;
        fprintf(f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e67e22\" "
                "stroke-width=\"1\" opacity=\"0.8\"/>\n", x, TOP, x, TOP + plot_h);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", left, TOP + plot_h,
            left + plot_w, TOP + plot_h);
    number(f, left, TOP + plot_h + 14, "middle", lo);
    number(f, left + plot_w, TOP + plot_h + 14, "middle", hi);
    number(f, left + plot_w / 2, TOP + plot_h + 14, "middle", (lo + hi) / 2);
    label(f, left + plot_w / 2, TOP + plot_h + 32, "middle", "a", x_label);
    label(f, left - 4, TOP + 10, "end", "n", log_counts ? "log count" : "count");
    end(f);
}

void rsvg_heatmap(FILE *f, const char *title, const char *unit, const char *const *rows, size_t n_rows,
                  const char *const *cols, size_t n_cols, const double *v)
{
    double lo = INFINITY, hi = -INFINITY;
    size_t points = 0;
    for (size_t i = 0; i < n_rows * n_cols; i++)
        if (isfinite(v[i])) lo = fmin(lo, v[i]), hi = fmax(hi, v[i]), points++;
    if (!(lo < hi)) lo = isfinite(lo) ? lo - 1 : 0, hi = lo + 2;
    double cell_w = (W - LEFT - 20) / (double)(n_cols ? n_cols : 1), cell_h = 12, head = 30;
    double h = TOP + head + cell_h * (double)n_rows + 40;
    begin(f, "heatmap", h, points, title);
    for (size_t c = 0; c < n_cols; c++) label(f, LEFT + cell_w * ((double)c + 0.5), TOP + 20, "middle", "l", cols[c]);
    for (size_t r = 0; r < n_rows; r++) {
        double y = TOP + head + cell_h * (double)r;
        label(f, LEFT - 6, y + cell_h - 2, "end", "s", rows[r]);
        for (size_t c = 0; c < n_cols; c++) {
            double x = v[r * n_cols + c];
            if (!isfinite(x)) continue;
            double t = (x - lo) / (hi - lo); /* red (low) to green (high) */
            int red = (int)lround(220 * (1 - t) + 30 * t), green = (int)lround(60 * (1 - t) + 170 * t);
            fprintf(f, "<rect class=\"pt\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"rgb(%d,%d,90)\">"
                    "<title>", LEFT + cell_w * (double)c, y, cell_w - 1, cell_h - 1, red, green);
            rsvg_text(f, rows[r]);
            fputs(", ", f);
            rsvg_text(f, cols[c]);
            fprintf(f, ": %.4g ", x);
            rsvg_text(f, unit);
            fputs("</title></rect>\n", f);
        }
    }
    double ly = TOP + head + cell_h * (double)n_rows + 24;
    char b[128];
    snprintf(b, sizeof b, "red %.3g %s ... green %.3g %s", lo, unit, hi, unit);
    label(f, LEFT, ly, "start", "a", b);
    end(f);
}

void rsvg_intervals(FILE *f, const char *title, const char *x_label, const char *const *labels, const double *mid,
                    const double *lo, const double *hi, size_t n, int has_ref, double ref)
{
    double a = has_ref ? ref : INFINITY, b = has_ref ? ref : -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(lo[i])) a = fmin(a, lo[i]);
        if (isfinite(hi[i])) b = fmax(b, hi[i]);
        if (isfinite(mid[i])) a = fmin(a, mid[i]), b = fmax(b, mid[i]);
    }
    if (!(a < b)) a = isfinite(a) ? a - 1 : 0, b = a + 2;
    double pad = (b - a) * 0.08;
    a -= pad, b += pad;
    double plot = W - LEFT - RIGHT, h = TOP + ROW * (double)n + BOTTOM;
    begin(f, "intervals", h, n, title);
#define X(v) (LEFT + ((v) - a) / (b - a) * plot)
    for (size_t i = 0; i < n; i++) {
        double y = TOP + ROW * (double)i + ROW / 2;
        label(f, LEFT - 6, y + 4, "end", "l", labels[i]);
        if (isfinite(lo[i]) && isfinite(hi[i]))
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#222\" stroke-width=\"2\"/>\n",
                    X(lo[i]), y, X(hi[i]), y);
        fprintf(f, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#4a78b5\"><title>", X(mid[i]), y);
        rsvg_text(f, labels[i]);
        fprintf(f, ": %.4g [%.4g, %.4g]</title></circle>\n", mid[i], lo[i], hi[i]);
        number(f, X(hi[i]) + 6, y + 4, "start", mid[i]);
    }
    double ay = TOP + ROW * (double)n;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", LEFT, ay, LEFT + plot, ay);
    number(f, LEFT, ay + 14, "middle", a);
    number(f, LEFT + plot, ay + 14, "middle", b);
    if (has_ref)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c0392b\" stroke-dasharray=\"4 3\"/>\n",
                X(ref), TOP - 4, X(ref), ay);
    label(f, LEFT + plot / 2, ay + 32, "middle", "a", x_label);
#undef X
    end(f);
}
