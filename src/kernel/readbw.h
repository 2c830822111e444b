/* A pure read of memory, as fast as this CPU loads: the baseline the
 * matvec benchmark (lowbit bench) divides its bandwidth by. Summing the
 * bytes as 64-bit integers makes every load needed (the sum is returned)
 * while the adds cost nothing next to the loads. */
#ifndef LB_KERNEL_READBW_H
#define LB_KERNEL_READBW_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

/* The sum, mod 2^64, of p[0 .. bytes/8) read as 64-bit words (the tail
 * beyond the last whole word is ignored). Every path gives the same sum. */
uint64_t lb__read_sum(const void *p, size_t bytes, lb_isa isa);
/* What lb__read_sum runs at that level, in words for a report. */
const char *lb__read_sum_method(lb_isa isa);

/* The paths, for tests: the portable one, the AVX2 and the AVX-512 one
 * (only after a CPU check; the portable loop on other targets). */
uint64_t lb__read_sum_scalar(const void *p, size_t bytes);
uint64_t lb__read_sum_avx2(const void *p, size_t bytes);
uint64_t lb__read_sum_avx512(const void *p, size_t bytes);

#endif
