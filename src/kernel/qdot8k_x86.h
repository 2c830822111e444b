/* What the x86 K-quant kernels (qdot8k_avx2.c, qdot8k_vnni.c) share:
 * included only by files compiled with AVX2 and F16C. */
#ifndef LB_KERNEL_QDOT8K_X86_H
#define LB_KERNEL_QDOT8K_X86_H

#include <immintrin.h>
#include <stdint.h>

#include "io/ggml_blocks.h"
#include "kernel/qdot8.h"
#include "kernel/row_streams.h"
#include "kernel/qdot8_instances.h"
#include "quant/qkernels.h"

#define INL static inline __attribute__((always_inline))
#define RMAX 4

/* The eight bytes of v (sc_j or m_j of lb__qdot8k_scale_min) as floats, times mul (exact: 6 bits by fp16). */
INL __m256 bytes_to_ps(uint64_t v, float mul)
{
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)v))),
                         _mm256_set1_ps(mul));
}

/* Rows in flight: row k of each of R streams of the range
 * (row_streams.h); each of a row's `steps` steps fetches its share of the
 * row `ahead` bytes on in each stream, into L2. */
typedef struct kstreams {
    lb__row_streams s;
    size_t share; /* bytes of a row each step prefetches: whole lines */
} kstreams;

INL void kstreams_init(kstreams *ks, const lb__qmat *m, size_t R, size_t r0, size_t r1, size_t steps)
{
    lb__row_streams_init(&ks->s, m, R, r0, r1);
    ks->share = (m->row_bytes / steps + 63) / 64 * 64;
}

/* Row k of each stream (a stream that has ended repeats the first's; its
 * sums are dropped). */
INL void kstream_rows(const lb__qmat *m, const kstreams *ks, size_t R, size_t k, const uint8_t **row)
{
    for (size_t i = 0; i < R; i++) row[i] = m->data + (ks->s.first[lb__row_stream_at(&ks->s, i, k)] + k) * m->row_bytes;
}

INL void kprefetch(const kstreams *ks, size_t R, const uint8_t *const *row, size_t step)
{
    for (size_t i = 0; i < R; i++)
        for (size_t o = 0; o < ks->share; o += 64)
            _mm_prefetch((const char *)row[i] + ks->s.ahead + step * ks->share + o, _MM_HINT_T1);
}

/* The little-endian fp16 at p. */
INL float fp16_at(const uint8_t *p) { return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8)); }

/* IQ4_XS: the eight d * (s_j - 32) of a super-block (exact), s_j's low
 * nibbles and high bits spread to bytes by pdep. */
INL __m256 iq4_xs_scales(const lb__block_iq4_xs *b)
{
    const uint64_t lo = _pdep_u64((uint64_t)b->scales_l[0] | (uint64_t)b->scales_l[1] << 8 |
                                      (uint64_t)b->scales_l[2] << 16 | (uint64_t)b->scales_l[3] << 24,
                                  0x0F0F0F0F0F0F0F0Full);
    const uint64_t hi = _pdep_u64(lb__le16(b->scales_h), 0x0303030303030303ull);
    const __m256 s = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)(lo | hi << 4))));
    return _mm256_mul_ps(_mm256_sub_ps(s, _mm256_set1_ps(32.0f)), _mm256_set1_ps(fp16_at(b->d)));
}

/* Group g of a row of nblk blocks of 32 (blocks 4g .. 4g + 3; IQ4_NL and
 * Q4_0: 18 bytes, d and 16 code bytes; five, Q5_0: 22, d, qh[4] and the
 * codes): the four block scales d, the 16 code bytes of block 4g + k at
 * codes[k] and its fifth bits at qh[k] (0 unless five); blocks past the
 * row (a last group that ends early) scale 0, codes and bits 0, never
 * read. */
INL __m128 block32_group(const uint8_t *row, size_t g, size_t nblk, int five, const uint8_t *codes[4], uint32_t qh[4])
{
    static const uint8_t none[16];
    const size_t bb = five ? 22 : 18;
    const uint8_t *b = row + 4 * g * bb;
    float s[4];
    for (size_t k = 0; k < 4; k++) {
        const uint8_t *x = b + bb * k;
        const int in = 4 * g + k < nblk;
        s[k] = in ? fp16_at(x) : 0.0f, codes[k] = in ? x + (five ? 6 : 2) : none;
        qh[k] = in && five ? lb__le32(x + 2) : 0;
    }
    return _mm_loadu_ps(s);
}

#endif
