/* AVX-512 VNNI int8-activation decode kernels: qdot8.h's sums, bit for
 * bit the scalar reference.
 *
 * A group is 64 bytes of a row in both layouts (128 4-bit elements, or
 * 64 int8 ones) and its 16 lanes are the 16 int32 lanes of a zmm:
 * vpdpbusd adds four byte products into each, so for 4-bit weights the
 * low nibbles (even elements, staged x's first 64 codes) and the high
 * ones (odd) give each lane its 8 elements in two instructions.
 * vpdpbusd multiplies unsigned bytes by signed ones: the weights are the
 * unsigned operand, u + c with c the set's offset (a vpshufb table of the
 * 16 nibble values: int4 + 8, uint4 + 0, fp4 2v + 12; int8 codes xor
 * 0x80 = + 128) and each lane's sum starts at the staged -c * (lane sum
 * of x), which makes it end exactly at P (qdot8.h). Then one int->float
 * conversion (exact: |P| < 2^24), s = d * mw and an fma per lane.
 * Rows in flight: 4 (2 for three or four tokens, so the sums stay in the
 * 32 registers). */
#include "kernel/qdot8.h"
#include "kernel/qdot8_instances.h"
#include "kernel/w8a8_kernels.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <stdint.h>

#include "kernel/qdot_scales_avx512.h"
#include "quant/qkernels.h"
#include "kernel/prefetch_x86.h"
#include "util/cpu.h"

#define INL static inline __attribute__((always_inline))
#define RMAX 4

/* int8 codes xor 0x80 are the unsigned operand: + 128 */
static int vnni_offset(lb_format element) { return element == LB_FMT_INT8 ? 128 : lb__qdot8_nibble_offset(element); }

static void scale_avx512(float *w, size_t n, float a, float b)
{
    const __m512 av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = (__mmask16)(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(w + i, k, _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, w + i), av), bv));
    }
}

/* Rows r .. r+n-1 of block scales of format F straight into their staged
 * rows: w = (decoded * sm) * f, 16 at a time with unmasked stores (the
 * stride leaves 16 floats past a row's last block, where its tail repeats
 * the last scale). One pass, no copy: the staging was a fifth of nvfp4's
 * decode time (18 blocks per row or more, scales decoded into a buffer and
 * copied over). */
static inline __attribute__((always_inline)) void stage_rows(const lb_format F, const lb__qmat *m, size_t r, size_t n,
                                                             float *mw)
{
    const size_t nb = m->blocks, st = lb__qdot8_stage_stride(m);
    const __m512 smv = _mm512_set1_ps(m->scale_mul), f = _mm512_set1_ps(m->element == LB_FMT_FP4_E2M1 ? 0.5f : 1.0f);
    const __m512i last = _mm512_set1_epi32((int)((nb - 1) % 16)); /* lane of the last scale in its vector */
    const size_t row_codes = lb_format_bytes(F, nb); /* whole bytes: every scale format is */
    for (size_t i = 0; i < n; i++) {
        const uint8_t *codes = m->scales + (r + i) * row_codes;
        float *w = mw + i * st;
        __m512 v = _mm512_setzero_ps();
        for (size_t b = 0; b < nb; b += 16) {
            __mmask16 k = (__mmask16)(nb - b >= 16 ? 0xFFFF : (1u << (nb - b)) - 1);
            v = _mm512_mul_ps(_mm512_mul_ps(lb__scale16_avx512(F, codes, b, k), smv), f); /* (s * sm) * f; by 1: exact */
            _mm512_storeu_ps(w + b, v);
        }
        _mm512_storeu_ps(w + nb, _mm512_permutexvar_ps(last, v));
    }
}

/* The weight scales of rows r .. r+n-1: qdot8.c's staging, with the
 * common layout (a row of block scales per row) decoded here (the same
 * values); the zero points, if any, are staged after. */
static void stage(const lb__qmat *m, size_t r, size_t n, float *mw, int32_t *zp)
{
    if (m->one_scale || m->block_rows > 1 || m->blocks <= 1) {
        lb__qdot8_stage_rows(m, LB_ISA_AVX512, scale_avx512, r, n, mw, zp);
        return;
    }
#define STAGE_ROWS(F) stage_rows(F, m, r, n, mw) /* lb__qdot8_supported takes scale formats only */
    LB__SCALE_FORMAT_SWITCH(m->scale_format, STAGE_ROWS)
#undef STAGE_ROWS
    if (m->zero_points) lb__qdot8_stage_zero_points(m, r, n, zp);
}

/* Batches of rows whose scales are fetched ahead of their staging. */
#define SCALES_AHEAD 4

/* The scale codes (and zero points) of the staging batch at row r;
 * prefetches past the matrix are harmless (they never fault). */
static void prefetch_scales(const lb__qmat *m, size_t r)
{
    if (r >= m->rows) return;
    const char *s = (const char *)m->scales + lb_format_bytes(m->scale_format, r * m->blocks);
    size_t bytes = lb_format_bytes(m->scale_format, LB__QDOT8_STAGE_ROWS * m->blocks);
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(s + o, _MM_HINT_T0);
    if (!m->zero_points) return;
    const char *z = (const char *)m->zero_points + r * m->zp_row_bytes;
    for (size_t o = 0; o < LB__QDOT8_STAGE_ROWS * m->zp_row_bytes; o += 64) _mm_prefetch(z + o, _MM_HINT_T0);
}

INL void run(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
             size_t ldy, void *scratch, const int nib, const int aff)
{
    const size_t R = nx <= 2 ? RMAX : RMAX / 2;
    const size_t st = lb__qdot8_stage_stride(m), groups = a->groups, G = nib ? 128 : 64;
    float *mw = scratch;
    int32_t *zp = (int32_t *)((uint8_t *)scratch + (LB__QDOT8_STAGE_ROWS * st * sizeof(float) + 63) / 64 * 64);
    int32_t lb[LB__QDOT8_LANES];
    lb__qdot8_lane_blocks(m, lb);
    const __m512i idx = _mm512_loadu_si512(lb);
    uint8_t lut16[16];
    lb__qdot8_nibble_table(m->element, vnni_offset(m->element), lut16);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lut16));
    const __m512i low4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8((char)0x80);
    const lb__qdot8_geom geo = lb__qdot8_geometry(m, groups, G);
    const size_t gmul = geo.gmul, gdiv = geo.gdiv, whole = geo.whole;
    const __mmask64 tail = _cvtu64_mask64(~0ull >> (64 - (m->row_bytes - whole * 64 ? m->row_bytes - whole * 64 : 64)));
    const size_t pstep = (R * m->row_bytes / groups + 63) / 64 * 64;
    const int short_rows = lb__prefetch_to_l1(m->row_bytes, R, 2);
    size_t first = SIZE_MAX;
    int first_stage = 1;
    for (size_t r = r0; r < r1; r += R) {
        size_t n = r1 - r < R ? r1 - r : R;
        if (first == SIZE_MAX || r + n > first + LB__QDOT8_STAGE_ROWS) {
            first = r;
            size_t k = r1 - r < LB__QDOT8_STAGE_ROWS ? r1 - r : LB__QDOT8_STAGE_ROWS;
            /* the scale codes and zero points are streams of their own that
             * the hardware does not fetch ahead (the staging's loads waited
             * on memory for as long as the dot products took): the batch
             * SCALES_AHEAD ahead is asked for now, and at a range's start
             * the ones before it as well */
            if (!m->one_scale && m->block_rows <= 1 && m->blocks > 1)
                for (size_t ahead_b = first_stage ? 1 : SCALES_AHEAD; ahead_b <= SCALES_AHEAD; ahead_b++)
                    prefetch_scales(m, r + ahead_b * LB__QDOT8_STAGE_ROWS);
            first_stage = 0;
            stage(m, r, k, mw, zp);
        }
        const uint8_t *row[RMAX];
        const float *mwp[RMAX];
        const int32_t *zpp[RMAX];
        lb__qdot8_row_ptrs(m, r, n, R, first, st, mw, zp, row, mwp, zpp);
        __m512 acc[RMAX][LB__QDOT_MAX_NX];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) acc[i][t] = _mm512_setzero_ps();
        const uint8_t *ahead = m->data + (r + 2 * R) * m->row_bytes;
        for (size_t g = 0; g < groups; g++) {
            lb__prefetch_span(ahead + g * pstep, pstep, short_rows); /* the rows two row groups on */
            const size_t b0 = g * gmul / gdiv;
            __m512i xl[LB__QDOT_MAX_NX], xh[LB__QDOT_MAX_NX], cx[LB__QDOT_MAX_NX], xs[LB__QDOT_MAX_NX];
            __m512 dv[LB__QDOT_MAX_NX];
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                const int8_t *q = a->q + (t0 + t) * a->stride + g * G;
                size_t lo = (t0 + t) * a->lanes + g * LB__QDOT8_LANES;
                xl[t] = _mm512_load_si512(q);
                xh[t] = nib ? _mm512_load_si512(q + 64) : xl[t];
                cx[t] = _mm512_load_si512(a->cxs + lo);
                xs[t] = aff ? _mm512_load_si512(a->xs + lo) : cx[t];
                dv[t] = _mm512_load_ps(a->d + lo);
            }
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                __m512i wb = g < whole ? _mm512_loadu_si512(row[i] + g * 64) : _mm512_maskz_loadu_epi8(tail, row[i] + g * 64);
                __m512i ul, uh;
                if (nib) {
                    ul = _mm512_shuffle_epi8(lut, _mm512_and_si512(wb, low4));
                    uh = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(wb, 4), low4));
                } else {
                    ul = uh = _mm512_xor_si512(wb, flip);
                }
                __m512 mwv = _mm512_permutexvar_ps(idx, _mm512_loadu_ps(mwp[i] + b0));
                __m512i zv = aff ? _mm512_permutexvar_epi32(idx, _mm512_loadu_si512(zpp[i] + b0)) : idx;
                _Pragma("GCC unroll 8")
                for (size_t t = 0; t < nx; t++) {
                    __m512i p = _mm512_dpbusd_epi32(cx[t], ul, xl[t]); /* from -c * (lane sum of x) */
                    if (nib) p = _mm512_dpbusd_epi32(p, uh, xh[t]);
                    if (aff) p = _mm512_sub_epi32(p, _mm512_mullo_epi32(zv, xs[t]));
                    acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dv[t], mwv), acc[i][t]);
                }
            }
        }
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < n; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                _Alignas(64) float s[16];
                _mm512_store_ps(s, acc[i][t]);
                y[t * ldy + r + i] = lb__sum16f(s);
            }
    }
}

LB__QDOT8_ROWS_FN(rows_vnni)

const lb__qdot8_set lb__qdot8_vnni_set = {"avx512-vnni", vnni_offset, rows_vnni, lb__qdot8k_rows_vnni, &lb__w8a8_avx512_ops};

#else
const lb__qdot8_set lb__qdot8_vnni_set = {"avx512-vnni", lb__qdot8_no_offset, NULL, lb__qdot8k_rows_scalar, &lb__w8a8_avx512_ops};
#endif
