/* Decode-time row kernels: dot products of a few activation rows with
 * packed weight rows, one set per instruction set.
 *
 * The canonical order (every set follows it, so all give the same bits):
 *   - w_k is the fp32 value of element k (qmat.h: (v - zp) * mul).
 *   - Chunks of C elements: C = 32 for 4-bit elements, 16 otherwise. The
 *     row is padded to a whole chunk with element code 0 (never read from
 *     memory; scaled by the last block's scale and zero point) and x with
 *     +0: only the sign of a zero sum can depend on the padding.
 *   - 16 partial sums p[0..15] start at +0. For chunk c (base e = c*C):
 *       C = 16: p[l] = fma(x[e+l], w[e+l], p[l])                 l = 0..15
 *       C = 32: p[l] = fma(x[e+2l], w[e+2l], p[l]);
 *               p[l] = fma(x[e+2l+1], w[e+2l+1], p[l])            l = 0..15
 *     (fma: fused, one rounding: fmaf in the scalar reference).
 *   - The dot is lb__sum16f(p) (quant/qkernels.h).
 * The chunks are walked in increasing order; a kernel may keep several
 * rows and tokens in flight, never changing one pair's order. */
#ifndef LB_KERNEL_QDOT_H
#define LB_KERNEL_QDOT_H

#include <stddef.h>

#include "kernel/qmat.h"

#define LB__QDOT_MAX_NX 4 /* tokens per pass over the weights */

/* For rows r in [r0, r1) and tokens t < nx (1 <= nx <= LB__QDOT_MAX_NX):
 *   y[t * ldy + r] = dot(x + t * ldx, row r)
 * scratch: lb__qdot_scratch_bytes(m) bytes, 64-byte aligned, owned by the
 * calling thread. Cannot fail. */
typedef void (*lb__qdot_fn)(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1,
                            float *y, size_t ldy, void *scratch);

size_t lb__qdot_scratch_bytes(const lb__qmat *m);
/* LB_ERR_UNSUPPORTED unless the kernels decode m's element and scale
 * formats (lb__qmat_matmul checks before any kernel runs: an unknown kind
 * is refused, never decoded as another). */
lb_status lb__qdot_check(const lb__qmat *m);

void lb__qdot_scalar(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                     size_t ldy, void *scratch);
/* NULL where the build has no such set (then lb__qdot_get falls back). */
extern const lb__qdot_fn lb__qdot_avx2_fn, lb__qdot_avx512_fn, lb__qdot_neon_fn;

/* The kernel for an instruction set (the next one down where missing). */
lb__qdot_fn lb__qdot_get(lb_isa isa);

#endif
