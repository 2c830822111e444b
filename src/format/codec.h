/* Scalar codecs: the reference every fast path is compared against. */
#ifndef LB_FORMAT_CODEC_H
#define LB_FORMAT_CODEC_H

#include <stdint.h>

#include "lowbit.h"

/* Encodes x (rounded once, to nearest, ties to even). Returns LB_OK or
 * LB_ERR_NAN (NaN into a format without NaN); never sets the error text,
 * so hot loops can call it. */
lb_status lb__encode_ref(const lb_format_info *f, double x, lb_overflow mode, uint32_t *code);

/* The code a NaN with these fp32 bits becomes (0 if the format has no
 * NaN; callers check that first). The payload matters: fp32 keeps it,
 * fp16 keeps its top bits as numpy does, others give a canonical NaN. */
uint32_t lb__nan_code(const lb_format_info *f, uint32_t f32_bits);

/* Decodes a code (only its low f->bits bits are read) to fp32 bits. */
uint32_t lb__decode_ref(const lb_format_info *f, uint32_t code);

/* The magnitude bits of the largest finite code of a float format. */
uint32_t lb__max_magnitude_code(const lb_format_info *f);

/* Round half to even without touching the floating-point environment;
 * exact for |y| < 2^52. */
double lb__round_half_even(double y);

#endif
