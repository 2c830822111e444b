/* The one entry point for writing ggml types (ggml_quants.h): argument
 * checks, then each row through the block loops of ggml_blocks.c and
 * ggml_blocks_iq4.c (and the K-quants of ggml_quants_k.c). */
#include <math.h>
#include <string.h>

#include "io/ggml_blocks.h"
#include "io/ggml_quants.h"
#include "io/ggml_quants_k.h"
#include "util/error.h"

/* The plain types, input finite: f16 as ggml's GGML_FP32_TO_FP16 (round to
 * nearest even, overflow to inf) and bf16 as GGML_FP32_TO_BF16 (round to
 * nearest even on the bits, overflow to inf) are both the IEEE
 * conversion, which the format layer's bulk codecs do (SIMD where the CPU
 * has it). ggml's bf16 NaN rule (keep the top bits, set the quiet bit)
 * never applies: NaN is refused before. */
static lb_status row_plain(lb_format f, const float *x, size_t n, uint8_t *y)
{
    return lb_encode_f32(f, LB_IEEE, x, n, y, 1);
}

static void row_f32(const float *x, size_t n, uint8_t *y)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(y, x, n * sizeof *x); /* the file's little-endian bytes are the host's */
#else
    for (size_t i = 0; i < n; i++) {
        uint32_t u = lb__bits_from_f32(x[i]);
        y[4 * i] = (uint8_t)u, y[4 * i + 1] = (uint8_t)(u >> 8), y[4 * i + 2] = (uint8_t)(u >> 16),
        y[4 * i + 3] = (uint8_t)(u >> 24);
    }
#endif
}

/* Whether all n values are finite: one pass without an early exit (most
 * rows are clean). Adding one to the exponent field carries into the sign
 * bit only for inf and NaN (field 0xFF), so an OR of those sums has bit 31
 * set exactly when one is there: three integer ops a lane, vectorized. */
static int all_finite(const float *x, size_t n)
{
    uint32_t acc = 0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) /* whole chunks: a fixed count the -O2 vectorizer takes */
        for (int j = 0; j < 32; j++) acc |= (lb__bits_from_f32(x[i + j]) & 0x7F800000u) + 0x00800000u;
    for (; i < n; i++) acc |= (lb__bits_from_f32(x[i]) & 0x7F800000u) + 0x00800000u;
    return !(acc & 0x80000000u);
}

static size_t first_nonfinite(const float *x) /* one of x is NaN or infinite */
{
    size_t i = 0;
    while (isfinite(x[i])) i++;
    return i;
}

/* One row of cols values (a whole number of blocks) into dst. */
static lb_status quantize_row(lb_dtype t, const lb_dtype_info *d, const float *x, size_t cols, const float *imatrix,
                              uint8_t *dst)
{
    const size_t nb = cols / d->block;
    switch (t) {
    case LB_DT_F32: row_f32(x, cols, dst); return LB_OK;
    case LB_DT_F16: return row_plain(LB_FMT_FP16, x, cols, dst);
    case LB_DT_BF16: return row_plain(LB_FMT_BF16, x, cols, dst);
    /* ggml ignores the importance matrix for these three */
    case LB_DT_Q8_0: lb__quantize_q8_0(x, nb, dst); return LB_OK;
    case LB_DT_MXFP4: lb__quantize_mxfp4(x, nb, dst); return LB_OK;
    case LB_DT_NVFP4: lb__quantize_nvfp4(x, nb, dst); return LB_OK;
    /* with an importance matrix ggml takes a weighted scale search (ggml_quants_k.c), else its reference */
    case LB_DT_Q4_0:
        if (imatrix) lb__ggml_quantize_row_q4_0_imatrix(x, dst, cols, imatrix);
        else lb__quantize_q4_0(x, nb, dst);
        return LB_OK;
    case LB_DT_Q4_1:
        if (imatrix) lb__ggml_quantize_row_q4_1_imatrix(x, dst, cols, imatrix);
        else lb__quantize_q4_1(x, nb, dst);
        return LB_OK;
    case LB_DT_Q5_0:
        if (imatrix) lb__ggml_quantize_row_q5_0_imatrix(x, dst, cols, imatrix);
        else lb__quantize_q5_0(x, nb, dst);
        return LB_OK;
    case LB_DT_Q5_1:
        if (imatrix) lb__ggml_quantize_row_q5_1_imatrix(x, dst, cols, imatrix);
        else lb__quantize_q5_1(x, nb, dst);
        return LB_OK;
    case LB_DT_IQ4_NL: lb__quantize_iq4_nl(x, nb, imatrix, dst); return LB_OK;
    case LB_DT_IQ4_XS: lb__quantize_iq4_xs(x, nb, imatrix, dst); return LB_OK;
    /* the K-quants: ggml's reference without an importance matrix, its weighted search with one */
    case LB_DT_Q2_K: lb__ggml_quantize_row_q2_k(x, dst, cols, imatrix); return LB_OK;
    case LB_DT_Q3_K: lb__ggml_quantize_row_q3_k(x, dst, cols, imatrix); return LB_OK;
    case LB_DT_Q4_K: lb__ggml_quantize_row_q4_k(x, dst, cols, imatrix); return LB_OK;
    case LB_DT_Q5_K: lb__ggml_quantize_row_q5_k(x, dst, cols, imatrix); return LB_OK;
    case LB_DT_Q6_K: lb__ggml_quantize_row_q6_k(x, dst, cols, imatrix); return LB_OK;
    case LB_DT_F64: case LB_DT_F8_E4M3: case LB_DT_F8_E5M2: case LB_DT_I8: case LB_DT_I16: case LB_DT_I32:
    case LB_DT_I64: case LB_DT_U8: case LB_DT_BOOL: case LB_DT_QUANTIZED: case LB_DT_COUNT: break;
    }
    return lb__fail(LB_ERR_UNSUPPORTED, "lb__ggml_quantize_rows: %s is not a type ggml quantizes to", d->name);
}

lb_status lb__ggml_quantize_rows(lb_dtype t, const float *src, size_t rows, size_t cols, const float *imatrix,
                                 void *dst)
{
    const lb_dtype_info *d = lb_dtype_get(t);
    if (!d) return lb__fail(LB_ERR_ARG, "lb__ggml_quantize_rows: unknown dtype id %d", (int)t);
    if (d->block_bytes == 0 || d->ggml_type < 0)
        return lb__fail(LB_ERR_UNSUPPORTED, "lb__ggml_quantize_rows: %s is not a ggml type", d->name);
    if (cols % d->block)
        return lb__fail(LB_ERR_ARG, "lb__ggml_quantize_rows: rows of %zu values are not whole %s blocks of %u", cols,
                        d->name, d->block);
    if (rows == 0 || cols == 0) return LB_OK;
    if (!src || !dst) return lb__fail(LB_ERR_ARG, "lb__ggml_quantize_rows: %s is NULL", !src ? "src" : "dst");
    const size_t row_bytes = cols / d->block * d->block_bytes;
    if (imatrix && !all_finite(imatrix, cols)) {
        size_t c = first_nonfinite(imatrix);
        return lb__fail(LB_ERR_NAN, "lb__ggml_quantize_rows: importance weight %zu is %s", c,
                        isnan(imatrix[c]) ? "NaN" : "infinite");
    }
    for (size_t r = 0; r < rows; r++) {
        const float *x = src + r * cols;
        if (!all_finite(x, cols)) {
            size_t c = first_nonfinite(x);
            return lb__fail(LB_ERR_NAN, "lb__ggml_quantize_rows: element %zu (row %zu, column %zu) is %s; %s needs "
                                        "finite values", r * cols + c, r, c, isnan(x[c]) ? "NaN" : "infinite", d->name);
        }
        lb_status st = quantize_row(t, d, x, cols, imatrix, (uint8_t *)dst + r * row_bytes);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}
