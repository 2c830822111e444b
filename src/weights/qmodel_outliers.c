/* 16-bit outlier columns (LLM.int8(), Dettmers et al. 2022; lowbit.h,
 * lb_qmodel_set_outliers): input columns of a quantized weight kept in the
 * model's 16-bit dtype while the spec quantizes the rest (zeroed there).
 * The slots themselves are qmodel.c's (qmodel_slot.h). */
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "weights/qmodel_internal.h"
#include "weights/qmodel_slot.h"

lb_status lb_qmodel_set_outliers(lb_qmodel *q, size_t i, const uint32_t *cols, size_t n)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_set_outliers");
    if (st != LB_OK) return st;
    qslot *s = &q->s[i];
    const lb_tensor *t = s->e.tensor;
    if (n == 0) {
        if (s->n_outliers) lb__qslot_drop_qtensor(s), lb__qslot_drop_outliers(s), lb__qmodel_group_changed(q, i);
        return LB_OK;
    }
    if (!cols) return lb__fail(LB_ERR_ARG, "lb_qmodel_set_outliers: %s: cols is NULL", t->name);
    if (s->e.state != LB_QSTATE_QUANTIZED)
        return lb__fail(LB_ERR_ARG, "lb_qmodel_set_outliers: %s is not quantized (outlier columns are the part of a "
                        "quantized weight kept in 16-bit; set a spec first)", t->name);
    size_t len = strlen(t->name), k = strlen("embed_tokens.weight");
    if (len >= k && strcmp(t->name + len - k, "embed_tokens.weight") == 0)
        return lb__fail(LB_ERR_ARG, "lb_qmodel_set_outliers: %s is an embedding: a lookup has no input features "
                        "whose columns could stay 16-bit", t->name);
    uint64_t width = t->shape[1];
    if (n >= width)
        return lb__fail(LB_ERR_ARG, "lb_qmodel_set_outliers: %s: %zu outlier columns of %llu leave nothing to "
                        "quantize (keep the weight in 16-bit instead)", t->name, n, (unsigned long long)width);
    for (size_t j = 0; j < n; j++)
        if (cols[j] >= width || (j && cols[j] <= cols[j - 1]))
            return lb__fail(LB_ERR_ARG, "lb_qmodel_set_outliers: %s: column %zu is %u; columns must ascend, each "
                            "once, below the row length %llu", t->name, j, cols[j], (unsigned long long)width);
    uint32_t *copy = malloc(n * sizeof *copy);
    if (!copy) return lb__fail(LB_ERR_NOMEM, "lb_qmodel_set_outliers: %s: out of memory", t->name);
    memcpy(copy, cols, n * sizeof *copy);
    lb__qslot_drop_qtensor(s); /* made from the whole weight: the rest is quantized anew */
    lb__qslot_drop_outliers(s);
    s->outliers = copy, s->n_outliers = n;
    lb__qmodel_group_changed(q, i);
    return LB_OK;
}

const uint32_t *lb_qmodel_outliers(const lb_qmodel *q, size_t i, size_t *n)
{
    if (n) *n = 0;
    if (!q || i >= q->n || !q->s[i].n_outliers) return NULL;
    if (n) *n = q->s[i].n_outliers;
    return q->s[i].outliers;
}

lb_status lb__qmodel_outlier_values(const lb_qmodel *q, size_t i, float *dst)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb__qmodel_outlier_values");
    if (st != LB_OK) return st;
    const qslot *s = &q->s[i];
    const lb_tensor *t = s->e.tensor;
    if (!s->n_outliers) return LB_OK;
    uint64_t rows = t->shape[0], cols = t->shape[1], n = s->n_outliers;
    float *all = malloc(t->n_elements * sizeof *all);
    if (!all) return lb__fail(LB_ERR_NOMEM, "cannot allocate an fp32 copy of %s", t->name);
    st = lb_qmodel_source_f32(q, i, all);
    for (uint64_t r = 0; st == LB_OK && r < rows; r++)
        for (uint64_t k = 0; k < n; k++) dst[r * n + k] = all[r * cols + s->outliers[k]];
    free(all);
    if (st == LB_OK) st = lb__qmodel_round_to_dtype(q->dtype, dst, rows * n, t->name);
    return st;
}

/* The outlier columns' 16-bit values written over dst (the dequantized
 * rest, rows x cols): the weight the quantized model computes with. */
lb_status lb__qmodel_put_outliers(const lb_qmodel *q, size_t i, float *dst)
{
    const qslot *s = &q->s[i];
    uint64_t rows = s->e.tensor->shape[0], cols = s->e.tensor->shape[1], n = s->n_outliers;
    float *v = malloc(rows * n * sizeof *v);
    if (!v) return lb__fail(LB_ERR_NOMEM, "cannot allocate the outlier columns of %s", s->e.tensor->name);
    lb_status st = lb__qmodel_outlier_values(q, i, v);
    for (uint64_t r = 0; st == LB_OK && r < rows; r++)
        for (uint64_t k = 0; k < n; k++) dst[r * cols + s->outliers[k]] = v[r * n + k];
    free(v);
    return st;
}
