/* Distribution statistics of a tensor: what decides how it quantizes.
 * Heavy tails (kurtosis) and one dominant channel (outlier ratio) are what
 * per-tensor scales cannot absorb. */
#include <math.h>
#include <stdlib.h>

#include "util/error.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

lb_status lb_tensor_stats_compute(const float *x, uint64_t rows, uint64_t cols, lb_tensor_stats *out)
{
    if (!x || !out) return lb__fail(LB_ERR_ARG, "lb_tensor_stats_compute: NULL argument");
    if (rows == 0 || cols == 0 || rows > SIZE_MAX / cols) return lb__fail(LB_ERR_ARG, "bad shape %llu x %llu",
                                                                          (unsigned long long)rows, (unsigned long long)cols);
    size_t n = (size_t)(rows * cols);
    double *row_max = malloc(rows * sizeof *row_max);
    if (!row_max) return lb__fail(LB_ERR_NOMEM, "out of memory for %llu rows", (unsigned long long)rows);
    double sum = 0, absmax = 0;
    for (size_t r = 0; r < rows; r++) {
        double m = 0;
        for (size_t c = 0; c < cols; c++) {
            double v = x[r * cols + c];
            if (!isfinite(v)) {
                free(row_max);
                return lb__fail(LB_ERR_NAN, "element %zu (row %zu, column %zu) is %s", r * cols + c, r, c,
                                isnan(v) ? "NaN" : "infinite");
            }
            sum += v;
            if (fabs(v) > m) m = fabs(v);
        }
        row_max[r] = m;
        if (m > absmax) absmax = m;
    }
    double mean = sum / (double)n, m2 = 0, m4 = 0;
    for (size_t i = 0; i < n; i++) {
        double d = x[i] - mean, d2 = d * d;
        m2 += d2, m4 += d2 * d2;
    }
    m2 /= (double)n, m4 /= (double)n;
    double sd = sqrt(m2);
    uint64_t beyond = 0;
    for (size_t i = 0; i < n; i++) beyond += fabs(x[i] - mean) > 6 * sd && sd > 0;
    qsort(row_max, rows, sizeof *row_max, cmp_double);
    double median = rows % 2 ? row_max[rows / 2] : (row_max[rows / 2 - 1] + row_max[rows / 2]) / 2;
    out->count = n;
    out->absmax = absmax, out->mean = mean, out->std = sd;
    out->kurtosis = m2 > 0 ? m4 / (m2 * m2) : 0;
    out->outlier_ratio = median > 0 ? row_max[rows - 1] / median : (row_max[rows - 1] > 0 ? INFINITY : 1);
    out->beyond_6std = beyond;
    free(row_max);
    return LB_OK;
}
