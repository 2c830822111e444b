/* GPTQ (Frantar, Ashkboos, Hoefler, Alistarh, "GPTQ: Accurate Post-Training
 * Quantization for Generative Pre-trained Transformers", ICLR 2023,
 * Algorithm 1): each weight column is rounded in turn and its rounding
 * error is compensated in the columns not yet rounded, through the upper
 * Cholesky factor of the inverse Hessian of the layer's inputs, with lazy
 * batch updates. The rules where the paper is silent follow IST-DASLab/gptq
 * fasterquant and the numpy oracle tests/oracle/gptq_ref.py (its docstring
 * lists them; lb__gptq computes the same Q as gptq_ref.gptq with the
 * default group_params_from="current").
 *
 * This is the solver only: what a column rounds to is the caller's grid
 * (lb__gptq_grid), so one engine serves every format. */
#ifndef LB_ALGO_GPTQ_H
#define LB_ALGO_GPTQ_H

#include <stddef.h>

#include "lowbit.h"

/* Dampening retries after a failed Cholesky (each multiplies the relative
 * dampening by 10, from 0.01 when it was 0): 0.01 * 10^12 of the mean
 * diagonal swamps any finite H, so more could not help. The oracle's
 * MAX_DAMP_RETRIES. */
#define LB__GPTQ_MAX_DAMP_RETRIES 12

/* Columns per lazy batch when options.block is 0 (the paper's B). */
#define LB__GPTQ_DEFAULT_BLOCK 128

/* How one weight's columns are rounded. Groups are `group` consecutive
 * ORIGINAL columns (the last one partial); 0 or >= cols: the whole row.
 * The solver calls params() for a group before any of its columns is
 * rounded, then round() for each of its columns. */
typedef struct lb__gptq_grid {
    size_t group;
    /* Choose the parameters, for every row, of the group of the columns
     * c0 .. c0 + n - 1 from their values w[r * ld + t] (row r < rows,
     * column c0 + t, t < n). With static groups (or act-order) these are
     * the weights before any rounding; otherwise the current weights, the
     * error of every earlier column applied. */
    lb_status (*params)(void *ctx, const float *w, size_t ld, size_t rows, size_t c0, size_t n);
    /* Round the values col[r] (r < rows) of original column c onto its
     * group's grid: out[r] = the dequantized value. A pure function of
     * (the group's parameters, the value). */
    void (*round)(void *ctx, size_t c, const float *col, size_t rows, float *out);
    void *ctx;
} lb__gptq_grid;

typedef struct lb__gptq_options {
    double damp;       /* dampening, a fraction of mean(diag H); the paper's 0.01 */
    size_t block;      /* columns per lazy batch; 0: LB__GPTQ_DEFAULT_BLOCK */
    int actorder;      /* 1: columns in decreasing diag(H) (needs static groups if groups < a row) */
    int static_groups; /* 1: every group's parameters from W before any rounding */
    int threads;       /* 0: one per CPU */
} lb__gptq_options;

typedef struct lb__gptq_report {
    double damp_rel;      /* the relative dampening finally used */
    double damp_used;     /* lambda added to diag(H) */
    int damp_retries;     /* times the dampening was raised (0: as asked) */
    size_t dead_columns;  /* columns with H[i,i] == 0 (set to 0 in W) */
    double err_proxy;     /* sum over columns of |w - q|^2 / (2 U[j,j]^2): the oracle's "loss" */
} lb__gptq_report;

/* GPTQ of w (rows x cols, row-major, in place: on return the dequantized
 * quantized values, in the original column order) against h (cols x cols,
 * symmetric up to rounding: (H + H^T) / 2 is used; sum or mean of x x^T,
 * the scale does not matter beyond the dampening's base).
 * Arithmetic: H, its factor and its inverse factor U in fp64; the weight
 * updates in fp32 (U rounded to fp32, products accumulated in fp32, as
 * the reference code's torch.float32 does).
 * LB_ERR_ARG: bad arguments, act-order with dynamic groups smaller than a
 * row; LB_ERR_NAN: a non-finite value in w or h; LB_ERR_NOMEM; or what
 * params() returns. rep may be NULL. w is left unchanged on an error
 * found before the first rounding, partially updated after it. */
lb_status lb__gptq(float *w, size_t rows, size_t cols, const double *h, const lb__gptq_options *o,
                   const lb__gptq_grid *g, lb__gptq_report *rep);

/* For the tests only (tests/algo/test_gptq_core.py, tests/unit/test_gptq.c):
 * the oracle's IntSym(bits, group) grid (d = amax / (2^(b-1) - 1) per row
 * and group, q = clip(rne(w / d), -2^(b-1), 2^(b-1) - 1) d, in fp64)
 * driving lb__gptq, or plain rounding (RTN, params from w) when h is NULL.
 * report: NULL or 5 doubles (damp_rel, damp_used, damp_retries,
 * dead_columns, err_proxy). */
lb_status lb__gptq_int_sym_test(float *w, size_t rows, size_t cols, const double *h, int bits, size_t group,
                                size_t block, double damp, int actorder, int static_groups, int threads,
                                double *report);

#endif
