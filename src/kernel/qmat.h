/* Weight matrices kept in their stored (packed) format, and the matrix
 * products that read them without a dequantized copy.
 *
 * An lb__qmat is a view of W [rows = output features][cols = inputs]:
 * either plain codes (fp32, bf16 or fp16, no scale) or an lb_qtensor's
 * packed layout (lowbit.h, "The stored layout"): rows of element codes,
 * per-block scale codes, optional zero points, optional tensor scale.
 *
 * The value a product uses for W[r][k] is exactly lb_dequantize's:
 *   w = (v - zp) * mul      (fp32, one rounding; v the element code's value,
 *                            zp 0 unless affine, mul = decoded block scale
 *                            times scale_mul)
 * so a kernel differs from "dequantize, then multiply in fp32" only in the
 * order it sums products (see qdot.h for the decode order, and
 * lb__qmat_matmul for the prefill order).
 *
 * Or (ggml_block > 0) a view of rows of ggml blocks as a GGUF file stores
 * them (lb__qmat_from_ggml): the value of W[r][k] is then exactly what
 * lb_dtype_to_f32 gives for the row, and the decode kernels are gdot.h's. */
#ifndef LB_KERNEL_QMAT_H
#define LB_KERNEL_QMAT_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

typedef struct lb__qmat {
    size_t rows, cols;
    lb_format element;         /* element format */
    int plain;                 /* 1: fp32/bf16/fp16 codes, no scales */
    size_t block;              /* elements per scale along a row (cols when plain, channel or tensor) */
    size_t blocks;             /* scale blocks per row: ceil(cols / block) */
    const uint8_t *data;       /* rows x row_bytes of packed element codes */
    size_t row_bytes;
    lb_format scale_format;    /* fp32, fp16, bf16, e8m0 or ue4m3 */
    const uint8_t *scales;     /* scale codes, lb_format_bytes layout; row r's first is (r / block_rows) * blocks */
    size_t block_rows;         /* rows sharing a row of scales: R of 2-D bRxC blocks, else 1 */
    int one_scale;             /* tensor granularity: the single code scales[0] serves every row */
    const uint8_t *zero_points;/* affine: row r's at zero_points + r * zp_row_bytes, element bulk layout */
    size_t zp_row_bytes;
    float scale_mul;           /* every decoded scale is multiplied by this (two-level tensor scale,
                                  MXINT8's 2^-6, else 1): the mul lb_dequantize uses */
    lb_qspec spec;             /* the quantization spec (element only when plain) */
    int nan_free;              /* 1: no element code is a NaN (checked when built from a tensor; lb_quantize
                                  never writes one): kernels may skip making NaN codes NaN */
    size_t bytes;              /* codes + scales + zero points (+ the fp32 tensor scale): what a product reads */
    /* a ggml-typed matrix: every row is cols / ggml_block blocks of the
       dtype, row_bytes apart from data; the fields above the codes (element,
       scales, spec ...) are unused and zero */
    lb_dtype ggml;             /* meaningful when ggml_block > 0 */
    size_t ggml_block;         /* elements per ggml block; 0: not a ggml matrix */
    size_t ggml_block_bytes;
    /* ownership: freed by lb__qmat_free (NULL for borrowed views) */
    lb_qtensor *owned_q;
    void *owned_buf;
} lb__qmat;

/* The row of scales that serves row r (a matrix built by hand with
 * block_rows 0 has one per row). */
static inline size_t lb__qmat_scale_row(const lb__qmat *m, size_t r)
{
    return m->block_rows > 1 ? r / m->block_rows : r;
}

/* Stores w [rows][cols] (fp32, row-major) packed: spec NULL keeps fp32; a
 * plain bf16/fp16/fp32 spec (element bf16/fp16/fp32 at tensor granularity,
 * no options) rounds to that format (saturating); any other spec is
 * quantized with lb_quantize. */
lb_status lb__qmat_from_f32(const float *w, size_t rows, size_t cols, const lb_qspec *spec, int threads,
                            lb__qmat *out);
/* Views a quantized tensor; with take_ownership the matrix frees it. */
void lb__qmat_from_qtensor(lb_qtensor *q, int take_ownership, lb__qmat *out);
void lb__qmat_free(lb__qmat *m);
/* Views rows x cols of ggml dtype t: data holds rows rows of cols / block
 * blocks each, back to back (a GGUF tensor's bytes). owned: freed by
 * lb__qmat_free (data may point into it), or NULL when data is borrowed
 * (a file mapping, which must outlive the matrix). Any dtype that
 * lb_dtype_to_f32 reads and that has a byte size works (the block types,
 * and f32/f16/bf16 ...); LB_ERR_ARG when cols is not whole blocks or the
 * size overflows, LB_ERR_UNSUPPORTED for a dtype without bytes of its own
 * or a dequantizer. On failure *out is zeroed and owned is not freed. */
lb_status lb__qmat_from_ggml(lb_dtype t, const void *data, size_t rows, size_t cols, void *owned, lb__qmat *out);

/* A ggml matrix whose values are a lowbit format exactly (Q8_0:
 * int8:g32, fp16 scales; MXFP4: mxfp4) copied into lowbit's layout, the
 * same values and bytes (qmat_repack.c), so the int8-activation kernels
 * take it. LB_ERR_UNSUPPORTED (no message) for other types (Q4_0 and
 * Q5_0 are read in place: qdot8k.c), LB_ERR_NOMEM. *out owns its bytes. */
lb_status lb__qmat_repack_ggml(const lb__qmat *g, lb__qmat *out);

/* 1 for a bf16/fp16/fp32 spec with nothing to scale (lb_qspec_validate
 * refuses these; here they mean "round to the format"). */
int lb__qspec_is_plain(const lb_qspec *spec);

/* Row r's values, exactly as lb_dequantize gives them, into dst[cols].
 * LB_ERR_NOMEM when wide rows need scratch that cannot be had. */
lb_status lb__qmat_row_f32(const lb__qmat *m, size_t r, float *dst);

/* Y[n][rows] = X[n][cols] . W^T, reading W packed.
 *   n < LB__QMAT_PANEL_MIN_N: the decode kernels (qdot.h), up to
 *     LB__QDOT_MAX_NX tokens per pass over W; a token's result does not
 *     depend on n.
 *   n >= LB__QMAT_PANEL_MIN_N: each panel of LB__MM_NR rows is
 *     dequantized (lb__qmat_row_f32) into a per-thread buffer and run
 *     through the fp32 matmul kernels (kernel/matmul.h): bit-identical to
 *     lb__matmul on the dequantized weights, so prefill on packed weights
 *     equals the fake-quantized path exactly.
 * Threads split the rows; results are identical for any thread count. */
#define LB__QMAT_PANEL_MIN_N 16
lb_status lb__qmat_matmul(const lb__qmat *m, const float *x, size_t n, float *y, int threads);
lb_status lb__qmat_matmul_isa(const lb__qmat *m, const float *x, size_t n, float *y, int threads, lb_isa isa);

#endif
