/* AVX2 int8-activation kernels on ggml's Q4_K and Q5_K, read in place:
 * qdot8.h's K-quant sums, bit for bit the scalar reference.
 *
 * A ymm is one 32-byte chunk c of a super-block's codes: its low nibbles
 * are sub-block 2c, its high ones 2c + 1, one scale for all 8 lanes.
 * vpmaddubsw takes the unsigned codes (at most 31) against the signed
 * activations (|x| <= 127): a pair is at most 7874, never saturating;
 * vpmaddwd by 1 gives the int32 lanes of 4 products. Lanes 0-7 of the
 * definition are chunk 2h, lanes 8-15 chunk 2h + 1. */
#include "kernel/qdot8.h"
#include "kernel/qdot8_instances.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <stdint.h>

#include "quant/qkernels.h"

#define INL static inline __attribute__((always_inline))
#define RMAX 4

INL __m256 bytes_to_ps(uint64_t v, float mul)
{
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)v))),
                         _mm256_set1_ps(mul));
}

INL float fp16_at(const uint8_t *p) { return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8)); }

INL void krun(const lb__qmat *m, const lb__act8 *a, size_t t0, const size_t nx, size_t r0, size_t r1, float *y,
              size_t ldy, const int five)
{
    const size_t R = nx == 1 ? 4 : nx == 2 ? 2 : 1;
    const size_t nsb = m->cols / 256, nblk = m->cols / 32, bb = m->ggml_block_bytes, qs_at = five ? 48 : 16;
    const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1), sixteen = _mm256_set1_epi8(16);
    for (size_t r = r0; r < r1; r += R) {
        size_t rn = r1 - r < R ? r1 - r : R;
        const uint8_t *row[RMAX];
        for (size_t i = 0; i < R; i++) row[i] = m->data + (r + (i < rn ? i : rn - 1)) * m->row_bytes;
        __m256 acc[RMAX][LB__QDOT_MAX_NX][2], macc[RMAX][LB__QDOT_MAX_NX];
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < R; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++)
                acc[i][t][0] = acc[i][t][1] = macc[i][t] = _mm256_setzero_ps();
        for (size_t s = 0; s < nsb; s++) {
            _Pragma("GCC unroll 8")
            for (size_t i = 0; i < R; i++) {
                const uint8_t *b = row[i] + s * bb, *qs = b + qs_at;
                uint64_t sc, mn;
                lb__qdot8k_scale_min(b + 4, &sc, &mn);
                const __m256 dsc = bytes_to_ps(sc, fp16_at(b)), dmn = bytes_to_ps(mn, fp16_at(b + 2));
                __m256i qh = _mm256_setzero_si256();
                if (five) qh = _mm256_loadu_si256((const __m256i *)(b + 16));
                _Pragma("GCC unroll 8")
                for (size_t t = 0; t < nx; t++)
                    macc[i][t] = _mm256_fmadd_ps(_mm256_loadu_ps(a->e + (t0 + t) * nblk + 8 * s), dmn, macc[i][t]);
                _Pragma("GCC unroll 2")
                for (size_t h = 0; h < 2; h++)
                    _Pragma("GCC unroll 2")
                    for (size_t n = 0; n < 2; n++)
                        _Pragma("GCC unroll 2")
                        for (size_t c = 0; c < 2; c++) {
                            const size_t ch = 2 * h + c, j = 2 * ch + n;
                            const __m256i wb = _mm256_loadu_si256((const __m256i *)(qs + 32 * ch));
                            __m256i u = _mm256_and_si256(n ? _mm256_srli_epi16(wb, 4) : wb, low4);
                            if (five) {
                                const __m256i bit = _mm256_set1_epi8((char)(1 << j));
                                u = _mm256_add_epi8(u, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit),
                                                                        sixteen));
                            }
                            const __m256 sv = _mm256_permutevar8x32_ps(dsc, _mm256_set1_epi32((int)j));
                            _Pragma("GCC unroll 8")
                            for (size_t t = 0; t < nx; t++) {
                                const size_t g = 2 * s + h;
                                const __m256i xv =
                                    _mm256_load_si256((const __m256i *)(a->q + (t0 + t) * a->stride + g * 128 + n * 64 + c * 32));
                                const __m256 dl = _mm256_load_ps(a->d + (t0 + t) * a->lanes + (2 * g + n) * 16 + 8 * c);
                                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), ones);
                                acc[i][t][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dl, sv), acc[i][t][c]);
                            }
                        }
            }
        }
        _Pragma("GCC unroll 8")
        for (size_t i = 0; i < rn; i++)
            _Pragma("GCC unroll 8")
            for (size_t t = 0; t < nx; t++) {
                _Alignas(32) float s16[16], s8[8];
                _mm256_store_ps(s16, acc[i][t][0]);
                _mm256_store_ps(s16 + 8, acc[i][t][1]);
                _mm256_store_ps(s8, macc[i][t]);
                y[t * ldy + r + i] = lb__sum16f(s16) - lb__qdot8k_sum8(s8);
            }
    }
}

LB__QDOT8K_ROWS_FN(lb__qdot8k_rows_avx2)

#endif
