/* AWQ's two searches (awq.h): the scale exponent of a group and the
 * clipping range of every block of a weight, each kept by the output error
 * on sample rows of the input, measured through the weight's own quantizer.
 *
 * The error products run on the runner's fp32 matmul kernels (split over
 * threads by their output columns, bit-identical for any thread count);
 * every sum after them is taken in a fixed order (one weight row at a
 * time, in double), so the results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algo/awq.h"
#include "kernel/matmul.h"
#include "util/error.h"
#include "util/parallel.h"

/* Weight rows whose errors are computed at once: the product Y holds
 * ERR_ROWS x (n or the block's columns) floats (4 MiB at n = 4096). */
#define ERR_ROWS 256
/* Sample rows per partial Gram product, each summed in fp32 and the
 * partials in double: an entry's rounding is that of a 512-term sum. */
#define GRAM_ROWS 512
/* AutoAWQ's floor on a scale (x_mean^a of a channel that never fires) */
#define SCALE_FLOOR 1e-4

/* ---- the output error of weight rows ----
 *
 * For the columns [c0, c0 + gw) of a weight, the error of a row d is
 * sum over the n sample rows x of (x . d)^2 = d^T G d with G = X^T X
 * (those columns). Directly, Y = D X^T costs n x gw per weight row and
 * evaluation; through G, Y = D G costs gw x gw, plus n x gw x gw once to
 * form G. The searches evaluate the same sample 10 to 20 times, so G wins
 * whenever gw < n: 7x fewer multiply-adds for SmolLM2's 576-wide inputs
 * over 4096 rows, 32x for the clipping search's 128-column blocks.
 * Rounding: G's entries are fp32 sums of GRAM_ROWS products added in
 * double, Y's are fp32 sums of gw products, and d^T G d is summed in
 * double. The quadratic form could cancel where the sample is nearly
 * rank-deficient in d's direction; measured against float64 sums of
 * squares, the errors agree to 1e-7 on random samples and on near-rank-8
 * ones with a 1000x channel (tests/algo checks 1e-5). */
typedef struct err_op {
    size_t n, gw;
    int gram;      /* 1: p holds G (gw x gw); 0: p holds the sample's columns (n x gw) */
    lb__packed p;
} err_op;

typedef struct sq_job {
    const float *y; /* rows x ld */
    const float *d; /* gram: rows x ld, else NULL */
    size_t ld;
    double *out;    /* per row */
} sq_job;

static lb_status sq_rows(void *ctx, size_t begin, size_t end)
{
    const sq_job *j = ctx;
    for (size_t r = begin; r < end; r++) {
        const float *y = j->y + r * j->ld;
        double acc = 0;
        if (j->d) {
            const float *d = j->d + r * j->ld;
            for (size_t t = 0; t < j->ld; t++) acc += (double)d[t] * y[t];
        } else {
            for (size_t t = 0; t < j->ld; t++) acc += (double)y[t] * y[t];
        }
        j->out[r] = acc;
    }
    return LB_OK;
}

/* Columns [c0, c0 + gw) of the sample (n x cols) as an err_op. */
static lb_status err_op_init(err_op *e, const float *x, size_t n, size_t cols, size_t c0, size_t gw, int threads)
{
    memset(e, 0, sizeof *e);
    e->n = n, e->gw = gw, e->gram = gw < n;
    lb_status st = LB_OK;
    size_t chunk = e->gram ? (n < GRAM_ROWS ? n : GRAM_ROWS) : n;
    float *xt = malloc(gw * chunk * sizeof *xt), *g = e->gram ? malloc(gw * gw * sizeof *g) : NULL;
    double *acc = e->gram ? calloc(gw * gw, sizeof *acc) : NULL;
    if (!xt || (e->gram && (!g || !acc))) {
        st = lb__fail(LB_ERR_NOMEM, "AWQ: out of memory for the error products of %zu x %zu sample values", n, gw);
        goto done;
    }
    if (!e->gram) {
        for (size_t t = 0; t < n; t++) memcpy(xt + t * gw, x + t * cols + c0, gw * sizeof *xt);
        st = lb__pack_weight(xt, n, gw, &e->p);
        goto done;
    }
    /* G = sum over chunks of Xc^T Xc: Xc^T (gw x m) times itself as the packed "weight" */
    for (size_t t0 = 0; t0 < n && st == LB_OK; t0 += chunk) {
        size_t m = n - t0 < chunk ? n - t0 : chunk;
        for (size_t t = 0; t < m; t++)
            for (size_t c = 0; c < gw; c++) xt[c * m + t] = x[(t0 + t) * cols + c0 + c];
        lb__packed pt;
        if ((st = lb__pack_weight(xt, gw, m, &pt)) != LB_OK) break;
        st = lb__matmul(xt, gw, &pt, g, threads);
        lb__packed_free(&pt);
        for (size_t k = 0; st == LB_OK && k < gw * gw; k++) acc[k] += g[k];
    }
    for (size_t k = 0; st == LB_OK && k < gw * gw; k++) g[k] = (float)acc[k];
    if (st == LB_OK) st = lb__pack_weight(g, gw, gw, &e->p);
done:
    if (st != LB_OK) lb__packed_free(&e->p);
    free(xt);
    free(g);
    free(acc);
    return st;
}

static void err_op_free(err_op *e) { lb__packed_free(&e->p); }

/* out[r] = sum over the sample rows x of (x . d_r)^2 for the rows rows of
 * d (gw floats each); y: ERR_ROWS x max(n, gw) floats of scratch. */
static lb_status err_op_rows(const err_op *e, const float *d, size_t rows, float *y, double *out, int threads)
{
    size_t ld = e->gram ? e->gw : e->n;
    for (size_t r0 = 0; r0 < rows; r0 += ERR_ROWS) {
        size_t m = rows - r0 < ERR_ROWS ? rows - r0 : ERR_ROWS;
        lb_status st = lb__matmul(d + r0 * e->gw, m, &e->p, y, threads);
        if (st != LB_OK) return st;
        sq_job j = {y, e->gram ? d + r0 * e->gw : NULL, ld, out + r0};
        st = lb__parallel_for(m, 1, lb__threads_for(threads, m * ld * sizeof *y), sq_rows, &j);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}

/* ---- elementwise passes over a weight, split by rows ---- */

typedef enum pass_kind {
    PASS_SCALE,   /* out = w diag(s) */
    PASS_UNSCALE, /* out = out diag(1/s) - w */
    PASS_CLAMP,   /* out = w clamped to +-c of its row's block */
    PASS_DIFF     /* out = out - w */
} pass_kind;

typedef struct pass_job {
    pass_kind kind;
    const float *w;
    float *out;
    size_t cols;
    const float *s;   /* SCALE, UNSCALE: cols */
    const float *c;   /* CLAMP: rows x blocks */
    size_t group, blocks;
} pass_job;

static lb_status pass_rows(void *ctx, size_t begin, size_t end)
{
    const pass_job *j = ctx;
    size_t cols = j->cols;
    for (size_t r = begin; r < end; r++) {
        const float *w = j->w + r * cols;
        float *o = j->out + r * cols;
        switch (j->kind) {
        case PASS_SCALE:
            for (size_t c = 0; c < cols; c++) o[c] = w[c] * j->s[c];
            break;
        case PASS_UNSCALE:
            for (size_t c = 0; c < cols; c++) o[c] = o[c] / j->s[c] - w[c];
            break;
        case PASS_CLAMP:
            for (size_t b = 0; b < j->blocks; b++) {
                float m = j->c[r * j->blocks + b];
                size_t c1 = (b + 1) * j->group < cols ? (b + 1) * j->group : cols;
                for (size_t c = b * j->group; c < c1; c++) o[c] = w[c] > m ? m : w[c] < -m ? -m : w[c];
            }
            break;
        case PASS_DIFF:
            for (size_t c = 0; c < cols; c++) o[c] -= w[c];
            break;
        }
    }
    return LB_OK;
}

static lb_status run_pass(pass_job *j, size_t rows, int threads)
{
    return lb__parallel_for(rows, 1, lb__threads_for(threads, rows * j->cols * sizeof(float)), pass_rows, j);
}

/* ---- the scale search ---- */

/* s = max(x_mean^a, 1e-4), then s /= sqrt(max(s) * min(s)) (AutoAWQ's
 * normalisation: the scales straddle 1, so neither the weights nor the
 * folded producer drift in magnitude). */
static void awq_scales(const float *x_mean, size_t cols, double a, float *s)
{
    double mx = 0, mn = INFINITY;
    for (size_t j = 0; j < cols; j++) {
        double v = pow((double)x_mean[j], a);
        if (!(v >= SCALE_FLOOR)) v = SCALE_FLOOR;
        s[j] = (float)v;
        mx = s[j] > mx ? s[j] : mx;
        mn = s[j] < mn ? s[j] : mn;
    }
    double norm = sqrt(mx * mn);
    for (size_t j = 0; j < cols; j++) s[j] = (float)(s[j] / norm);
}

lb_status lb__awq_search_scale(const float *w, const size_t *member_rows, size_t n_members, size_t cols,
                               const float *x, size_t n, const float *x_mean, int grid, lb__fakeq_fn q,
                               void *const *qctx, float *s, double *err, int *best, int threads)
{
    return lb__awq_search_scale_ex(w, member_rows, n_members, cols, x, n, x_mean, grid, q, qctx, NULL, s, err, best,
                                   threads);
}

lb_status lb__awq_search_scale_ex(const float *w, const size_t *member_rows, size_t n_members, size_t cols,
                                  const float *x, size_t n, const float *x_mean, int grid, lb__fakeq_fn q,
                                  void *const *qctx, lb__fakeq_scale_fn on_scale, float *s, double *err, int *best,
                                  int threads)
{
    if (!w || !member_rows || !x || !x_mean || !q || !qctx || !s || !best)
        return lb__fail(LB_ERR_ARG, "lb__awq_search_scale: NULL argument");
    if (n_members == 0 || cols == 0 || n == 0 || grid < 1)
        return lb__fail(LB_ERR_ARG, "lb__awq_search_scale: %zu members, %zu columns, %zu sample rows, grid %d",
                        n_members, cols, n, grid);
    size_t rows = 0;
    for (size_t k = 0; k < n_members; k++) rows += member_rows[k];
    if (rows == 0) return lb__fail(LB_ERR_ARG, "lb__awq_search_scale: the group has no rows");
    for (size_t j = 0; j < cols; j++)
        if (!(x_mean[j] >= 0) || isinf(x_mean[j]))
            return lb__fail(LB_ERR_ARG, "lb__awq_search_scale: mean |x| of channel %zu is %g", j, (double)x_mean[j]);

    err_op eo;
    lb_status st = err_op_init(&eo, x, n, cols, 0, cols, threads);
    if (st != LB_OK) return st;
    size_t err_rows = rows < ERR_ROWS ? rows : ERR_ROWS;
    float *wq = malloc(rows * cols * sizeof *wq), *y = malloc(err_rows * (n > cols ? n : cols) * sizeof *y);
    double *row_err = malloc(rows * sizeof *row_err);
    if (!wq || !y || !row_err) {
        st = lb__fail(LB_ERR_NOMEM, "AWQ scale search: out of memory for a %zu x %zu group", rows, cols);
        goto done;
    }
    double best_err = INFINITY;
    int best_k = 0;
    for (int k = 0; k < grid && st == LB_OK; k++) {
        awq_scales(x_mean, cols, (double)k / grid, s);
        pass_job scale = {.kind = PASS_SCALE, .w = w, .out = wq, .cols = cols, .s = s};
        st = run_pass(&scale, rows, threads);
        for (size_t m = 0, r0 = 0; m < n_members && st == LB_OK; r0 += member_rows[m], m++)
            if (member_rows[m]) {
                if (on_scale) on_scale(qctx[m], s, cols);
                st = q(qctx[m], wq + r0 * cols, member_rows[m], cols);
            }
        if (st != LB_OK) break;
        pass_job unscale = {.kind = PASS_UNSCALE, .w = w, .out = wq, .cols = cols, .s = s};
        if ((st = run_pass(&unscale, rows, threads)) != LB_OK) break;
        if ((st = err_op_rows(&eo, wq, rows, y, row_err, threads)) != LB_OK) break;
        double total = 0;
        for (size_t r = 0; r < rows; r++) total += row_err[r];
        total /= (double)n * (double)rows;
        if (!isfinite(total)) {
            st = lb__fail(LB_ERR_NAN, "AWQ scale search: the output error at a = %g is %g", (double)k / grid, total);
            break;
        }
        if (err) err[k] = total;
        if (total < best_err) best_err = total, best_k = k;
    }
    if (st == LB_OK) {
        awq_scales(x_mean, cols, (double)best_k / grid, s);
        *best = best_k;
    }
done:
    free(wq);
    free(y);
    free(row_err);
    err_op_free(&eo);
    return st;
}

/* ---- the clipping search ---- */

lb_status lb__awq_search_clip(const float *w, size_t rows, size_t cols, size_t group, const float *x, size_t n,
                              int grid, float max_shrink, lb__fakeq_fn q, void *qctx, float *clip, int threads)
{
    if (!w || !x || !q || !clip) return lb__fail(LB_ERR_ARG, "lb__awq_search_clip: NULL argument");
    int shrinks = grid >= 1 && max_shrink > 0 && max_shrink <= 1 ? (int)((float)grid * max_shrink) : 0;
    if (rows == 0 || cols == 0 || n == 0 || group == 0 || shrinks < 1)
        return lb__fail(LB_ERR_ARG, "lb__awq_search_clip: %zu x %zu weight, group %zu, %zu sample rows, grid %d, "
                        "max shrink %g", rows, cols, group, n, grid, (double)max_shrink);
    if (group > cols) group = cols;
    size_t blocks = (cols + group - 1) / group;

    lb_status st = LB_OK;
    err_op *eo = calloc(blocks, sizeof *eo);
    float *amax = malloc(rows * blocks * sizeof *amax);
    float *cand = malloc(rows * blocks * sizeof *cand), *wc = malloc(rows * cols * sizeof *wc);
    float *dg = malloc(rows * group * sizeof *dg);
    size_t err_rows = rows < ERR_ROWS ? rows : ERR_ROWS;
    float *y = malloc(err_rows * (n > group ? n : group) * sizeof *y);
    double *row_err = malloc(rows * sizeof *row_err), *best = malloc(rows * blocks * sizeof *best);
    if (!eo || !amax || !cand || !wc || !dg || !y || !row_err || !best) {
        st = lb__fail(LB_ERR_NOMEM, "AWQ clip search: out of memory for a %zu x %zu weight", rows, cols);
        goto done;
    }
    /* each block's error operator, made once for every candidate */
    for (size_t b = 0; b < blocks && st == LB_OK; b++) {
        size_t c0 = b * group, gw = cols - c0 < group ? cols - c0 : group;
        st = err_op_init(&eo[b], x, n, cols, c0, gw, threads);
    }
    if (st != LB_OK) goto done;
    for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < blocks; b++) {
            size_t c0 = b * group, c1 = c0 + group < cols ? c0 + group : cols;
            float m = 0;
            for (size_t c = c0; c < c1; c++) m = fabsf(w[r * cols + c]) > m ? fabsf(w[r * cols + c]) : m;
            amax[r * blocks + b] = m;
            clip[r * blocks + b] = m;
            best[r * blocks + b] = INFINITY;
        }
    for (int k = 0; k < shrinks && st == LB_OK; k++) {
        double ratio = 1.0 - (double)k / grid;
        for (size_t i = 0; i < rows * blocks; i++) cand[i] = (float)(amax[i] * ratio);
        pass_job clamp = {.kind = PASS_CLAMP, .w = w, .out = wc, .cols = cols, .c = cand, .group = group,
                          .blocks = blocks};
        if ((st = run_pass(&clamp, rows, threads)) != LB_OK) break;
        if ((st = q(qctx, wc, rows, cols)) != LB_OK) break;
        pass_job diff = {.kind = PASS_DIFF, .w = w, .out = wc, .cols = cols};
        if ((st = run_pass(&diff, rows, threads)) != LB_OK) break;
        for (size_t b = 0; b < blocks && st == LB_OK; b++) {
            size_t c0 = b * group, gw = eo[b].gw;
            for (size_t r = 0; r < rows; r++) memcpy(dg + r * gw, wc + r * cols + c0, gw * sizeof *dg);
            if ((st = err_op_rows(&eo[b], dg, rows, y, row_err, threads)) != LB_OK) break;
            for (size_t r = 0; r < rows; r++) {
                double e = row_err[r];
                if (!isfinite(e)) {
                    st = lb__fail(LB_ERR_NAN, "AWQ clip search: row %zu, block %zu: the output error at shrink "
                                  "%g is %g", r, b, 1 - ratio, e);
                    break;
                }
                if (e < best[r * blocks + b]) best[r * blocks + b] = e, clip[r * blocks + b] = cand[r * blocks + b];
            }
        }
    }
done:
    for (size_t b = 0; eo && b < blocks; b++) err_op_free(&eo[b]);
    free(eo);
    free(amax);
    free(cand);
    free(wc);
    free(dg);
    free(y);
    free(row_err);
    free(best);
    return st;
}
