/* Activation rounding of llama.cpp's CPU matmuls (see ggml_act.h).
 *
 * The arithmetic follows the x86 build of the pinned ggml (AVX2 and the
 * repacked 4-row variants agree): Q8_0 and Q8_1 multiply by 127/amax and
 * round half to even (_mm256_round_ps), their scale amax/127 is stored as
 * fp16; Q8_K multiplies by -127/max (max: the signed value of largest
 * magnitude), rounds half to even (the 1.5*2^23 trick), caps at 127 and
 * keeps the scale 1/iscale in fp32. Scalar and deterministic: this is a
 * simulation, not a fast path. */
#include "model/ggml_act.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "util/error.h"

lb__ggml_act lb__ggml_act_type(lb_dtype w)
{
    switch (w) {
    case LB_DT_Q4_0: case LB_DT_Q5_0: case LB_DT_Q8_0: case LB_DT_IQ4_NL: case LB_DT_MXFP4: case LB_DT_NVFP4:
        return LB__GGML_ACT_Q8_0;
    case LB_DT_Q4_1: case LB_DT_Q5_1:
        return LB__GGML_ACT_Q8_1;
    case LB_DT_Q2_K: case LB_DT_Q3_K: case LB_DT_Q4_K: case LB_DT_Q5_K: case LB_DT_Q6_K: case LB_DT_IQ4_XS:
        return LB__GGML_ACT_Q8_K;
    case LB_DT_F16: return LB__GGML_ACT_F16;
    case LB_DT_BF16: return LB__GGML_ACT_BF16;
    case LB_DT_F32: case LB_DT_F64: case LB_DT_F8_E4M3: case LB_DT_F8_E5M2: case LB_DT_I8: case LB_DT_I16:
    case LB_DT_I32: case LB_DT_I64: case LB_DT_U8: case LB_DT_BOOL: case LB_DT_QUANTIZED: case LB_DT_COUNT:
        return LB__GGML_ACT_F32; /* no ggml matmul weight, or one it computes in fp32 */
    }
    return LB__GGML_ACT_F32;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* fp32 -> fp16 -> fp32, round half to even (F16C's vcvtps2ph, which ggml's
 * x86 build uses); overflow goes to infinity as there. */
static float via_fp16(float f)
{
    if (isnan(f)) return f;
    float a = fabsf(f);
    if (a >= 65520.0f) return copysignf(INFINITY, f); /* past the midpoint above 65504 */
    if (a < 6.103515625e-05f) { /* fp16 subnormal: a multiple of 2^-24 */
        float q = a * 16777216.0f;  /* exact: a power-of-two scale */
        float r = q + 12582912.0f - 12582912.0f; /* half to even for |q| < 2^22 */
        return copysignf(r / 16777216.0f, f);
    }
    uint32_t u = bits_of(f);
    u += 0xfffu + ((u >> 13) & 1u); /* to 10 mantissa bits; a carry rolls into the exponent */
    return float_of(u & ~0x1fffu);
}

/* fp32 -> bf16 -> fp32 as ggml's scalar conversion: half to even on the
 * top 16 bits, NaN kept quiet. */
static float via_bf16(float f)
{
    uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return float_of((u | 0x00400000u) & 0xffff0000u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return float_of(u & 0xffff0000u);
}

/* round half to even of v (|v| <= 2^22), as ggml's nearest_int and the
 * SSE/AVX rounding in the default mode */
static float nearest(float v)
{
    return (v + 12582912.0f) - 12582912.0f; /* C11 without fast-math keeps both roundings */
}

static void q8_0_block(const float *x, float *y) /* also Q8_1: the same codes and scale */
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = via_fp16(amax / 127.0f), id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < 32; j++) y[j] = d * nearest(x[j] * id); /* fp16 d x 8-bit code: exact in fp32 */
}

static void q8_k_block(const float *x, float *y)
{
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < 256; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    if (amax == 0.0f) {
        for (int j = 0; j < 256; j++) y[j] = 0.0f;
        return;
    }
    float iscale = -127.0f / max, d = 1.0f / iscale;
    for (int j = 0; j < 256; j++) {
        float q = nearest(iscale * x[j]);
        y[j] = d * (q > 127.0f ? 127.0f : q);
    }
}

lb_status lb__ggml_act_round(int act, const float *x, size_t n, float *y)
{
    if (act < LB__GGML_ACT_F32 || act > LB__GGML_ACT_Q8_K)
        return lb__fail(LB_ERR_ARG, "ggml activation rounding: %d is no vec_dot type", act);
    size_t block = act == LB__GGML_ACT_Q8_0 || act == LB__GGML_ACT_Q8_1 ? 32 : act == LB__GGML_ACT_Q8_K ? 256 : 1;
    if (n % block) return lb__fail(LB_ERR_ARG, "ggml activation rounding: %zu values are no whole %zu-blocks", n, block);
    switch ((lb__ggml_act)act) {
    case LB__GGML_ACT_Q8_0: case LB__GGML_ACT_Q8_1:
        for (size_t i = 0; i < n; i += 32) q8_0_block(x + i, y + i);
        return LB_OK;
    case LB__GGML_ACT_Q8_K:
        for (size_t i = 0; i < n; i += 256) q8_k_block(x + i, y + i);
        return LB_OK;
    case LB__GGML_ACT_F16:
        for (size_t i = 0; i < n; i++) y[i] = via_fp16(x[i]);
        return LB_OK;
    case LB__GGML_ACT_BF16:
        for (size_t i = 0; i < n; i++) y[i] = via_bf16(x[i]);
        return LB_OK;
    case LB__GGML_ACT_F32:
        if (y != x) memmove(y, x, n * sizeof *y);
        return LB_OK;
    }
    return LB_OK;
}
