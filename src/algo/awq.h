/* AWQ (Lin et al., "AWQ: Activation-aware Weight Quantization for
 * On-Device LLM Compression and Acceleration", MLSys 2024): per group of
 * linear layers sharing one input, the input channels are scaled by
 * s = mean|x|^a with a searched on a grid (the weights' columns times s,
 * the 1/s folded into what produces the input), then each weight's range
 * is clipped by a second search; both searches keep what minimises the
 * output error on calibration activations, measured through the weight's
 * own quantizer (any weight-only spec, NVFP4 and MXFP4 included, or a GGUF
 * type). */
#ifndef LB_ALGO_AWQ_H
#define LB_ALGO_AWQ_H

#include <stddef.h>

#include "algo/calib_pass.h"

/* Fake-quantizes w (rows x cols, in place) as one weight would be
 * quantized (quantize, then dequantize). */
typedef lb_status (*lb__fakeq_fn)(void *ctx, float *w, size_t rows, size_t cols);

typedef struct lb__awq_options {
    int grid;        /* scale search grid points (the paper: 20) */
    int clip;        /* 1: the clipping search too */
    int threads;
} lb__awq_options;

/* The scale search on one group. w: the group's weights stacked (rows x
 * cols), quantized by q per member (member_rows[k] rows each, n_members;
 * the members may have different quantizers: q is called once per member
 * with qctx[k]); x: n sample rows of the input (n x cols); x_mean: mean
 * |x_j| over all calibration tokens. For k = 0 .. grid-1, a = k / grid:
 *   s = max(x_mean^a, 1e-4), then s /= sqrt(max(s) * min(s));
 *   err(a) = sum over rows of X and rows of W of
 *            (x . (Q(W diag(s)) diag(1/s) - W))^2 / (n * rows)
 * Writes the best s (cols), every err (grid doubles, may be NULL) and the
 * best k (*best; the first of equal errors). */
lb_status lb__awq_search_scale(const float *w, const size_t *member_rows, size_t n_members, size_t cols,
                               const float *x, size_t n, const float *x_mean, int grid, lb__fakeq_fn q,
                               void *const *qctx, float *s, double *err, int *best, int threads);

/* Told each grid point's s (cols values) before the members are quantized
 * at it: a quantizer that weighs its error by the input's importance (a
 * ggml importance vector, E[x_j^2]) sees the scaled weight's own,
 * E[x_j^2] / s_j^2, as the input of W diag(s) is X diag(1/s). */
typedef void (*lb__fakeq_scale_fn)(void *ctx, const float *s, size_t cols);

/* lb__awq_search_scale with on_scale(qctx[k], s, cols) called for every
 * member before it is quantized at each grid point (NULL: never). */
lb_status lb__awq_search_scale_ex(const float *w, const size_t *member_rows, size_t n_members, size_t cols,
                                  const float *x, size_t n, const float *x_mean, int grid, lb__fakeq_fn q,
                                  void *const *qctx, lb__fakeq_scale_fn on_scale, float *s, double *err, int *best,
                                  int threads);

/* The clipping search on one weight (rows x cols) whose quantizer q works
 * on independent groups of `group` consecutive columns: for each row and
 * group, m = max |w| over the group; candidates m * (1 - k / grid) for k =
 * 0 .. (int)(grid * max_shrink) - 1; with every group clamped to its k-th
 * candidate the whole weight is fake-quantized and
 *   err[row][group] = mean over the n rows of X of (x_g . (Q(w)_g - w_g))^2
 * (w the unclamped weight, x_g, w_g the group's columns); clip[row][group]
 * = the best candidate (the first of equal errors). */
lb_status lb__awq_search_clip(const float *w, size_t rows, size_t cols, size_t group, const float *x, size_t n,
                              int grid, float max_shrink, lb__fakeq_fn q, void *qctx, float *clip, int threads);

/* A calibration pass layer callback (SOURCE mode): AWQ on the layer's
 * groups in q, scales folded and clipped weights replaced (see awq.c).
 * ctx: an lb__awq_options. */
lb_status lb__awq_layer(void *ctx, lb_qmodel *q, const lb__layer_stats *s);

#endif
