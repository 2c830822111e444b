/* What the x86 K-quant kernels (qdot8k_avx2.c, qdot8k_vnni.c) share:
 * included only by files compiled with AVX2 and F16C. */
#ifndef LB_KERNEL_QDOT8K_X86_H
#define LB_KERNEL_QDOT8K_X86_H

#include <immintrin.h>
#include <stdint.h>

#include "io/ggml_blocks.h"
#include "kernel/qdot8.h"
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

/* The little-endian fp16 at p. */
INL float fp16_at(const uint8_t *p) { return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8)); }

/* IQ4 group g of a row (blocks 4g .. 4g + 3): the four block scales
 * (IQ4_XS d * (s_j - 32), exact; IQ4_NL each block's d) and the 16 code
 * bytes of block 4g + k at codes[k]. */
INL __m128 iq4_group(const uint8_t *row, size_t g, int nl, const uint8_t *codes[4])
{
    float s[4];
    if (nl) {
        const uint8_t *b = row + 4 * g * 18;
        for (int k = 0; k < 4; k++) s[k] = fp16_at(b + 18 * k), codes[k] = b + 18 * k + 2;
    } else {
        const lb__block_iq4_xs *b = (const lb__block_iq4_xs *)row + g / 2;
        const float d = fp16_at(b->d);
        for (int k = 0; k < 4; k++) {
            int j = (int)(4 * (g % 2)) + k;
            s[k] = d * (float)(lb__iq4_xs_scale_code(b, j) - 32), codes[k] = b->qs + 16 * j;
        }
    }
    return _mm_loadu_ps(s);
}

#endif
