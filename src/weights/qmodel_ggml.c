/* The quantized model's GGUF side (lowbit.h, "The quantized model"): an
 * entry stored as a ggml block type, the importance vector its quantizer
 * weighs the rows with, and the bytes an algorithm (GPTQ) made for it; the
 * values such an entry computes with are the source through that type and
 * back. The slots themselves are qmodel.c's (qmodel_slot.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/dtype.h"
#include "util/error.h"
#include "weights/qmodel_internal.h"
#include "weights/qmodel_slot.h"

lb_status lb_qmodel_set_ggml(lb_qmodel *q, size_t i, lb_dtype t)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_set_ggml");
    if (st != LB_OK) return st;
    qslot *s = &q->s[i];
    const lb_tensor *tn = s->e.tensor;
    if (t != LB_DT_COUNT) {
        const lb_dtype_info *d = lb_dtype_get(t);
        if (!d || d->ggml_type < 0)
            return lb__fail(LB_ERR_ARG, "lb_qmodel_set_ggml: %s: dtype %s has no ggml type", tn->name,
                            lb__dtype_name(t));
        uint64_t cols = tn->n_dims >= 1 ? tn->shape[tn->n_dims - 1] : 1;
        if (d->block > 1 && cols % d->block)
            return lb__fail(LB_ERR_ARG, "lb_qmodel_set_ggml: %s: rows of %llu are not whole %s blocks of %u", tn->name,
                            (unsigned long long)cols, d->name, d->block);
    }
    lb__qslot_drop_qtensor(s);
    lb__qslot_drop_outliers(s);
    s->has_plain = 0;
    memset(&s->e.spec, 0, sizeof s->e.spec);
    s->e.ggml = t;
    s->e.state = s->replacement ? LB_QSTATE_REPLACED : lb_tensor_is_weight(tn) ? LB_QSTATE_KEPT : LB_QSTATE_STORED;
    lb__qmodel_group_changed(q, i);
    return LB_OK;
}

lb_status lb_qmodel_set_imatrix(lb_qmodel *q, size_t i, const float *w, size_t n)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_set_imatrix");
    if (st != LB_OK) return st;
    qslot *s = &q->s[i];
    float *copy = NULL;
    if (w) {
        for (size_t k = 0; k < n; k++)
            if (!isfinite(w[k]) || w[k] < 0)
                return lb__fail(LB_ERR_ARG, "lb_qmodel_set_imatrix: %s: element %zu is %g (finite, >= 0 expected)",
                                s->e.tensor->name, k, (double)w[k]);
        if (!n || !(copy = malloc(n * sizeof *copy)))
            return lb__fail(n ? LB_ERR_NOMEM : LB_ERR_ARG, "lb_qmodel_set_imatrix: %s: %s", s->e.tensor->name,
                            n ? "out of memory" : "empty importance vector");
        memcpy(copy, w, n * sizeof *copy);
    }
    free(s->imatrix);
    lb__qslot_drop_qtensor(s); /* ggml bytes made with the old importance: stale */
    s->imatrix = copy, s->n_imatrix = copy ? n : 0;
    s->e.has_imatrix = copy != NULL;
    return LB_OK;
}

const float *lb__qmodel_imatrix(const lb_qmodel *q, size_t i, size_t *n)
{
    if (!q || i >= q->n || !q->s[i].imatrix) return NULL;
    if (n) *n = q->s[i].n_imatrix;
    return q->s[i].imatrix;
}

/* What a GGUF holds for an entry stored as a ggml type: the source through
 * that type and back (with the importance vector: one row's, or one per
 * expert, as the writer uses it). */
lb_status lb__qmodel_ggml_values(const lb_qmodel *q, size_t i, float *dst, int threads)
{
    const qslot *s = &q->s[i];
    const lb_tensor *t = s->e.tensor;
    if (s->ggml_bytes) { /* an algorithm's bytes (GPTQ): what the file holds */
        lb_status st = lb_dtype_to_f32(s->e.ggml, s->ggml_bytes, (size_t)t->n_elements, dst);
        for (uint64_t k = 0; st == LB_OK && s->ggml_scale != 1.0f && k < t->n_elements; k++) dst[k] *= s->ggml_scale;
        return st;
    }
    lb_status st = lb_qmodel_source_f32(q, i, dst);
    /* stored in its own type: the file copies the bytes, so the values are the stored ones */
    int as_stored = s->e.ggml == t->dtype && !s->replacement;
    if (st != LB_OK || as_stored || s->e.ggml == LB_DT_F32 || t->n_elements == 0) return st;
    uint64_t cols = t->n_dims >= 1 ? t->shape[t->n_dims - 1] : 1, rows = t->n_elements / cols;
    st = lb__ggml_round_trip(s->e.ggml, dst, (size_t)rows, (size_t)cols, s->imatrix, s->n_imatrix, threads);
    if (st != LB_OK) st = lb__fail(st, "%s as %s: %s", t->name, lb_dtype_get(s->e.ggml)->name, lb_last_error());
    return st;
}

lb_status lb__qmodel_set_ggml_bytes(lb_qmodel *q, size_t i, const void *bytes, size_t n, float tensor_scale)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb__qmodel_set_ggml_bytes");
    if (st != LB_OK) return st;
    qslot *s = &q->s[i];
    const lb_tensor *t = s->e.tensor;
    const lb_dtype_info *d = s->e.ggml != LB_DT_COUNT ? lb_dtype_get(s->e.ggml) : NULL;
    if (!d || d->block < 2)
        return lb__fail(LB_ERR_ARG, "lb__qmodel_set_ggml_bytes: %s has no ggml block type (lb_qmodel_set_ggml first)",
                        t->name);
    uint64_t want = 0;
    if ((st = lb_dtype_bytes(s->e.ggml, t->n_elements, &want)) != LB_OK) return st;
    if (!bytes || n != want)
        return lb__fail(LB_ERR_ARG, "lb__qmodel_set_ggml_bytes: %s as %s takes %llu bytes, not %zu%s", t->name,
                        d->name, (unsigned long long)want, n, bytes ? "" : " (NULL)");
    if (!(tensor_scale > 0.0f) || !isfinite(tensor_scale) || (s->e.ggml != LB_DT_NVFP4 && tensor_scale != 1.0f))
        return lb__fail(LB_ERR_ARG, "lb__qmodel_set_ggml_bytes: %s: tensor scale %g (NVFP4: > 0, else 1)", t->name,
                        (double)tensor_scale);
    unsigned char *copy = malloc(n ? n : 1);
    if (!copy) return lb__fail(LB_ERR_NOMEM, "lb__qmodel_set_ggml_bytes: %s: out of memory", t->name);
    memcpy(copy, bytes, n);
    lb__qslot_drop_qtensor(s);
    s->ggml_bytes = copy, s->n_ggml_bytes = n, s->ggml_scale = tensor_scale;
    return LB_OK;
}

const void *lb__qmodel_ggml_bytes(const lb_qmodel *q, size_t i, size_t *n, float *tensor_scale)
{
    if (!q || i >= q->n || !q->s[i].ggml_bytes) return NULL;
    if (n) *n = q->s[i].n_ggml_bytes;
    if (tensor_scale) *tensor_scale = q->s[i].ggml_scale;
    return q->s[i].ggml_bytes;
}
