/* AWQ's two searches (awq.h): the scale exponent of a group and the
 * clipping range of every block of a weight, each kept by the output error
 * on sample rows of the input, measured through the weight's own quantizer.
 *
 * The error products run on the runner's fp32 matmul kernels with the
 * sample packed once as the "weight": Y = D . X^T, so a row of Y is one
 * weight row's error on every sample row, and the sum of its squares is
 * that row's error. The kernels split over threads by sample rows; every
 * sum is then taken in a fixed order (one row of Y at a time, in double),
 * so the results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algo/awq.h"
#include "kernel/matmul.h"
#include "util/error.h"
#include "util/parallel.h"

/* Weight rows whose errors are computed at once: Y holds ERR_ROWS x n
 * floats (4 MiB at n = 4096 sample rows). */
#define ERR_ROWS 256
/* AutoAWQ's floor on a scale (x_mean^a of a channel that never fires) */
#define SCALE_FLOOR 1e-4

/* ---- the output error of weight rows ---- */

typedef struct sq_job {
    const float *y; /* rows x n */
    size_t n;
    double *out;    /* per row */
} sq_job;

static lb_status sq_rows(void *ctx, size_t begin, size_t end)
{
    const sq_job *j = ctx;
    for (size_t r = begin; r < end; r++) {
        const float *y = j->y + r * j->n;
        double acc = 0;
        for (size_t t = 0; t < j->n; t++) acc += (double)y[t] * y[t];
        j->out[r] = acc;
    }
    return LB_OK;
}

/* out[o] = sum over the packed sample rows x of (x . d_o)^2, for the rows
 * rows of d (xp->in floats each); y: ERR_ROWS x xp->out floats of scratch. */
static lb_status row_errors(const float *d, size_t rows, const lb__packed *xp, float *y, double *out, int threads)
{
    for (size_t r0 = 0; r0 < rows; r0 += ERR_ROWS) {
        size_t m = rows - r0 < ERR_ROWS ? rows - r0 : ERR_ROWS;
        lb_status st = lb__matmul(d + r0 * xp->in, m, xp, y, threads);
        if (st != LB_OK) return st;
        sq_job j = {y, xp->out, out + r0};
        st = lb__parallel_for(m, 1, lb__threads_for(threads, m * xp->out * sizeof *y), sq_rows, &j);
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
            for (size_t c = 0; c < cols; c++) {
                float m = j->c[r * j->blocks + c / j->group];
                o[c] = w[c] > m ? m : w[c] < -m ? -m : w[c];
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

static lb_status pack_sample(const float *x, size_t n, size_t cols, lb__packed *xp, const char *what)
{
    lb_status st = lb__pack_weight(x, n, cols, xp);
    return st == LB_OK ? st : lb__fail(st, "%s: packing %zu x %zu sample rows: %s", what, n, cols, lb_last_error());
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

    lb__packed xp;
    lb_status st = pack_sample(x, n, cols, &xp, "AWQ scale search");
    if (st != LB_OK) return st;
    size_t err_rows = rows < ERR_ROWS ? rows : ERR_ROWS;
    float *wq = malloc(rows * cols * sizeof *wq), *y = malloc(err_rows * n * sizeof *y);
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
        if ((st = row_errors(wq, rows, &xp, y, row_err, threads)) != LB_OK) break;
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
    lb__packed_free(&xp);
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
    lb__packed *xp = calloc(blocks, sizeof *xp);
    float *xg = malloc(n * group * sizeof *xg), *amax = malloc(rows * blocks * sizeof *amax);
    float *cand = malloc(rows * blocks * sizeof *cand), *wc = malloc(rows * cols * sizeof *wc);
    float *dg = malloc(rows * group * sizeof *dg);
    size_t err_rows = rows < ERR_ROWS ? rows : ERR_ROWS;
    float *y = malloc(err_rows * n * sizeof *y);
    double *row_err = malloc(rows * sizeof *row_err), *best = malloc(rows * blocks * sizeof *best);
    if (!xp || !xg || !amax || !cand || !wc || !dg || !y || !row_err || !best) {
        st = lb__fail(LB_ERR_NOMEM, "AWQ clip search: out of memory for a %zu x %zu weight", rows, cols);
        goto done;
    }
    /* each block's columns of the sample, packed once for every candidate */
    for (size_t b = 0; b < blocks && st == LB_OK; b++) {
        size_t c0 = b * group, gw = cols - c0 < group ? cols - c0 : group;
        for (size_t t = 0; t < n; t++) memcpy(xg + t * gw, x + t * cols + c0, gw * sizeof *xg);
        st = pack_sample(xg, n, gw, &xp[b], "AWQ clip search");
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
            size_t c0 = b * group, gw = xp[b].in;
            for (size_t r = 0; r < rows; r++) memcpy(dg + r * gw, wc + r * cols + c0, gw * sizeof *dg);
            if ((st = row_errors(dg, rows, &xp[b], y, row_err, threads)) != LB_OK) break;
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
    for (size_t b = 0; xp && b < blocks; b++) lb__packed_free(&xp[b]);
    free(xp);
    free(xg);
    free(amax);
    free(cand);
    free(wc);
    free(dg);
    free(y);
    free(row_err);
    free(best);
    return st;
}
