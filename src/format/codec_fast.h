/* Scalar encode/decode of single values by the SIMD kernels' integer
 * method (saturating, finite input): for per-block scales. The caller runs
 * in the default FP environment (lb__fenv_begin). */
#ifndef LB_FORMAT_CODEC_FAST_H
#define LB_FORMAT_CODEC_FAST_H

#include <stdint.h>

#include "lowbit.h"

uint32_t lb__encode_fast(lb_format f, float x);
float lb__decode_fast(lb_format f, uint32_t code);

#endif
