/* An fp32 value's bit pattern and back, without type punning through
 * pointers (memcpy is what C allows; compilers make it a register move). */
#ifndef LB_UTIL_BITS_H
#define LB_UTIL_BITS_H

#include <stdint.h>
#include <string.h>

static inline uint32_t lb__f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float lb__f32_from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

#endif
