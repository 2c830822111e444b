/* The quantized tensor and the scale rules shared by quantize, dequantize
 * and the statistics. */
#ifndef LB_QUANT_INTERNAL_H
#define LB_QUANT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

struct lb_qtensor {
    lb_qspec spec;
    size_t rows, cols;
    size_t block;          /* values per scale along a row (cols for channel/token) */
    size_t scales_per_row; /* ceil(cols / block); 1 for tensor granularity */
    size_t scale_count;    /* rows * scales_per_row, or 1 for tensor */
    size_t row_bytes;      /* packed bytes per row */
    uint8_t *data;         /* [rows][row_bytes] */
    uint8_t *scales;       /* scale codes, lb_format_bytes layout */
    int8_t *zero_points;   /* [scale_count], affine only */
    float tensor_scale;    /* two-level: fp32 multiplier over block scales; else 1 */
};

/* One block's scale as stored and as used. */
typedef struct lb__block_scale {
    uint32_t code;   /* in the spec's scale format */
    float value;     /* the decoded code */
    float divisor;   /* what the elements are divided by: value, times the
                        tensor scale (two-level), times 2^-6 (MXINT8) */
    int zero_point;  /* affine only */
} lb__block_scale;

/* Largest element magnitude used: max finite, symmetric for integers
 * (-128 is never produced by int8 symmetric, nor -8 by int4). */
float lb__element_max(const lb_qspec *q);

/* Two-level: the fp32 tensor scale from the tensor's largest magnitude. */
float lb__tensor_scale(const lb_qspec *q, float tensor_amax);

/* A symmetric block scale (fp scale formats, single or two-level) for a
 * block whose largest magnitude is amax, clipped by ratio (1 = absmax). */
void lb__scale_symmetric(const lb_qspec *q, float amax, float ratio, float tensor_scale, lb__block_scale *s);

/* An E8M0 (MX) block scale, rounded as q->mx_rounding says. */
void lb__scale_mx(const lb_qspec *q, float amax, lb__block_scale *s);

/* An affine block scale and zero point from the block's range [lo, hi]
 * (both include 0), clipped by ratio. */
void lb__scale_affine(const lb_qspec *q, float lo, float hi, float ratio, lb__block_scale *s);

/* The divisor of a stored scale code (for dequantization). */
float lb__scale_divisor(const lb_qspec *q, uint32_t code, float tensor_scale);

/* 6-bit codes: one per byte <-> the dense little-endian bit stream. */
void lb__pack6(const uint8_t *codes, size_t n, uint8_t *out);
void lb__unpack6(const uint8_t *packed, size_t n, uint8_t *codes);

/* Bytes of one packed row of n elements. */
size_t lb__packed_row_bytes(lb_format element, size_t n);

#endif
