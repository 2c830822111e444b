/* Decode-time row kernels for ggml-typed matrices (lb__qmat_from_ggml):
 * dot products of a few activation rows with rows of ggml blocks, read in
 * the file's bytes.
 *
 * The canonical order (every instruction set follows it, so all give the
 * same bits):
 *   - w_k is the fp32 value lb_dtype_to_f32 gives element k of the row
 *     (the dtype's dequantizer, op for op).
 *   - C = 16 for every ggml type: element k goes to partial sum k % 16, in
 *     increasing k. The row is padded to a multiple of 16 with w = +0 and
 *     x = +0 (only for block-1 types such as f16, whose rows may end
 *     mid-chunk; every block type has a block that is a multiple of 16):
 *       p[l] = fma(x[e+l], w[e+l], p[l])     for chunk base e, l = 0..15
 *     with p[0..15] starting at +0 (fma: fused, one rounding).
 *   - The dot is lb__sum16f(p) (quant/qkernels.h).
 * This is qdot.h's order for C = 16; unlike qdot.h's 4-bit elements no
 * even/odd interleave is needed, since a ggml block is decoded whole into
 * a buffer of values before any product (the nibble order of the block
 * types differs from type to type).
 *
 * A kernel walks the row in segments of whole blocks (gdot_segment),
 * decodes each into fp32 scratch and runs the nx tokens' products over it;
 * the reference decodes with lb_dtype_to_f32, the vector kernels with their
 * own block decoders where they have one (bit-identical: the same fp32
 * operations in the same order) and lb_dtype_to_f32 otherwise. */
#ifndef LB_KERNEL_GDOT_H
#define LB_KERNEL_GDOT_H

#include <stddef.h>

#include "kernel/qdot.h"

/* Elements decoded at a time (whole blocks; at least one block). */
#define LB__GDOT_SEGMENT 256

/* Scratch for the kernels (64-byte aligned, one per thread). */
size_t lb__gdot_scratch_bytes(const lb__qmat *m);
/* Blocks in one segment of m's rows. */
size_t lb__gdot_segment_blocks(const lb__qmat *m);

/* lb__qdot_fn's contract, for a matrix with ggml_block > 0. */
void lb__gdot_scalar(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                     size_t ldy, void *scratch);
/* NULL where the build has no such set (lb__gdot_get falls back). */
extern const lb__qdot_fn lb__gdot_avx2_fn, lb__gdot_avx512_fn, lb__gdot_neon_fn;

/* The kernel for an instruction set (the next one down where missing). */
lb__qdot_fn lb__gdot_get(lb_isa isa);

#endif
