/* One token's int8 activations staged in AVX2 vectors: the twin of
 * qdot8_stage_vnni.c for the AVX2 set, the same bytes as the reference
 * loop (lb__qdot8_stage in qdot8.c) for lane widths 4 and 8. A block of
 * 32 is quantized as w8a8's quant_i8 does it (max of |x|, one division,
 * clamp, rounding to nearest even), packed to bytes in order; 4-bit
 * layouts then split even and odd bytes with a shuffle. Lane sums: four
 * bytes by vpmaddubsw and vpmaddwd with ones, eight by vpsadbw of the
 * codes + 128 (less 8 * 128). */
#include "kernel/qdot8.h"
#include "kernel/w8a8_kernels.h"

#if defined(__x86_64__) && defined(__AVX2__)

#include <immintrin.h>
#include <string.h>

/* The block of 32 at k0 as 32 int8 codes in order, and its scale; a block
 * wholly past the row: codes 0 and d = 0 (the reference's). */
static inline float quant_block(const float *x, size_t cols, size_t k0, __m256i *codes)
{
    if (k0 >= cols) {
        *codes = _mm256_setzero_si256();
        return 0.0f;
    }
    float pad[32];
    const float *p = x + k0;
    if (cols - k0 < 32) { /* the row's last block: zeros past it, as the reference's masked loads read */
        memset(pad, 0, sizeof pad);
        memcpy(pad, p, (cols - k0) * sizeof *p);
        p = pad;
    }
    const __m256 signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(p + 8 * i);
        m = _mm256_max_ps(_mm256_and_ps(v[i], signless), m);
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const float d = lb__w8a8_i8_scale(_mm_cvtss_f32(h));
    const __m256 dv = _mm256_set1_ps(d), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    __m256i c[4];
    for (int i = 0; i < 4; i++) c[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_div_ps(v[i], dv), lo), hi));
    /* in [-127, 127]: packed twice without saturating, then the dwords put back in order */
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
    *codes = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    return d;
}

static inline void store_lanes(__m128i sums, int off, int32_t *cxs, int32_t *xs)
{
    _mm_storeu_si128((__m128i *)(void *)cxs, _mm_mullo_epi32(sums, _mm_set1_epi32(-off)));
    if (xs) _mm_storeu_si128((__m128i *)(void *)xs, sums);
}

void lb__qdot8_stage_token_avx2(const float *x, size_t cols, size_t groups, size_t lane_elems, int off, int8_t *q,
                                int32_t *cxs, int32_t *xs, float *d)
{
    if (lane_elems == 8) { /* 4-bit: per group of 4 blocks, its 64 even elements, then the 64 odd ones */
        /* per 128-bit half: its 8 even bytes, then its 8 odd ones */
        const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10,
                                               12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
        const __m256i bias = _mm256_set1_epi8((char)0x80);
        for (size_t g = 0; g < groups; g++)
            for (size_t b = 0; b < 4; b++) {
                __m256i c;
                const float s = quant_block(x, cols, g * 128 + 32 * b, &c);
                /* [even 0-14, odd 1-15 | even 16-30, odd 17-31] -> [evens | odds] */
                __m256i eo = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(c, split), _MM_SHUFFLE(3, 1, 2, 0));
                _mm_storeu_si128((__m128i *)(void *)(q + g * 128 + 16 * b), _mm256_castsi256_si128(eo));
                _mm_storeu_si128((__m128i *)(void *)(q + g * 128 + 64 + 16 * b), _mm256_extracti128_si256(eo, 1));
                /* lane 4b + i: elements 8i .. 8i+7 of the block, in order here */
                __m256i sad = _mm256_sub_epi64(_mm256_sad_epu8(_mm256_xor_si256(c, bias), _mm256_setzero_si256()),
                                               _mm256_set1_epi64x(8 * 128));
                __m128i sums = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(sad, _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0)));
                const size_t l = g * 16 + 4 * b;
                store_lanes(sums, off, cxs + l, xs ? xs + l : NULL);
                _mm_storeu_ps(d + l, _mm_set1_ps(s));
            }
        return;
    }
    /* int8 and fp6 (lane width 4): per group 2 blocks, codes in order */
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (size_t g = 0; g < groups; g++)
        for (size_t b = 0; b < 2; b++) {
            __m256i c;
            const float s = quant_block(x, cols, g * 64 + 32 * b, &c);
            _mm256_storeu_si256((__m256i *)(void *)(q + g * 64 + 32 * b), c);
            __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, c), ones16); /* lane 8b + i: bytes 4i .. 4i+3 */
            const size_t l = g * 16 + 8 * b;
            _mm256_storeu_si256((__m256i *)(void *)(cxs + l), _mm256_mullo_epi32(sums, _mm256_set1_epi32(-off)));
            if (xs) _mm256_storeu_si256((__m256i *)(void *)(xs + l), sums);
            _mm256_storeu_ps(d + l, _mm256_set1_ps(s));
        }
}

#endif
