/* Scalar codecs: the reference every fast path is compared against. */
#ifndef LB_FORMAT_CODEC_H
#define LB_FORMAT_CODEC_H

#include <stdint.h>

#include "lowbit.h"

/* The three codec families a table row can point at (lb_encode_fn and
 * lb_decode_fn in lowbit.h say what they promise). */
lb_status lb__encode_minifloat(const lb_format_info *f, double x, lb_overflow mode, uint32_t *code);
lb_status lb__encode_e8m0(const lb_format_info *f, double x, lb_overflow mode, uint32_t *code);
lb_status lb__encode_int(const lb_format_info *f, double x, lb_overflow mode, uint32_t *code);
uint32_t lb__decode_minifloat(const lb_format_info *f, uint32_t code);
uint32_t lb__decode_e8m0(const lb_format_info *f, uint32_t code);
uint32_t lb__decode_int(const lb_format_info *f, uint32_t code);

/* The code a NaN with these fp32 bits becomes (0 if the format has no
 * NaN; callers check that first). The payload matters: fp32 keeps it,
 * fp16 keeps its top bits as numpy does, others give a canonical NaN. */
uint32_t lb__nan_code(const lb_format_info *f, uint32_t f32_bits);

/* The magnitude bits of the largest finite code of a float format. */
uint32_t lb__max_magnitude_code(const lb_format_info *f);

/* Round half to even without touching the floating-point environment;
 * exact for |y| < 2^52. */
double lb__round_half_even(double y);

#endif
