/* Inline SVG charts for lowbit report: bars, scatter (with lines),
 * histograms with a grid drawn over them, heat maps and intervals. Every
 * chart is one <svg> element whose data points are elements of class "pt"
 * and whose data-points attribute says how many there are (a test counts
 * them), with a <title> and axis labels; no scripts, no fonts, no links. */
#ifndef LOWBIT_REPORT_SVG_H
#define LOWBIT_REPORT_SVG_H

#include <stddef.h>
#include <stdio.h>

/* Writes s escaped for XML text or an attribute value. */
void rsvg_text(FILE *f, const char *s);

/* Horizontal bars, largest scale at the longest: one per value (with an
 * error bar when err is not NULL), a dashed reference line at ref when
 * ref > 0 (labelled ref_label). Values that are not finite get no bar but
 * count as points. */
void rsvg_bars(FILE *f, const char *title, const char *x_label, const char *const *labels, const double *values,
               const double *err, size_t n, double ref, const char *ref_label);

/* One series of a scatter chart. */
typedef struct rsvg_series {
    const char *name;
    const double *x, *y;
    const char *const *labels; /* per point (a tooltip), or NULL */
    size_t n;
    int line;                  /* 1: joined by a line (a front), 0: markers only */
    const char *color;
} rsvg_series;
/* The series on shared axes (y on a log scale when log_y and every y is
 * positive), with a legend. */
void rsvg_scatter(FILE *f, const char *title, const char *x_label, const char *y_label, const rsvg_series *s,
                  size_t n_series, int log_y);

/* A histogram of counts over [lo, hi] (n equal bins: the points), with
 * vertical lines at the grid values (when n_grid > 0) and the bins beyond
 * +-mark (when mark > 0: the outliers) drawn in red. */
void rsvg_histogram(FILE *f, const char *title, const char *x_label, const double *counts, size_t n, double lo,
                    double hi, const double *grid, size_t n_grid, double mark, int log_counts);

/* A heat map of rows x cols values (row-major; NaN: empty cell, not a
 * point), colored from low (red) to high (green), with the row and column
 * labels and each cell's value as its tooltip. */
void rsvg_heatmap(FILE *f, const char *title, const char *unit, const char *const *rows, size_t n_rows,
                  const char *const *cols, size_t n_cols, const double *v);

/* Intervals: a point with a 95% interval [lo, hi] per label (the points),
 * on a shared axis, with a vertical line at ref when has_ref. */
void rsvg_intervals(FILE *f, const char *title, const char *x_label, const char *const *labels, const double *mid,
                    const double *lo, const double *hi, size_t n, int has_ref, double ref);

#endif
