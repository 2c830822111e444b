/* Is the difference between two models noise? Paired statistics over the
 * same items: McNemar's exact test for right/wrong outcomes, a percentile
 * bootstrap of the mean difference, and the smallest difference the items
 * could have detected. */
#include <math.h>
#include <stdlib.h>

#include "lowbit.h"
#include "util/error.h"

double lb_binomial_se(uint64_t correct, uint64_t n)
{
    if (n < 2 || correct > n) return NAN;
    double p = (double)correct / (double)n;
    return sqrt(p * (1 - p) / (double)(n - 1));
}

double lb_mcnemar_exact(uint64_t b, uint64_t c)
{
    uint64_t n = b + c, m = b < c ? b : c;
    if (n == 0 || 2 * m >= n) return 1; /* b == c: the lower tail holds at least half */
    /* log P(X = k) by the ratio P(k) / P(k-1) = (n - k + 1) / k from
     * P(0) = 2^-n, summed with a running log-sum-exp: no lgamma of huge
     * arguments, so the rounding stays near k ulps */
    double log_term = -(double)n * log(2.0), log_sum = log_term;
    for (uint64_t k = 1; k <= m; k++) {
        log_term += log((double)(n - k + 1) / (double)k);
        double hi = log_sum > log_term ? log_sum : log_term, lo = log_sum > log_term ? log_term : log_sum;
        log_sum = hi + log1p(exp(lo - hi));
    }
    double p = 2 * exp(log_sum);
    return p < 1 ? p : 1;
}

static uint64_t xorshift64star(uint64_t *s)
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy.percentile's default: linear between the order statistics. */
static double percentile(const double *sorted, size_t n, double q)
{
    double h = (double)(n - 1) * q;
    size_t lo = (size_t)floor(h);
    if (lo + 1 >= n) return sorted[n - 1];
    return sorted[lo] + (h - (double)lo) * (sorted[lo + 1] - sorted[lo]);
}

lb_status lb_paired_compare(const double *a, const double *b, size_t n, int binary, uint32_t resamples, uint64_t seed,
                            lb_paired_result *out)
{
    if (!a || !b || !out) return lb__fail(LB_ERR_ARG, "lb_paired_compare: NULL argument");
    if (n < 2) return lb__fail(LB_ERR_ARG, "lb_paired_compare: %zu items (at least 2)", n);
    if (resamples == 0) resamples = 10000;
    double *d = malloc(n * sizeof *d), *stat = malloc((size_t)resamples * sizeof *stat);
    if (!d || !stat) {
        free(d), free(stat);
        return lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    lb_paired_result r = {.n = n, .p_mcnemar = NAN};
    double sum_a = 0, sum_b = 0, sum_d = 0;
    for (size_t i = 0; i < n; i++) {
        d[i] = b[i] - a[i];
        sum_a += a[i], sum_b += b[i], sum_d += d[i];
        if (binary) r.only_a += a[i] > b[i], r.only_b += b[i] > a[i];
    }
    r.mean_a = sum_a / (double)n, r.mean_b = sum_b / (double)n, r.diff = sum_d / (double)n;
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (d[i] - r.diff) * (d[i] - r.diff);
    double sd = sqrt(ss / (double)(n - 1));
    r.diff_se = sd / sqrt((double)n);
    double sd_floor = 1 / sqrt((double)n); /* one disagreement in n */
    r.mde = (1.959963984540054 + 0.8416212335729143) * (sd > sd_floor ? sd : sd_floor) / sqrt((double)n);
    uint64_t s = seed ? seed : 1;
    for (uint32_t k = 0; k < resamples; k++) {
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            double u = (double)(xorshift64star(&s) >> 11) / 9007199254740992.0;
            sum += d[(size_t)(u * (double)n)];
        }
        stat[k] = sum / (double)n;
    }
    qsort(stat, resamples, sizeof *stat, by_value);
    r.ci_lo = percentile(stat, resamples, 0.025), r.ci_hi = percentile(stat, resamples, 0.975);
    if (binary) {
        r.p_mcnemar = lb_mcnemar_exact(r.only_a, r.only_b);
        r.significant = r.p_mcnemar < 0.05;
    } else {
        r.significant = r.ci_lo > 0 || r.ci_hi < 0;
    }
    free(d), free(stat);
    *out = r;
    return LB_OK;
}
