/* Fake quantization of candidate values as one qmodel entry would be
 * quantized (qmodel_internal.h): what the output-error searches (AWQ's
 * scale and clip searches) measure each candidate through, and the
 * round trip of a GGUF-typed entry that lb_qmodel_values_f32 shares. */
#include <stdlib.h>

#include "io/ggml_rows.h"
#include "quant/quant_internal.h"
#include "util/error.h"
#include "weights/qmodel_internal.h"

lb_status lb__ggml_round_trip(lb_dtype t, float *x, size_t rows, size_t cols, const float *imatrix, size_t n_imatrix,
                              int threads)
{
    if (t == LB_DT_F32 || rows == 0 || cols == 0) return LB_OK;
    uint64_t bytes = 0;
    lb_status st = lb_dtype_bytes(t, (uint64_t)rows * cols, &bytes);
    if (st != LB_OK) return st;
    void *packed = malloc(bytes ? (size_t)bytes : 1);
    if (!packed) return lb__fail(LB_ERR_NOMEM, "cannot allocate %llu bytes of %s", (unsigned long long)bytes,
                                 lb_dtype_get(t)->name);
    size_t n = rows * cols;
    /* NVFP4 blocks hold the values over one per-tensor scale (the GGUF's
     * "<name>.scale" tensor): from these values' own largest magnitude */
    float scale = t == LB_DT_NVFP4 ? lb__ggml_nvfp4_scale(x, n) : 1.0f;
    for (size_t k = 0; scale != 1.0f && k < n; k++) x[k] /= scale;
    st = lb__ggml_rows_stacked(t, x, rows, cols, imatrix, n_imatrix, packed, threads);
    if (st == LB_OK) st = lb_dtype_to_f32(t, packed, n, x);
    for (size_t k = 0; st == LB_OK && scale != 1.0f && k < n; k++) x[k] *= scale;
    free(packed);
    return st;
}

/* A ggml type that quantizes (blocks of several values with their
 * scales); f32/f16/bf16 only round, which no search can improve on. */
static int ggml_quantizes(lb_dtype t)
{
    const lb_dtype_info *d = t == LB_DT_COUNT ? NULL : lb_dtype_get(t);
    return d && d->ggml_type >= 0 && d->block > 1;
}

lb_status lb__qmodel_fakeq(const lb_qmodel *q, size_t i, int threads, lb__fakeq *out)
{
    lb_qentry e;
    lb_status st = lb_qmodel_entry(q, i, &e);
    if (st != LB_OK) return st;
    if (!out) return lb__fail(LB_ERR_ARG, "lb__qmodel_fakeq: out is NULL");
    *out = (lb__fakeq){.ggml = LB_DT_COUNT, .threads = threads};
    if (e.ggml != LB_DT_COUNT) {
        if (!ggml_quantizes(e.ggml))
            return lb__fail(LB_ERR_ARG, "%s is stored as %s, which does not quantize", e.tensor->name,
                            lb_dtype_get(e.ggml)->name);
        out->ggml = e.ggml;
        out->imatrix = lb__qmodel_imatrix(q, i, &out->n_imatrix);
        return LB_OK;
    }
    if (e.state != LB_QSTATE_QUANTIZED) return lb__fail(LB_ERR_ARG, "%s is not quantized", e.tensor->name);
    out->spec = e.spec;
    return LB_OK;
}

lb_status lb__fake_quantize(void *ctx, float *w, size_t rows, size_t cols)
{
    const lb__fakeq *f = ctx;
    if (!f || (!w && rows && cols)) return lb__fail(LB_ERR_ARG, "lb__fake_quantize: NULL argument");
    if (f->ggml != LB_DT_COUNT) {
        lb_status st = lb__ggml_round_trip(f->ggml, w, rows, cols, f->imatrix, f->n_imatrix, f->threads);
        return st == LB_OK ? st : lb__fail(st, "fake quantization as %s: %s", lb_dtype_get(f->ggml)->name,
                                           lb_last_error());
    }
    if (rows == 0 || cols == 0) return LB_OK;
    lb_qtensor *qt = NULL;
    /* tensor_amax 0: a two-level spec's tensor scale from these values */
    lb_status st = lb__quantize_ex(&f->spec, w, rows, cols, f->threads, 0.0f, &qt);
    if (st == LB_OK) st = lb_dequantize(qt, w, f->threads);
    lb_qtensor_free(qt);
    return st;
}

lb_status lb__qmodel_fake_quantize(const lb_qmodel *q, size_t i, float *w, size_t rows, size_t cols, int threads)
{
    lb__fakeq f;
    lb_status st = lb__qmodel_fakeq(q, i, threads, &f);
    if (st == LB_OK) st = lb__fake_quantize(&f, w, rows, cols);
    return st;
}

size_t lb__fakeq_block(const lb__fakeq *f, size_t cols)
{
    if (f->ggml != LB_DT_COUNT) return lb_dtype_get(f->ggml)->block;
    switch (f->spec.granularity) {
    case LB_GRAN_TENSOR:
    case LB_GRAN_CHANNEL:
    case LB_GRAN_TOKEN: return cols;
    case LB_GRAN_GROUP: return f->spec.group < cols ? f->spec.group : cols;
    }
    return cols;
}
