/* The reference decode kernel for ggml-typed matrices (gdot.h's canonical
 * order, literally), the scratch they share, and the choice of kernel. */
#include "kernel/gdot.h"

#include <math.h>
#include <string.h>

#include "quant/qkernels.h"

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t lb__gdot_segment_blocks(const lb__qmat *m)
{
    size_t b = m->ggml_block ? m->ggml_block : 1;
    return b >= LB__GDOT_SEGMENT ? 1 : LB__GDOT_SEGMENT / b;
}

/* One segment of values, padded to a whole chunk of 16, then the same for
 * the staged tail of x (the vector kernels' last partial chunk). */
size_t lb__gdot_scratch_bytes(const lb__qmat *m)
{
    size_t seg = lb__gdot_segment_blocks(m) * (m->ggml_block ? m->ggml_block : 1);
    return align64((seg + 16) * sizeof(float)) + align64(LB__QDOT_MAX_NX * 16 * sizeof(float));
}

void lb__gdot_scalar(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                     size_t ldy, void *scratch)
{
    float *w = scratch;
    size_t sb = lb__gdot_segment_blocks(m), seg = sb * m->ggml_block;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *row = m->data + r * m->row_bytes;
        float s[LB__QDOT_MAX_NX][16];
        memset(s, 0, sizeof s);
        for (size_t k0 = 0; k0 < m->cols; k0 += seg) {
            size_t n = m->cols - k0 < seg ? m->cols - k0 : seg, padded = (n + 15) / 16 * 16;
            /* whole blocks of a readable dtype: cannot fail */
            lb_dtype_to_f32(m->ggml, row + k0 / m->ggml_block * m->ggml_block_bytes, n, w);
            for (size_t k = n; k < padded; k++) w[k] = 0.0f;
            for (size_t t = 0; t < nx; t++) {
                const float *xt = x + t * ldx + k0;
                for (size_t k = 0; k < padded; k++) s[t][k % 16] = fmaf(k < n ? xt[k] : 0.0f, w[k], s[t][k % 16]);
            }
        }
        for (size_t t = 0; t < nx; t++) y[t * ldy + r] = lb__sum16f(s[t]);
    }
}

lb__qdot_fn lb__gdot_get(lb_isa isa)
{
    /* by name, not by >=: NEON (3) is no x86 level above AVX-512 (2) */
    if (isa == LB_ISA_NEON) return lb__gdot_neon_fn ? lb__gdot_neon_fn : lb__gdot_scalar;
    if (isa == LB_ISA_AVX512 && lb__gdot_avx512_fn) return lb__gdot_avx512_fn;
    if ((isa == LB_ISA_AVX512 || isa == LB_ISA_AVX2) && lb__gdot_avx2_fn) return lb__gdot_avx2_fn;
    return lb__gdot_scalar;
}
