/* Overflow-checked unsigned 64-bit arithmetic: each returns 1 and stores
 * the result, or returns 0 (and leaves *out alone) when it would wrap. */
#ifndef LB_UTIL_CHECKED_H
#define LB_UTIL_CHECKED_H

#include <stdint.h>

static inline int lb__mul_u64_checked(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a && b > UINT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static inline int lb__add_u64_checked(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b > UINT64_MAX - a) return 0;
    *out = a + b;
    return 1;
}

static inline int lb__sub_u64_checked(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b > a) return 0;
    *out = a - b;
    return 1;
}

#endif
