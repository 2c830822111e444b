/* AVX-512 decode kernels: qdot.h's order, bit for bit the scalar reference.
 *
 * Four rows and all tokens are in flight, so each chunk's x is loaded once
 * for four rows and 4 * nx independent FMA chains hide the latency. A
 * chunk's 16 partial sums p[0..15] are one zmm (C = 32: the low nibbles,
 * the even elements, go first, then the high ones; x is staged in that
 * order). The element decoders, per kind (lb__qkind):
 *   F32/BF16/F16  load, shift, vcvtph2ps: exact.
 *   E4M3          ((c & 0x7f) << 7) | ((c & 0x80) << 8) is the fp16 of value * 2^-8
 *                 (same exponent field and mantissa, fp16's bias 15 vs 7); the NaN
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
 * w = (v - zp) * mul for affine, v * mul otherwise (equal to (v - 0) * mul: v - 0
 * only quiets a signaling NaN, which the product quiets anyway), v when plain.
 * Blocks must hold whole chunks (or the row be one block), except 4-bit
 * elements in blocks of 16 (nvfp4), which run_nib16 handles; other matrices,
 * e.g. int4:g48, fp6:g24 or g3, go to the scalar reference. */
#include "kernel/qdot_internal.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernel/qdot_scales_avx512.h"
#include "quant/qkernels.h"
#include "kernel/prefetch_x86.h"
#include "util/cpu.h"

#define INL static inline __attribute__((always_inline))
/* e4m3 in a matrix without NaN codes */
#define QK_E4M3_FINITE LB__QK_E4M3_FINITE
#define LB__QK_E4M3F QK_E4M3_FINITE /* for the instantiation macros below */
#define IS_E4M3(kind) ((kind) == LB__QK_E4M3 || (kind) == QK_E4M3_FINITE)
#define R LB__QDOT_ROWS

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
        __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)s));
        __m256i h = _mm256_slli_epi16(_mm256_add_epi16(c, _mm256_and_si256(c, _mm256_set1_epi16(0x80))), 7);
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
    case LB__QK_SIX: { /* 16 codes in 12 bytes; lane j of 4 codes starts at byte 3j */
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

/* Each chunk step also fetches its share of the row group PREFETCH_GROUPS
 * ahead (rows are contiguous, so that is the bytes after this group;
 * prefetches never fault, past the end neither). Rows of a few hundred
 * bytes end before the hardware prefetchers ramp up, which capped decode
 * at a third of the bandwidth on 576-wide SmolLM2 rows: those go to L1
 * where they fit (prefetch_x86.h). Long rows stream, but the decode work
 * between loads left the memory idle part of the time: fetching them into
 * L2 ahead gave +25-55% on 4096-wide rows (interleaved A/B runs), while L1
 * there was slower. The data read and the arithmetic are unchanged. */
#define PREFETCH_GROUPS 2

/* bytes of the row group each chunk step prefetches: whole lines */
static size_t prefetch_step(const lb__qmat *m, size_t nch) { return (R * m->row_bytes / nch + 63) / 64 * 64; }
#define SHORT_ROW(m) lb__prefetch_to_l1((m)->row_bytes, R, PREFETCH_GROUPS)


/* The staged scales' first row for row group r: batches of
 * LB__QDOT_STAGE_ROWS rows staged when a group leaves the last batch
 * (batches start at group starts, so a group never straddles two). */
static size_t staged_row(const lb__qmat *m, const lb__qdot_plan *p, size_t r, size_t r1, size_t *first)
{
    if (*first == SIZE_MAX || r >= *first + LB__QDOT_STAGE_ROWS) {
        size_t n = r1 - r < LB__QDOT_STAGE_ROWS ? r1 - r : LB__QDOT_STAGE_ROWS;
        if (m->plain || p->affine || m->one_scale || m->block_rows > 1) lb__qdot_stage_scales(m, p, LB_ISA_AVX512, r, n);
        else lb__scales_to_f32_avx512(m->scale_format, m->scales + lb_format_bytes(m->scale_format, r * p->blocks), n * p->blocks,
                           m->scale_mul, p->mul);
        *first = r;
        /* the next batch's scale codes: a stream of their own that the
         * hardware does not fetch ahead (loads of them stalled on memory) */
        if (!m->plain && !m->one_scale && m->block_rows == 1) {
            const char *next = (const char *)m->scales + lb_format_bytes(m->scale_format, (r + n) * p->blocks);
            size_t bytes = lb_format_bytes(m->scale_format, LB__QDOT_STAGE_ROWS * p->blocks);
            for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(next + o, _MM_HINT_T0);
        }
    }
    return r - *first;
}

/* A row group's pointers: row i's codes and first staged scale and zero
 * point (rows past n repeat the last; their results are dropped), and its
 * chunks past `inplace` copied into tail[i] before the chunk loop: a call
 * inside the loop would keep the sums out of registers. */
INL void group_rows(const lb__qmat *m, const lb__qdot_plan *p, size_t r, size_t n, size_t off, size_t inplace,
                    const uint8_t *row[R], const float *mu[R], const float *zp[R], uint8_t tail[R][2][64])
{
    _Pragma("GCC unroll 8")
    for (size_t i = 0; i < R; i++) {
        size_t k = i < n ? i : n - 1;
        row[i] = m->data + (r + k) * m->row_bytes;
        mu[i] = p->mul + (off + k) * p->blocks, zp[i] = p->zp + (off + k) * p->blocks;
        for (size_t c = inplace; c < p->nch; c++) lb__qdot_tail_chunk(m, p, row[i], c, tail[i][c - inplace]);
    }
}

/* every (row, token) pair's 16 partial sums start at +0 */
INL void zero_sums(__m512 acc[R][LB__QDOT_MAX_NX], size_t nx)
{
    _Pragma("GCC unroll 8")
    for (size_t i = 0; i < R; i++)
        _Pragma("GCC unroll 8")
        for (size_t t = 0; t < nx; t++) acc[i][t] = _mm512_setzero_ps();
}

/* y for rows r .. r+n-1: each pair's 16 partial sums added in the fixed tree */
INL void store_sums(__m512 acc[R][LB__QDOT_MAX_NX], size_t n, size_t nx, size_t r, float *y, size_t ldy)
{
    for (size_t i = 0; i < n; i++)
        for (size_t t = 0; t < nx; t++) {
            _Alignas(64) float s[16];
            _mm512_store_ps(s, acc[i][t]);
            y[t * ldy + r + i] = lb__sum16f(s);
        }
}

/* e4m3: whether 2^8 can be folded into this scale (see the top). */
static int foldable(float mul) { return !(fabsf(mul) >= 0x1p120f && fabsf(mul) <= 3.4028234663852886e38f); }

INL void run(const lb__qmat *m, const lb__qdot_plan *p, const lb__qkind kind, const int aff, const size_t nx, size_t r0,
             size_t r1, float *y, size_t ldy)
{
    const size_t C = kind == LB__QK_NIB ? 32 : 16, cb = p->chunk_bytes, nch = p->nch, xst = p->xstride;
    const size_t inplace = lb__qdot_inplace_chunks(m, p, kind == LB__QK_SIX ? 12 : cb);
    const size_t pstep = prefetch_step(m, nch);
    const int short_rows = SHORT_ROW(m);
    const int plain = p->plain;
    const __m512 lut16 = kind == LB__QK_NIB ? _mm512_loadu_ps(p->lut) : _mm512_setzero_ps();
    const __m512 t0 = kind == LB__QK_SIX ? _mm512_loadu_ps(p->lut) : _mm512_setzero_ps();
    const __m512 t1 = kind == LB__QK_SIX ? _mm512_loadu_ps(p->lut + 16) : _mm512_setzero_ps();
    _Alignas(64) uint8_t tail[R][2][64]; /* a row's chunks past `inplace`: at most 2 (qdot_internal.h) */
    size_t first = SIZE_MAX; /* the staged batch's first row */
    for (size_t r = r0; r < r1; r += R) {
        size_t n = r1 - r < R ? r1 - r : R;
        const size_t off = staged_row(m, p, r, r1, &first);
        const uint8_t *row[R];
        const float *mu[R], *zp[R];
        group_rows(m, p, r, n, off, inplace, row, mu, zp, tail);
        __m512 acc[R][LB__QDOT_MAX_NX];
        zero_sums(acc, nx);
        const uint8_t *ahead = m->data + (r + PREFETCH_GROUPS * R) * m->row_bytes;
        for (size_t c = 0, b = 0; c < nch; b++) { /* block b holds chunks [b * cpb, (b + 1) * cpb) */
            size_t cend = (b + 1) * p->cpb;
            if (cend > nch) cend = nch;
            __m512 mulv[R], zpv[R], tab[R];
            int fold = 1;
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                float mul = plain ? 1.0f : mu[i][b];
                if (IS_E4M3(kind)) fold &= foldable(mul);
                mulv[i] = _mm512_set1_ps(mul);
                zpv[i] = aff ? _mm512_set1_ps(zp[i][b]) : _mm512_setzero_ps();
                if (kind == LB__QK_NIB)
                    tab[i] = aff ? _mm512_mul_ps(_mm512_sub_ps(lut16, zpv[i]), mulv[i]) : _mm512_mul_ps(lut16, mulv[i]);
                else
                    tab[i] = lut16;
            }
            if (IS_E4M3(kind) && fold)
                _Pragma("GCC unroll 8")
                for (size_t i = 0; i < R; i++) mulv[i] = _mm512_mul_ps(mulv[i], _mm512_set1_ps(256.0f));
            for (; c < cend; c++) {
                lb__prefetch_span(ahead + c * pstep, pstep, short_rows);
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
                    if (IS_E4M3(kind) && !fold)
                        chunk_w(kind, aff, 0, s, p->lut, tab[i], t0, t1, mulv[i], zpv[i], plain, w);
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
        store_sums(acc, n, nx, r, y, ldy);
    }
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
    const size_t C = kind == LB__QK_NIB ? 32 : 16, cb = p->chunk_bytes, nch = p->nch, xst = p->xstride;
    const size_t inplace = lb__qdot_inplace_chunks(m, p, kind == LB__QK_SIX ? 12 : cb);
    const size_t pstep = prefetch_step(m, nch);
    const int short_rows = SHORT_ROW(m);
    const __m512 lut16 = kind == LB__QK_NIB ? _mm512_loadu_ps(p->lut) : _mm512_setzero_ps();
    const __m512 t0 = kind == LB__QK_SIX ? _mm512_loadu_ps(p->lut) : _mm512_setzero_ps();
    const __m512 t1 = kind == LB__QK_SIX ? _mm512_loadu_ps(p->lut + 16) : _mm512_setzero_ps();
    _Alignas(64) uint8_t tail[R][2][64];
    size_t first = SIZE_MAX; /* the staged batch's first row */
    for (size_t r = r0; r < r1; r += R) {
        size_t n = r1 - r < R ? r1 - r : R;
        const size_t off = staged_row(m, p, r, r1, &first);
        const uint8_t *row[R];
        const float *mu[R], *zp[R];
        group_rows(m, p, r, n, off, inplace, row, mu, zp, tail);
        __m512 acc[R][LB__QDOT_MAX_NX];
        zero_sums(acc, nx);
        const uint8_t *ahead = m->data + (r + PREFETCH_GROUPS * R) * m->row_bytes;
        for (size_t c = 0; c < nch; c++) {
            lb__prefetch_span(ahead + c * pstep, pstep, short_rows);
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
        store_sums(acc, n, nx, r, y, ldy);
    }
}

/* 4-bit elements in blocks of 16 (nvfp4, g16): a chunk of 32 spans two
 * blocks, lanes 0-7 (elements 0-15) in the first and 8-15 in the second, so
 * w = (v - zp) * mul is formed per lane with the two blocks' values side by
 * side, the reference's expression on the same operands. */
INL void run_nib16(const lb__qmat *m, const lb__qdot_plan *p, const int aff, const size_t nx, size_t r0, size_t r1,
                   float *y, size_t ldy)
{
    const size_t nb = p->blocks, nch = p->nch, xst = p->xstride;
    const size_t inplace = lb__qdot_inplace_chunks(m, p, p->chunk_bytes);
    const size_t pstep = prefetch_step(m, nch);
    const int short_rows = SHORT_ROW(m);
    const __m512 lut16 = _mm512_loadu_ps(p->lut);
    const __mmask16 upper = 0xFF00;
    _Alignas(64) uint8_t tail[R][2][64];
    size_t first = SIZE_MAX; /* the staged batch's first row */
    for (size_t r = r0; r < r1; r += R) {
        size_t n = r1 - r < R ? r1 - r : R;
        const size_t off = staged_row(m, p, r, r1, &first);
        const uint8_t *row[R];
        const float *mu[R], *zp[R];
        group_rows(m, p, r, n, off, inplace, row, mu, zp, tail);
        __m512 acc[R][LB__QDOT_MAX_NX];
        zero_sums(acc, nx);
        const uint8_t *ahead = m->data + (r + PREFETCH_GROUPS * R) * m->row_bytes;
        for (size_t c = 0; c < nch; c++) {
            lb__prefetch_span(ahead + c * pstep, pstep, short_rows);
            size_t b0 = 2 * c, b1 = 2 * c + 1 < nb ? 2 * c + 1 : nb - 1; /* padding: the last block's */
            __m512 xe[LB__QDOT_MAX_NX], xo[LB__QDOT_MAX_NX];
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                xe[t] = _mm512_loadu_ps(p->xs + t * xst + c * 32);
                xo[t] = _mm512_loadu_ps(p->xs + t * xst + c * 32 + 16);
            }
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                const uint8_t *s = c < inplace ? row[i] + c * 16 : tail[i][c - inplace];
                __m512 mulv = _mm512_mask_blend_ps(upper, _mm512_set1_ps(mu[i][b0]), _mm512_set1_ps(mu[i][b1]));
                __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s));
                __m512 v0 = _mm512_permutexvar_ps(b, lut16), v1 = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut16);
                if (aff) {
                    __m512 zpv = _mm512_mask_blend_ps(upper, _mm512_set1_ps(zp[i][b0]), _mm512_set1_ps(zp[i][b1]));
                    v0 = _mm512_sub_ps(v0, zpv), v1 = _mm512_sub_ps(v1, zpv);
                }
                __m512 w0 = _mm512_mul_ps(v0, mulv), w1 = _mm512_mul_ps(v1, mulv);
                _Pragma("GCC unroll 8")
                for (size_t t = 0; t < nx; t++) {
                    acc[i][t] = _mm512_fmadd_ps(xe[t], w0, acc[i][t]);
                    acc[i][t] = _mm512_fmadd_ps(xo[t], w1, acc[i][t]);
                }
            }
        }
        store_sums(acc, n, nx, r, y, ldy);
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
#define INSTB(K, A, N)                                                                                            \
    static void runb1_##K##_##A##_##N(const lb__qmat *m, const lb__qdot_plan *p, size_t r0, size_t r1, float *y, \
                                      size_t ldy)                                                                 \
    {                                                                                                             \
        run_b1(m, p, LB__QK_##K, A, N, r0, r1, y, ldy);                                                           \
    }
#define INSTB4(K, A) INSTB(K, A, 1) INSTB(K, A, 2) INSTB(K, A, 3) INSTB(K, A, 4)
INSTB4(E4M3, 0) INSTB4(E5M2, 0) INSTB4(I8, 0) INSTB4(I8, 1) INSTB4(U8, 0) INSTB4(U8, 1) INSTB4(NIB, 0) INSTB4(NIB, 1)
INSTB4(SIX, 0) INSTB4(F16, 0) INSTB4(E4M3F, 0)
INST4(F32, 0) INST4(BF16, 0) INST4(F16, 0) INST4(E4M3, 0) INST4(E5M2, 0) INST4(LUT8, 0)
INST4(I8, 0) INST4(I8, 1) INST4(U8, 0) INST4(U8, 1) INST4(NIB, 0) INST4(NIB, 1) INST4(SIX, 0) INST4(E4M3F, 0)

typedef void (*run_fn)(const lb__qmat *, const lb__qdot_plan *, size_t, size_t, float *, size_t);
/* [kind][variant][nx - 1]: variant 1 is affine for integers and, for e4m3
 * (never affine), a matrix without NaN codes */
#define ROW(K, A) {run_##K##_##A##_1, run_##K##_##A##_2, run_##K##_##A##_3, run_##K##_##A##_4}
static const run_fn runs[LB__QK_COUNT][2][LB__QDOT_MAX_NX] = {
    [LB__QK_F32] = {ROW(F32, 0), ROW(F32, 0)},    [LB__QK_BF16] = {ROW(BF16, 0), ROW(BF16, 0)},
    [LB__QK_F16] = {ROW(F16, 0), ROW(F16, 0)},    [LB__QK_E4M3] = {ROW(E4M3, 0), ROW(E4M3F, 0)},
    [LB__QK_E5M2] = {ROW(E5M2, 0), ROW(E5M2, 0)}, [LB__QK_LUT8] = {ROW(LUT8, 0), ROW(LUT8, 0)},
    [LB__QK_I8] = {ROW(I8, 0), ROW(I8, 1)},       [LB__QK_U8] = {ROW(U8, 0), ROW(U8, 1)},
    [LB__QK_NIB] = {ROW(NIB, 0), ROW(NIB, 1)},    [LB__QK_SIX] = {ROW(SIX, 0), ROW(SIX, 0)},
};

#define ROWB(K, A) {runb1_##K##_##A##_1, runb1_##K##_##A##_2, runb1_##K##_##A##_3, runb1_##K##_##A##_4}
static const run_fn runs_b1[LB__QK_COUNT][2][LB__QDOT_MAX_NX] = {
    [LB__QK_F16] = {ROWB(F16, 0), ROWB(F16, 0)},  [LB__QK_E4M3] = {ROWB(E4M3, 0), ROWB(E4M3F, 0)},
    [LB__QK_E5M2] = {ROWB(E5M2, 0), ROWB(E5M2, 0)}, [LB__QK_I8] = {ROWB(I8, 0), ROWB(I8, 1)},
    [LB__QK_U8] = {ROWB(U8, 0), ROWB(U8, 1)},     [LB__QK_NIB] = {ROWB(NIB, 0), ROWB(NIB, 1)},
    [LB__QK_SIX] = {ROWB(SIX, 0), ROWB(SIX, 0)},
};

static void qdot_avx512(const lb__qmat *m, const float *x, size_t nx, size_t ldx, size_t r0, size_t r1, float *y,
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
    int variant = p.kind == LB__QK_E4M3 ? m->nan_free != 0 : p.affine;
    if (!p.plain && (p.cpb == 1 || p.cpb == 2) && p.blocks > 1 && runs_b1[p.kind][variant][nx - 1])
        runs_b1[p.kind][variant][nx - 1](m, &p, r0, r1, y, ldy);
    else
        runs[p.kind][variant][nx - 1](m, &p, r0, r1, y, ldy);
}

const lb__qdot_fn lb__qdot_avx512_fn = qdot_avx512;

#else
const lb__qdot_fn lb__qdot_avx512_fn = NULL;
#endif
