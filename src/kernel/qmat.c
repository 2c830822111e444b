/* Packed weight matrices: building them, a row's values, and the matrix
 * product that picks the decode kernels or dequantized panels (qmat.h). */
#include "kernel/qmat.h"

#include <stdlib.h>
#include <string.h>

#include "format/convert.h"
#include "kernel/gdot.h"
#include "kernel/qdot.h"
#include "kernel/matmul.h"
#include "quant/qkernels.h"
#include "quant/quant_internal.h"
#include "util/cpu.h"
#include "util/error.h"
#include "util/parallel.h"

int lb__qspec_is_plain(const lb_qspec *spec)
{
    lb_format e = spec->element;
    return (e == LB_FMT_BF16 || e == LB_FMT_FP16 || e == LB_FMT_FP32) && spec->granularity == LB_GRAN_TENSOR &&
           !spec->affine && !spec->two_level;
}

void lb__qmat_from_qtensor(lb_qtensor *q, int take_ownership, lb__qmat *m)
{
    lb_qtensor_view v;
    lb_qtensor_view_get(q, &v);
    memset(m, 0, sizeof *m);
    m->rows = v.rows;
    m->cols = v.cols;
    m->element = v.spec.element;
    m->spec = v.spec;
    m->block = v.spec.granularity == LB_GRAN_GROUP ? v.spec.group : v.cols;
    if (m->block == 0) m->block = 1;
    m->blocks = v.cols ? (v.cols + m->block - 1) / m->block : 0;
    m->data = v.data;
    m->row_bytes = v.row_bytes;
    m->scale_format = v.spec.scale_format;
    m->scales = v.scales;
    m->one_scale = v.spec.granularity == LB_GRAN_TENSOR;
    m->block_rows = lb__block_rows(&v.spec);
    m->zero_points = v.zero_points;
    m->zp_row_bytes = v.zero_point_row_bytes;
    /* lb__scale_divisors: two-level specs multiply by the tensor scale, the
     * rest by the element's fixed-point fraction (2^-6 for MXINT8, else 1) */
    m->scale_mul = v.spec.two_level ? v.tensor_scale : (float)(1.0 / (double)(1u << v.spec.int_frac_bits));
    m->bytes = v.data_bytes + v.scale_bytes + v.zero_point_bytes + (v.spec.two_level ? sizeof(float) : 0);
    m->owned_q = take_ownership ? q : NULL;
    m->nan_free = 1;
    if (m->element == LB_FMT_FP8_E4M3) /* its NaN codes: S.1111.111 (fnuz and 4/6-bit elements have other tests) */
        for (size_t i = 0; i < v.data_bytes && m->nan_free; i++) m->nan_free = (v.data[i] & 0x7F) != 0x7F;
    else
        m->nan_free = 0; /* only e4m3's kernels use it */
}

lb_status lb__qmat_from_f32(const float *w, size_t rows, size_t cols, const lb_qspec *spec, int threads, lb__qmat *m)
{
    memset(m, 0, sizeof *m);
    if (spec && !lb__qspec_is_plain(spec)) {
        lb_qtensor *q = NULL;
        lb_status st = lb_quantize(spec, w, rows, cols, threads, &q);
        if (st != LB_OK) return st;
        lb__qmat_from_qtensor(q, 1, m);
        return LB_OK;
    }
    lb_format f = spec ? spec->element : LB_FMT_FP32;
    size_t row_bytes = lb_format_bytes(f, cols);
    if (cols && (row_bytes == 0 || rows > SIZE_MAX / row_bytes))
        return lb__fail(LB_ERR_NOMEM, "a %zu x %zu matrix overflows", rows, cols);
    void *buf = malloc(rows * row_bytes + 1);
    if (!buf) return lb__fail(LB_ERR_NOMEM, "cannot allocate %zu bytes for a %zu x %zu weight", rows * row_bytes, rows, cols);
    lb_status st = lb_encode_f32(f, LB_SATURATE, w, rows * cols, buf, threads);
    if (st != LB_OK) {
        free(buf);
        return st;
    }
    m->rows = rows;
    m->cols = cols;
    m->element = f;
    m->plain = 1;
    m->spec = (lb_qspec){.element = f, .granularity = LB_GRAN_TENSOR, .scale_format = LB_FMT_FP32};
    m->block = cols ? cols : 1;
    m->blocks = cols ? 1 : 0;
    m->block_rows = 1;
    m->data = buf;
    m->row_bytes = row_bytes;
    m->scale_format = LB_FMT_FP32;
    m->scale_mul = 1.0f;
    m->bytes = rows * row_bytes;
    m->owned_buf = buf;
    return LB_OK;
}

lb_status lb__qmat_from_ggml(lb_dtype t, const void *data, size_t rows, size_t cols, void *owned, lb__qmat *m)
{
    memset(m, 0, sizeof *m);
    const lb_dtype_info *d = lb_dtype_get(t);
    if (!d) return lb__fail(LB_ERR_ARG, "lb__qmat_from_ggml: unknown dtype id %d", (int)t);
    if (!d->can_read || d->block_bytes == 0 || d->block == 0)
        return lb__fail(LB_ERR_UNSUPPORTED, "a %s matrix cannot be held packed: it has no dequantizer over its own bytes",
                        d->name);
    if (cols % d->block)
        return lb__fail(LB_ERR_ARG, "a %s matrix needs rows of whole %u-element blocks, not %zu columns", d->name,
                        d->block, cols);
    size_t row_bytes = cols / d->block * d->block_bytes;
    if (row_bytes && rows > SIZE_MAX / row_bytes)
        return lb__fail(LB_ERR_ARG, "a %zu x %zu %s matrix overflows", rows, cols, d->name);
    if (!data && rows && row_bytes) return lb__fail(LB_ERR_ARG, "lb__qmat_from_ggml: NULL data for %s", d->name);
    m->rows = rows;
    m->cols = cols;
    m->data = data;
    m->row_bytes = row_bytes;
    m->bytes = rows * row_bytes;
    m->ggml = t;
    m->ggml_block = d->block;
    m->ggml_block_bytes = d->block_bytes;
    m->blocks = cols / d->block;
    m->block = d->block;
    m->block_rows = 1;
    m->scale_mul = 1.0f;
    m->owned_buf = owned;
    return LB_OK;
}

void lb__qmat_free(lb__qmat *m)
{
    if (!m) return;
    lb_qtensor_free(m->owned_q);
    free(m->owned_buf);
    memset(m, 0, sizeof *m);
}

/* Row r's values into dst, with mul/sub scratch of m->blocks floats and
 * codes of m->cols bytes (6-bit elements only). The same calls, in the
 * same order, as lb_dequantize's rows: (code value - zero point) * mul. */
static void row_f32(const lb__qmat *m, size_t r, float *dst, float *mul, float *sub, uint8_t *codes, lb_isa isa)
{
    const uint8_t *src = m->data + r * m->row_bytes;
    if (m->ggml_block) { /* the dtype's own dequantizer: it cannot fail on whole blocks of a readable dtype */
        (void)mul, (void)sub, (void)codes, (void)isa;
        lb_dtype_to_f32(m->ggml, src, m->cols, dst);
        return;
    }
    const lb_format_info *e = lb_format_get(m->element);
    if (e->bits == 6) lb__unpack6(src, m->cols, codes), src = codes;
    lb__decode_kernel(isa)(e, src, m->cols, dst);
    if (m->plain) return;
    size_t first = m->one_scale ? 0 : lb__qmat_scale_row(m, r) * m->blocks, nb = m->one_scale ? 1 : m->blocks;
    lb__decode_kernel(isa)(lb_format_get(m->scale_format), m->scales + lb_format_bytes(m->scale_format, first), nb,
                           mul);
    for (size_t b = 0; b < nb; b++) mul[b] *= m->scale_mul; /* a product by 1 is exact */
    for (size_t b = 0; b < nb; b++) {
        sub[b] = 0.0f;
        if (!m->zero_points) continue;
        const uint8_t *zp = m->zero_points + (m->one_scale ? 0 : r) * m->zp_row_bytes;
        uint32_t c = e->bits == 4 ? (zp[b / 2] >> (4 * (b % 2))) & 0xF : zp[b];
        int v = e->sign_bits && (c >> (e->bits - 1)) ? (int)c - (1 << e->bits) : (int)c;
        sub[b] = (float)v;
    }
    /* tensor granularity: one block spanning the row */
    lb__qkernels_get(isa)->block_sub_mul(dst, m->cols, m->one_scale ? m->cols : m->block, sub, mul, dst);
}

static size_t row_scratch_floats(const lb__qmat *m) { return 2 * (m->blocks + 1) + (m->cols + 3) / 4 + 1; }

lb_status lb__qmat_row_f32(const lb__qmat *m, size_t r, float *dst)
{
    float stack[2 * 64 + 64];
    size_t need = row_scratch_floats(m);
    float *tmp = need <= sizeof stack / sizeof *stack ? stack : malloc(need * sizeof *tmp);
    if (!tmp) return lb__fail(LB_ERR_NOMEM, "cannot allocate scratch to decode a row of %zu values", m->cols);
    row_f32(m, r, dst, tmp, tmp + m->blocks + 1, (uint8_t *)(tmp + 2 * (m->blocks + 1)), lb_isa_active());
    if (tmp != stack) free(tmp);
    return LB_OK;
}

/* ---- prefill: dequantized panels through the fp32 kernels ---- */

typedef struct panel_ctx {
    const lb__qmat *m;
    lb_isa isa;
} panel_ctx;

/* scratch: the panel, then LB__MM_NR row-major rows, then row_f32's room */
static const float *make_panel(void *ctx, size_t p, void *scratch)
{
    const panel_ctx *c = ctx;
    const lb__qmat *m = c->m;
    float *panel = scratch, *rows = panel + LB__MM_NR * m->cols, *tmp = rows + LB__MM_NR * m->cols;
    size_t o0 = p * LB__MM_NR, n = m->rows - o0 < LB__MM_NR ? m->rows - o0 : LB__MM_NR;
    for (size_t j = 0; j < n; j++)
        row_f32(m, o0 + j, rows + j * m->cols, tmp, tmp + m->blocks + 1, (uint8_t *)(tmp + 2 * (m->blocks + 1)),
                c->isa);
    for (size_t k = 0; k < m->cols; k++) {
        float *dst = panel + k * LB__MM_NR;
        for (size_t j = 0; j < n; j++) dst[j] = rows[j * m->cols + k];
        for (size_t j = n; j < LB__MM_NR; j++) dst[j] = 0.0f;
    }
    return panel;
}

/* ---- decode: the row kernels ---- */

typedef struct dot_job {
    const lb__qmat *m;
    const float *x;
    size_t n;
    float *y;
    lb__qdot_fn fn;
} dot_job;

static lb_status dot_rows(void *ctx, size_t r0, size_t r1)
{
    const dot_job *j = ctx;
    size_t bytes = j->m->ggml_block ? lb__gdot_scratch_bytes(j->m) : lb__qdot_scratch_bytes(j->m);
    void *scratch = bytes ? aligned_alloc(64, (bytes + 63) / 64 * 64) : NULL;
    if (bytes && !scratch) return lb__fail(LB_ERR_NOMEM, "cannot allocate %zu bytes of kernel scratch", bytes);
    for (size_t t = 0; t < j->n; t += LB__QDOT_MAX_NX) {
        size_t nx = j->n - t < LB__QDOT_MAX_NX ? j->n - t : LB__QDOT_MAX_NX;
        j->fn(j->m, j->x + t * j->m->cols, nx, j->m->cols, r0, r1, j->y + t * j->m->rows, j->m->rows, scratch);
    }
    free(scratch);
    return LB_OK;
}

lb_status lb__qmat_matmul_isa(const lb__qmat *m, const float *x, size_t n, float *y, int threads, lb_isa isa)
{
    if (n == 0 || m->rows == 0) return LB_OK;
    if (m->cols == 0) {
        memset(y, 0, n * m->rows * sizeof *y);
        return LB_OK;
    }
    isa = lb__isa_clamp(isa); /* what this CPU runs (another architecture's set: scalar) */
    if (n < LB__QMAT_PANEL_MIN_N && m->ggml_block) {
        dot_job j = {.m = m, .x = x, .n = n, .y = y, .fn = lb__gdot_get(isa)};
        /* decoding ggml blocks costs about what reading the fp32 values would:
         * split as the fp32 product of the same size is */
        return lb__parallel_for(m->rows, 16, lb__threads_for(threads, m->rows * m->cols * sizeof(float) * n), dot_rows,
                                &j);
    }
    if (n < LB__QMAT_PANEL_MIN_N) {
        lb_status st = lb__qdot_check(m);
        if (st != LB_OK) return st;
        dot_job j = {.m = m, .x = x, .n = n, .y = y, .fn = lb__qdot_get(isa)};
        /* rows in runs of 16: whole cache lines of y per thread */
        return lb__parallel_for(m->rows, 16, lb__threads_for(threads, m->bytes * n), dot_rows, &j);
    }
    panel_ctx c = {.m = m, .isa = isa};
    lb__panel_source src = {.panel = make_panel, .ctx = &c,
                            .scratch_bytes = (2 * LB__MM_NR * m->cols + row_scratch_floats(m)) * sizeof(float)};
    return lb__matmul_source(x, n, m->rows, m->cols, &src, y, threads, isa);
}

lb_status lb__qmat_matmul(const lb__qmat *m, const float *x, size_t n, float *y, int threads)
{
    return lb__qmat_matmul_isa(m, x, n, y, threads, lb_isa_active());
}
