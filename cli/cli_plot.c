/* Text charts (cli_plot.h). */
#include "cli_plot.h"

#include <math.h>
#include <string.h>

/* Longest label, at most cap characters. */
static int label_width(const char *const *labels, size_t n, int cap)
{
    int w = 0;
    for (size_t i = 0; i < n; i++) {
        int l = (int)strlen(labels[i]);
        if (l > w) w = l;
    }
    return w < cap ? w : cap;
}

void cli_plot_bars(FILE *out, const char *title, const char *const *labels, const double *values, size_t n,
                   int width, const char *fmt)
{
    double top = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(values[i]) && values[i] > top) top = values[i];
    int lw = label_width(labels, n, 48);
    fprintf(out, "%s\n", title);
    for (size_t i = 0; i < n; i++) {
        int len = top > 0 && isfinite(values[i]) && values[i] > 0 ? (int)lround(values[i] / top * width) : 0;
        if (len == 0 && isfinite(values[i]) && values[i] > 0) len = 1; /* something, not nothing */
        fprintf(out, "  %-*.*s |", lw, lw, labels[i]);
        for (int k = 0; k < len; k++) fputc('#', out);
        fprintf(out, "%*s ", width - len, "");
        if (isfinite(values[i])) fprintf(out, fmt, values[i]);
        else fprintf(out, "n/a");
        fputc('\n', out);
    }
}

void cli_plot_scatter(FILE *out, const char *title, const char *x_label, const char *y_label,
                      const char *const *labels, const double *x, const double *y, size_t n, int cols, int rows)
{
    enum { MAX_COLS = 120, MAX_ROWS = 40 };
    if (cols > MAX_COLS) cols = MAX_COLS;
    if (rows > MAX_ROWS) rows = MAX_ROWS;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) continue;
        if (x[i] < x0) x0 = x[i];
        if (x[i] > x1) x1 = x[i];
        if (y[i] < y0) y0 = y[i];
        if (y[i] > y1) y1 = y[i];
    }
    fprintf(out, "%s\n", title);
    if (!(x0 <= x1)) {
        fprintf(out, "  (no points)\n");
        return;
    }
    if (x1 == x0) x1 = x0 + 1;
    if (y1 == y0) y1 = y0 + 1;
    char grid[MAX_ROWS][MAX_COLS + 1];
    for (int r = 0; r < rows; r++) memset(grid[r], ' ', (size_t)cols), grid[r][cols] = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) continue;
        int c = (int)lround((x[i] - x0) / (x1 - x0) * (cols - 1));
        int r = rows - 1 - (int)lround((y[i] - y0) / (y1 - y0) * (rows - 1));
        char mark = (char)(i < 26 ? 'A' + i : i < 52 ? 'a' + (i - 26) : '*');
        grid[r][c] = grid[r][c] == ' ' ? mark : '+'; /* '+': points on one cell */
    }
    for (int r = 0; r < rows; r++) {
        if (r == 0 || r == rows - 1) fprintf(out, "  %10.4g |%s\n", r == 0 ? y1 : y0, grid[r]);
        else fprintf(out, "  %10s |%s\n", "", grid[r]);
    }
    fprintf(out, "  %10s +", "");
    for (int c = 0; c < cols; c++) fputc('-', out);
    fprintf(out, "\n  %10s  %-10.4g%*s%10.4g\n", "", x0, cols - 20 > 0 ? cols - 20 : 0, "", x1);
    fprintf(out, "  y: %s, x: %s\n", y_label, x_label);
    for (size_t i = 0; i < n && i < 52; i++)
        if (isfinite(x[i]) && isfinite(y[i]))
            fprintf(out, "  %c %s (%.4g, %.4g)\n", (char)(i < 26 ? 'A' + i : 'a' + (i - 26)), labels[i], x[i], y[i]);
}
