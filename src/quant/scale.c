/* Scale rules: how each block's scale is chosen and stored. Every rule is
 * plain fp32 arithmetic in a fixed order, so the vector paths and any
 * reference that follows the same order reproduce it bit for bit. */
#include <math.h>
#include <string.h>

#include "format/codec.h"
#include "format/codec_fast.h"
#include "format/convert.h"
#include "quant/qkernels.h"
#include "quant/quant_internal.h"
#include "util/bits.h"


void lb__scale_rules_init(const lb_qspec *q, lb__scale_rules *r)
{
    const lb_format_info *e = lb_format_get(q->element), *sf = lb_format_get(q->scale_format);
    memset(r, 0, sizeof *r);
    r->spec = *q;
    r->elem_max = (float)e->max_finite;
    r->qmin = (float)e->min_finite, r->qmax = (float)e->max_finite;
    /* full range: int8/int4 symmetric under a scale that is not a power
     * of two (MXINT8 keeps OCP's rule) */
    r->full_range = e->kind == LB_KIND_INT && !q->affine && q->scale_format != LB_FMT_E8M0 &&
                    (q->range == LB_RANGE_FULL || q->range == LB_RANGE_SIGNED);
    r->signed_scale = r->full_range && q->range == LB_RANGE_SIGNED; /* validate: fp32/fp16/bf16, one level */
    r->clamp_hi = q->affine || r->full_range ? r->qmax : r->elem_max;
    r->clamp_lo = q->affine || r->full_range ? r->qmin : -r->elem_max;
    r->scale_floor = (float)sf->min_subnormal;
    r->scale_max = (float)sf->max_finite;
    /* MX: emax is the exponent of the element's largest power of two (OCP
     * MX v1.0 sec. 6.3); MXINT8 elements are 1.6 fixed point, so 0 */
    r->emax = q->int_frac_bits ? 0 : ilogb(e->max_finite);
    r->mbits = q->int_frac_bits ? q->int_frac_bits : e->man_bits;
    r->rceil_max = q->int_frac_bits ? 127.0f / 64.0f : r->elem_max;
    r->frac = q->int_frac_bits ? 0x1p-6f : 1.0f;
    r->tensor_scale = 1.0f;
}

float lb__tensor_scale(const lb__scale_rules *r, float tensor_amax, float tensor_lo, float tensor_hi)
{
    if (!r->spec.two_level) return 1.0f;
    if (r->full_range) { /* the block scales' largest value maps the tensor's extremes onto [qmin, qmax] */
        float ts = lb__full_range_scale(tensor_lo, tensor_hi, 1.0f, -r->qmin * r->scale_max, r->qmax * r->scale_max);
        return ts == 0 ? 1.0f : ts;
    }
    /* NVFP4: amax / (6 * 448), so that the largest block scale lands on
     * E4M3's largest value (ModelOpt get_weights_scaling_factor_2). When
     * that is 0 (an all-zero tensor, or amax < ~1.9e-42 underflowing) every
     * divisor would be 0: use 1, and the tiny values quantize to zeros. */
    float ts = tensor_amax / (r->elem_max * r->scale_max);
    return ts == 0 ? 1.0f : ts;
}

/* A stored scale that decodes to zero would turn every element into
 * inf/NaN; the smallest positive scale saturates the block instead (a
 * negative s whose magnitude is that smallest value keeps its sign). */
static void store_nonzero(const lb__scale_rules *r, float s, lb__block_scale *out)
{
    lb_format f = r->spec.scale_format;
    out->code = lb__encode_fast(f, s);
    out->value = lb__decode_fast(f, out->code);
    if (out->value == 0) {
        out->code = lb__encode_fast(f, r->scale_floor);
        out->value = lb__decode_fast(f, out->code);
    }
}

static void zero_block(const lb__scale_rules *r, lb__block_scale *s)
{
    s->code = lb__encode_fast(r->spec.scale_format, 0.0f);
    s->value = s->divisor = 0;
    s->zero_point = 0;
}

/* floor(log2(a)) from the fp32 bits, as the MX references compute it: a
 * subnormal counts as 2^-127. */
static int exponent_of(uint32_t bits) { return (int)((bits >> 23) & 0xFF) - 127; }

static void scale_mx(const lb__scale_rules *r, float amax, lb__block_scale *s)
{
    uint32_t bits = lb__f32_bits(amax);
    int x = exponent_of(bits) - r->emax; /* unbiased scale exponent: LB_MX_FLOOR, the OCP rule, unless below */
    switch (r->spec.mx_rounding) {
    case LB_MX_CEIL:
        x = exponent_of(bits) + ((bits & 0x7FFFFF) != 0) - r->emax;
        break;
    case LB_MX_EVEN: /* round amax to the element's mantissa width first */
        x = exponent_of((bits + (1u << (23 - r->mbits - 1))) & 0x7F800000u) - r->emax;
        break;
    case LB_MX_RCEIL: { /* the smallest power of two >= amax / max_elem */
        uint32_t d = lb__f32_bits(amax / r->rceil_max);
        int expf = (int)((d >> 23) & 0xFF);
        int up = expf == 0 ? (d & 0x7FFFFF) > 0x400000 : (d & 0x7FFFFF) != 0;
        x = expf + up - 127;
        break;
    }
    case LB_MX_FLOOR: break;
    }
    if (amax == 0) x = -127; /* an all-zero block: the smallest scale, code 0x00 */
    if (x < -127) x = -127;
    if (x > 127) x = 127;
    s->code = (uint32_t)(x + 127);
    uint32_t vbits = s->code ? s->code << 23 : 0x00400000u; /* 2^(c-127); code 0 is the subnormal 2^-127 */
    memcpy(&s->value, &vbits, sizeof vbits);
    s->divisor = s->value * r->frac; /* MXINT8: X * 2^-6, exact */
    s->zero_point = 0;
}

static void scale_affine(const lb__scale_rules *r, float lo, float hi, float ratio, lb__block_scale *s)
{
    lo *= ratio, hi *= ratio;
    if (hi == lo) { /* all zero */
        zero_block(r, s);
        return;
    }
    float steps = r->qmax - r->qmin, range = hi - lo;
    /* a range wider than FLT_MAX overflows: split the division instead */
    store_nonzero(r, isinf(range) ? hi / steps - lo / steps : range / steps, s);
    s->divisor = s->value;
    /* the integer that real 0 maps to, kept inside the element's range */
    float z = r->qmin - lo / s->value; /* fp32, in this order */
    double zr = lb__round_half_even((double)z);
    if (zr < r->qmin) zr = r->qmin;
    if (zr > r->qmax) zr = r->qmax;
    s->zero_point = (int)zr;
}

/* ModelOpt nvfp4_tensor.py: amax_block / (6 * scale_2); an all-zero block
 * gets 1.0; tiny ones are floored at the scale format's smallest value
 * (2^-9 for E4M3) instead of flushing to 0. Before rounding to the scale
 * format. */
static void two_level_values(const lb__scale_rules *r, const lb__qkernels *k, size_t n, const float *amax, float *tmp)
{
    const float neg_zero = -0.0f, denom = r->elem_max * r->tensor_scale;
    k->block_div_clamp(amax, n, n, &denom, &neg_zero, r->scale_floor, INFINITY, tmp);
    for (size_t b = 0; b < n; b++) tmp[b] = amax[b] == 0 ? 1.0f : tmp[b]; /* a select: the loop vectorizes */
}

int lb__two_level_direct(const lb__scale_rules *r)
{
    return r->spec.two_level && !r->full_range && !r->spec.affine && lb_format_get(r->spec.scale_format)->bits == 8;
}

void lb__two_level_scales(const lb__scale_rules *r, lb_isa isa, size_t n, const float *amax, uint8_t *codes,
                          float *tmp, float *div)
{
    const lb_format_info *sf = lb_format_get(r->spec.scale_format);
    two_level_values(r, lb__qkernels_get(isa), n, amax, tmp);
    lb__encode_kernel(isa)(sf, LB_SATURATE, tmp, n, codes);
    lb__decode_kernel(isa)(sf, codes, n, tmp);
    for (size_t b = 0; b < n; b++) { /* the divisor lb__scales_for_blocks gives, 1 where that is 0 (as the encoder wants) */
        float d = tmp[b] * r->tensor_scale;
        div[b] = d != 0 ? d : 1.0f;
    }
}

/* Symmetric scales with an fp32/fp16/bf16/ue4m3 scale, all blocks of a row
 * at once: the candidate scales go through the format layer's bulk
 * kernels, which equal the scalar reference bit for bit. */
static void scales_symmetric(const lb__scale_rules *r, lb_isa isa, size_t n, const float *amax, const float *lo,
                             const float *hi, float ratio, lb__block_scale *out, float *tmp, uint8_t *codes)
{
    const lb_format_info *sf = lb_format_get(r->spec.scale_format);
    const lb__qkernels *k = lb__qkernels_get(isa); /* the divisions, vectorized; exact either way */
    const float zero = 0.0f, neg_zero = -0.0f; /* x - 0 and x + (-0) are x */
    if (r->full_range) {
        float ts = r->tensor_scale; /* 1 unless two-level; x * 1 is exact */
        float den_lo = -r->qmin * ts, den_hi = r->qmax * ts;
        if (r->signed_scale) k->signed_scales(lo, hi, n, ratio, r->qmin, tmp);
        else k->full_range_scales(lo, hi, n, ratio, den_lo, den_hi, tmp);
        if (r->spec.two_level)
            for (size_t b = 0; b < n; b++) { /* selects, not branches: the loop vectorizes */
                tmp[b] = tmp[b] < r->scale_floor ? r->scale_floor : tmp[b];
                tmp[b] = amax[b] == 0 ? 1.0f : tmp[b];
            }
    } else if (r->spec.two_level) {
        two_level_values(r, k, n, amax, tmp);
    } else { /* (amax * ratio) / elem_max */
        k->block_sub_mul(amax, n, n, &zero, &ratio, tmp);
        k->block_div_clamp(tmp, n, n, &r->elem_max, &neg_zero, -INFINITY, INFINITY, tmp);
    }
    lb__encode_kernel(isa)(sf, LB_SATURATE, tmp, n, codes);
    lb__decode_kernel(isa)(sf, codes, n, tmp);
    /* plain loops, one per code width, so that the width's switch in
     * lb__load_code is not taken per block */
    if (sf->bits == 8)
        for (size_t b = 0; b < n; b++) out[b].code = codes[b];
    else if (sf->bits == 32) /* fp32 codes are the decoded values' bits (a NaN never gets here) */
        for (size_t b = 0; b < n; b++) out[b].code = lb__f32_bits(tmp[b]);
    else
        for (size_t b = 0; b < n; b++) out[b].code = lb__load_code(sf, codes, b);
    if (r->spec.two_level) {
        for (size_t b = 0; b < n; b++)
            out[b].value = tmp[b], out[b].divisor = tmp[b] * r->tensor_scale, out[b].zero_point = 0;
        return;
    }
    int zeros = 0; /* a zero scale comes from an all-zero block or an underflow; both are rare */
    for (size_t b = 0; b < n; b++) {
        out[b].value = out[b].divisor = tmp[b], out[b].zero_point = 0;
        zeros |= tmp[b] == 0;
    }
    for (size_t b = 0; zeros && b < n; b++) {
        if (amax[b] == 0) zero_block(r, &out[b]); /* nothing to scale: every element is 0 */
        else if (out[b].value == 0) { /* underflow: the smallest scale (of the block's sign when signed) */
            store_nonzero(r, 0.0f, &out[b]);
            if (r->signed_scale && signbit(tmp[b])) store_nonzero(r, -out[b].value, &out[b]);
            out[b].divisor = out[b].value;
        }
    }
}

void lb__scales_for_blocks(const lb__scale_rules *r, lb_isa isa, size_t n, const float *amax, const float *lo,
                           const float *hi, float ratio, lb__block_scale *out, float *tmp, uint8_t *codes)
{
    if (r->spec.affine) {
        for (size_t b = 0; b < n; b++) scale_affine(r, lo[b], hi[b], ratio, &out[b]);
    } else if (r->spec.scale_format == LB_FMT_E8M0) {
        for (size_t b = 0; b < n; b++) scale_mx(r, amax[b], &out[b]);
    } else {
        scales_symmetric(r, isa, n, amax, lo, hi, ratio, out, tmp, codes);
    }
}

void lb__scale_divisors(const lb__scale_rules *r, lb_isa isa, const uint8_t *codes, size_t n, float *out)
{
    lb__decode_kernel(isa)(lb_format_get(r->spec.scale_format), codes, n, out);
    float m = r->spec.two_level ? r->tensor_scale : r->frac; /* a product by 1 is exact */
    for (size_t b = 0; b < n; b++) out[b] *= m;
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
