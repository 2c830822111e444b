/* Decode attention on a quantized KV cache's codes: the run decoder, the
 * scalar products (the reference, and NEON's path, as for the fp32
 * products) and the dispatch (see kvattn.h). */
#include "kernel/kvattn.h"

#include <math.h>

#include "util/cpu.h"

float lb__kv_value(lb_format f, const uint8_t *codes, size_t j, float s, uint32_t nan_bits)
{
    switch (f) {
    case LB_FMT_BF16: return lb__kv_bf16_value(lb__kv_code16(codes, j));
    case LB_FMT_FP16: return lb__kv_half_value(lb__kv_code16(codes, j));
    case LB_FMT_FP8_E4M3: return lb__kv_e4m3_value(codes[j], nan_bits) * s;
    case LB_FMT_FP8_E5M2: return lb__kv_e5m2_value(codes[j]) * s;
    case LB_FMT_INT8: return lb__kv_int8_value(codes[j]) * s;
    case LB_FMT_INT4: return lb__kv_int4_value(lb__kv_nibble(codes, j)) * s;
    /* no cache holds these (lb__kv_format_check): NaN, never another format's values */
    case LB_FMT_FP32: case LB_FMT_FP8_E4M3FNUZ: case LB_FMT_FP8_E5M2FNUZ: case LB_FMT_FP6_E2M3:
    case LB_FMT_FP6_E3M2: case LB_FMT_FP4_E2M1: case LB_FMT_E8M0: case LB_FMT_UE4M3: case LB_FMT_UINT8:
    case LB_FMT_UINT4: case LB_FMT_COUNT: break;
    }
    return NAN;
}

/* n (<= NR) values of a run of codes, value j times scales[j] (the K
 * panels' per-position scales) or times scales[0] (a V row's). */
static void run_values(const lb__kv_view *v, const uint8_t *codes, size_t n, const float *scales, int per_lane,
                       float *out)
{
    int scaled = v->scales != NULL;
    for (size_t j = 0; j < n; j++)
        out[j] = lb__kv_value(v->format, codes, j, scaled ? scales[per_lane ? j : 0] : 1.0f, v->nan_bits);
}

static void scores_scalar(const lb__kv_view *k, const float *q, size_t ldq, size_t mr, size_t len, float *s,
                          size_t lds)
{
    size_t nr = LB__MM_NR, hd = k->head_dim, pr = lb_format_bytes(k->format, nr);
    float w[LB__MM_NR], acc[LB__KV_ROWS][LB__MM_NR];
    for (size_t p0 = 0; p0 < len; p0 += nr) {
        size_t np = len - p0 < nr ? len - p0 : nr;
        const uint8_t *panel = k->codes + p0 / nr * hd * pr;
        for (size_t r = 0; r < mr; r++)
            for (size_t i = 0; i < nr; i++) acc[r][i] = 0.0f;
        for (size_t d = 0; d < hd; d++) {
            run_values(k, panel + d * pr, nr, k->scales ? k->scales + p0 : NULL, 1, w);
            for (size_t r = 0; r < mr; r++)
                for (size_t i = 0; i < nr; i++) acc[r][i] += q[r * ldq + d] * w[i];
        }
        for (size_t r = 0; r < mr; r++)
            for (size_t i = 0; i < np; i++) s[r * lds + p0 + i] = acc[r][i];
    }
}

static void mix_scalar(const lb__kv_view *v, const float *p, size_t ldp, size_t mr, size_t len, float *o, size_t ldo)
{
    size_t nr = LB__MM_NR, hd = v->head_dim, bits = lb_format_get(v->format)->bits;
    float w[LB__MM_NR], acc[LB__KV_ROWS][LB__MM_NR];
    for (size_t d0 = 0; d0 < hd; d0 += nr) { /* d0 a multiple of NR: a whole byte into a 4-bit row */
        size_t width = hd - d0 < nr ? hd - d0 : nr;
        for (size_t r = 0; r < mr; r++)
            for (size_t i = 0; i < width; i++) acc[r][i] = 0.0f;
        for (size_t t = 0; t < len; t++) {
            const uint8_t *row = v->codes + t * v->stride + d0 * bits / 8;
            run_values(v, row, width, v->scales ? v->scales + t : NULL, 0, w);
            for (size_t r = 0; r < mr; r++)
                for (size_t i = 0; i < width; i++) acc[r][i] += p[r * ldp + t] * w[i];
        }
        for (size_t r = 0; r < mr; r++)
            for (size_t i = 0; i < width; i++) o[r * ldo + d0 + i] = acc[r][i];
    }
}

static const lb__kv_kernels scalar = {scores_scalar, mix_scalar};

static const lb__kv_kernels *kernels_for(lb_format f, lb_isa isa)
{
    /* a format no cache holds: the scalar products, which read it as NaN */
    if (isnan(lb__kv_value(f, (const uint8_t[2]){0, 0}, 0, 1.0f, 0))) return &scalar;
    isa = lb__isa_x86(lb__isa_clamp(isa)); /* x86 only: NEON runs the scalar products, as the fp32 ones */
    if (isa >= LB_ISA_AVX512 && lb__kv_avx512.scores) return &lb__kv_avx512;
    if (isa >= LB_ISA_AVX2 && lb__kv_avx2.scores) return &lb__kv_avx2;
    return &scalar;
}

void lb__kv_scores(const lb__kv_view *k, const float *q, size_t ldq, size_t mr, size_t len, float *s, size_t lds,
                   lb_isa isa)
{
    const lb__kv_kernels *kk = kernels_for(k->format, isa);
    for (size_t r = 0; r < mr; r += LB__KV_ROWS)
        kk->scores(k, q + r * ldq, ldq, mr - r < LB__KV_ROWS ? mr - r : LB__KV_ROWS, len, s + r * lds, lds);
}

void lb__kv_mix(const lb__kv_view *v, const float *p, size_t ldp, size_t mr, size_t len, float *o, size_t ldo,
                lb_isa isa)
{
    const lb__kv_kernels *kk = kernels_for(v->format, isa);
    for (size_t r = 0; r < mr; r += LB__KV_ROWS)
        kk->mix(v, p + r * ldp, ldp, mr - r < LB__KV_ROWS ? mr - r : LB__KV_ROWS, len, o + r * ldo, ldo);
}
