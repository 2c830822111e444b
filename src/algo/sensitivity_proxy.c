/* The cheap proxy beside the measured sensitivity (lowbit.h,
 * lb_unit_proxy), and the rank correlation that says whether to trust it.
 *
 * For a linear layer y = W x, quantizing W to Q(W) moves the output by
 * (W - Q(W)) x; its expected square over the calibration inputs, with the
 * input covariance taken diagonal, is sum_j E[x_j^2] sum_r (W_rj -
 * Q(W)_rj)^2. E[x_j^2] is exactly what an importance matrix holds (per
 * input column, llama.cpp's imatrix), so the proxy costs one quantization
 * per weight and no forward pass: the output error weighted by activation
 * statistics (the diagonal-Hessian, Fisher-like score of the literature;
 * it does not see how much the rest of the network amplifies the error,
 * which is why the measurement stays the reference). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algo/units.h"
#include "util/error.h"

/* sum_j imp[j] sum_r (a - b)^2 over a rows x cols matrix. */
static double weighted_error(const float *a, const float *b, const float *imp, size_t rows, size_t cols)
{
    double total = 0;
    for (size_t r = 0; r < rows; r++) {
        double row = 0;
        for (size_t c = 0; c < cols; c++) {
            double d = (double)a[r * cols + c] - (double)b[r * cols + c];
            row += (double)imp[c] * d * d;
        }
        total += row;
    }
    return total;
}

/* The proxy of entry i of q (0 when q leaves it as stored), or NaN when
 * the imatrix has no matching entry for a changed weight. */
static lb_status entry_proxy(const lb_qmodel *q, size_t i, const lb_imatrix *im, int threads, float *src, float *val,
                             double *out)
{
    lb_qentry e;
    lb_status st = lb_qmodel_entry(q, i, &e);
    if (st != LB_OK) return st;
    *out = 0;
    if (!lb_tensor_is_weight(e.tensor) || (e.state != LB_QSTATE_QUANTIZED && e.ggml == LB_DT_COUNT)) return LB_OK;
    const float *imp = NULL;
    size_t n = 0;
    size_t rows = (size_t)e.tensor->shape[0], cols = (size_t)e.tensor->shape[1];
    if (!im || !lb_imatrix_values(im, e.tensor->name, &imp, &n) || n != cols) {
        *out = NAN;
        return LB_OK;
    }
    if ((st = lb_qmodel_source_f32(q, i, src)) == LB_OK && (st = lb_qmodel_values_f32(q, i, val, threads)) == LB_OK)
        *out = weighted_error(src, val, imp, rows, cols);
    return st;
}

lb_status lb_unit_proxy(const lb_qmodel *q, const lb_units *units, const lb_imatrix *im, int threads, double *proxy)
{
    if (!q || !units || !proxy) return lb__fail(LB_ERR_ARG, "lb_unit_proxy: NULL argument");
    size_t most = 0;
    for (size_t u = 0; u < units->n; u++)
        for (size_t k = 0; k < units->u[u].n; k++) {
            size_t e = (size_t)lb_model_tensor(lb_qmodel_model(q), units->u[u].entries[k])->n_elements;
            if (e > most) most = e;
        }
    float *src = malloc((most + 1) * sizeof *src), *val = malloc((most + 1) * sizeof *val);
    lb_status st = src && val ? LB_OK : lb__fail(LB_ERR_NOMEM, "lb_unit_proxy: out of memory");
    for (size_t u = 0; u < units->n && st == LB_OK; u++) {
        const lb__unit *x = &units->u[u];
        proxy[u] = x->kv || x->act_only ? NAN : 0; /* weights alone: no proxy of the KV cache or activations */
        for (size_t k = 0; k < x->n && st == LB_OK && !isnan(proxy[u]); k++) {
            double p = 0;
            st = entry_proxy(q, x->entries[k], im, threads, src, val, &p);
            proxy[u] += p;
        }
    }
    free(src), free(val);
    return st;
}

typedef struct ranked {
    double v;
    size_t i;
} ranked;

static int by_value(const void *pa, const void *pb)
{
    const ranked *a = pa, *b = pb;
    if (a->v != b->v) return a->v < b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* rank[k] of v[0..n-1]: 1-based, ties averaged. */
static void ranks(const double *v, size_t n, ranked *scratch, double *rank)
{
    for (size_t k = 0; k < n; k++) scratch[k] = (ranked){v[k], k};
    qsort(scratch, n, sizeof *scratch, by_value);
    for (size_t a = 0; a < n;) {
        size_t b = a;
        while (b + 1 < n && scratch[b + 1].v == scratch[a].v) b++;
        double r = (double)(a + b) / 2 + 1;
        for (size_t k = a; k <= b; k++) rank[scratch[k].i] = r;
        a = b + 1;
    }
}

double lb_rank_correlation(const double *x, const double *y, size_t n)
{
    if (!x || !y) return NAN;
    double *px = malloc((n + 1) * sizeof *px), *py = malloc((n + 1) * sizeof *py);
    double *rx = malloc((n + 1) * sizeof *rx), *ry = malloc((n + 1) * sizeof *ry);
    ranked *s = malloc((n + 1) * sizeof *s);
    double r = NAN;
    size_t m = 0;
    if (px && py && rx && ry && s) {
        for (size_t k = 0; k < n; k++)
            if (isfinite(x[k]) && isfinite(y[k])) px[m] = x[k], py[m] = y[k], m++;
        if (m >= 3) {
            ranks(px, m, s, rx), ranks(py, m, s, ry);
            /* Pearson's correlation of the ranks (exact with ties) */
            double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
            for (size_t k = 0; k < m; k++) mx += rx[k], my += ry[k];
            mx /= (double)m, my /= (double)m;
            for (size_t k = 0; k < m; k++)
                sxy += (rx[k] - mx) * (ry[k] - my), sxx += (rx[k] - mx) * (rx[k] - mx), syy += (ry[k] - my) * (ry[k] - my);
            if (sxx > 0 && syy > 0) r = sxy / sqrt(sxx * syy);
        }
    }
    free(px), free(py), free(rx), free(ry), free(s);
    return r;
}
