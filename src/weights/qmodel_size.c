/* What a quantized model's weights take (lb_qmodel_size_of), counted as
 * the runner holds them, and the writers' refusal of what no engine format
 * carries (16-bit outlier columns beside a quantized rest). */
#include <string.h>

#include "util/error.h"
#include "weights/qmodel_internal.h"

/* Bits of one index of an outlier column (an int32, as a column list is
 * stored). */
#define OUTLIER_INDEX_BITS 32.0

static double dtype_bits(lb_dtype dt) { return dt == LB_DT_F32 ? 32.0 : 16.0; }

/* Bits of entry e's weight as the quantized model holds it. */
static lb_status entry_bits(const lb_qmodel *q, size_t i, const lb_qentry *e, double *bits)
{
    const lb_tensor *t = e->tensor;
    double n = (double)t->n_elements;
    *bits = 0;
    if (e->ggml != LB_DT_COUNT) {
        uint64_t bytes;
        lb_status st = lb_dtype_bytes(e->ggml, t->n_elements, &bytes);
        *bits = 8.0 * (double)bytes;
        return st;
    }
    switch (e->state) {
    case LB_QSTATE_STORED: *bits = 8.0 * (double)t->n_bytes; return LB_OK;
    case LB_QSTATE_KEPT:
    case LB_QSTATE_REPLACED: *bits = n * dtype_bits(lb_qmodel_dtype(q)); return LB_OK;
    case LB_QSTATE_QUANTIZED: {
        /* the rest at its full width (the outlier columns are zeros in it), then the 16-bit columns */
        double per = lb_qspec_bits_per_value(&e->spec, t->shape[0], t->shape[1]);
        if (!(per > 0)) return lb__fail(LB_ERR_ARG, "%s: its spec has no size for [%llu, %llu]", t->name,
                                        (unsigned long long)t->shape[0], (unsigned long long)t->shape[1]);
        size_t k = 0;
        lb_qmodel_outliers(q, i, &k);
        *bits = per * n + (double)k * ((double)t->shape[0] * dtype_bits(lb_qmodel_dtype(q)) + OUTLIER_INDEX_BITS);
        return LB_OK;
    }
    }
    return lb__fail(LB_ERR_ARG, "%s has an unknown state", t->name);
}

lb_status lb_qmodel_entry_bits(const lb_qmodel *q, size_t i, double *bits)
{
    if (!q || !bits) return lb__fail(LB_ERR_ARG, "lb_qmodel_entry_bits: NULL argument");
    lb_qentry e;
    lb_status st = lb_qmodel_entry(q, i, &e);
    return st == LB_OK ? entry_bits(q, i, &e, bits) : st;
}

lb_status lb_qmodel_size_of(const lb_qmodel *q, lb_qmodel_size *out)
{
    if (!q || !out) return lb__fail(LB_ERR_ARG, "lb_qmodel_size_of: NULL argument");
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        lb_status st = lb_qmodel_entry(q, i, &e);
        if (st != LB_OK) return st;
        if (!lb_tensor_is_weight(e.tensor)) continue;
        double bits;
        if ((st = entry_bits(q, i, &e, &bits)) != LB_OK) return st;
        size_t k = 0;
        lb_qmodel_outliers(q, i, &k);
        out->weight_params += e.tensor->n_elements;
        out->weight_bits += bits;
        out->outlier_columns += k;
        out->outlier_params += (uint64_t)k * e.tensor->shape[0];
        if (strncmp(e.tensor->name, "model.layers.", 13) == 0) {
            out->layer_params += e.tensor->n_elements;
            out->layer_bits += bits;
        }
    }
    out->bits_per_weight = out->weight_params ? out->weight_bits / (double)out->weight_params : 0;
    out->layer_bits_per_weight = out->layer_params ? out->layer_bits / (double)out->layer_params : 0;
    return LB_OK;
}

lb_status lb__qmodel_check_no_outliers(const lb_qmodel *q, const char *format)
{
    for (size_t i = 0; q && i < lb_qmodel_count(q); i++) {
        size_t k = 0;
        if (!lb_qmodel_outliers(q, i, &k)) continue;
        return lb__fail(LB_ERR_UNSUPPORTED, "%s keeps %zu input columns in 16-bit beside its quantized rest "
                        "(LLM.int8() outlier columns): no engine format (compressed-tensors, modelopt, gguf) can "
                        "carry split columns, so %s cannot hold it; evaluate such a model with the runner (lowbit "
                        "ppl, kld) instead", lb_model_tensor(lb_qmodel_model(q), i)->name, k, format);
    }
    return LB_OK;
}
