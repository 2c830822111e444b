/* Dequantizing one logical tensor of a quantized Hugging Face checkpoint
 * (planned by hf_quantized.c), exactly as the format's package computes it:
 * every rounding step of its torch code is a rounding step here, in the
 * same dtype, in the same order (see hf_quantized.h for the formulas). */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/hf_quantized.h"
#include "util/bits.h"
#include "util/error.h"

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* x rounded to bf16 (nearest, ties to even; NaN stays NaN), as torch's .to(bfloat16). */
static float round_bf16(float x)
{
    uint32_t u = lb__f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return x;
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    return lb__f32_from_bits(u);
}

/* x rounded to fp16 (nearest, ties to even; overflow to inf), as torch's .to(float16).
 * Scaling by powers of two is exact, so nearbyint does the one rounding. */
static float round_f16(float x)
{
    if (!isfinite(x) || x == 0.0f) return x;
    float a = fabsf(x);
    if (a >= 65520.0f) return copysignf(INFINITY, x); /* halfway to 2^16 and beyond round to inf */
    int e;
    frexpf(a, &e);                                    /* a = m * 2^e, m in [0.5, 1) */
    int q = e - 11 < -24 ? -24 : e - 11;              /* the quantum's exponent: 10 mantissa bits, subnormals at 2^-24 */
    return ldexpf(nearbyintf(ldexpf(x, -q)), q);
}

static float round_to(lb_dtype d, float x)
{
    if (d == LB_DT_BF16) return round_bf16(x);
    if (d == LB_DT_F16) return round_f16(x);
    return x; /* F32 (the planner allows no other compute dtype) */
}

uint32_t lb__hfq_stream_at(const uint8_t *words, size_t stride, uint64_t i, int bits)
{
    uint64_t p = i * (uint64_t)bits;
    uint64_t w = p / 32;
    unsigned o = (unsigned)(p % 32);
    uint64_t v = le32(words + w * stride) >> o;
    if (o + (unsigned)bits > 32) v |= (uint64_t)le32(words + (w + 1) * stride) << (32 - o);
    return (uint32_t)(v & ((1u << bits) - 1u));
}

static const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

/* Row r's codes as exact floats. */
static void decode_codes(const lb__hfq_tensor *q, const float *fp8, uint64_t r, float *row)
{
    const uint8_t *base = q->codes.data;
    uint64_t cols = q->cols;
    switch (q->elem) {
    case LB__HFQ_E_FP8:
        for (uint64_t c = 0; c < cols; c++) row[c] = fp8[base[r * cols + c]];
        return;
    case LB__HFQ_E_INT8:
        for (uint64_t c = 0; c < cols; c++) row[c] = (float)(int8_t)base[r * cols + c];
        return;
    case LB__HFQ_E_PACKED: {
        uint64_t words = q->codes.shape[1];
        const uint8_t *w = base + r * words * 4;
        int32_t off = 1 << (q->bits - 1);
        for (uint64_t c = 0; c < cols; c++) row[c] = (float)((int32_t)lb__hfq_stream_at(w, 4, c, q->bits) - off);
        return;
    }
    case LB__HFQ_E_FP4: {
        const uint8_t *b = base + r * (cols / 2);
        for (uint64_t c = 0; c < cols; c++) {
            unsigned nib = c & 1 ? b[c / 2] >> 4 : b[c / 2] & 15u;
            row[c] = nib & 8u ? -e2m1[nib & 7u] : e2m1[nib & 7u];
        }
        return;
    }
    }
}

/* The scales (and zero points) as floats, one per scale cell. */
static lb_status scales_f32(const lb__hfq_tensor *q, float *s)
{
    const lb_tensor *t = &q->scale;
    if (q->e8m0) {
        const uint8_t *e = t->data;
        for (uint64_t i = 0; i < t->n_elements; i++) s[i] = ldexpf(1.0f, (int)e[i] - 127); /* 0xFF: 2^128 = inf, as both packages */
        return LB_OK;
    }
    return lb_dtype_to_f32(t->dtype, t->data, (size_t)t->n_elements, s);
}

static lb_status zero_points_f32(const lb__hfq_tensor *q, uint64_t srows, uint64_t scols, float *z)
{
    const lb_tensor *t = &q->zero_point;
    if (!q->zp_packed) return lb_dtype_to_f32(t->dtype, t->data, (size_t)t->n_elements, z);
    /* packed along dim 0: column j's stream is words [k][j] for k = 0.. */
    int32_t off = 1 << (q->bits - 1);
    for (uint64_t j = 0; j < scols; j++)
        for (uint64_t r = 0; r < srows; r++)
            z[r * scols + j] = (float)((int32_t)lb__hfq_stream_at((const uint8_t *)t->data + 4 * j, 4 * scols, r, q->bits) - off);
    return LB_OK;
}

lb_status lb__hfq_to_f32(const lb_tensor *t, float *dst)
{
    const lb__hfq_tensor *q = t->data;
    uint64_t srows = (q->rows + q->brows - 1) / q->brows, scols = (q->cols + q->bcols - 1) / q->bcols;
    size_t ns = (size_t)(srows * scols);
    float *s = malloc((ns + 1) * sizeof *s), *z = q->has_zp ? malloc((ns + 1) * sizeof *z) : NULL;
    float fp8[256];
    if (!s || (q->has_zp && !z)) {
        free(s), free(z);
        return lb__fail(LB_ERR_NOMEM, "out of memory dequantizing '%s'", t->name);
    }
    const lb_format_info *f8 = lb_format_get(LB_FMT_FP8_E4M3);
    for (unsigned c = 0; c < 256; c++) fp8[c] = lb__f32_from_bits(f8->decode(f8, c));
    lb_status st = scales_f32(q, s);
    if (st == LB_OK && q->has_zp) st = zero_points_f32(q, srows, scols, z);
    float g = 1.0f;
    if (st == LB_OK && q->has_global) st = lb_dtype_to_f32(q->global.dtype, q->global.data, 1, &g);
    if (st != LB_OK) {
        free(s), free(z);
        return lb__fail(st, "dequantizing '%s': %s", t->name, lb_last_error());
    }
    /* the effective scale of each cell, as the package forms it before the multiply */
    for (size_t i = 0; i < ns; i++) switch (q->math) {
        case LB__HFQ_M_CT: s[i] = round_to(q->scale_dtype, s[i]); break; /* fp8 / E8M0 scales: .to(bf16), exact */
        case LB__HFQ_M_CT_FP4G: if (q->has_global) s[i] = s[i] / g; else s[i] = round_bf16(s[i]); break;
        case LB__HFQ_M_F32: if (q->has_global) s[i] = s[i] * g; break;
        }
    for (uint64_t r = 0; r < q->rows; r++) {
        float *row = dst + r * q->cols;
        decode_codes(q, fp8, r, row);
        const float *sr = s + (r / q->brows) * scols, *zr = z ? z + (r / q->brows) * scols : NULL;
        switch (q->math) {
        case LB__HFQ_M_CT: {
            lb_dtype d = q->scale_dtype;
            for (uint64_t c = 0; c < q->cols; c++) {
                float x = round_to(d, row[c]);
                if (zr) x = round_to(d, x - round_to(d, zr[c / q->bcols]));
                row[c] = round_to(d, x * sr[c / q->bcols]);
            }
            break;
        }
        case LB__HFQ_M_CT_FP4G: /* fp32 multiply, then the unpacking dtype (bf16) */
            for (uint64_t c = 0; c < q->cols; c++) row[c] = round_bf16(row[c] * sr[c / q->bcols]);
            break;
        case LB__HFQ_M_F32:
            for (uint64_t c = 0; c < q->cols; c++) row[c] = zr ? (row[c] - zr[c / q->bcols]) * sr[c / q->bcols]
                                                              : row[c] * sr[c / q->bcols];
            break;
        }
    }
    free(s), free(z);
    return LB_OK;
}

void lb__hfq_release(const lb_tensor *t)
{
    const lb__hfq_tensor *q = t->data;
    lb_tensor_release(&q->codes);
    lb_tensor_release(&q->scale);
    if (q->has_zp) lb_tensor_release(&q->zero_point);
}
