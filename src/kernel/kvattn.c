/* Decode attention on a quantized KV cache's codes: the run decoder, the
 * scalar products (the reference, and NEON's path, as for the fp32
 * products) and the dispatch (see kvattn.h). */
#include "kernel/kvattn.h"

#include <math.h>

#include "util/cpu.h"

float lb__kv_value(lb_format f, const uint8_t *codes, size_t j, float s, uint32_t nan_bits)
{
    switch (f) {
    case LB_FMT_FP32: return lb__kv_f32_value(codes, j);
    case LB_FMT_BF16: return lb__kv_bf16_value(lb__kv_code16(codes, j));
    case LB_FMT_FP16: return lb__kv_half_value(lb__kv_code16(codes, j));
    case LB_FMT_FP8_E4M3: return lb__kv_e4m3_value(codes[j], nan_bits) * s;
    case LB_FMT_FP8_E5M2: return lb__kv_e5m2_value(codes[j]) * s;
    case LB_FMT_INT8: return lb__kv_int8_value(codes[j]) * s;
    case LB_FMT_INT4: return lb__kv_int4_value(lb__kv_nibble(codes, j)) * s;
    /* no cache holds these (lb__kv_format_check): NaN, never another format's values */
    case LB_FMT_FP8_E4M3FNUZ: case LB_FMT_FP8_E5M2FNUZ: case LB_FMT_FP6_E2M3:
    case LB_FMT_FP6_E3M2: case LB_FMT_FP4_E2M1: case LB_FMT_E8M0: case LB_FMT_UE4M3: case LB_FMT_UINT8:
    case LB_FMT_UINT4: case LB_FMT_COUNT: break;
    }
    return NAN;
}

/* Values per block of the row loops. gcc -O2 vectorizes only loops of a
 * constant trip count that no aliasing check guards ("very cheap" cost
 * model): hence inner loops of BLOCK values over restrict pointers, and
 * the rest of a row element by element with the same function. */
#define BLOCK 16

/* 4-bit codes spread to bytes this many at a time (even: each piece starts
 * on a byte). */
#define PIECE 256

/* ROW(value of code j, times S(j)): buf[0..n), BLOCK values at a time,
 * then the rest. */
#define ROW(VALUE)                                                  \
    do {                                                            \
        size_t d = 0;                                               \
        for (; d + BLOCK <= n; d += BLOCK)                          \
            for (size_t j = d; j < d + BLOCK; j++) buf[j] = VALUE;  \
        for (size_t j = d; j < n; j++) buf[j] = VALUE;              \
    } while (0)

/* Per format, a V row (n values, one scale s) and a K panel row (NR
 * positions' values of one d, scale sc[j] for lane j): value x scale, one
 * fp32 rounding (a NaN scale makes the values NaN); bf16 and fp16 have no
 * scale. int4 spreads its nibbles to bytes first: plain loops that
 * vectorize, where converting nibble by nibble does not. */
#define DECODERS(name, VALUE, TIMES_ROW, TIMES_LANE)                                                 \
    static void row_##name(const uint8_t *restrict src, size_t n, float s, uint32_t nan_bits,             \
                           float *restrict buf)                                                           \
    {                                                                                                     \
        (void)s, (void)nan_bits;                                                                          \
        ROW(VALUE(src, j) TIMES_ROW);                                                                     \
    }                                                                                                     \
    static void lanes_##name(const uint8_t *restrict src, const float *restrict sc, uint32_t nan_bits,    \
                             float *restrict buf)                                                         \
    {                                                                                                     \
        (void)sc, (void)nan_bits;                                                                         \
        for (size_t j = 0; j < LB__MM_NR; j++) buf[j] = VALUE(src, j) TIMES_LANE;                         \
    }
#define F32(src, j) lb__kv_f32_value(src, j)
#define BF16(src, j) lb__kv_bf16_value(lb__kv_code16(src, j))
#define FP16(src, j) lb__kv_half_value(lb__kv_code16(src, j))
#define E4M3(src, j) lb__kv_e4m3_value(src[j], nan_bits)
#define E5M2(src, j) lb__kv_e5m2_value(src[j])
#define INT8(src, j) lb__kv_int8_value(src[j])
#define INT4(src, j) lb__kv_int4_value(src[j]) /* src: one code per byte */
DECODERS(f32, F32, , )
DECODERS(bf16, BF16, , )
DECODERS(fp16, FP16, , )
DECODERS(e4m3, E4M3, *s, *sc[j])
DECODERS(e5m2, E5M2, *s, *sc[j])
DECODERS(int8, INT8, *s, *sc[j])
DECODERS(int4_bytes, INT4, *s, *sc[j])

/* 4-bit codes spread to one per byte, n of them (at most PIECE). */
static void spread_nibbles(const uint8_t *restrict src, size_t n, uint8_t *restrict dst)
{
    for (size_t b = 0; b < n / 2; b++) {
        dst[2 * b] = src[b] & 0x0Fu;
        dst[2 * b + 1] = src[b] >> 4;
    }
    if (n % 2) dst[n - 1] = src[n / 2] & 0x0Fu;
}

void lb__kv_decode_run(lb_format f, const uint8_t *src, size_t n, float s, const float *sc, uint32_t nan_bits,
                       float *buf)
{
    switch (f) {
    case LB_FMT_FP32: sc ? lanes_f32(src, sc, 0, buf) : row_f32(src, n, 1.0f, 0, buf); break;
    case LB_FMT_BF16: sc ? lanes_bf16(src, sc, 0, buf) : row_bf16(src, n, 1.0f, 0, buf); break;
    case LB_FMT_FP16: sc ? lanes_fp16(src, sc, 0, buf) : row_fp16(src, n, 1.0f, 0, buf); break;
    case LB_FMT_FP8_E4M3: sc ? lanes_e4m3(src, sc, nan_bits, buf) : row_e4m3(src, n, s, nan_bits, buf); break;
    case LB_FMT_FP8_E5M2: sc ? lanes_e5m2(src, sc, 0, buf) : row_e5m2(src, n, s, 0, buf); break;
    case LB_FMT_INT8: sc ? lanes_int8(src, sc, 0, buf) : row_int8(src, n, s, 0, buf); break;
    case LB_FMT_INT4:
        for (size_t d0 = 0; d0 < n; d0 += PIECE) {
            uint8_t t[PIECE];
            size_t len = n - d0 < PIECE ? n - d0 : PIECE;
            spread_nibbles(src + d0 / 2, len, t);
            if (sc) lanes_int4_bytes(t, sc, 0, buf);
            else row_int4_bytes(t, len, s, 0, buf + d0);
        }
        break;
    /* no cache holds these: NaN, never another format's values */
    case LB_FMT_FP8_E4M3FNUZ: case LB_FMT_FP8_E5M2FNUZ: case LB_FMT_FP6_E2M3: case LB_FMT_FP6_E3M2:
    case LB_FMT_FP4_E2M1: case LB_FMT_E8M0: case LB_FMT_UE4M3: case LB_FMT_UINT8: case LB_FMT_UINT4:
    case LB_FMT_COUNT:
        for (size_t j = 0; j < n; j++) buf[j] = NAN;
        break;
    }
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
            lb__kv_decode_run(k->format, panel + d * pr, nr, 1.0f, k->scales ? k->scales + p0 : NULL, k->nan_bits, w);
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
            lb__kv_decode_run(v->format, row, width, v->scales ? v->scales[t] : 1.0f, NULL, v->nan_bits, w);
            for (size_t r = 0; r < mr; r++)
                for (size_t i = 0; i < width; i++) acc[r][i] += p[r * ldp + t] * w[i];
        }
        for (size_t r = 0; r < mr; r++)
            for (size_t i = 0; i < width; i++) o[r * ldo + d0 + i] = acc[r][i];
    }
}

static const lb__kv_kernels scalar = {scores_scalar, mix_scalar};

/* Whether a cache holds format f (the vector sets convert only those). */
static int cache_format(lb_format f)
{
    switch (f) {
    case LB_FMT_FP32: case LB_FMT_BF16: case LB_FMT_FP16: case LB_FMT_FP8_E4M3: case LB_FMT_FP8_E5M2:
    case LB_FMT_INT8: case LB_FMT_INT4:
        return 1;
    case LB_FMT_FP8_E4M3FNUZ: case LB_FMT_FP8_E5M2FNUZ: case LB_FMT_FP6_E2M3: case LB_FMT_FP6_E3M2:
    case LB_FMT_FP4_E2M1: case LB_FMT_E8M0: case LB_FMT_UE4M3: case LB_FMT_UINT8: case LB_FMT_UINT4:
    case LB_FMT_COUNT:
        break;
    }
    return 0;
}

static const lb__kv_kernels *kernels_for(lb_format f, lb_isa isa)
{
    /* a format no cache holds: the scalar products, which read it as NaN */
    if (!cache_format(f)) return &scalar;
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
    /* rows in panels (an fp32 cache's V): each panel's NR values a view
     * of their own, whose outputs are those values' */
    size_t run = v->panel_stride ? LB__MM_NR : v->head_dim;
    for (size_t d0 = 0; d0 < v->head_dim; d0 += run) {
        lb__kv_view part = *v;
        part.codes += d0 / run * v->panel_stride;
        part.head_dim = v->head_dim - d0 < run ? v->head_dim - d0 : run;
        for (size_t r = 0; r < mr; r += LB__KV_ROWS)
            kk->mix(&part, p + r * ldp, ldp, mr - r < LB__KV_ROWS ? mr - r : LB__KV_ROWS, len, o + r * ldo + d0, ldo);
    }
}
