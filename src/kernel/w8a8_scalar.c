/* The W8A8 reference kernels: w8a8.h's definitions written out plainly,
 * one (token, row) pair at a time. Every vector set equals these bit for
 * bit. */
#include <math.h>

#include "kernel/w8a8_kernels.h"
#include "quant/qkernels.h"

static float quant_i8(const float *x, size_t cols, float static_scale, int8_t *q)
{
    float s = static_scale;
    if (!(s > 0)) {
        float m = 0;
        for (size_t k = 0; k < cols; k++) {
            float a = fabsf(x[k]);
            m = a > m ? a : m; /* a NaN is skipped, as the vector max skips it */
        }
        s = lb__w8a8_i8_scale(m);
    }
    for (size_t k = 0; k < cols; k++) q[k] = (int8_t)lb__w8a8_i8_code(x[k] / s);
    return s;
}

/* int8: the exact dot in int64, one conversion, y = float(dot) * (s_t * s_w). */
static void gemm_i8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t r0, size_t r1, float *y)
{
    const lb__qmat *m = w->m;
    for (size_t r = r0; r < r1; r++) {
        const int8_t *wr = (const int8_t *)(m->data + r * m->row_bytes);
        for (size_t t = 0; t < a->n; t++) {
            const int8_t *xq = a->q + t * a->ld;
            int64_t dot = 0;
            for (size_t k = 0; k < m->cols; k++) dot += (int32_t)xq[k] * wr[k];
            y[t * m->rows + r] = (float)dot * (a->scale[t] * w->row_scale[r]);
        }
    }
}

/* fp8: qdot.h's canonical order. The row is decoded into wbuf and padded
 * with +0 to whole chunks of 16 (x is padded the same); every padded
 * product still goes through the sum, as the canonical order says (it can
 * turn a -0 partial sum into +0). A product of two e4m3 values is exact in
 * fp32 (4-bit significands, exponents within [-18, 18]), so x * w + p
 * rounds once, like the fma the order names. */
static void gemm_f8(const lb__w8a8 *w, const lb__w8a8_acts *a, size_t r0, size_t r1, float *y, float *wbuf)
{
    const lb__qmat *m = w->m;
    const float *table = lb__w8a8_e4m3_table();
    size_t chunks = (m->cols + 15) / 16;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *wr = m->data + r * m->row_bytes;
        for (size_t k = 0; k < chunks * 16; k++) wbuf[k] = k < m->cols ? table[wr[k]] : 0.0f;
        for (size_t t = 0; t < a->n; t++) {
            const float *xv = a->v + t * a->ld;
            float p[16] = {0};
            for (size_t c = 0; c < chunks; c++)
                for (int l = 0; l < 16; l++) p[l] = xv[c * 16 + l] * wbuf[c * 16 + l] + p[l];
            y[t * m->rows + r] = lb__sum16f(p) * (a->scale[t] * w->row_scale[r]);
        }
    }
}

const lb__w8a8_ops lb__w8a8_scalar_ops = {0, quant_i8, gemm_i8, gemm_f8};
