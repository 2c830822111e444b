/* GPTQ's solver (gptq.h): preparation of H, the dampened inverse Cholesky
 * factor, then the columns in lazy batches. */
#include "algo/gptq.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "algo/gptq_linalg.h"
#include "util/error.h"

/* ===== H: symmetrised, dead columns, order ===== */

/* hw = (h + h^T) / 2; a column whose diagonal is 0 is dead: its diagonal
 * becomes 1 (so H stays invertible) and its weights 0 (later). */
static size_t prepare_h(const double *h, size_t n, double *hw, unsigned char *dead)
{
    size_t ndead = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) hw[i * n + j] = (h[i * n + j] + h[j * n + i]) / 2.0;
    for (size_t i = 0; i < n; i++) {
        dead[i] = hw[i * n + i] == 0.0;
        if (dead[i]) hw[i * n + i] = 1.0, ndead++;
    }
    return ndead;
}

typedef struct diag_key {
    double d;
    size_t i;
} diag_key;

/* decreasing diagonal, ties by increasing index: a stable order from qsort */
static int by_diag(const void *pa, const void *pb)
{
    const diag_key *a = pa, *b = pb;
    if (a->d != b->d) return a->d > b->d ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

/* perm[j] = the original column processed j-th. */
static lb_status column_order(const double *hw, size_t n, int actorder, size_t *perm)
{
    for (size_t i = 0; i < n; i++) perm[i] = i;
    if (!actorder) return LB_OK;
    diag_key *k = malloc(n * sizeof *k);
    if (!k) return lb__fail(LB_ERR_NOMEM, "GPTQ: cannot allocate the act-order of %zu columns", n);
    for (size_t i = 0; i < n; i++) k[i] = (diag_key){hw[i * n + i], i};
    qsort(k, n, sizeof *k, by_diag);
    for (size_t i = 0; i < n; i++) perm[i] = k[i].i;
    free(k);
    return LB_OK;
}

/* ===== the dampened inverse factor ===== */

/* The dampening's base: mean(diag H), or max|H| when that is not > 0
 * (1 when H is all zero). */
static double damp_base(const double *hw, size_t n)
{
    double s = 0.0, amax = 0.0;
    for (size_t i = 0; i < n; i++) s += hw[i * n + i];
    if (s / (double)n > 0.0) return s / (double)n;
    for (size_t i = 0; i < n * n; i++) amax = fabs(hw[i]) > amax ? fabs(hw[i]) : amax;
    return amax > 0.0 ? amax : 1.0;
}

/* U, the upper Cholesky factor of (P H P^T + lambda I)^-1 (P: the column
 * order), without a second factorisation: with J the reversal, if
 * J A J = L L^T then A^-1 = (J L^-T J)(J L^-1 J) and J L^-1 J is upper
 * with a positive diagonal, so by uniqueness it is U. One Cholesky and one
 * triangular inverse (2/3 n^3 flops) instead of fasterquant's Cholesky,
 * inverse, product and Cholesky (about 4/3 n^3); same U to rounding.
 * fac (n x n) is the factor's room; the inverse lands in hw, which is then
 * spent. *ok = 0 when A + lambda I is not positive definite. */
static lb_status inverse_factor(double *hw, double *fac, size_t n, const size_t *perm, double lambda, int threads,
                                float *u, int *ok)
{
    for (size_t i = 0; i < n; i++) {
        const double *hr = hw + perm[n - 1 - i] * n;
        for (size_t j = 0; j <= i; j++) fac[i * n + j] = hr[perm[n - 1 - j]];
        fac[i * n + i] += lambda;
    }
    lb_status st = lb__gptq_chol(fac, n, threads, lb_isa_active(), ok);
    if (st != LB_OK || !*ok) return st;
    /* the inverse needs H no more: it is written over hw (which is kept
     * until here for a retry) */
    double *x = hw;
    st = lb__gptq_trinv(fac, n, x, threads, lb_isa_active());
    if (st != LB_OK) return st;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            double v = j >= i ? x[(n - 1 - i) * n + (n - 1 - j)] : 0.0;
            if (!isfinite(v) || (i == j && !(v > 0.0)) || !isfinite((float)v)) *ok = 0;
            u[i * n + j] = (float)v;
        }
    return LB_OK;
}

/* Raises the dampening until the factor exists (the oracle's rule). */
static lb_status dampened_factor(double *hw, size_t n, const size_t *perm, double damp, int threads, float *u,
                                 lb__gptq_report *rep)
{
    double *fac = malloc(n * n * sizeof *fac);
    if (!fac) return lb__fail(LB_ERR_NOMEM, "GPTQ: cannot allocate a %zu x %zu factor", n, n);
    double base = damp_base(hw, n), p = damp;
    lb_status st = LB_OK;
    int ok = 0, tries = 0;
    for (; tries <= LB__GPTQ_MAX_DAMP_RETRIES; tries++) {
        st = inverse_factor(hw, fac, n, perm, p * base, threads, u, &ok);
        if (st != LB_OK || ok) break;
        p = p > 0.0 ? 10.0 * p : 0.01;
    }
    free(fac);
    if (st != LB_OK) return st;
    if (!ok)
        return lb__fail(LB_ERR_ARG, "GPTQ: H + lambda I is not positive definite even after %d raises of the "
                        "dampening (lambda = %g)", LB__GPTQ_MAX_DAMP_RETRIES, p / 10.0 * base);
    rep->damp_rel = p, rep->damp_used = p * base, rep->damp_retries = tries;
    return LB_OK;
}

/* ===== the columns ===== */

/* Reorders each row of w (rows x n) by perm: to processing order
 * (inverse 0: w'[j] = w[perm[j]]) or back (inverse 1). */
static void permute_columns(float *w, size_t rows, size_t n, const size_t *perm, int inverse, float *tmp)
{
    for (size_t r = 0; r < rows; r++) {
        float *wr = w + r * n;
        for (size_t j = 0; j < n; j++) {
            if (inverse) tmp[perm[j]] = wr[j];
            else tmp[j] = wr[perm[j]];
        }
        memcpy(wr, tmp, n * sizeof *wr);
    }
}

/* What the column loop works with. */
typedef struct solver {
    float *w;            /* rows x cols, processing order */
    size_t rows, cols, group, block;
    const float *u;      /* cols x cols, upper inverse factor, fp32 */
    const size_t *perm;
    const lb__gptq_grid *g;
    int dynamic, threads;
    float *wb;           /* block x rows: the block's columns, each contiguous */
    float *e;            /* rows x block: the block's scaled errors */
    float *q;            /* rows: one rounded column */
    float *gbuf;         /* rows x group: a group's current values */
    double loss;
} solver;

static lb_status alloc_solver(solver *s)
{
    s->wb = malloc(s->block * s->rows * sizeof *s->wb);
    s->e = malloc(s->rows * s->block * sizeof *s->e);
    s->q = malloc(s->rows * sizeof *s->q);
    s->gbuf = s->dynamic ? malloc(s->rows * s->group * sizeof *s->gbuf) : NULL;
    if (s->wb && s->e && s->q && (s->gbuf || !s->dynamic)) return LB_OK;
    return lb__fail(LB_ERR_NOMEM, "GPTQ: cannot allocate the work space of a %zu x %zu block", s->rows, s->block);
}

static void free_solver(solver *s) { free(s->wb), free(s->e), free(s->q), free(s->gbuf); }

/* A dynamic group starting at column j = i1 + i: its parameters from its
 * current values. At a block start these are W's; inside a block, its
 * columns in the block are in wb and those past the block end i2 still
 * lack this block's pending errors E[:, :i] U[i1:i1+i, i2:e], added here
 * (the oracle's "current" rule). */
static lb_status group_params(solver *s, size_t i1, size_t i2, size_t i)
{
    size_t j = i1 + i, e = j + s->group < s->cols ? j + s->group : s->cols, n = e - j;
    if (i == 0) return s->g->params(s->g->ctx, s->w + j, s->cols, s->rows, j, n);
    size_t inb = (e < i2 ? e : i2) - j;
    for (size_t r = 0; r < s->rows; r++) {
        float *gr = s->gbuf + r * n;
        for (size_t t = 0; t < inb; t++) gr[t] = s->wb[(i + t) * s->rows + r];
        for (size_t t = inb; t < n; t++) {
            float acc = 0.0f;
            for (size_t k = 0; k < i; k++) acc += s->e[r * s->block + k] * s->u[(i1 + k) * s->cols + j + t];
            gr[t] = s->w[r * s->cols + j + t] - acc;
        }
    }
    return s->g->params(s->g->ctx, s->gbuf, n, s->rows, j, n);
}

/* y -= a x: the in-block update of one later column */
static void axpy_neg(float *restrict y, const float *restrict x, float a, size_t n)
{
    for (size_t r = 0; r < n; r++) y[r] -= x[r] * a;
}

/* Column j = i1 + i: round it, record its scaled error, and pass the error
 * on to the block's later columns (Algorithm 1's inner loop). */
static void round_column(solver *s, size_t i1, size_t i2, size_t i)
{
    size_t j = i1 + i, rows = s->rows;
    float *col = s->wb + i * rows, *err = s->q; /* q is turned into the error in place */
    const float *urow = s->u + j * s->cols;
    s->g->round(s->g->ctx, s->perm[j], col, rows, s->q);
    float d = urow[j];
    double loss = 0.0;
    for (size_t r = 0; r < rows; r++) {
        float q = s->q[r], ev = (col[r] - q) / d;
        col[r] = q;
        err[r] = ev;
        s->e[r * s->block + i] = ev;
        loss += (double)ev * ev;
    }
    s->loss += loss / 2.0;
    for (size_t k = i + 1; k < i2 - i1; k++) axpy_neg(s->wb + k * rows, err, urow[i1 + k], rows);
}

/* One lazy batch: columns i1 .. i2-1 rounded in wb, written back as Q,
 * then their errors applied to every later column at once:
 * W[:, i2:] -= E U[i1:i2, i2:] (the hot spot, lb__gptq_gemm_f32). */
static lb_status run_block(solver *s, size_t i1, size_t i2)
{
    size_t nb = i2 - i1, rows = s->rows, cols = s->cols;
    for (size_t r = 0; r < rows; r++)
        for (size_t t = 0; t < nb; t++) s->wb[t * rows + r] = s->w[r * cols + i1 + t];
    for (size_t i = 0; i < nb; i++) {
        if (s->dynamic && (i1 + i) % s->group == 0) {
            lb_status st = group_params(s, i1, i2, i);
            if (st != LB_OK) return st;
        }
        round_column(s, i1, i2, i);
    }
    for (size_t r = 0; r < rows; r++)
        for (size_t t = 0; t < nb; t++) s->w[r * cols + i1 + t] = s->wb[t * rows + r];
    return lb__gptq_gemm_f32(rows, cols - i2, nb, s->e, s->block, s->u + i1 * cols + i2, cols, s->w + i2, cols,
                             s->threads, lb_isa_active());
}

static lb_status run_columns(solver *s)
{
    lb_status st = alloc_solver(s);
    for (size_t i1 = 0; i1 < s->cols && st == LB_OK; i1 += s->block)
        st = run_block(s, i1, i1 + s->block < s->cols ? i1 + s->block : s->cols);
    free_solver(s);
    return st;
}

/* ===== the whole ===== */

static lb_status check_args(const float *w, size_t rows, size_t cols, const double *h, const lb__gptq_options *o,
                            const lb__gptq_grid *g)
{
    if (!w || !h || !o || !g || !g->params || !g->round) return lb__fail(LB_ERR_ARG, "lb__gptq: NULL argument");
    if (rows == 0 || cols == 0) return lb__fail(LB_ERR_ARG, "GPTQ: empty weight (%zu x %zu)", rows, cols);
    if (cols > SIZE_MAX / sizeof(double) / cols || rows > SIZE_MAX / sizeof(float) / cols)
        return lb__fail(LB_ERR_ARG, "GPTQ: a %zu x %zu weight is too large", rows, cols);
    if (!(o->damp >= 0.0) || !isfinite(o->damp))
        return lb__fail(LB_ERR_ARG, "GPTQ: dampening %g is not a finite number >= 0", o->damp);
    size_t group = g->group == 0 || g->group >= cols ? cols : g->group;
    if (o->actorder && !o->static_groups && group < cols)
        return lb__fail(LB_ERR_ARG, "GPTQ: act-order with groups of %zu columns (of %zu) needs static groups",
                        group, cols);
    for (size_t i = 0; i < rows * cols; i++)
        if (!isfinite(w[i])) return lb__fail(LB_ERR_NAN, "GPTQ: W[%zu,%zu] is not finite", i / cols, i % cols);
    for (size_t i = 0; i < cols * cols; i++)
        if (!isfinite(h[i])) return lb__fail(LB_ERR_NAN, "GPTQ: H[%zu,%zu] is not finite", i / cols, i % cols);
    return LB_OK;
}

/* Zeroes the dead columns; with static groups (act-order included), every
 * group's parameters from this W, in the original order. */
static lb_status prepare_w(float *w, size_t rows, size_t cols, const unsigned char *dead, const lb__gptq_grid *g,
                           size_t group, int is_static)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            if (dead[c]) w[r * cols + c] = 0.0f;
    lb_status st = LB_OK;
    for (size_t a = 0; is_static && a < cols && st == LB_OK; a += group)
        st = g->params(g->ctx, w + a, cols, rows, a, a + group < cols ? group : cols - a);
    return st;
}

lb_status lb__gptq(float *w, size_t rows, size_t cols, const double *h, const lb__gptq_options *o,
                   const lb__gptq_grid *g, lb__gptq_report *rep)
{
    lb_status st = check_args(w, rows, cols, h, o, g);
    if (st != LB_OK) return st;
    lb__gptq_report r = {0};
    size_t group = g->group == 0 || g->group >= cols ? cols : g->group;
    int is_static = o->static_groups || o->actorder;
    double *hw = malloc(cols * cols * sizeof *hw);
    float *u = malloc(cols * cols * sizeof *u), *tmp = malloc(cols * sizeof *tmp);
    size_t *perm = malloc(cols * sizeof *perm);
    unsigned char *dead = malloc(cols);
    if (!hw || !u || !tmp || !perm || !dead) {
        st = lb__fail(LB_ERR_NOMEM, "GPTQ: cannot allocate the work space of a %zu x %zu Hessian", cols, cols);
        goto done;
    }
    r.dead_columns = prepare_h(h, cols, hw, dead);
    st = column_order(hw, cols, o->actorder, perm);
    if (st == LB_OK) st = dampened_factor(hw, cols, perm, o->damp, o->threads, u, &r);
    free(hw), hw = NULL;
    if (st == LB_OK) st = prepare_w(w, rows, cols, dead, g, group, is_static);
    if (st != LB_OK) goto done;
    if (o->actorder) permute_columns(w, rows, cols, perm, 0, tmp);
    size_t block = o->block ? o->block : LB__GPTQ_DEFAULT_BLOCK;
    solver s = {.w = w, .rows = rows, .cols = cols, .group = group, .u = u, .perm = perm, .g = g,
                .dynamic = !is_static, .threads = o->threads, .block = block < cols ? block : cols};
    st = run_columns(&s);
    if (o->actorder) permute_columns(w, rows, cols, perm, 1, tmp);
    r.err_proxy = s.loss;
done:
    free(hw), free(u), free(tmp), free(perm), free(dead);
    if (st == LB_OK && rep) *rep = r;
    return st;
}
