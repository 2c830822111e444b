/* The quantized tensor and the scale rules shared by quantize, dequantize
 * and the statistics. */
#ifndef LB_QUANT_INTERNAL_H
#define LB_QUANT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

/* Largest block size: a row this long is ~16 GiB of fp32 already. */
#define LB_QUANT_MAX_GROUP (1u << 30)

/* Rows one block spans: the spec's group_rows for 2-D blocks (bRxC), else 1. */
static inline size_t lb__block_rows(const lb_qspec *s)
{
    return s->granularity == LB_GRAN_GROUP && s->group_rows > 1 ? s->group_rows : 1;
}

struct lb_qtensor {
    lb_qspec spec;
    size_t rows, cols;
    size_t block;          /* values per scale along a row (cols for channel/token) */
    size_t scales_per_row; /* ceil(cols / block); 1 for tensor granularity */
    size_t block_rows;     /* rows sharing a row of scales: R of a 2-D bRxC block, else 1 */
    size_t scale_rows;     /* ceil(rows / block_rows), or 1 for tensor */
    size_t scale_count;    /* scale_rows * scales_per_row */
    size_t row_bytes;      /* packed bytes per row */
    uint8_t *data;         /* [rows][row_bytes] */
    uint8_t *scales;       /* scale codes, lb_format_bytes layout */
    uint8_t *zero_points;  /* affine only: rows of zp_row_bytes, zero points in the element's bulk layout */
    size_t zp_row_bytes;   /* lb_format_bytes(element, scales_per_row) */
    float tensor_scale;    /* two-level: fp32 multiplier over block scales; else 1 */
};

/* The view lb_quantize's tensor would give for rows x cols under spec,
 * sizes only (data, scales and zero points NULL, tensor scale 1), without
 * quantizing: export writes the safetensors headers from it before any
 * tensor exists, and checks each quantized tensor against it. */
void lb__qtensor_layout(const lb_qspec *spec, size_t rows, size_t cols, lb_qtensor_view *v);

/* lb_quantize with, for a two-level spec, the tensor (global) scale made
 * from tensor_amax when that exceeds the tensor's own largest magnitude
 * (a fused group's shared amax: vLLM wants one global scale for q/k/v and
 * for gate/up); 0, or any spec that is not two-level: lb_quantize's bytes. */
lb_status lb__quantize_ex(const lb_qspec *spec, const float *x, size_t rows, size_t cols, int threads,
                          float tensor_amax, lb_qtensor **out);

/* lb__quantize_ex with, for a two-level spec, the tensor scale given
 * (finite, > 0) instead of chosen from the data: GPTQ quantizes a weight
 * group by group under the one tensor scale chosen first from the whole
 * weight (src/algo/gptq_grid.c). Any other spec: lb_quantize's bytes. */
lb_status lb__quantize_ts(const lb_qspec *spec, const float *x, size_t rows, size_t cols, int threads,
                          float tensor_scale, lb_qtensor **out);

/* An lb_qtensor of the spec's layout with its buffers allocated and
 * uninitialized (tensor_scale 1), for a reader that fills in codes and
 * scales it already has (a quantized checkpoint's). */
lb_status lb__qtensor_alloc(const lb_qspec *spec, size_t rows, size_t cols, lb_qtensor **out);

/* One block's scale as stored and as used. */
typedef struct lb__block_scale {
    uint32_t code;   /* in the spec's scale format */
    float value;     /* the decoded code */
    float divisor;   /* what the elements are divided by: value, times the
                        tensor scale (two-level), times 2^-6 (MXINT8) */
    int zero_point;  /* affine only */
} lb__block_scale;

/* Everything the scale rules need, derived once per call from the spec. */
typedef struct lb__scale_rules {
    lb_qspec spec;
    float elem_max;            /* symmetric: the largest element magnitude used (range=restricted
                                  integers: -128 is never produced by int8, nor -8 by int4) */
    int full_range;            /* symmetric integer, range=full or signed: the scale comes from the
                                  block's signed extremes (lo, hi), codes qmin..qmax (lb_int_range) */
    int signed_scale;          /* range=signed: s = (value of largest magnitude) / qmin, maybe < 0 */
    float qmin, qmax;          /* affine: the element's integer range */
    float clamp_lo, clamp_hi;  /* the range scaled values are clamped to */
    float scale_floor;         /* smallest positive value of the scale format */
    float scale_max;           /* largest value of the scale format */
    int emax, mbits;           /* MX: the element's largest exponent and mantissa width */
    float rceil_max;           /* MX round=rceil: amax is divided by this */
    float frac;                /* MXINT8: 2^-6 (1.6 fixed point elements); else 1 */
    float tensor_scale;        /* two-level: fp32 multiplier over block scales; else 1 */
} lb__scale_rules;

void lb__scale_rules_init(const lb_qspec *q, lb__scale_rules *r);

/* Two-level: the fp32 tensor scale from the tensor's largest magnitude
 * (full range: from its extremes lo <= 0 <= hi). */
float lb__tensor_scale(const lb__scale_rules *r, float tensor_amax, float tensor_lo, float tensor_hi);

/* Whether the scale rules read each block's lo/hi (affine, and full-range
 * symmetric integers) rather than its largest magnitude alone. */
static inline int lb__rules_need_range(const lb__scale_rules *r) { return r->spec.affine || r->full_range; }

/* The scales of n blocks at a clipping ratio (1 = absmax): from amax[]
 * (symmetric and MX) or lo[]/hi[] (affine and full-range integers; both
 * include 0; full range also needs amax[b] = max(-lo[b], hi[b])). tmp holds
 * n floats and codes 4n bytes of scratch. */
void lb__scales_for_blocks(const lb__scale_rules *r, lb_isa isa, size_t n, const float *amax, const float *lo,
                           const float *hi, float ratio, lb__block_scale *out, float *tmp, uint8_t *codes);

/* Two-level scales with a one-byte scale format and symmetric elements
 * (NVFP4): lb__two_level_direct says whether r is such a spec, and
 * lb__two_level_scales gives the same scales as lb__scales_for_blocks at
 * ratio 1 without the per-block structs: the codes in the bulk layout (a
 * row of the tensor's scales) and the divisors the encoder divides by (an
 * underflow to 0 divides by 1, as in quantize.c's load_block_arrays). tmp:
 * n floats of scratch. */
int lb__two_level_direct(const lb__scale_rules *r);
void lb__two_level_scales(const lb__scale_rules *r, lb_isa isa, size_t n, const float *amax, uint8_t *codes,
                          float *tmp, float *div);

/* The divisors of n stored scale codes (bulk layout of the scale format),
 * for dequantization and statistics. */
void lb__scale_divisors(const lb__scale_rules *r, lb_isa isa, const uint8_t *codes, size_t n, float *out);

/* ----- quantization with the scales given (quantize_fixed.c) ----- */

/* lb_quantize's encode step and lb_dequantize's decode step for n values
 * whose block scales are given: value i lies in the block of scale
 * s[i * stride] (stride 0: one scale for all), and
 *   out[i] = (decode(encode_sat(clamp(x[i] / d + zp))) - zp) * divisor
 * with d = divisor, or 1 for a zero divisor (an all-zero block), exactly as
 * those functions compute it, bit for bit, when each divisor is what
 * lb_dequantize multiplies by (lb__scale_divisors of the scale's code, r's
 * tensor scale set). x finite; tmp: n floats, codes: 4n bytes of scratch.
 * The caller runs in the default FP environment (lb__fenv_begin). */
void lb__requantize_values(const lb__scale_rules *r, lb_isa isa, const float *x, size_t n, const lb__block_scale *s,
                           size_t stride, float *tmp, uint8_t *codes, float *out);

/* The quantized tensor of x (rows x cols) under spec with every block's
 * scale given instead of chosen: scales[r * scales_per_row + b] for row r
 * and block b (scales_per_row as lb__qtensor_layout says; a 2-D block's
 * scale is read at the first row of its band; tensor granularity:
 * scales[0] alone), divisors as lb__requantize_values wants them; for a
 * two-level spec tensor_scale (finite, > 0; ignored otherwise). The codes
 * are what lb_quantize's encode step gives for x under those scales, so
 * values already on their blocks' grids (GPTQ's output) keep their codes
 * exactly, and lb_dequantize gives them back. LB_ERR_NAN for a value that
 * is not finite. */
lb_status lb__quantize_fixed(const lb_qspec *spec, const float *x, size_t rows, size_t cols,
                             const lb__block_scale *scales, float tensor_scale, int threads, lb_qtensor **out);

/* The zero point of block b of row r (tensor granularity: r = b = 0),
 * sign-extended from the element's code. */
int lb__zero_point(const lb_qtensor *q, size_t r, size_t b);
void lb__store_zero_point(lb_qtensor *q, size_t r, size_t b, int zp);

/* Row r's per-block divisors (mul) and zero points (sub, 0 unless
 * affine), each array holding scales_per_row entries (one for tensor
 * granularity): what dequantization and the statistics both need. */
void lb__row_scales(const lb_qtensor *q, const lb__scale_rules *rules, lb_isa isa, size_t r, float *mul, float *sub);

/* 6-bit codes: one per byte <-> the dense little-endian bit stream. */
void lb__pack6(const uint8_t *codes, size_t n, uint8_t *out);
void lb__unpack6(const uint8_t *packed, size_t n, uint8_t *codes);

/* Bytes of one packed row of n elements. */
size_t lb__packed_row_bytes(lb_format element, size_t n);

#endif
