/* The portable read loop and the choice of path (readbw.h). */
#include "kernel/readbw.h"

#include <string.h>

#include "util/cpu.h"

/* Four independent accumulators so that the loop is bound by loads, not
 * by one chain of adds; gcc -O2 turns it into vector adds. memcpy reads
 * a word without assuming the buffer's alignment or effective type. */
uint64_t lb__read_sum_scalar(const void *p, size_t bytes)
{
    const unsigned char *b = p;
    size_t n = bytes / 8, i = 0;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (; i + 4 <= n; i += 4) {
        uint64_t w[4];
        memcpy(w, b + i * 8, sizeof w);
        a0 += w[0], a1 += w[1], a2 += w[2], a3 += w[3];
    }
    for (; i < n; i++) {
        uint64_t w;
        memcpy(&w, b + i * 8, sizeof w);
        a0 += w;
    }
    return a0 + a1 + a2 + a3;
}

uint64_t lb__read_sum(const void *p, size_t bytes, lb_isa isa)
{
    isa = lb__isa_x86(lb__isa_clamp(isa)); /* the vector path is x86 only */
    if (isa >= LB_ISA_AVX512) return lb__read_sum_avx512(p, bytes);
    if (isa == LB_ISA_AVX2) return lb__read_sum_avx2(p, bytes);
    return lb__read_sum_scalar(p, bytes);
}

const char *lb__read_sum_method(lb_isa isa)
{
    isa = lb__isa_x86(lb__isa_clamp(isa));
    if (isa >= LB_ISA_AVX512) return "AVX-512 64-bit integer sum, 4 independent 512-bit accumulators";
    if (isa == LB_ISA_AVX2) return "AVX2 64-bit integer sum, 8 independent 256-bit accumulators";
    return "portable C 64-bit integer sum, 4 independent accumulators (compiler-vectorized)";
}
