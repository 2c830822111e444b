/* W8A8: 8-bit weights times activations quantized to 8 bits on the fly.
 *
 * int8 (LB_FMT_INT8): weights int8, symmetric, channel or tensor scale.
 *   Each activation row (token) t gets scale s_t = absmax(x_t) / 127 (fp32
 *   division; a row of zeros gets s_t = 1), or a static scale s given by
 *   the caller (from calibration); q = round-half-even(x / s) clamped to
 *   [-127, 127]. The dot sum_k q_x[k] * q_w[k] is exact in integers (int32
 *   per run of at most 2^16 columns, int64 across runs), converted once
 *   to fp32 (exact below 2^24 in magnitude, rounded to nearest above), and
 *   y = float(dot) * (s_t * s_w) with s_w the weight row's decoded scale
 *   (times scale_mul), products in fp32 in that order.
 * fp8 (LB_FMT_FP8_E4M3): weights fp8_e4m3, channel or tensor scale.
 *   s_t = absmax(x_t) / 448 (or static); q = x / s encoded to e4m3
 *   (nearest-even, saturating). Every product of two e4m3 values is exact
 *   in fp32; the products are summed in fp32 in the canonical order of
 *   qdot.h (16 fused partial sums, lb__sum16f), then y = dot * (s_t * s_w).
 *
 * A token with a NaN activation gets NaN outputs (quantization alone
 * would clamp it to a code).
 *
 * Integer sums make int8 results independent of kernel, blocking and
 * thread count; fp8 results are the same for every set too (one order).
 * A decode step and a prefill give a token the same bits. */
#ifndef LB_KERNEL_W8A8_H
#define LB_KERNEL_W8A8_H

#include <stddef.h>
#include <stdint.h>

#include "kernel/qmat.h"

typedef struct lb__w8a8 {
    const lb__qmat *m;     /* the weights (borrowed) */
    lb_format act;         /* LB_FMT_INT8 or LB_FMT_FP8_E4M3 */
    float *row_scale;      /* rows: s_w per row */
    int32_t *row_sum;      /* int8: sum of each row's codes (kernels that bias activations to unsigned) */
    void *aux;             /* kernel-private derived data, freed by lb__w8a8_free */
} lb__w8a8;

/* LB_ERR_UNSUPPORTED (naming what is needed) unless the weights fit the
 * activation format: int8 symmetric or fp8_e4m3, channel or tensor scale. */
lb_status lb__w8a8_init(const lb__qmat *m, lb_format act, lb__w8a8 *out);
void lb__w8a8_free(lb__w8a8 *w);

/* Y[n][rows] = W8A8 product of X[n][cols]; static_scale > 0 uses that
 * activation scale for every token, else each token's own. Threads split
 * the rows (or tokens); any count gives the same bits. LB_ERR_NOMEM only. */
lb_status lb__w8a8_matmul(const lb__w8a8 *w, const float *x, size_t n, float static_scale, float *y, int threads);
lb_status lb__w8a8_matmul_isa(const lb__w8a8 *w, const float *x, size_t n, float static_scale, float *y,
                              int threads, lb_isa isa);

#endif
