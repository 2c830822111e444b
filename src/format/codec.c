/* Scalar reference codecs for every format in the table.
 *
 * Encoding works in binary64 arithmetic on the value itself, not on bit
 * patterns: it finds the target's quantum (a power of two) at the value's
 * exponent, rounds value/quantum to an integer, and builds the code from
 * that. The SIMD kernels do the same job with integer bit tricks, so the
 * two are independent derivations that the tests hold against each other. */
#include "format/codec.h"

#include <math.h>
#include <string.h>

static uint32_t float_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

double lb__round_half_even(double y)
{
    double a = fabs(y), f = floor(a), d = a - f, r;
    if (d > 0.5) r = f + 1;
    else if (d < 0.5) r = f;
    else r = fmod(f, 2.0) == 0.0 ? f : f + 1;
    return y < 0 ? -r : r;
}

uint32_t lb__max_magnitude_code(const lb_format_info *f)
{
    uint32_t all = (1u << (f->exp_bits + f->man_bits)) - 1;
    switch (f->specials) {
    case LB_SPECIALS_IEEE: return all - (1u << f->man_bits); /* exponent all ones - 1, mantissa all ones */
    case LB_SPECIALS_FN: return all - 1;
    case LB_SPECIALS_E8M0: return all - 1;
    case LB_SPECIALS_FNUZ:
    case LB_SPECIALS_NONE: return all;
    }
    return all;
}

static int has_nan(const lb_format_info *f) { return f->specials != LB_SPECIALS_NONE; }

/* The code a NaN input becomes. ml_dtypes (and numpy for fp16) decide the
 * payload: fp16 keeps the top payload bits (numpy), fp32 keeps them all,
 * the other IEEE-style formats give the canonical quiet NaN with the sign. */
uint32_t lb__nan_code(const lb_format_info *f, uint32_t u)
{
    uint32_t sign = u >> 31;
    uint32_t signbit = f->sign_bits ? sign << (f->exp_bits + f->man_bits) : 0;
    uint32_t expmask = ((1u << f->exp_bits) - 1) << f->man_bits;
    switch (f->specials) {
    case LB_SPECIALS_IEEE:
        if (f->id == LB_FMT_FP32) return u;
        if (f->id == LB_FMT_FP16) {
            uint32_t payload = (u & 0x7FFFFF) >> 13;
            return signbit | expmask | (payload ? payload : 1);
        }
        return signbit | expmask | (1u << (f->man_bits - 1));
    case LB_SPECIALS_FN: return signbit | ((1u << (f->exp_bits + f->man_bits)) - 1);
    case LB_SPECIALS_FNUZ: return 1u << (f->exp_bits + f->man_bits);
    case LB_SPECIALS_E8M0: return 0xFF;
    case LB_SPECIALS_NONE: break;
    }
    return 0;
}

/* What a value beyond the largest finite one becomes. */
static uint32_t overflow_code(const lb_format_info *f, int negative, lb_overflow mode)
{
    uint32_t signbit = (f->sign_bits && negative) ? 1u << (f->exp_bits + f->man_bits) : 0;
    uint32_t maxc = lb__max_magnitude_code(f);
    if (mode == LB_SATURATE) return signbit | maxc;
    switch (f->specials) {
    case LB_SPECIALS_IEEE: return signbit | (((1u << f->exp_bits) - 1) << f->man_bits); /* inf */
    case LB_SPECIALS_FN: return signbit | ((1u << (f->exp_bits + f->man_bits)) - 1);
    case LB_SPECIALS_FNUZ: return 1u << (f->exp_bits + f->man_bits);
    case LB_SPECIALS_E8M0: return 0xFF;
    case LB_SPECIALS_NONE: break;
    }
    return signbit | maxc;
}

lb_status lb__encode_int(const lb_format_info *f, double x, lb_overflow mode, uint32_t *code)
{
    (void)mode;
    if (isnan(x)) return LB_ERR_NAN;
    /* Both overflow modes clamp: an integer has neither inf nor NaN. The
     * bounds are integers, so clamping before rounding is the same as after. */
    double v = x < f->min_finite ? f->min_finite : x > f->max_finite ? f->max_finite : x;
    long q = (long)lb__round_half_even(v);
    *code = (uint32_t)q & ((1u << f->bits) - 1);
    return LB_OK;
}

/* E8M0 holds only powers of two, 2^-127 .. 2^127, and has no zero:
 * NaN, 0 and negatives are NaN in ieee mode (as in ml_dtypes). */
lb_status lb__encode_e8m0(const lb_format_info *f, double x, lb_overflow mode, uint32_t *code)
{
    (void)f;
    if (isnan(x) || x <= 0 || signbit(x)) {
        *code = (mode == LB_SATURATE && !isnan(x)) ? 0x00 : 0xFF;
        return LB_OK;
    }
    if (isinf(x)) {
        *code = mode == LB_SATURATE ? 0xFE : 0xFF;
        return LB_OK;
    }
    double ax = x;
    int e = ilogb(ax);
    if (e < -127) return *code = 0x00, LB_OK; /* below the smallest value: nearest is 2^-127 */
    /* ax/2^e is in [1,2): the nearest power is 2^e or 2^(e+1); the tie at
     * 1.5 goes up (there is no mantissa bit to be even). */
    int k = (int)lb__round_half_even(ldexp(ax, -e));
    long c = (long)e + 127 + (k - 1);
    *code = c > 254 ? (mode == LB_SATURATE ? 0xFE : 0xFF) : (uint32_t)c;
    return LB_OK;
}

/* Sign/exponent/mantissa formats with subnormals: everything but e8m0. */
lb_status lb__encode_minifloat(const lb_format_info *f, double x, lb_overflow mode, uint32_t *code)
{
    if (isnan(x)) {
        if (!has_nan(f)) return LB_ERR_NAN;
        *code = lb__nan_code(f, float_bits((float)x));
        return LB_OK;
    }
    int negative = signbit(x) != 0;
    double ax = fabs(x);

    if (!f->sign_bits) { /* ue4m3: negatives lie below the range */
        if (negative && ax != 0) {
            *code = mode == LB_SATURATE ? 0x00 : lb__nan_code(f, 0x7FC00000);
            return LB_OK;
        }
        negative = 0;
    }
    if (isinf(x)) {
        *code = overflow_code(f, negative, mode);
        return LB_OK;
    }

    int m = f->man_bits, emin = 1 - f->bias;
    uint32_t signbit = (f->sign_bits && negative) ? 1u << (f->exp_bits + m) : 0;
    if (ax == 0) {
        *code = f->specials == LB_SPECIALS_FNUZ ? 0 : signbit;
        return LB_OK;
    }
    int e = ilogb(ax);
    if (e < emin) e = emin; /* subnormal range: the quantum stops shrinking */
    double k = lb__round_half_even(ldexp(ax, m - e)); /* ax / 2^(e-m), exact */
    if (k == 0) { /* rounded to zero */
        *code = f->specials == LB_SPECIALS_FNUZ ? 0 : signbit;
        return LB_OK;
    }
    /* k is in [2^m, 2^(m+1)] for normals and < 2^m for subnormals; adding it
     * to the exponent field lets a carry (k = 2^(m+1)) bump the exponent. */
    uint64_t mag = ((uint64_t)(e - emin) << m) + (uint64_t)k;
    if (mag > lb__max_magnitude_code(f)) {
        *code = overflow_code(f, negative, mode);
        return LB_OK;
    }
    *code = signbit | (uint32_t)mag;
    return LB_OK;
}

static uint32_t fp32_bits_of(double v) { return float_bits((float)v); }

#define QNAN_BITS 0x7FC00000u

uint32_t lb__decode_int(const lb_format_info *f, uint32_t code)
{
    code &= (1u << f->bits) - 1;
    int32_t v = (int32_t)code;
    if (f->sign_bits && (code >> (f->bits - 1))) v -= (int32_t)1 << f->bits;
    return fp32_bits_of((double)v);
}

uint32_t lb__decode_e8m0(const lb_format_info *f, uint32_t code)
{
    (void)f;
    code &= 0xFF;
    return code == 0xFF ? QNAN_BITS : fp32_bits_of(ldexp(1.0, (int)code - 127));
}

uint32_t lb__decode_minifloat(const lb_format_info *f, uint32_t code)
{
    const uint32_t qnan = QNAN_BITS;
    code &= f->bits == 32 ? 0xFFFFFFFFu : (1u << f->bits) - 1;
    int m = f->man_bits, width = f->exp_bits + m;
    uint32_t mag = code & ((1u << width) - 1);
    uint32_t sign = f->sign_bits ? (code >> width) & 1 : 0;
    uint32_t expf = mag >> m, man = mag & ((1u << m) - 1);
    if (!f->sign_bits && (code >> width)) return qnan; /* ue4m3 with the sign bit set */
    switch (f->specials) {
    case LB_SPECIALS_IEEE:
        if (expf == (1u << f->exp_bits) - 1) /* inf, or NaN with its payload kept */
            return (sign << 31) | 0x7F800000 | (man << (23 - m));
        break;
    case LB_SPECIALS_FN:
        if (mag == (1u << width) - 1) return (sign << 31) | 0x7F800000 | (man << (23 - m));
        break;
    case LB_SPECIALS_FNUZ:
        if (sign && mag == 0) return qnan;
        break;
    case LB_SPECIALS_NONE: /* every code is a number */
    case LB_SPECIALS_E8M0: /* decoded before this point */
        break;
    }
    double v = expf == 0 ? ldexp((double)man, 1 - f->bias - m)
                         : ldexp((double)(man | (1u << m)), (int)expf - f->bias - m);
    return (sign << 31) | fp32_bits_of(v);
}

/* ===== Public scalar API ===== */

#include <fenv.h>

#include "util/error.h"

/* Like the bulk kernels, the scalar API runs in the default FP environment. */
lb_status lb_encode_value(lb_format fmt, double x, lb_overflow mode, uint32_t *code)
{
    const lb_format_info *f = lb_format_get(fmt);
    if (!f) return lb__fail(LB_ERR_FORMAT, "format id %d is not in the format table", (int)fmt);
    if (!code) return lb__fail(LB_ERR_ARG, "lb_encode_value: code is NULL");
    if (mode != LB_SATURATE && mode != LB_IEEE) return lb__fail(LB_ERR_ARG, "unknown overflow mode %d", (int)mode);
    fenv_t caller;
    fegetenv(&caller);
    fesetenv(FE_DFL_ENV);
    lb_status s = f->encode(f, x, mode, code);
    fesetenv(&caller);
    if (s == LB_ERR_NAN) return lb__fail(s, "NaN cannot be encoded in %s: the format has no NaN", f->name);
    return s;
}

lb_status lb_decode_value(lb_format fmt, uint32_t code, float *out)
{
    const lb_format_info *f = lb_format_get(fmt);
    if (!f) return lb__fail(LB_ERR_FORMAT, "format id %d is not in the format table", (int)fmt);
    if (!out) return lb__fail(LB_ERR_ARG, "lb_decode_value: out is NULL");
    if (f->bits < 32 && (code >> f->bits))
        return lb__fail(LB_ERR_ARG, "code 0x%X does not fit in %d-bit %s", code, f->bits, f->name);
    fenv_t caller;
    fegetenv(&caller);
    fesetenv(FE_DFL_ENV);
    uint32_t b = f->decode(f, code);
    fesetenv(&caller);
    memcpy(out, &b, sizeof b);
    return LB_OK;
}
