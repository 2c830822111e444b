/* Compact text charts for the terminal (--plot on compare and
 * sensitivity): what a reader takes in at a glance, beside the tables
 * that hold the numbers. */
#ifndef LOWBIT_CLI_PLOT_H
#define LOWBIT_CLI_PLOT_H

#include <stddef.h>
#include <stdio.h>

/* Bars of the given width at most, one per row, longest for the largest
 * value, the value printed after it (format fmt, e.g. "%.5f"); values
 * that are not finite or negative get no bar. A title line first. */
void cli_plot_bars(FILE *out, const char *title, const char *const *labels, const double *values, size_t n,
                   int width, const char *fmt);

/* A scatter of points (x, y) on a grid of cols x rows characters with its
 * axes' ranges printed: each point drawn as its mark (a letter), marks
 * explained below the chart by their labels. Points that are not finite
 * are left out. */
void cli_plot_scatter(FILE *out, const char *title, const char *x_label, const char *y_label,
                      const char *const *labels, const double *x, const double *y, size_t n, int cols, int rows);

#endif
