/* AVX2 decode kernels: qdot.h's order, bit for bit the scalar reference.
 * The layout of qdot_avx512.c with two ymm per 16 partial sums (p[0..7],
 * p[8..15]); rows in flight: 2 for nx <= 2, else 1 (the 16 registers), from
 * separate streams of the range (stream_rows below). The
 * element decoders differ where AVX2 lacks an instruction:
 *   NIB  a 16-entry table of w in two ymm: vpermps with the index's low 3
 *        bits in each, vblendvps on bit 3 (moved to the sign bit).
 *   SIX  arithmetic: the 5 magnitude bits placed at fp32's exponent/mantissa
 *        boundary with the exponent rebiased make the value itself (a
 *        subnormal code: field 1, minus the smallest normal; see six8),
 *        the code's bit 5 is the sign; then w = v * mul.
 * The rest (E4M3's fp16 pattern and its folding, E5M2, gathers for fnuz,
 * integer conversion) is qdot_avx512.c's, where the argument is given.
 * Blocks must hold whole chunks (or the row be one block), except 4-bit
 * elements in blocks of 16 (nvfp4, int4:g16, uint4:g16:affine,
 * fp4_e2m1:g16), which run_nib16 handles; other matrices whose blocks split
 * a chunk (int4:g48, int8:g3, fp6_e3m2:g24, ...) go to the scalar reference. */
#include "kernel/qdot_internal.h"

#if defined(__x86_64__)

#include "kernel/row_streams.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant/qkernels.h"

#define INL static inline __attribute__((always_inline))

/* 8-lane sign-or-zero extension of 8 bytes at s */
INL __m256i bytes8(const uint8_t *s, int sign)
{
    __m128i b = _mm_loadl_epi64((const __m128i *)s);
    return sign ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
}

/* 16-entry lookup: tlo holds entries 0..7, thi 8..15 */
INL __m256 lut16(__m256i idx, __m256 tlo, __m256 thi)
{
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(tlo, idx), _mm256_permutevar8x32_ps(thi, idx),
                            _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

/* 6-bit: 8 codes starting at byte s (6 bytes; 16 may be read) */
INL __m256 six8(const uint8_t *s, int e3m2)
{
    const __m256i shuf = _mm256_setr_epi32(0x80800100, 0x80800100, 0x80800201, 0x80800302, 0x80800403, 0x80800403,
                                           0x80800504, 0x80800605);
    __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)s));
    __m256i c = _mm256_srlv_epi32(_mm256_shuffle_epi8(b, shuf), _mm256_setr_epi32(0, 6, 4, 2, 0, 6, 4, 2));
    /* the exponent field e moved up by the fp32 bias less the format's
     * (126 for e2m3, 124 for e3m2): a normal code is then its own value;
     * a subnormal one (e = 0) takes field 1 -- 1.mmm times the smallest
     * normal -- and that power of two subtracted leaves 0.mmm times it,
     * exactly (Sterbenz). No fp32 subnormal is formed: multiplying those
     * took a microcode assist per operand, and fp6_e2m3 decoded at 0.5
     * GB/s (e3m2, with fewer such codes, at 3.5). */
    const int sh = e3m2 ? 21 : 20;
    const __m256i emask = _mm256_set1_epi32(e3m2 ? 0x1C : 0x18); /* the code's exponent bits */
    const __m256i bias = _mm256_set1_epi32((e3m2 ? 124 : 126) << 23), one = _mm256_set1_epi32(1 << 23);
    const __m256 least = _mm256_set1_ps(e3m2 ? 0x1p-2f : 1.0f); /* the smallest normal value */
    __m256i sub = _mm256_cmpeq_epi32(_mm256_and_si256(c, emask), _mm256_setzero_si256());
    __m256i mag = _mm256_and_si256(_mm256_slli_epi32(c, sh), _mm256_set1_epi32(0x1F << sh));
    mag = _mm256_add_epi32(_mm256_add_epi32(mag, bias), _mm256_and_si256(sub, one));
    __m256 f = _mm256_sub_ps(_mm256_castsi256_ps(mag), _mm256_and_ps(_mm256_castsi256_ps(sub), least));
    __m256i sign = _mm256_and_si256(_mm256_slli_epi32(c, 26), _mm256_set1_epi32((int)0x80000000u));
    return _mm256_or_ps(f, _mm256_castsi256_ps(sign));
}

INL __m256 f16x8(__m128i h) { return _mm256_cvtph_ps(h); }

/* One chunk of one row: w[0], w[1] (C = 16: p lanes 0-7, 8-15); C = 32:
 * even 0-7, even 8-15, odd 0-7, odd 8-15. */
INL void chunk_w(const lb__qkind kind, const int aff, const int fold, const int e3m2, const uint8_t *s, const float *lut,
                 __m256 tlo, __m256 thi, __m256 mulv, __m256 zpv, int plain, __m256 *w)
{
    __m256 v[2];
    switch (kind) {
    case LB__QK_F32:
        v[0] = _mm256_loadu_ps((const float *)s), v[1] = _mm256_loadu_ps((const float *)s + 8);
        break;
    case LB__QK_BF16:
        for (int h = 0; h < 2; h++)
            v[h] = _mm256_castsi256_ps(
                _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + 16 * h))), 16));
        break;
    case LB__QK_F16:
        v[0] = f16x8(_mm_loadu_si128((const __m128i *)s)), v[1] = f16x8(_mm_loadu_si128((const __m128i *)(s + 16)));
        break;
    case LB__QK_E4M3:
    case LB__QK_E4M3_FINITE: {
        __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)s));
        __m256i h = _mm256_slli_epi16(_mm256_add_epi16(c, _mm256_and_si256(c, _mm256_set1_epi16(0x80))), 7);
        __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x7F)), _mm256_set1_epi16(0x7F));
        h = _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7F80)));
        v[0] = f16x8(_mm256_castsi256_si128(h)), v[1] = f16x8(_mm256_extracti128_si256(h, 1));
        if (!fold)
            v[0] = _mm256_mul_ps(v[0], _mm256_set1_ps(256.0f)), v[1] = _mm256_mul_ps(v[1], _mm256_set1_ps(256.0f));
        break;
    }
    case LB__QK_E5M2: {
        __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)s)), 8);
        v[0] = f16x8(_mm256_castsi256_si128(h)), v[1] = f16x8(_mm256_extracti128_si256(h, 1));
        break;
    }
    case LB__QK_LUT8:
        v[0] = _mm256_i32gather_ps(lut, bytes8(s, 0), 4), v[1] = _mm256_i32gather_ps(lut, bytes8(s + 8, 0), 4);
        break;
    case LB__QK_I8:
    case LB__QK_U8:
        v[0] = _mm256_cvtepi32_ps(bytes8(s, kind == LB__QK_I8));
        v[1] = _mm256_cvtepi32_ps(bytes8(s + 8, kind == LB__QK_I8));
        break;
    case LB__QK_NIB: {
        __m256i b0 = bytes8(s, 0), b1 = bytes8(s + 8, 0);
        w[0] = lut16(b0, tlo, thi), w[1] = lut16(b1, tlo, thi);
        w[2] = lut16(_mm256_srli_epi32(b0, 4), tlo, thi), w[3] = lut16(_mm256_srli_epi32(b1, 4), tlo, thi);
        return;
    }
    case LB__QK_SIX:
    case LB__QK_SIX_VBMI: v[0] = six8(s, e3m2), v[1] = six8(s + 6, e3m2); break;
    }
    for (int h = 0; h < 2; h++) {
        if (plain) w[h] = v[h];
        else if (aff) w[h] = _mm256_mul_ps(_mm256_sub_ps(v[h], zpv), mulv);
        else w[h] = _mm256_mul_ps(v[h], mulv);
    }
}

static int foldable(float mul) { return !(fabsf(mul) >= 0x1p120f && fabsf(mul) <= 3.4028234663852886e38f); }

#define RMAX 2

/* Rows in flight: row k of each of R streams of the range (row_streams.h:
 * neighbouring rows are interleaved streams the hardware prefetchers do
 * not follow), each prefetched a line at a time as the chunks reach it;
 * the staged scales hold LB__QDOT_STAGE_ROWS / R rows of each stream. */
INL void streams_begin(const lb__qmat *m, const lb__qdot_plan *p, size_t R, size_t r0, size_t r1, lb__row_streams *s)
{
    const size_t st = LB__QDOT_STAGE_ROWS / R;
    lb__row_streams_init(s, m, R, r0, r1);
    for (size_t i = 0; i < R; i++) lb__prefetch_scale_rows(m, p->blocks, s->first[i] + st, st);
}

/* Row k of each stream: its codes, first staged scale and zero point (a
 * stream that has ended repeats the first's row; its sums are dropped) and
 * its chunks past `inplace` copied into tail[i]; every LB__QDOT_STAGE_ROWS /
 * R rows the next batch of each stream is staged, into slot i. */
INL void stream_rows(const lb__qmat *m, const lb__qdot_plan *p, const lb__row_streams *s, size_t R, size_t k,
                     size_t inplace, const uint8_t *row[RMAX], const float *mu[RMAX], const float *zp[RMAX],
                     uint8_t tail[RMAX][2][64])
{
    const size_t nb = p->blocks, st = LB__QDOT_STAGE_ROWS / R;
    if (k % st == 0)
        for (size_t i = 0; i < R; i++) {
            if (k >= s->len[i]) continue;
            size_t r = s->first[i] + k, n = s->len[i] - k < st ? s->len[i] - k : st;
            lb__prefetch_scale_rows(m, nb, r + 2 * st, st);
            lb__qdot_stage_scales(m, p, LB_ISA_AVX2, r, n, i * st);
        }
    _Pragma("GCC unroll 8")
    for (size_t i = 0; i < R; i++) lb__qdot_stream_slot(m, p, s, i, k, st, inplace, &row[i], &mu[i], &zp[i], tail[i]);
}

/* The lines of the rows `ahead` on, up to byte `upto` of them (from *pf). */
INL void prefetch_to(const uint8_t *const row[RMAX], size_t R, size_t *pf, size_t upto)
{
    for (; *pf < upto; *pf += 64)
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++) _mm_prefetch((const char *)row[i] + *pf, _MM_HINT_T1);
}

/* y for row k of each stream: its 16 partial sums added in the fixed order */
INL void store_sums(__m256 acc[RMAX][LB__QDOT_MAX_NX][2], const lb__row_streams *s, size_t R, size_t k, size_t nx,
                    float *y, size_t ldy)
{
    _Pragma("GCC unroll 8")
    for (size_t i = 0; i < R; i++)
        _Pragma("GCC unroll 8")
        for (size_t t = 0; t < nx; t++) {
            _Alignas(32) float sum[16];
            _mm256_store_ps(sum, acc[i][t][0]);
            _mm256_store_ps(sum + 8, acc[i][t][1]);
            if (k < s->len[i]) y[t * ldy + s->first[i] + k] = lb__sum16f(sum);
        }
}

INL void run(const lb__qmat *m, const lb__qdot_plan *p, const lb__qkind kind, const int aff, const size_t nx, size_t r0,
             size_t r1, float *y, size_t ldy)
{
    const size_t R = nx <= 2 ? 2 : 1;
    const size_t C = kind == LB__QK_NIB ? 32 : 16, cb = p->chunk_bytes, nch = p->nch;
    const size_t xst = p->xstride;
    const size_t inplace = lb__qdot_inplace_chunks(m, p, kind == LB__QK_SIX ? 6 + 16 : cb);
    const int plain = p->plain, e3m2 = m->element == LB_FMT_FP6_E3M2;
    __m256 tl = _mm256_setzero_ps(), th = _mm256_setzero_ps();
    if (kind == LB__QK_NIB) tl = _mm256_loadu_ps(p->lut), th = _mm256_loadu_ps(p->lut + 8);
    _Alignas(64) uint8_t tail[RMAX][2][64]; /* a row's chunks past `inplace`: at most 2 (qdot_internal.h) */
    lb__row_streams rs;
    streams_begin(m, p, R, r0, r1, &rs);
    for (size_t k = 0; k < rs.per; k++) {
        const uint8_t *row[RMAX];
        const float *mu[RMAX], *zp[RMAX];
        stream_rows(m, p, &rs, R, k, inplace, row, mu, zp, tail);
        size_t pf = rs.ahead; /* the next line of the rows ahead to ask for */
        __m256 acc[RMAX][LB__QDOT_MAX_NX][2];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) acc[i][t][0] = acc[i][t][1] = _mm256_setzero_ps();
        for (size_t c = 0, b = 0; c < nch; b++) { /* block b holds chunks [b * cpb, (b + 1) * cpb) */
            size_t cend = (b + 1) * p->cpb;
            if (cend > nch) cend = nch;
            __m256 mulv[RMAX], zpv[RMAX], tlo[RMAX], thi[RMAX];
            int fold = 1;
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                float mb = plain ? 1.0f : mu[i][b];
                if (kind == LB__QK_E4M3) fold &= foldable(mb);
                mulv[i] = _mm256_set1_ps(mb);
                zpv[i] = aff ? _mm256_set1_ps(zp[i][b]) : _mm256_setzero_ps();
                tlo[i] = tl, thi[i] = th;
                if (kind == LB__QK_NIB && aff) {
                    tlo[i] = _mm256_mul_ps(_mm256_sub_ps(tl, zpv[i]), mulv[i]);
                    thi[i] = _mm256_mul_ps(_mm256_sub_ps(th, zpv[i]), mulv[i]);
                } else if (kind == LB__QK_NIB) {
                    tlo[i] = _mm256_mul_ps(tl, mulv[i]), thi[i] = _mm256_mul_ps(th, mulv[i]);
                }
            }
            if (kind == LB__QK_E4M3 && fold)
                _Pragma("GCC unroll 8")
                for (size_t i = 0; i < R; i++) mulv[i] = _mm256_mul_ps(mulv[i], _mm256_set1_ps(256.0f));
            for (; c < cend; c++) {
                prefetch_to(row, R, &pf, rs.ahead + (c + 1) * cb);
                __m256 xv[LB__QDOT_MAX_NX][4];
                _Pragma("GCC unroll 8")
                for (size_t t = 0; t < nx; t++)
                    _Pragma("GCC unroll 8")
                    for (size_t q = 0; q < C / 8; q++) xv[t][q] = _mm256_loadu_ps(p->xs + t * xst + c * C + 8 * q);
                _Pragma("GCC unroll 8")
                for (size_t i = 0; i < R; i++) {
                    const uint8_t *s = row[i] + c * cb;
                    if (c >= inplace) s = tail[i][c - inplace];
                    __m256 w[4];
                    if (kind == LB__QK_E4M3 && !fold)
                        chunk_w(kind, aff, 0, e3m2, s, p->lut, tlo[i], thi[i], mulv[i], zpv[i], plain, w);
                    else
                        chunk_w(kind, aff, 1, e3m2, s, p->lut, tlo[i], thi[i], mulv[i], zpv[i], plain, w);
                    _Pragma("GCC unroll 8")
                    for (size_t t = 0; t < nx; t++)
                        _Pragma("GCC unroll 8")
                        for (size_t h = 0; h < 2; h++) {
                            acc[i][t][h] = _mm256_fmadd_ps(xv[t][h], w[h], acc[i][t][h]);
                            if (C == 32) acc[i][t][h] = _mm256_fmadd_ps(xv[t][2 + h], w[2 + h], acc[i][t][h]);
                        }
                }
            }
        }
        store_sums(acc, &rs, R, k, nx, y, ldy);
    }
}

/* 4-bit elements in blocks of 16 (nvfp4, g16): a chunk of 32 spans two
 * blocks, 2c (elements 0-15: the even and odd lanes 0-7, ymm w[0] and w[2])
 * and 2c + 1 (lanes 8-15: w[1] and w[3]), so each half looks its values up
 * in its own block's table of w = (v - zp) * mul (v * mul when not affine,
 * equal as in run: v - 0 only quiets a signaling NaN, the product too),
 * each entry the reference's expression on the same operands. The padding
 * past cols is code 0 (lb__qdot_tail_chunk) in the last block's table. */
INL void run_nib16(const lb__qmat *m, const lb__qdot_plan *p, const int aff, const size_t nx, size_t r0, size_t r1,
                   float *y, size_t ldy)
{
    const size_t R = nx <= 2 ? 2 : 1;
    const size_t nb = p->blocks, nch = p->nch, xst = p->xstride;
    const size_t inplace = lb__qdot_inplace_chunks(m, p, p->chunk_bytes); /* bytes8(s + 8) reads up to s + 16 */
    const __m256 tl = _mm256_loadu_ps(p->lut), th = _mm256_loadu_ps(p->lut + 8);
    _Alignas(64) uint8_t tail[RMAX][2][64];
    lb__row_streams rs;
    streams_begin(m, p, R, r0, r1, &rs);
    for (size_t k = 0; k < rs.per; k++) {
        const uint8_t *row[RMAX];
        const float *mu[RMAX], *zp[RMAX];
        stream_rows(m, p, &rs, R, k, inplace, row, mu, zp, tail);
        size_t pf = rs.ahead;
        __m256 acc[RMAX][LB__QDOT_MAX_NX][2];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) acc[i][t][0] = acc[i][t][1] = _mm256_setzero_ps();
        for (size_t c = 0; c < nch; c++) {
            prefetch_to(row, R, &pf, rs.ahead + (c + 1) * 16);
            const size_t bk[2] = {2 * c, 2 * c + 1 < nb ? 2 * c + 1 : nb - 1}; /* padding: the last block's */
            __m256 xv[LB__QDOT_MAX_NX][4];
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++)
                _Pragma("GCC unroll 8")
                for (size_t q = 0; q < 4; q++) xv[t][q] = _mm256_loadu_ps(p->xs + t * xst + c * 32 + 8 * q);
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                const uint8_t *s = c < inplace ? row[i] + c * 16 : tail[i][c - inplace];
                __m256 w[4];
                _Pragma("GCC unroll 8")
                for (size_t h = 0; h < 2; h++) { /* h: the block, lanes 8h .. 8h+7 */
                    __m256 mulv = _mm256_set1_ps(mu[i][bk[h]]), lo = tl, hi = th;
                    if (aff) {
                        __m256 zpv = _mm256_set1_ps(zp[i][bk[h]]);
                        lo = _mm256_sub_ps(lo, zpv), hi = _mm256_sub_ps(hi, zpv);
                    }
                    lo = _mm256_mul_ps(lo, mulv), hi = _mm256_mul_ps(hi, mulv);
                    __m256i b = bytes8(s + 8 * h, 0);
                    w[h] = lut16(b, lo, hi), w[2 + h] = lut16(_mm256_srli_epi32(b, 4), lo, hi);
                }
                _Pragma("GCC unroll 8")
                for (size_t t = 0; t < nx; t++)
                    _Pragma("GCC unroll 8")
                    for (size_t h = 0; h < 2; h++) {
                        acc[i][t][h] = _mm256_fmadd_ps(xv[t][h], w[h], acc[i][t][h]);
                        acc[i][t][h] = _mm256_fmadd_ps(xv[t][2 + h], w[2 + h], acc[i][t][h]);
                    }
            }
        }
        store_sums(acc, &rs, R, k, nx, y, ldy);
    }
}

#define INST16(A, N)                                                                                            \
    static void run16_##A##_##N(const lb__qmat *m, const lb__qdot_plan *p, size_t r0, size_t r1, float *y,      \
                                size_t ldy)                                                                     \
    {                                                                                                           \
        run_nib16(m, p, A, N, r0, r1, y, ldy);                                                                  \
    }
INST16(0, 1) INST16(0, 2) INST16(0, 3) INST16(0, 4) INST16(1, 1) INST16(1, 2) INST16(1, 3) INST16(1, 4)

/* One function per (kind, affine, nx): every branch on them folds away. */
#define INST(K, A, N)                                                                                          \
    static void run_##K##_##A##_##N(const lb__qmat *m, const lb__qdot_plan *p, size_t r0, size_t r1, float *y, \
                                    size_t ldy)                                                                \
    {                                                                                                          \
        run(m, p, LB__QK_##K, A, N, r0, r1, y, ldy);                                                           \
    }
#define INST4(K, A) INST(K, A, 1) INST(K, A, 2) INST(K, A, 3) INST(K, A, 4)
INST4(F32, 0) INST4(BF16, 0) INST4(F16, 0) INST4(E4M3, 0) INST4(E5M2, 0) INST4(LUT8, 0)
INST4(I8, 0) INST4(I8, 1) INST4(U8, 0) INST4(U8, 1) INST4(NIB, 0) INST4(NIB, 1) INST4(SIX, 0)

typedef void (*run_fn)(const lb__qmat *, const lb__qdot_plan *, size_t, size_t, float *, size_t);
#define ROW(K, A) {run_##K##_##A##_1, run_##K##_##A##_2, run_##K##_##A##_3, run_##K##_##A##_4}
static const run_fn runs[LB__QK_COUNT][2][LB__QDOT_MAX_NX] = {
    [LB__QK_F32] = {ROW(F32, 0), ROW(F32, 0)},    [LB__QK_BF16] = {ROW(BF16, 0), ROW(BF16, 0)},
    [LB__QK_F16] = {ROW(F16, 0), ROW(F16, 0)},    [LB__QK_E4M3] = {ROW(E4M3, 0), ROW(E4M3, 0)},
    [LB__QK_E5M2] = {ROW(E5M2, 0), ROW(E5M2, 0)}, [LB__QK_LUT8] = {ROW(LUT8, 0), ROW(LUT8, 0)},
    [LB__QK_I8] = {ROW(I8, 0), ROW(I8, 1)},       [LB__QK_U8] = {ROW(U8, 0), ROW(U8, 1)},
    [LB__QK_NIB] = {ROW(NIB, 0), ROW(NIB, 1)},    [LB__QK_SIX] = {ROW(SIX, 0), ROW(SIX, 0)},
};

static void qdot_avx2(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
                        size_t ldy, void *scratch)
{
    if (r0 >= r1 || nx == 0) return;
    lb__qdot_plan p;
    lb__qdot_plan_init(m, scratch, &p);
    if (p.kind == LB__QK_NIB && !p.plain && p.blocks > 1 && m->block == 16) { /* nvfp4 and other g16 */
        static const run_fn r16[2][LB__QDOT_MAX_NX] = {{run16_0_1, run16_0_2, run16_0_3, run16_0_4},
                                                       {run16_1_1, run16_1_2, run16_1_3, run16_1_4}};
        lb__qdot_stage_x(&p, x, nx, ldx);
        r16[p.affine][nx - 1](m, &p, r0, r1, y, ldy);
        return;
    }
    if (!lb__qdot_blocks_fit(m, &p)) { /* a chunk would straddle two blocks */
        lb__qdot_scalar(m, x, nx, ldx, r0, r1, y, ldy, scratch);
        return;
    }
    lb__qdot_stage_x(&p, x, nx, ldx);
    runs[p.kind][p.affine][nx - 1](m, &p, r0, r1, y, ldy);
}

const lb__qdot_fn lb__qdot_avx2_fn = qdot_avx2;

#else
const lb__qdot_fn lb__qdot_avx2_fn = NULL;
#endif
