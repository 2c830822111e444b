/* The AVX-512 decode kernels' row loops and element decoders (qdot.h's
 * order, bit for bit the scalar reference), shared by qdot_avx512.c and
 * qdot_vbmi.c, which instantiates them for the kinds that need AVX-512 VBMI.
 *
 * Four rows (from four streams of the range: kernel/row_streams.h) and all
 * tokens are in flight, so each chunk's x is loaded once for four rows and
 * 4 * nx independent FMA chains hide the latency. A
 * chunk's 16 partial sums p[0..15] are one zmm (C = 32: the low nibbles,
 * the even elements, go first, then the high ones; x is staged in that
 * order). The element decoders, per kind (lb__qkind):
 *   F32/BF16/F16  load, shift, vcvtph2ps: exact.
 *   E4M3          ((c & 0x7f) << 7) | ((c & 0x80) << 8) is the fp16 of value * 2^-8
 *                 (same exponent field and mantissa, fp16's bias 15 vs 7): formed as
 *                 (sign-extended c << 7) & 0xBFFF, for two chunks at once (32 words)
 *                 where they share a scale (pair_w); the NaN
 *                 codes S.1111.111 are patched to the reference's NaN. The 2^8 is
 *                 folded into the block's scale when mul * 2^8 is finite: then
 *                 h * (mul * 2^8) and (h * 2^8) * mul are the same real number (both
 *                 products of exact values) rounded once, so w is the same; else
 *                 v = h * 2^8 (exact) is formed first.
 *   E5M2          c << 8 is the fp16 of the same value (inf and NaN too).
 *   LUT8          (fnuz) the reference decoder's 256 values, gathered.
 *   I8/U8         sign/zero extension and vcvtdq2ps: exact.
 *   NIB           4-bit: per block the 16 possible w = (v - zp) * mul are computed
 *                 with the reference's expression, then vpermps picks them.
 *   SIX           6-bit: vpshufb puts each code's two bytes into its lane, vpsrlvd
 *                 aligns it, vpermt2ps looks the magnitude up and bit 5 is the sign
 *                 (negating is exact); then w = v * mul as the reference.
 *   SIX_VBMI      6-bit values that are small integers k times a power of two u
 *                 (fp6 e2m3: u = 1/8), two chunks (24 bytes) at once: vpermb puts
 *                 each 8 codes' 6 bytes in a qword, vpmultishiftqb moves code j to
 *                 byte j, vpermb looks k up in a 64-byte table, vpmovsxbd and
 *                 vcvtdq2ps make it exact fp32; u is folded into the scale where
 *                 mul * u is exact (the same real number rounded once), else v = k * u
 *                 (exact) is formed first. A sign on a zero magnitude is lost (k = 0):
 *                 w = +0 instead of -0 changes no sum, as every partial sum starts at
 *                 +0 and a zero product added to a sum leaves it (+0 + -0 = +0), and
 *                 inf * +-0 and NaN * +-0 give the same NaN.
 * w = (v - zp) * mul for affine, v * mul otherwise (equal to (v - 0) * mul: v - 0
 * only quiets a signaling NaN, which the product quiets anyway), v when plain.
 * Blocks must hold whole chunks (or the row be one block), except 4-bit
 * elements in blocks of 16 (nvfp4), which run_nib16 handles; other matrices,
 * e.g. int4:g48, fp6:g24 or g3, go to the scalar reference. */#ifndef LB_KERNEL_QDOT_AVX512_RUN_H
#define LB_KERNEL_QDOT_AVX512_RUN_H

#include <immintrin.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernel/qdot_internal.h"
#include "kernel/row_streams.h"
#include "kernel/qdot_scales_avx512.h"
#include "kernel/sum16_avx512.h"
#include "quant/qkernels.h"
#include "util/cpu.h"

#define INL static inline __attribute__((always_inline))
/* e4m3 in a matrix without NaN codes */
#define QK_E4M3_FINITE LB__QK_E4M3_FINITE
#define LB__QK_E4M3F QK_E4M3_FINITE /* for the instantiation macros below */
#define IS_E4M3(kind) ((kind) == LB__QK_E4M3 || (kind) == QK_E4M3_FINITE)
#define R LB__QDOT_ROWS
_Static_assert(LB__QDOT_ROWS == 4, "store_sums sums four rows at once");
/* kinds whose decoders take two chunks of one block at once (pair_w) */
#define PAIRS(kind) (IS_E4M3(kind) || (kind) == LB__QK_SIX_VBMI)
#define IS_SIX(kind) ((kind) == LB__QK_SIX || (kind) == LB__QK_SIX_VBMI)

/* One chunk of one row: its w vectors (w[0] for C = 16; C = 32: even, odd). */
INL void chunk_w(const lb__qkind kind, const int aff, const int fold, const uint8_t *s, const float *lut, __m512 tab,
                 __m512 t0, __m512 t1, __m512 mulv, __m512 zpv, int plain, __m512 *w)
{
    __m512 v;
    switch (kind) {
    case LB__QK_F32: v = _mm512_loadu_ps((const float *)s); break;
    case LB__QK_BF16:
        v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)s)), 16));
        break;
    case LB__QK_F16: v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)s)); break;
    case LB__QK_E4M3:
    case QK_E4M3_FINITE: {
        /* sign-extended, the code's bit 7 fills bits 8-15: << 7 puts the
         * sign at bit 15 and a stray one at bit 14, which the mask clears */
        __m256i c = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)s));
        __m256i h = _mm256_and_si256(_mm256_slli_epi16(c, 7), _mm256_set1_epi16((short)0xBFFF));
        /* the NaN codes S.1111.111 give magnitude 0x3F80, the only one that
         * carries into bit 14 when 0x80 is added: setting that bit makes the
         * fp16 exponent all ones, a NaN (-> fp32 S.7FF00000, the reference's);
         * two word ops instead of a compare and a masked move, and none for a
         * matrix known to hold no NaN code (lb__qmat.nan_free: ~20% faster) */
        if (kind == LB__QK_E4M3)
            h = _mm256_ternarylogic_epi32(h, _mm256_add_epi16(h, _mm256_set1_epi16(0x80)), _mm256_set1_epi16(0x4000),
                                          0xF8); /* A | (B & C) */
        v = _mm512_cvtph_ps(h);
        if (!fold) v = _mm512_mul_ps(v, _mm512_set1_ps(256.0f));
        break;
    }
    case LB__QK_E5M2:
        v = _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)s)), 8));
        break;
    case LB__QK_LUT8:
        v = _mm512_i32gather_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s)), lut, 4);
        break;
    case LB__QK_I8: v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)s))); break;
    case LB__QK_U8: v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s))); break;
    case LB__QK_NIB: {
        __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s));
        w[0] = _mm512_permutexvar_ps(b, tab); /* vpermps reads the index's low 4 bits: the low nibble */
        w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), tab);
        return;
    }
    case LB__QK_SIX:
    case LB__QK_SIX_VBMI: { /* 16 codes in 12 bytes; lane j of 4 codes starts at byte 3j */
        const __m512i shuf = _mm512_set4_epi32(0x80800302, 0x80800201, 0x80800100, 0x80800100);
        const __m512i step = _mm512_set_epi32(0x09090909, 0x09090909, 0x09090909, 0x09090909, 0x06060606, 0x06060606,
                                              0x06060606, 0x06060606, 0x03030303, 0x03030303, 0x03030303, 0x03030303,
                                              0, 0, 0, 0); /* + 3j to every byte of lane j */
        __m512i b = _mm512_broadcast_i32x4(_mm_maskz_loadu_epi8(0x0FFF, s));
        __m512i c = _mm512_shuffle_epi8(b, _mm512_add_epi8(shuf, step));
        c = _mm512_srlv_epi32(c, _mm512_set4_epi32(2, 4, 6, 0));
        __m512 mag = _mm512_permutex2var_ps(t0, c, t1); /* index bits 4:0 */
        v = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(mag), _mm512_slli_epi32(c, 26),
                                                          _mm512_set1_epi32((int)0x80000000u), 0x78)); /* A ^ (B & C) */
        break;
    }
    }
    if (plain) w[0] = v;
    else if (aff) w[0] = _mm512_mul_ps(_mm512_sub_ps(v, zpv), mulv);
    else w[0] = _mm512_mul_ps(v, mulv);
}

/* Rows in flight: row k of each of R streams of the range (row_streams.h),
 * each prefetched a line at a time as the chunks reach it; the staged
 * scales hold STREAM_STAGE rows of each stream. The data read and the
 * arithmetic are unchanged. */
#define STREAM_STAGE (LB__QDOT_STAGE_ROWS / R)
#define SCALES_AHEAD 4 /* staging batches whose scale codes are asked for ahead */
_Static_assert(R <= LB__STREAMS_MAX, "one stream per row in flight");

static void streams_init(lb__row_streams *s, const lb__qmat *m, const lb__qdot_plan *p, size_t r0, size_t r1)
{
    lb__row_streams_init(s, m, R, r0, r1);
    for (size_t i = 0; i < R; i++)
        for (size_t b = 1; b <= SCALES_AHEAD; b++)
            lb__prefetch_scale_rows(m, p->blocks, s->first[i] + b * STREAM_STAGE, STREAM_STAGE);
}

/* Row k of each stream: its codes, first staged scale and zero point (a
 * stream that has ended repeats the first's row; its sums are dropped),
 * and its chunks past `inplace` copied into tail[i] (a call inside the
 * chunk loop would keep the sums out of registers). Every STREAM_STAGE
 * rows the next batch of each stream is staged, into slot i. */
INL void stream_rows(const lb__qmat *m, const lb__qdot_plan *p, const lb__row_streams *s, size_t k, size_t inplace,
                     const uint8_t *row[R], const float *mu[R], const float *zp[R], uint8_t tail[R][2][64])
{
    const size_t nb = p->blocks;
    if (k % STREAM_STAGE == 0)
        for (size_t i = 0; i < R; i++) {
            if (k >= s->len[i]) continue;
            size_t r = s->first[i] + k, n = s->len[i] - k < STREAM_STAGE ? s->len[i] - k : STREAM_STAGE;
            lb__prefetch_scale_rows(m, nb, r + (SCALES_AHEAD + 1) * STREAM_STAGE, STREAM_STAGE);
            if (m->plain || p->affine || m->one_scale || m->block_rows > 1)
                lb__qdot_stage_scales(m, p, LB_ISA_AVX512, r, n, i * STREAM_STAGE);
            else
                lb__scales_to_f32_avx512(m->scale_format, m->scales + lb_format_bytes(m->scale_format, r * nb), n * nb,
                                         m->scale_mul, p->mul + i * STREAM_STAGE * nb);
        }
    _Pragma("GCC unroll 8")
    for (size_t i = 0; i < R; i++)
        lb__qdot_stream_slot(m, p, s, i, k, STREAM_STAGE, inplace, &row[i], &mu[i], &zp[i], tail[i]);
}

/* The lines of the rows `ahead` on, up to byte `upto` of them (from *pf). */
INL void prefetch_to(const uint8_t *const row[R], size_t *pf, size_t upto)
{
    for (; *pf < upto; *pf += 64)
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++) _mm_prefetch((const char *)row[i] + *pf, _MM_HINT_T1);
}

/* every (row, token) pair's 16 partial sums start at +0 */
INL void zero_sums(__m512 acc[R][LB__QDOT_MAX_NX], size_t nx)
{
    _Pragma("GCC unroll 8")
    for (size_t i = 0; i < R; i++)
        _Pragma("GCC unroll 8")
        for (size_t t = 0; t < nx; t++) acc[i][t] = _mm512_setzero_ps();
}

/* y for row k of each stream: each pair's 16 partial sums added in the fixed tree */
INL void store_sums(__m512 acc[R][LB__QDOT_MAX_NX], const lb__row_streams *s, size_t k, size_t nx, float *y, size_t ldy)
{
    _Pragma("GCC unroll 8")
    for (size_t t = 0; t < nx; t++) {
        float sums[4];
        _mm_storeu_ps(sums, lb__sum16f_x4_avx512(acc[0][t], acc[1][t], acc[2][t], acc[3][t]));
        for (size_t i = 0; i < R; i++)
            if (k < s->len[i]) y[t * ldy + s->first[i] + k] = sums[i];
    }
}

/* e4m3: whether 2^8 can be folded into this scale (see the top). */
static inline int foldable(float mul) { return !(fabsf(mul) >= 0x1p120f && fabsf(mul) <= 3.4028234663852886e38f); }

/* The factor pair_w's values need in the scale: 2^8 for e4m3, the 6-bit
 * unit for SIX_VBMI, else 1. */
INL float fold_factor(const lb__qkind kind, const lb__qdot_plan *p)
{
    return IS_E4M3(kind) ? 256.0f : kind == LB__QK_SIX_VBMI ? p->six_unit : 1.0f;
}

/* Whether mul * f is exact (or mul not finite), so that the factor can go
 * into the scale (see the top): e4m3's 2^8 overflows only from 2^120 up,
 * the 6-bit unit (< 1) loses bits only where the product is subnormal. */
INL int fold_ok(const lb__qkind kind, float mul, float f)
{
    if (IS_E4M3(kind)) return foldable(mul);
    float g = mul * f;
    return !(fabsf(g) < FLT_MIN && g != 0.0f);
}

#if defined(__AVX512VBMI__)
/* SIX_VBMI: the integers k of 32 codes (two chunks, 24 bytes at s) as
 * bytes 0-31 of the result (see the top). */
INL __m512i six_units32(const uint8_t *s, __m512i units)
{
    const __m256i spread = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 0, 0, 6, 7, 8, 9, 10, 11, 0, 0, 12, 13, 14, 15, 16, 17, 0,
                                            0, 18, 19, 20, 21, 22, 23, 0, 0); /* qword j: bytes 6j .. 6j + 5 */
    const __m256i at = _mm256_set1_epi64x(0x2A241E18120C0600ll); /* byte j of a qword: bits 6j .. 6j + 7 */
    __m256i b = _mm256_maskz_loadu_epi8(0x00FFFFFF, s);
    __m256i codes = _mm256_multishift_epi64_epi8(at, _mm256_permutexvar_epi8(spread, b));
    return _mm512_permutexvar_epi8(_mm512_castsi256_si512(codes), units); /* vpermb reads an index's low 6 bits */
}
#endif

/* Two chunks c, c + 1 of one row in one scale block (PAIRS kinds): their w
 * as chunk_w gives them. mulv is the scale times fold_factor when fold,
 * else the scale. */
INL void pair_w(const lb__qkind kind, const int fold, const uint8_t *s, const lb__qdot_plan *p, __m512 mulv,
                __m512 w[2])
{
    __m512 v0, v1;
    if (kind == LB__QK_SIX_VBMI) {
#if defined(__AVX512VBMI__)
        __m512i k = six_units32(s, _mm512_load_si512(p->six_units));
        v0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_castsi512_si128(k)));
        v1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm512_extracti32x4_epi32(k, 1)));
        if (!fold) {
            v0 = _mm512_mul_ps(v0, _mm512_set1_ps(p->six_unit)), v1 = _mm512_mul_ps(v1, _mm512_set1_ps(p->six_unit));
        }
#else
        (void)p;
        __builtin_unreachable(); /* instantiated only where the build has VBMI (qdot_vbmi.c) */
#endif
    } else {
        __m512i h = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)s)), 7),
                                     _mm512_set1_epi16((short)0xBFFF));
        if (kind == LB__QK_E4M3) /* the NaN codes, as chunk_w */
            h = _mm512_ternarylogic_epi32(h, _mm512_add_epi16(h, _mm512_set1_epi16(0x80)), _mm512_set1_epi16(0x4000),
                                          0xF8);
        v0 = _mm512_cvtph_ps(_mm512_castsi512_si256(h)), v1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
        if (!fold) v0 = _mm512_mul_ps(v0, _mm512_set1_ps(256.0f)), v1 = _mm512_mul_ps(v1, _mm512_set1_ps(256.0f));
    }
    w[0] = _mm512_mul_ps(v0, mulv), w[1] = _mm512_mul_ps(v1, mulv);
}

/* Chunks c and c + 1 (one block) of R rows for every token: pair_w with
 * row i's scale mul[i] (times fold_factor where fold[i]), then the two
 * chunks' fmas in order, as single chunks would add them. */
INL void pair_step(const lb__qkind kind, const lb__qdot_plan *p, const size_t nx, size_t c, const uint8_t *const row[R],
                   const int fold[R], const __m512 mul[R], __m512 acc[R][LB__QDOT_MAX_NX])
{
    __m512 xa[LB__QDOT_MAX_NX], xb[LB__QDOT_MAX_NX];
    _Pragma("GCC unroll 8")
    for (size_t t = 0; t < nx; t++) {
        xa[t] = _mm512_loadu_ps(p->xs + t * p->xstride + c * 16);
        xb[t] = _mm512_loadu_ps(p->xs + t * p->xstride + c * 16 + 16);
    }
    _Pragma("GCC unroll 8")
    for (size_t i = 0; i < R; i++) {
        __m512 w[2];
        pair_w(kind, fold[i], row[i] + c * p->chunk_bytes, p, mul[i], w);
        _Pragma("GCC unroll 8")
        for (size_t t = 0; t < nx; t++) {
            acc[i][t] = _mm512_fmadd_ps(xa[t], w[0], acc[i][t]);
            acc[i][t] = _mm512_fmadd_ps(xb[t], w[1], acc[i][t]);
        }
    }
}

INL void run(const lb__qmat *m, const lb__qdot_plan *p, const lb__qkind kind, const int aff, const size_t nx, size_t r0,
             size_t r1, float *y, size_t ldy)
{
    const size_t C = kind == LB__QK_NIB ? 32 : 16, cb = p->chunk_bytes, nch = p->nch, xst = p->xstride;
    const size_t inplace = lb__qdot_inplace_chunks(m, p, IS_SIX(kind) ? 12 : cb);
    const int plain = p->plain;
    const float ff = fold_factor(kind, p);
    const __m512 lut16 = kind == LB__QK_NIB ? _mm512_loadu_ps(p->lut) : _mm512_setzero_ps();
    const __m512 t0 = IS_SIX(kind) ? _mm512_loadu_ps(p->lut) : _mm512_setzero_ps();
    const __m512 t1 = IS_SIX(kind) ? _mm512_loadu_ps(p->lut + 16) : _mm512_setzero_ps();
    _Alignas(64) uint8_t tail[R][2][64]; /* a row's chunks past `inplace`: at most 2 (qdot_internal.h) */
    lb__row_streams rs;
    streams_init(&rs, m, p, r0, r1);
    for (size_t k = 0; k < rs.per; k++) {
        const uint8_t *row[R];
        const float *mu[R], *zp[R];
        stream_rows(m, p, &rs, k, inplace, row, mu, zp, tail);
        __m512 acc[R][LB__QDOT_MAX_NX];
        zero_sums(acc, nx);
        size_t pf = rs.ahead; /* the next line of the rows ahead to ask for */
        for (size_t c = 0, b = 0; c < nch; b++) { /* block b holds chunks [b * cpb, (b + 1) * cpb) */
            size_t cend = (b + 1) * p->cpb;
            if (cend > nch) cend = nch;
            __m512 mulv[R], mulf[R], zpv[R], tab[R];
            int fold = 1; /* pair_w's factor goes into all R scales or none */
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                float mul = plain ? 1.0f : mu[i][b];
                if (PAIRS(kind)) fold &= fold_ok(kind, mul, ff);
                mulv[i] = _mm512_set1_ps(mul);
                zpv[i] = aff ? _mm512_set1_ps(zp[i][b]) : _mm512_setzero_ps();
                if (kind == LB__QK_NIB)
                    tab[i] = aff ? _mm512_mul_ps(_mm512_sub_ps(lut16, zpv[i]), mulv[i]) : _mm512_mul_ps(lut16, mulv[i]);
                else
                    tab[i] = lut16;
            }
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) mulf[i] = PAIRS(kind) && fold ? _mm512_mul_ps(mulv[i], _mm512_set1_ps(ff)) : mulv[i];
            if (PAIRS(kind)) {
                int folds[R];
                for (size_t i = 0; i < R; i++) folds[i] = fold;
                for (; c + 1 < cend && c + 1 < inplace; c += 2) {
                    prefetch_to(row, &pf, rs.ahead + (c + 2) * cb);
                    pair_step(kind, p, nx, c, row, folds, mulf, acc);
                }
            }
            for (; c < cend; c++) {
                prefetch_to(row, &pf, rs.ahead + (c + 1) * cb);
                __m512 xe[LB__QDOT_MAX_NX], xo[LB__QDOT_MAX_NX];
                _Pragma("GCC unroll 8")
                for (size_t t = 0; t < nx; t++) {
                    xe[t] = _mm512_loadu_ps(p->xs + t * xst + c * C);
                    xo[t] = C == 32 ? _mm512_loadu_ps(p->xs + t * xst + c * C + 16) : xe[t];
                }
                _Pragma("GCC unroll 8")
                for (size_t i = 0; i < R; i++) {
                    const uint8_t *s = row[i] + c * cb;
                    if (c >= inplace) s = tail[i][c - inplace];
                    __m512 w[2];
                    if (IS_E4M3(kind) && !fold) /* e4m3's single chunks take the folded scale too */
                        chunk_w(kind, aff, 0, s, p->lut, tab[i], t0, t1, mulf[i], zpv[i], plain, w);
                    else if (IS_E4M3(kind))
                        chunk_w(kind, aff, 1, s, p->lut, tab[i], t0, t1, mulf[i], zpv[i], plain, w);
                    else
                        chunk_w(kind, aff, 1, s, p->lut, tab[i], t0, t1, mulv[i], zpv[i], plain, w);
                    _Pragma("GCC unroll 8")
                    for (size_t t = 0; t < nx; t++) {
                        acc[i][t] = _mm512_fmadd_ps(xe[t], w[0], acc[i][t]);
                        if (C == 32) acc[i][t] = _mm512_fmadd_ps(xo[t], w[1], acc[i][t]);
                    }
                }
            }
        }
        store_sums(acc, &rs, k, nx, y, ldy);
    }
}

/* Whether a plan runs on run_b1 below rather than run (qdot_avx512.c and
 * qdot_vbmi.c choose alike). */
static inline int lb__qdot_takes_b1(const lb__qdot_plan *p)
{
    return !p->plain && (p->cpb == 1 || p->cpb == 2) && p->blocks > 1;
}

/* Blocks of one or two chunks (g32 and MX 4-bit; g16, g32 and MX 8-bit):
 * the block and chunk loops are one, chunk c taking its row's scale
 * c >> sh (sh = 0 or 1), so the per-block bookkeeping of run() (a few dozen
 * scalar instructions per block and row group) does not dominate. Same w,
 * same order. */
INL void run_b1(const lb__qmat *m, const lb__qdot_plan *p, const lb__qkind kind, const int aff, const size_t nx, size_t r0,
                size_t r1, float *y, size_t ldy)
{
    const unsigned sh = p->cpb == 2;
    const float ff = fold_factor(kind, p);
    const size_t C = kind == LB__QK_NIB ? 32 : 16, cb = p->chunk_bytes, nch = p->nch, xst = p->xstride;
    const size_t inplace = lb__qdot_inplace_chunks(m, p, IS_SIX(kind) ? 12 : cb);
    const __m512 lut16 = kind == LB__QK_NIB ? _mm512_loadu_ps(p->lut) : _mm512_setzero_ps();
    const __m512 t0 = IS_SIX(kind) ? _mm512_loadu_ps(p->lut) : _mm512_setzero_ps();
    const __m512 t1 = IS_SIX(kind) ? _mm512_loadu_ps(p->lut + 16) : _mm512_setzero_ps();
    _Alignas(64) uint8_t tail[R][2][64];
    lb__row_streams rs;
    streams_init(&rs, m, p, r0, r1);
    for (size_t k = 0; k < rs.per; k++) {
        const uint8_t *row[R];
        const float *mu[R], *zp[R];
        stream_rows(m, p, &rs, k, inplace, row, mu, zp, tail);
        __m512 acc[R][LB__QDOT_MAX_NX];
        zero_sums(acc, nx);
        size_t pf = rs.ahead; /* the next line of the rows ahead to ask for */
        size_t c = 0;
        if (PAIRS(kind) && sh) /* blocks of two chunks, one pair_w each while both lie in place */
            for (; c + 1 < nch && c + 1 < inplace; c += 2) {
                prefetch_to(row, &pf, rs.ahead + (c + 2) * cb);
                int folds[R];
                __m512 mulf[R];
                _Pragma("GCC unroll 8")
                for (size_t i = 0; i < R; i++) {
                    const float mul = mu[i][c >> 1];
                    folds[i] = fold_ok(kind, mul, ff);
                    mulf[i] = _mm512_set1_ps(folds[i] ? mul * ff : mul);
                }
                pair_step(kind, p, nx, c, row, folds, mulf, acc);
            }
        for (; c < nch; c++) {
            prefetch_to(row, &pf, rs.ahead + (c + 1) * cb);
            __m512 xe[LB__QDOT_MAX_NX], xo[LB__QDOT_MAX_NX];
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                xe[t] = _mm512_loadu_ps(p->xs + t * xst + c * C);
                xo[t] = C == 32 ? _mm512_loadu_ps(p->xs + t * xst + c * C + 16) : xe[t];
            }
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                const uint8_t *s = c < inplace ? row[i] + c * cb : tail[i][c - inplace];
                const float mul = mu[i][c >> sh];
                __m512 mulv = _mm512_set1_ps(mul), zpv = aff ? _mm512_set1_ps(zp[i][c >> sh]) : _mm512_setzero_ps();
                __m512 tab = lut16, w[2];
                if (kind == LB__QK_NIB)
                    tab = aff ? _mm512_mul_ps(_mm512_sub_ps(lut16, zpv), mulv) : _mm512_mul_ps(lut16, mulv);
                if (IS_E4M3(kind) && foldable(mul))
                    chunk_w(kind, aff, 1, s, p->lut, tab, t0, t1, _mm512_mul_ps(mulv, _mm512_set1_ps(256.0f)), zpv, 0, w);
                else
                    chunk_w(kind, aff, 0, s, p->lut, tab, t0, t1, mulv, zpv, 0, w);
                _Pragma("GCC unroll 8")
                for (size_t t = 0; t < nx; t++) {
                    acc[i][t] = _mm512_fmadd_ps(xe[t], w[0], acc[i][t]);
                    if (C == 32) acc[i][t] = _mm512_fmadd_ps(xo[t], w[1], acc[i][t]);
                }
            }
        }
        store_sums(acc, &rs, k, nx, y, ldy);
    }
}
#endif
