/* The AVX2 int8-activation row loop (qdot8.h's sums, bit for bit the
 * scalar reference), instantiated by qdot8_avx2.c and, with the sums of
 * four byte products by AVX-VNNI's vpdpbusd (LB__QDOT8_AVX_VNNI 1:
 * one instruction where vpmaddubsw, vpmaddwd and two adds were), by
 * qdot8_avxvnni.c. The operands are the same either way (qdot8_avx2.c's
 * comment), so are the int32 sums: vpdpbusd does not saturate, and the
 * vpmaddubsw pairs never do.
 *
 * Rows in flight: 4 for one token, 2 for two, 1 for three or four (16
 * ymm registers), taken from as many separate streams of the range
 * (row_streams.h: neighbouring rows are interleaved streams the hardware
 * prefetchers do not follow). Define LB__QDOT8_AVX_VNNI (0 or 1) before
 * including. */
#ifndef LB_KERNEL_QDOT8_AVX2_RUN_H
#define LB_KERNEL_QDOT8_AVX2_RUN_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernel/qdot8.h"
#include "kernel/row_streams.h"
#include "quant/qkernels.h"

#define INL static inline __attribute__((always_inline))
#define RMAX 4

static void scale_avx2(float *w, size_t n, float a, float b)
{
    const __m256 av = _mm256_set1_ps(a), bv = _mm256_set1_ps(b);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(w + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(w + i), av), bv));
    for (; i < n; i++) w[i] = (w[i] * a) * b;
}

/* Scale codes 0 .. 7 at codes as the format layer decodes them: e8m0
 * 2^(c-127), code 0 the subnormal 2^-127, 0xFF NaN; ue4m3 through fp16 (a
 * code shifted left by 7 is the fp16 of its value * 2^-8, exactly), codes
 * >= 0x7F NaN; fp16 by vcvtph2ps, bf16 into the upper half, fp32 as it is. */
INL __m256 scale8(const lb_format F, const uint8_t *codes)
{
    if (F == LB_FMT_FP32) return _mm256_loadu_ps((const float *)(const void *)codes);
    if (F == LB_FMT_FP16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)codes));
    if (F == LB_FMT_BF16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)codes)), 16));
    const __m128i c8 = _mm_loadl_epi64((const __m128i *)(const void *)codes);
    const __m256i c = _mm256_cvtepu8_epi32(c8);
    if (F == LB_FMT_E8M0) {
        __m256i b = _mm256_slli_epi32(c, 23);
        b = _mm256_blendv_epi8(b, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(c, _mm256_setzero_si256()));
        b = _mm256_blendv_epi8(b, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(c, _mm256_set1_epi32(0xFF)));
        return _mm256_castsi256_ps(b);
    }
    __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(c8), 7)), _mm256_set1_ps(256.0f));
    return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)),
                            _mm256_castsi256_ps(_mm256_cmpgt_epi32(c, _mm256_set1_epi32(0x7E))));
}

/* lb__qdot8_decode_fn for the scale formats of blocks (UE4M3, E8M0, fp16,
 * bf16, fp32): decoding, the two products and the finiteness check in one
 * pass of 8 (the format layer's decoder, the products and the check in
 * three passes left nvfp4 decode of SmolLM2 a third slower). */
static int decode_scales_avx2(lb_format f, const uint8_t *codes, size_t n, float a, float b, float *out)
{
    if (f != LB_FMT_UE4M3 && f != LB_FMT_E8M0 && f != LB_FMT_FP16 && f != LB_FMT_BF16 && f != LB_FMT_FP32) return -1;
    const size_t bytes = lb_format_bytes(f, 1); /* 1, 2 or 4: whole bytes */
    const __m256 av = _mm256_set1_ps(a), bv = _mm256_set1_ps(b);
    const __m256 big = _mm256_set1_ps(3.40282347e38f), signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 bad = _mm256_setzero_ps();
    for (size_t i = 0; i < n; i += 8) {
        _Alignas(32) uint8_t tail[32];
        const uint8_t *c = codes + i * bytes;
        if (n - i < 8) { /* past the last code: 1.0 (e8m0, ue4m3) or 0 (no subnormal operand either way) */
            memset(tail, f == LB_FMT_E8M0 ? 127 : f == LB_FMT_UE4M3 ? 0x38 : 0, sizeof tail);
            memcpy(tail, c, (n - i) * bytes);
            c = tail;
        }
        __m256 v = _mm256_mul_ps(_mm256_mul_ps(scale8(f, c), av), bv);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(v, signless), big, _CMP_NLE_UQ)); /* NaN or inf */
        if (n - i >= 8) _mm256_storeu_ps(out + i, v);
        else _mm256_maskstore_ps(out + i, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)),
                                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), v);
    }
    return _mm256_testz_ps(bad, bad);
}

INL void run(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
             size_t ldy, void *scratch, const int nib, const int aff)
{
    const size_t R = nx == 1 ? 4 : nx == 2 ? 2 : 1;
    const size_t st = lb__qdot8_stage_stride(m), groups = a->groups, G = nib ? 128 : 64;
    float *mw = scratch;
    int32_t *zp = (int32_t *)((uint8_t *)scratch + (LB__QDOT8_STAGE_ROWS * st * sizeof(float) + 63) / 64 * 64);
    int32_t lb[LB__QDOT8_LANES];
    lb__qdot8_lane_blocks(m, lb);
    /* half h's lanes take blocks lb[8h] + idx[h][j] */
    const __m256i idx0 = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)lb), _mm256_set1_epi32(lb[0]));
    const __m256i idx1 = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(lb + 8)), _mm256_set1_epi32(lb[8]));
    uint8_t lut16[16];
    lb__qdot8_nibble_table(m->element, lb__qdot8_nibble_offset(m->element), lut16);
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lut16));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
#if !LB__QDOT8_AVX_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    const lb__qdot8_geom geo = lb__qdot8_geometry(m, groups, G);
    const size_t gmul = geo.gmul, gdiv = geo.gdiv, whole = geo.whole;
    _Alignas(32) uint8_t tail[RMAX][64];
    /* rows in flight: row k of each of R streams of the range, each
     * prefetched a line per group (row_streams.h); scales staged per
     * stream, stage_k rows at a time */
    const size_t stage_k = LB__QDOT8_STAGE_ROWS / R;
    lb__row_streams rs;
    lb__row_streams_init(&rs, m, R, r0, r1);
    for (size_t i = 0; i < R; i++) lb__prefetch_scale_rows(m, m->blocks, rs.first[i] + stage_k, stage_k);
    size_t mst[RMAX] = {0}; /* each stream's staged scale rows: floats apart */
    for (size_t k = 0; k < rs.per; k++) {
        if (k % stage_k == 0)
            for (size_t i = 0; i < R; i++) {
                if (k >= rs.len[i]) continue;
                size_t cnt = rs.len[i] - k < stage_k ? rs.len[i] - k : stage_k;
                lb__prefetch_scale_rows(m, m->blocks, rs.first[i] + k + 2 * stage_k, stage_k);
                mst[i] = lb__qdot8_stage_rows(m, LB_ISA_AVX2, scale_avx2, decode_scales_avx2, rs.first[i] + k, cnt,
                                              mw + i * stage_k * st, zp + i * stage_k * st);
            }
        const uint8_t *row[RMAX];
        const float *mwp[RMAX];
        const int32_t *zpp[RMAX];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++) { /* a stream that has ended repeats the first's row (its sums are dropped) */
            size_t j = lb__row_stream_at(&rs, i, k);
            row[i] = m->data + (rs.first[j] + k) * m->row_bytes;
            mwp[i] = mw + j * stage_k * st + k % stage_k * mst[j];
            zpp[i] = zp + (j * stage_k + k % stage_k) * st;
        }
        for (size_t i = 0; i < R; i++) {
            if (whole < groups) { /* the row's last, partial group, zero padded */
                memset(tail[i], 0, 64);
                memcpy(tail[i], row[i] + whole * 64, m->row_bytes - whole * 64);
            }
        }
        __m256 acc[RMAX][LB__QDOT_MAX_NX][2];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) acc[i][t][0] = acc[i][t][1] = _mm256_setzero_ps();
        for (size_t g = 0; g < groups; g++) {
            const size_t b0 = g * gmul / gdiv;
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) _mm_prefetch((const char *)row[i] + rs.ahead + g * 64, _MM_HINT_T1);
            _Pragma("GCC unroll 8")
            for (size_t h = 0; h < 2; h++) {
                const __m256i idx = h ? idx1 : idx0;
                const size_t bh = b0 + (size_t)lb[8 * h];
                _Pragma("GCC unroll 8")
                for (size_t i = 0; i < R; i++) {
                    const uint8_t *src = g < whole ? row[i] + g * 64 : tail[i];
                    __m256i wb = _mm256_loadu_si256((const __m256i *)(src + 32 * h));
                    __m256 mwv = _mm256_permutevar8x32_ps(_mm256_loadu_ps(mwp[i] + bh), idx);
                    __m256i zv = aff ? _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(zpp[i] + bh)), idx)
                                     : idx;
                    __m256i ul = wb, uh = wb;
                    if (nib) {
                        ul = _mm256_shuffle_epi8(lut, _mm256_and_si256(wb, low4));
                        uh = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(wb, 4), low4));
                    }
                    _Pragma("GCC unroll 8")
                    for (size_t t = 0; t < nx; t++) {
                        const int8_t *q = a->q + (t0 + t) * a->stride + g * G;
                        size_t lo = (t0 + t) * a->lanes + g * LB__QDOT8_LANES + 8 * h;
                        const __m256i cx = _mm256_load_si256((const __m256i *)(a->cxs + lo));
                        __m256i p;
                        if (nib) {
                            __m256i xl = _mm256_load_si256((const __m256i *)(q + 32 * h));
                            __m256i xh = _mm256_load_si256((const __m256i *)(q + 64 + 32 * h));
#if LB__QDOT8_AVX_VNNI
                            p = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(cx, ul, xl), uh, xh);
#else
                            __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(ul, xl), _mm256_maddubs_epi16(uh, xh));
                            p = _mm256_add_epi32(_mm256_madd_epi16(p16, ones), cx);
#endif
                        } else {
                            __m256i xv = _mm256_load_si256((const __m256i *)(q + 32 * h));
#if LB__QDOT8_AVX_VNNI
                            p = _mm256_dpbusd_avx_epi32(cx, _mm256_abs_epi8(wb), _mm256_sign_epi8(xv, wb));
#else
                            p = _mm256_add_epi32(
                                _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wb), _mm256_sign_epi8(xv, wb)), ones),
                                cx);
#endif
                        }
                        if (aff)
                            p = _mm256_sub_epi32(p, _mm256_mullo_epi32(zv, _mm256_load_si256((const __m256i *)(a->xs + lo))));
                        __m256 s = _mm256_mul_ps(_mm256_load_ps(a->d + lo), mwv);
                        acc[i][t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[i][t][h]);
                    }
                }
            }
        }
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                _Alignas(32) float s[16];
                _mm256_store_ps(s, acc[i][t][0]);
                _mm256_store_ps(s + 8, acc[i][t][1]);
                if (k < rs.len[i]) y[t * ldy + rs.first[i] + k] = lb__sum16f(s);
            }
    }
}

#endif
