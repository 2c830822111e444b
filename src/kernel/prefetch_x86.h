/* The x86 decode kernels' software prefetch of the rows ahead (included
 * only by files compiled for x86 with SSE). Rows of a few hundred bytes
 * end before the hardware prefetchers ramp up, so each kernel step also
 * asks for its share of the rows a few row groups on: into L1 where those
 * fit in an eighth of it (lb__prefetch_to_l1), else into L2. A prefetch past
 * the matrix is harmless: it never faults. */
#ifndef LB_KERNEL_PREFETCH_X86_H
#define LB_KERNEL_PREFETCH_X86_H

#include <immintrin.h>
#include <stddef.h>

/* The cache lines of [at, at + bytes), into L1 (to_l1) or L2. */
static inline __attribute__((always_inline)) void lb__prefetch_span(const void *at, size_t bytes, int to_l1)
{
    const char *p = (const char *)at;
    if (to_l1)
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
    else
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
}

#endif
