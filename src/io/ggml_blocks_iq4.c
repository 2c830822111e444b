/* ggml's non-linear 4-bit types, IQ4_NL (blocks of 32) and IQ4_XS
 * (super-blocks of 256 with a 6-bit scale per 32): the dequantize loops
 * (the gguf package's arithmetic) and ggml's quantizer (quantize_iq4_nl /
 * quantize_iq4_xs and the search they share), with and without an
 * importance matrix. Layouts: ggml_blocks.h.
 *
 * The quantizer is a scale search: each 32-element sub-block starts from
 * the scale that maps its largest magnitude onto the grid's end (-127),
 * then tries 15 nearby scales and keeps the one of least weighted squared
 * error (the weighted least-squares scale for each set of codes). Every
 * sum runs in element order in fp32, as ggml's, so the chosen codes and
 * scales are the same bits. */
#include <math.h>

#include "io/ggml_blocks.h"

const int8_t lb__kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

#define IQ4_TRIES 7           /* scales tried either side of the first guess (ggml's ntry) */
#define IQ4_MIN_AMAX 1e-15f   /* smaller sub-blocks get scale 0 (ggml's GROUP_MAX_EPS) */

/* ===== Dequantize ===== */

void lb__dequantize_iq4_nl(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_iq4_nl *x = src;
    for (size_t i = 0; i < nb; i++, dst += LB__QK) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d));
        for (int j = 0; j < LB__QK / 2; j++) {
            dst[j] = d * (float)lb__kvalues_iq4nl[x[i].qs[j] & 0x0F];
            dst[j + LB__QK / 2] = d * (float)lb__kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void lb__dequantize_iq4_xs(const void *restrict src, size_t nb, float *restrict dst)
{
    const lb__block_iq4_xs *x = src;
    for (size_t i = 0; i < nb; i++) {
        const float d = lb__fp16_to_f32(lb__le16(x[i].d));
        for (int ib = 0; ib < LB__QK_K / 32; ib++, dst += 32) {
            const float dl = d * (float)(lb__iq4_xs_scale_code(&x[i], ib) - 32);
            const uint8_t *qs = x[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)lb__kvalues_iq4nl[qs[j] & 0x0F];
                dst[j + 16] = dl * (float)lb__kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* ===== Quantize ===== */

/* ggml's nearest_int: round to nearest even through the fp32 adder (the
 * magic constant 1.5 * 2^23 leaves the integer in the low mantissa bits).
 * Kept as the bit trick so that even inf and NaN give ggml's result. */
static inline int magic_round(float v)
{
    uint32_t u = lb__bits_from_f32(v + 12582912.0f);
    return (int)(u & 0x007FFFFFu) - 0x00400000;
}

/* Weighted fit of codes chosen at inverse scale id: sum w q x and sum w q^2,
 * summed in element order as ggml (only the products run in parallel). */
static inline void fit_at(const float *x, const float *w, float id, float *sumqx, float *sumq2)
{
    float q[32], wq[32], wqx[32], wqq[32];
    lb__iq4_nearest32(x, id, NULL, q);
    for (int j = 0; j < 32; j++) wq[j] = w[j] * q[j], wqx[j] = wq[j] * x[j], wqq[j] = wq[j] * q[j];
    float sx = 0.0f, s2 = 0.0f;
    for (int j = 0; j < 32; j++) sx += wqx[j], s2 += wqq[j];
    *sumqx = sx, *sumq2 = s2;
}

/* The scale of one 32-element sub-block x with weights w; 0 when its
 * largest magnitude is below IQ4_MIN_AMAX. */
static float sub_block_scale(const float *x, const float *w)
{
    float amax = 0.0f, max = 0.0f; /* magnitude and signed value of the first largest */
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    if (amax < IQ4_MIN_AMAX) return 0.0f;
    const float g0 = (float)lb__kvalues_iq4nl[0];
    float sumqx, sumq2;
    fit_at(x, w, 1.0f / (-max / g0), &sumqx, &sumq2);
    float d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int t = -IQ4_TRIES; t <= IQ4_TRIES; t++) {
        fit_at(x, w, (float)(t + lb__kvalues_iq4nl[0]) / max, &sumqx, &sumq2);
        /* sumqx^2 / sumq2 > best, without the division */
        if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* The weights of the fit for sub-block x: x^2 without an importance
 * matrix, else imatrix * sqrt(sigma2 + x^2) with sigma2 twice the mean
 * square of the super-block. */
static inline void fit_weights(const float *x, const float *imatrix, float sigma2, float *w)
{
    if (imatrix)
        for (int j = 0; j < 32; j++) w[j] = imatrix[j] * sqrtf(sigma2 + x[j] * x[j]);
    else
        for (int j = 0; j < 32; j++) w[j] = x[j] * x[j];
}

static float twice_mean_square(const float *x, int n)
{
    float s = 0.0f;
    for (int j = 0; j < n; j++) s += x[j] * x[j];
    return s * (2.0f / (float)n);
}

/* Codes of 32 elements at scale d (inverse 0 for d = 0), packed. */
static inline void codes_at(const float *x, float d, uint8_t *qs)
{
    uint8_t q[32];
    lb__iq4_nearest32(x, d != 0.0f ? 1.0f / d : 0.0f, q, NULL);
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
}

void lb__quantize_iq4_nl(const float *restrict src, size_t nb, const float *restrict imatrix, void *restrict dst)
{
    lb__block_iq4_nl *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK) {
        float w[32];
        fit_weights(src, imatrix ? imatrix + LB__QK * i : NULL, imatrix ? twice_mean_square(src, LB__QK) : 0.0f, w);
        const float d = sub_block_scale(src, w);
        lb__store_ggml_fp16(y[i].d, d);
        codes_at(src, d, y[i].qs); /* with the unrounded scale, as ggml */
    }
}

void lb__quantize_iq4_xs(const float *restrict src, size_t nb, const float *restrict imatrix, void *restrict dst)
{
    lb__block_iq4_xs *y = dst;
    for (size_t i = 0; i < nb; i++, src += LB__QK_K) {
        const float *qw = imatrix ? imatrix + LB__QK_K * i : NULL;
        const float sigma2 = qw ? twice_mean_square(src, LB__QK_K) : 0.0f;
        float scale[8], w[32];
        float amax_scale = 0.0f, max_scale = 0.0f; /* the first scale of largest magnitude */
        for (int ib = 0; ib < 8; ib++) {
            fit_weights(src + 32 * ib, qw ? qw + 32 * ib : NULL, sigma2, w);
            scale[ib] = sub_block_scale(src + 32 * ib, w);
            if (fabsf(scale[ib]) > amax_scale) amax_scale = fabsf(scale[ib]), max_scale = scale[ib];
        }
        /* the super-block scale maps the largest sub-block scale to -32 */
        const float d = -max_scale / 32.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        lb__store_ggml_fp16(y[i].d, d);
        uint32_t h = 0;
        for (int ib = 0; ib < 8; ib++) {
            int l = magic_round(id * scale[ib]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            codes_at(src + 32 * ib, d * (float)l, y[i].qs + 16 * ib);
            const unsigned code = (unsigned)(l + 32);
            if (ib % 2 == 0) y[i].scales_l[ib / 2] = (uint8_t)(code & 0x0F);
            else y[i].scales_l[ib / 2] |= (uint8_t)((code & 0x0F) << 4);
            h |= (code >> 4) << 2 * ib;
        }
        y[i].scales_h[0] = (uint8_t)h, y[i].scales_h[1] = (uint8_t)(h >> 8);
    }
}
