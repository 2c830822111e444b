/* The AVX2 read loop (readbw.h): readbw_avx512.c's loop in 32-byte loads,
 * 256 bytes per iteration into eight independent accumulators (unrolled:
 * looped over, they stayed in memory and read 11.7 GB/s), each line
 * prefetched into L2 4 KiB ahead. Before it, AVX2 machines measured the
 * portable loop, which the compiler vectorizes to 16-byte SSE2 adds: on an
 * AVX-512 Xeon run as AVX2 (LOWBIT_ISA=avx2) that loop read 10.4 GB/s on
 * one thread and 17.6 on two while the fp32 matvec read 26.7, so every "of
 * read" ratio of an AVX2 run was flattered (fp32 1.52); this one reads what
 * the AVX-512 loop does there (14.1 and 26.9-27.1 GB/s against 14.1-14.6
 * and 25.8-27.0, alternated). Lanes summed as unsigned 64-bit words: the
 * result equals lb__read_sum_scalar's. */
#include "kernel/readbw.h"

#if defined(__x86_64__)
#include <immintrin.h>

uint64_t lb__read_sum_avx2(const void *p, size_t bytes)
{
    const unsigned char *b = p;
    size_t n = bytes / 8 * 8, i = 0;
    __m256i a[8];
    _Pragma("GCC unroll 8")
    for (int k = 0; k < 8; k++) a[k] = _mm256_setzero_si256();
    for (; i + 256 <= n; i += 256) {
        for (int l = 0; l < 4; l++) _mm_prefetch((const char *)b + i + 4096 + 64 * l, _MM_HINT_T1); /* never faults */
        _Pragma("GCC unroll 8") /* the accumulators in registers: a loop over them kept them in memory */
        for (int k = 0; k < 8; k++) a[k] = _mm256_add_epi64(a[k], _mm256_loadu_si256((const __m256i *)(b + i + 32 * k)));
    }
    _Pragma("GCC unroll 8")
    for (int k = 1; k < 8; k++) a[0] = _mm256_add_epi64(a[0], a[k]);
    uint64_t lane[4], s = 0;
    _mm256_storeu_si256((__m256i *)lane, a[0]);
    for (int l = 0; l < 4; l++) s += lane[l];
    return s + lb__read_sum_scalar(b + i, n - i);
}
#else
uint64_t lb__read_sum_avx2(const void *p, size_t bytes) { return lb__read_sum_scalar(p, bytes); }
#endif
