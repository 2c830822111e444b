/* Scale rules: how each block's scale is chosen and stored. Every rule is
 * plain fp32 arithmetic in a fixed order, so the vector paths and any
 * reference that follows the same order reproduce it bit for bit. */
#include <math.h>
#include <string.h>

#include "format/codec.h"
#include "format/codec_fast.h"
#include "quant/quant_internal.h"

static uint32_t encode_sat(lb_format f, float x) { return lb__encode_fast(f, x); }

static float decode(lb_format f, uint32_t code) { return lb__decode_fast(f, code); }

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

float lb__element_max(const lb_qspec *q)
{
    return (float)lb_format_get(q->element)->max_finite;
}

float lb__tensor_scale(const lb_qspec *q, float tensor_amax)
{
    if (!q->two_level) return 1.0f;
    /* NVFP4: amax / (6 * 448), so that the largest block scale lands on
     * E4M3's largest value (ModelOpt get_weights_scaling_factor_2). When
     * that is 0 (an all-zero tensor, or amax < ~1.9e-42 underflowing) every
     * divisor would be 0: use 1, and the tiny values quantize to zeros. */
    float denom = lb__element_max(q) * (float)lb_format_get(q->scale_format)->max_finite;
    float ts = tensor_amax / denom;
    return ts == 0 ? 1.0f : ts;
}

/* A stored scale that decodes to zero would turn every element into
 * inf/NaN; the smallest positive scale saturates the block instead. */
static void store_positive(lb_format f, float s, lb__block_scale *out)
{
    out->code = encode_sat(f, s);
    out->value = decode(f, out->code);
    if (out->value == 0) {
        out->code = encode_sat(f, (float)lb_format_get(f)->min_subnormal);
        out->value = decode(f, out->code);
    }
}

void lb__scale_symmetric(const lb_qspec *q, float amax, float ratio, float tensor_scale, lb__block_scale *s)
{
    float m = lb__element_max(q);
    s->zero_point = 0;
    if (q->two_level) {
        /* ModelOpt nvfp4_tensor.py: amax_block / (6 * scale_2); an all-zero
         * block gets 1.0; tiny ones are floored at the scale format's
         * smallest value (2^-9 for E4M3) instead of flushing to 0 */
        float bs = amax == 0 ? 1.0f : amax / (m * tensor_scale);
        float floor_v = (float)lb_format_get(q->scale_format)->min_subnormal;
        if (bs < floor_v) bs = floor_v;
        s->code = encode_sat(q->scale_format, bs);
        s->value = decode(q->scale_format, s->code);
        s->divisor = s->value * tensor_scale;
        return;
    }
    if (amax == 0) { /* nothing to scale: store 0, every element is 0 */
        s->code = encode_sat(q->scale_format, 0.0f);
        s->value = s->divisor = 0;
        return;
    }
    store_positive(q->scale_format, (amax * ratio) / m, s);
    s->divisor = s->value;
}

/* floor(log2(a)) from the fp32 bits, as the MX references compute it: a
 * subnormal counts as 2^-127. */
static int exponent_of(uint32_t bits) { return (int)((bits >> 23) & 0xFF) - 127; }

void lb__scale_mx(const lb_qspec *q, float amax, lb__block_scale *s)
{
    const lb_format_info *e = lb_format_get(q->element);
    /* emax: exponent of the element's largest power of two (OCP MX v1.0
     * sec. 6.3); MXINT8 elements are 1.6 fixed point, so 0 */
    int emax = q->int_frac_bits ? 0 : ilogb(e->max_finite);
    int mbits = q->int_frac_bits ? q->int_frac_bits : e->man_bits;
    uint32_t bits = f32_bits(amax);
    int x; /* unbiased scale exponent */
    switch (q->mx_rounding) {
    case LB_MX_CEIL:
        x = exponent_of(bits) + ((bits & 0x7FFFFF) != 0) - emax;
        break;
    case LB_MX_EVEN: /* round amax to the element's mantissa width first */
        x = exponent_of((bits + (1u << (23 - mbits - 1))) & 0x7F800000u) - emax;
        break;
    case LB_MX_RCEIL: { /* the smallest power of two >= amax / max_elem */
        float max_elem = q->int_frac_bits ? 127.0f / 64.0f : (float)e->max_finite;
        uint32_t d = f32_bits(amax / max_elem);
        int expf = (int)((d >> 23) & 0xFF);
        int up = expf == 0 ? (d & 0x7FFFFF) > 0x400000 : (d & 0x7FFFFF) != 0;
        x = expf + up - 127;
        break;
    }
    default: /* LB_MX_FLOOR: the OCP rule */
        x = exponent_of(bits) - emax;
    }
    if (amax == 0) x = -127; /* an all-zero block: the smallest scale, code 0x00 */
    if (x < -127) x = -127;
    if (x > 127) x = 127;
    s->code = (uint32_t)(x + 127);
    s->value = decode(LB_FMT_E8M0, s->code);
    s->divisor = q->int_frac_bits ? s->value * 0x1p-6f : s->value;
    s->zero_point = 0;
}

void lb__scale_affine(const lb_qspec *q, float lo, float hi, float ratio, lb__block_scale *s)
{
    const lb_format_info *e = lb_format_get(q->element);
    float qmin = (float)e->min_finite, qmax = (float)e->max_finite;
    lo *= ratio, hi *= ratio;
    if (hi == lo) { /* all zero */
        s->code = encode_sat(q->scale_format, 0.0f);
        s->value = s->divisor = 0;
        s->zero_point = 0;
        return;
    }
    store_positive(q->scale_format, (hi - lo) / (qmax - qmin), s);
    s->divisor = s->value;
    /* the integer that real 0 maps to, kept inside the element's range */
    float z = qmin - lo / s->value; /* fp32, in this order */
    double r = lb__round_half_even((double)z);
    if (r < qmin) r = qmin;
    if (r > qmax) r = qmax;
    s->zero_point = (int)r;
}

float lb__scale_divisor(const lb_qspec *q, uint32_t code, float tensor_scale)
{
    float v = decode(q->scale_format, code);
    if (q->two_level) return v * tensor_scale;
    if (q->int_frac_bits) return v * 0x1p-6f;
    return v;
}

size_t lb__packed_row_bytes(lb_format element, size_t n)
{
    int bits = lb_format_get(element)->bits;
    if (bits == 6) return (n * 6 + 7) / 8;
    return lb_format_bytes(element, n);
}

void lb__pack6(const uint8_t *codes, size_t n, uint8_t *out)
{
    memset(out, 0, (n * 6 + 7) / 8);
    for (size_t i = 0; i < n; i++) {
        size_t bit = i * 6, byte = bit / 8, shift = bit % 8;
        uint32_t v = (uint32_t)(codes[i] & 0x3F) << shift;
        out[byte] |= (uint8_t)v;
        if (shift > 2) out[byte + 1] |= (uint8_t)(v >> 8);
    }
}

void lb__unpack6(const uint8_t *packed, size_t n, uint8_t *codes)
{
    for (size_t i = 0; i < n; i++) {
        size_t bit = i * 6, byte = bit / 8, shift = bit % 8;
        uint32_t v = packed[byte] >> shift;
        if (shift > 2) v |= (uint32_t)packed[byte + 1] << (8 - shift);
        codes[i] = (uint8_t)(v & 0x3F);
    }
}
