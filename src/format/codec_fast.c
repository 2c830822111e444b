/* One value at a time, fast: the scalar twin of the SIMD kernels' integer
 * rounding, for callers that encode a scale per block (tensor
 * quantization) and cannot afford the binary64 reference per call. The
 * SIMD kernels it mirrors are tested bit-identical to the reference over
 * every code point and 10^6 random patterns; test_format.c holds this one
 * to the same reference. Saturating, finite inputs only. */
#include <pthread.h>
#include <string.h>

#include "format/codec_fast.h"
#include "format/kernel_params.h"
#include "util/bits.h"

static lb__enc_params enc_params[LB_FMT_COUNT];
static lb__dec_params dec_params[LB_FMT_COUNT];
static pthread_once_t params_once = PTHREAD_ONCE_INIT;

static void init_params(void)
{
    for (int i = 0; i < LB_FMT_COUNT; i++) {
        lb__enc_params_init(lb_format_get((lb_format)i), LB_SATURATE, &enc_params[i]);
        lb__dec_params_init(lb_format_get((lb_format)i), &dec_params[i]);
    }
}

uint32_t lb__encode_fast(lb_format f, float x)
{
    pthread_once(&params_once, init_params);
    const lb__enc_params *p = &enc_params[f];
    if (p->kind == LB_CODEC_FP32) return lb__f32_bits(x); /* finite: the identity */
    if (p->kind != LB_CODEC_MINIFLOAT) { /* e8m0, ints: the reference */
        const lb_format_info *fi = lb_format_get(f);
        uint32_t c = 0;
        fi->encode(fi, (double)x, LB_SATURATE, &c);
        return c;
    }
    uint32_t u = lb__f32_bits(x), a = u & 0x7FFFFFFF, shift = 23u - (uint32_t)p->man_bits;
    uint32_t mag = ((a + p->round_half + ((a >> shift) & 1)) >> shift) - p->rebias;
    if (a < p->min_normal_bits) /* subnormal result: the FPU rounds at the magic number's ulp */
        mag = lb__f32_bits(lb__f32_from_bits(a) + p->magic) - lb__f32_bits(p->magic);
    int neg = (u >> 31) != 0;
    uint32_t res = mag | (neg ? p->sign_bit : 0);
    if (p->zero_drops_sign && mag == 0) res = 0;
    if (mag > p->max_mag) res = neg ? p->ovf_neg : p->ovf_pos;
    if (p->is_unsigned_float && neg && a != 0) res = p->below_code;
    return res;
}

float lb__decode_fast(lb_format f, uint32_t c)
{
    pthread_once(&params_once, init_params);
    const lb__dec_params *p = &dec_params[f];
    const lb_format_info *fi = lb_format_get(f);
    if (p->kind == LB_CODEC_FP32) return lb__f32_from_bits(c);
    if (p->kind == LB_CODEC_E8M0) return lb__f32_from_bits(c == 0xFF ? 0x7FC00000 : c == 0 ? 0x00400000 : c << 23);
    if (p->is_bf16) return lb__f32_from_bits(c << 16);
    if (p->kind != LB_CODEC_MINIFLOAT) return lb__f32_from_bits(fi->decode(fi, c));
    int m = p->man_bits;
    uint32_t mag = c & p->mag_mask, expf = mag >> m, man = mag & ((1u << m) - 1);
    uint32_t sign = (c & p->sign_bit) ? 0x80000000u : 0;
    if (p->is_unsigned_float && c > p->mag_mask) return lb__f32_from_bits(0x7FC00000);
    switch (p->specials) {
    case LB_SPECIALS_IEEE:
        if (expf == (1u << p->exp_bits) - 1) return lb__f32_from_bits(sign | 0x7F800000 | man << (23 - m));
        break;
    case LB_SPECIALS_FN:
        if (mag == p->mag_mask) return lb__f32_from_bits(sign | 0x7F800000 | man << (23 - m));
        break;
    case LB_SPECIALS_FNUZ:
        if (c == p->sign_bit) return lb__f32_from_bits(0x7FC00000);
        break;
    case LB_SPECIALS_NONE: /* every code is a number */
    case LB_SPECIALS_E8M0: /* e8m0 has its own decoder */
        break;
    }
    if (expf == 0) return lb__f32_from_bits(lb__f32_bits((float)man * p->sub_scale) | sign);
    return lb__f32_from_bits(sign | (expf + 127u - (uint32_t)p->bias) << 23 | man << (23 - m));
}
