/* The quantized model: an overlay on an open lb_model (lowbit.h, "The
 * quantized model"). One slot per model tensor, same index; nothing is
 * copied or quantized until asked, except what the caller hands over (a
 * replacement, a quantized tensor an algorithm made).
 *
 * Fused groups: engines fuse q/k/v and gate/up of a layer into one GEMM
 * and so load one tensor (global) scale for the group. For a two-level
 * spec (NVFP4) the tensor scale therefore comes from the largest |w| over
 * the group's members that are QUANTIZED under the same spec; it is
 * computed on first use (reading each member once) and cached until a
 * member changes. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/qmat.h"
#include "quant/quant_internal.h"
#include "util/alloc.h"
#include "util/error.h"
#include "weights/qmodel_internal.h"
#include "weights/qmodel_slot.h"

long lb__fused_group_of(const char *name)
{
    static const char prefix[] = "model.layers.";
    if (!name || strncmp(name, prefix, sizeof prefix - 1) != 0) return -1;
    const char *p = name + sizeof prefix - 1;
    if (*p < '0' || *p > '9') return -1;
    long layer = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (layer > 100000000L) return -1; /* no model has that many layers: not a group */
        layer = layer * 10 + (*p - '0');
    }
    static const char *const attn[] = {".self_attn.q_proj.weight", ".self_attn.k_proj.weight",
                                       ".self_attn.v_proj.weight"};
    static const char *const mlp[] = {".mlp.gate_proj.weight", ".mlp.up_proj.weight"};
    for (int i = 0; i < 3; i++)
        if (strcmp(p, attn[i]) == 0) return 2 * layer;
    for (int i = 0; i < 2; i++)
        if (strcmp(p, mlp[i]) == 0) return 2 * layer + 1;
    return -1;
}

lb_status lb_qmodel_new(const lb_model *m, lb_qmodel **out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb_qmodel_new: out is NULL");
    *out = NULL;
    if (!m) return lb__fail(LB_ERR_ARG, "lb_qmodel_new: model is NULL");
    lb_qmodel *q = calloc(1, sizeof *q);
    size_t n = lb_model_tensor_count(m);
    if (q) q->s = calloc(n ? n : 1, sizeof *q->s);
    if (!q || !q->s) {
        if (q) free(q->s);
        free(q);
        return lb__fail(LB_ERR_NOMEM, "cannot allocate a quantized model of %zu tensors", n);
    }
    q->m = m;
    q->n = n;
    q->dtype = LB_DT_BF16;
    q->kv = LB_FMT_FP32;
    q->n_layers = lb_model_arch(m)->n_layers;
    pthread_mutex_init(&q->lock, NULL);
    for (size_t i = 0; i < n; i++) lb__qslot_fresh(&q->s[i], lb_model_tensor(m, i));
    *out = q;
    return LB_OK;
}

void lb_qmodel_free(lb_qmodel *q)
{
    if (!q) return;
    for (size_t i = 0; i < q->n; i++) {
        if (q->s[i].borrowed) continue; /* the lender's */
        free(q->s[i].replacement);
        free(q->s[i].imatrix);
        free(q->s[i].outliers);
        lb_qtensor_free(q->s[i].qt);
        free(q->s[i].ggml_bytes);
    }
    free(q->s);
    if (!q->kv_borrowed) free(q->kv_amax);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

const lb_model *lb_qmodel_model(const lb_qmodel *q) { return q ? q->m : NULL; }
size_t lb_qmodel_count(const lb_qmodel *q) { return q ? q->n : 0; }

lb_status lb__qmodel_check_index(const lb_qmodel *q, size_t i, const char *fn)
{
    if (!q) return lb__fail(LB_ERR_ARG, "%s: qmodel is NULL", fn);
    if (i >= q->n) return lb__fail(LB_ERR_ARG, "%s: tensor index %zu, the model has %zu", fn, i, q->n);
    return LB_OK;
}

lb_status lb_qmodel_find(const lb_qmodel *q, const char *name, size_t *index)
{
    if (!q || !name || !index) return lb__fail(LB_ERR_ARG, "lb_qmodel_find: NULL argument");
    for (size_t i = 0; i < q->n; i++)
        if (strcmp(q->s[i].e.tensor->name, name) == 0) return *index = i, LB_OK;
    for (size_t i = 0; i < q->n; i++)
        if (strcmp(q->s[i].e.tensor->file_name, name) == 0) return *index = i, LB_OK;
    return lb__fail(LB_ERR_ARG, "the model has no tensor %s", name);
}

/* Drops every member's cached group range: a member changed. */
void lb__qmodel_group_changed(lb_qmodel *q, size_t i)
{
    int g = q->s[i].e.fused_group;
    q->s[i].group_known = 0;
    q->s[i].e.group_amax = 0;
    if (g < 0) return;
    for (size_t j = 0; j < q->n; j++)
        if (q->s[j].e.fused_group == g) q->s[j].group_known = 0, q->s[j].e.group_amax = 0;
}

static int same_spec(const lb_qspec *a, const lb_qspec *b)
{
    return a->element == b->element && a->granularity == b->granularity &&
           (a->granularity != LB_GRAN_GROUP || a->group == b->group) && a->scale_format == b->scale_format &&
           a->affine == b->affine && a->two_level == b->two_level && a->search == b->search &&
           a->mx_rounding == b->mx_rounding && a->int_frac_bits == b->int_frac_bits &&
           lb__block_rows(a) == lb__block_rows(b);
}

static int two_level_entry(const qslot *s) { return s->e.state == LB_QSTATE_QUANTIZED && s->e.spec.two_level; }

static lb_status source_f32(const lb_qmodel *q, size_t i, float *dst)
{
    const qslot *s = &q->s[i];
    if (s->replacement) {
        memcpy(dst, s->replacement, s->e.tensor->n_elements * sizeof *dst);
        return LB_OK;
    }
    lb_status st = lb_tensor_to_f32(s->e.tensor, dst);
    lb_tensor_release(s->e.tensor);
    return st;
}

void lb__qslot_drop_outliers(qslot *s)
{
    free(s->outliers);
    s->outliers = NULL;
    s->n_outliers = 0;
}

/* The 16-bit outlier columns of a slot zeroed in x (its rows x cols
 * values): what the spec quantizes is the rest. */
static void zero_outliers(const qslot *s, float *x)
{
    if (!s->n_outliers) return;
    uint64_t rows = s->e.tensor->shape[0], cols = s->e.tensor->shape[1];
    for (uint64_t r = 0; r < rows; r++)
        for (size_t k = 0; k < s->n_outliers; k++) x[r * cols + s->outliers[k]] = 0.0f;
}

/* The largest |x| of n values (NaN or infinity: an error naming element
 * base + k of the tensor). */
static lb_status scan_amax(const float *x, uint64_t n, uint64_t base, const char *name, float *m)
{
    for (uint64_t k = 0; k < n; k++) {
        if (!isfinite(x[k]))
            return lb__fail(LB_ERR_NAN, "%s: element %llu is %s; quantization needs finite values", name,
                            (unsigned long long)(base + k), isnan(x[k]) ? "NaN" : "infinite");
        if (fabsf(x[k]) > *m) *m = fabsf(x[k]);
    }
    return LB_OK;
}

/* Elements decoded at a time when scanning a stored tensor: a small buffer
 * that stays in cache, instead of an fp32 copy of the whole tensor (its
 * page faults cost more than the scan). */
#define AMAX_CHUNK 65536u

/* The largest |x| of tensor i's source values (NaN or infinity: an error
 * naming the tensor, as quantizing it would be). */
static lb_status source_amax(const lb_qmodel *q, size_t i, float *amax)
{
    const lb_tensor *t = q->s[i].e.tensor;
    const lb_dtype_info *d = t->dtype == LB_DT_QUANTIZED ? NULL : lb_dtype_get(t->dtype);
    float m = 0, *buf = NULL;
    lb_status st = LB_OK;
    *amax = 0;
    if (q->s[i].replacement && !q->s[i].n_outliers) {
        st = scan_amax(q->s[i].replacement, t->n_elements, 0, t->name, &m);
    } else if (!q->s[i].n_outliers && d && d->can_read && d->block >= 1 && d->block <= AMAX_CHUNK) {
        /* whole blocks at a time, straight from the stored bytes */
        uint64_t chunk = AMAX_CHUNK / d->block * d->block, n = t->n_elements;
        if (!(buf = malloc(chunk * sizeof *buf))) return lb__fail(LB_ERR_NOMEM, "out of memory scanning %s", t->name);
        for (uint64_t k = 0; k < n && st == LB_OK; k += chunk) {
            uint64_t c = n - k < chunk ? n - k : chunk;
            st = lb_dtype_to_f32(t->dtype, (const uint8_t *)t->data + k / d->block * d->block_bytes, (size_t)c, buf);
            if (st == LB_OK) st = scan_amax(buf, c, k, t->name, &m);
        }
        lb_tensor_release(t);
    } else {
        if (!(buf = malloc(t->n_elements * sizeof *buf)))
            return lb__fail(LB_ERR_NOMEM, "cannot allocate an fp32 copy of %s", t->name);
        st = source_f32(q, i, buf);
        zero_outliers(&q->s[i], buf); /* the range of what the spec quantizes */
        if (st == LB_OK) st = scan_amax(buf, t->n_elements, 0, t->name, &m);
    }
    free(buf);
    *amax = m;
    return st;
}

/* Fills the group range of every member of i's group under i's spec;
 * the caller holds the lock. */
static lb_status compute_group(lb_qmodel *q, size_t i)
{
    qslot *s = &q->s[i];
    int g = s->e.fused_group;
    float m = 0;
    for (size_t j = 0; j < q->n; j++) {
        qslot *o = &q->s[j];
        if (j != i && (g < 0 || o->e.fused_group != g || !two_level_entry(o) || !same_spec(&o->e.spec, &s->e.spec)))
            continue;
        float a = 0;
        lb_status st = source_amax(q, j, &a);
        if (st != LB_OK) return st;
        if (a > m) m = a;
    }
    for (size_t j = 0; j < q->n; j++) {
        qslot *o = &q->s[j];
        if (j == i || (g >= 0 && o->e.fused_group == g && two_level_entry(o) && same_spec(&o->e.spec, &s->e.spec)))
            o->e.group_amax = m, o->group_known = 1;
    }
    return LB_OK;
}

lb_status lb__qmodel_group_amax(const lb_qmodel *cq, size_t i, float *amax)
{
    lb_status st = lb__qmodel_check_index(cq, i, "lb__qmodel_group_amax");
    if (st != LB_OK) return st;
    *amax = 0;
    /* alone (no group, or fusing off): 0, lb_quantize's own range, no pass over the values */
    if (!two_level_entry(&cq->s[i]) || cq->s[i].e.fused_group < 0) return LB_OK;
    lb_qmodel *q = (lb_qmodel *)cq; /* the cache is not the qmodel's value: reads stay concurrent */
    pthread_mutex_lock(&q->lock);
    if (!q->s[i].group_known) st = compute_group(q, i);
    *amax = q->s[i].e.group_amax;
    pthread_mutex_unlock(&q->lock);
    return st;
}

lb_status lb_qmodel_entry(const lb_qmodel *q, size_t i, lb_qentry *out)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_entry");
    if (st != LB_OK) return st;
    if (!out) return lb__fail(LB_ERR_ARG, "lb_qmodel_entry: out is NULL");
    float amax = 0;
    if ((st = lb__qmodel_group_amax(q, i, &amax)) != LB_OK) return st;
    *out = q->s[i].e;
    out->group_amax = amax;
    return LB_OK;
}

static lb_status need_matrix(const lb_qmodel *q, size_t i, const char *fn)
{
    const lb_tensor *t = q->s[i].e.tensor;
    if (t->n_dims != 2 || t->shape[0] == 0 || t->shape[1] == 0)
        return lb__fail(LB_ERR_ARG, "%s: %s is not a 2-D weight (%d dims, %llu elements)", fn, t->name, t->n_dims,
                        (unsigned long long)t->n_elements);
    return LB_OK;
}

/* Drops what an algorithm set: a quantized tensor, ggml bytes. */
void lb__qslot_drop_qtensor(qslot *s)
{
    lb_qtensor_free(s->qt);
    s->qt = NULL;
    free(s->ggml_bytes);
    s->ggml_bytes = NULL, s->n_ggml_bytes = 0;
    s->e.has_qtensor = 0;
}

lb_status lb_qmodel_set_spec(lb_qmodel *q, size_t i, const lb_qspec *spec)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_set_spec");
    if (st != LB_OK) return st;
    if (!spec) return lb__fail(LB_ERR_ARG, "lb_qmodel_set_spec: spec is NULL");
    if ((st = need_matrix(q, i, "lb_qmodel_set_spec")) != LB_OK) return st;
    qslot *s = &q->s[i];
    if (lb__qspec_is_plain(spec))
        return lb__fail(LB_ERR_ARG, "%s: %s has nothing to scale; keep the weight in 16-bit instead", s->e.tensor->name,
                        lb_format_get(spec->element) ? lb_format_get(spec->element)->name : "that element");
    if ((st = lb_qspec_validate(spec)) != LB_OK) return lb__fail(st, "%s: %s", s->e.tensor->name, lb_last_error());
    lb__qslot_drop_qtensor(s);
    s->has_plain = 0;
    s->e.ggml = LB_DT_COUNT;
    s->e.state = LB_QSTATE_QUANTIZED;
    s->e.spec = *spec;
    lb__qmodel_group_changed(q, i);
    return LB_OK;
}

lb_status lb_qmodel_keep(lb_qmodel *q, size_t i)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_keep");
    if (st != LB_OK) return st;
    qslot *s = &q->s[i];
    if (!lb_tensor_is_weight(s->e.tensor))
        return lb__fail(LB_ERR_ARG, "lb_qmodel_keep: %s is not a weight matrix (norms and biases stay as stored)",
                        s->e.tensor->name);
    lb__qslot_drop_qtensor(s);
    lb__qslot_drop_outliers(s);
    s->has_plain = 0;
    s->e.ggml = LB_DT_COUNT;
    memset(&s->e.spec, 0, sizeof s->e.spec);
    s->e.state = s->replacement ? LB_QSTATE_REPLACED : LB_QSTATE_KEPT;
    lb__qmodel_group_changed(q, i);
    return LB_OK;
}

lb_status lb__qmodel_keep_plain(lb_qmodel *q, size_t i, const lb_qspec *plain)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb__qmodel_keep_plain");
    if (st != LB_OK) return st;
    if (!plain || !lb__qspec_is_plain(plain)) return lb__fail(LB_ERR_ARG, "lb__qmodel_keep_plain: not a plain spec");
    if ((st = need_matrix(q, i, "lb__qmodel_keep_plain")) != LB_OK) return st;
    qslot *s = &q->s[i];
    lb__qslot_drop_qtensor(s);
    lb__qslot_drop_outliers(s);
    memset(&s->e.spec, 0, sizeof s->e.spec);
    s->e.state = s->replacement ? LB_QSTATE_REPLACED : LB_QSTATE_KEPT;
    s->has_plain = 1;
    s->plain = *plain;
    lb__qmodel_group_changed(q, i);
    return LB_OK;
}

const lb_qspec *lb__qmodel_plain(const lb_qmodel *q, size_t i)
{
    return q && i < q->n && q->s[i].has_plain ? &q->s[i].plain : NULL;
}

lb_status lb_qmodel_replace(lb_qmodel *q, size_t i, const float *values)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_replace");
    if (st != LB_OK) return st;
    if (!values) return lb__fail(LB_ERR_ARG, "lb_qmodel_replace: values is NULL");
    qslot *s = &q->s[i];
    uint64_t n = s->e.tensor->n_elements;
    for (uint64_t k = 0; k < n; k++)
        if (!isfinite(values[k]))
            return lb__fail(LB_ERR_NAN, "lb_qmodel_replace: %s element %llu is %s; replacements must be finite",
                            s->e.tensor->name, (unsigned long long)k, isnan(values[k]) ? "NaN" : "infinite");
    float *copy = s->replacement ? s->replacement : malloc((n ? n : 1) * sizeof *copy);
    if (!copy) return lb__fail(LB_ERR_NOMEM, "cannot allocate a replacement of %s (%llu values)", s->e.tensor->name,
                               (unsigned long long)n);
    memcpy(copy, values, n * sizeof *copy);
    s->replacement = copy;
    s->e.replaced = 1;
    lb__qslot_drop_qtensor(s); /* quantized from the old values: stale */
    if (s->e.state != LB_QSTATE_QUANTIZED) s->e.state = LB_QSTATE_REPLACED;
    lb__qmodel_group_changed(q, i);
    return LB_OK;
}

lb_status lb_qmodel_set_qtensor(lb_qmodel *q, size_t i, lb_qtensor *qt)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_set_qtensor");
    if (st == LB_OK && !qt) st = lb__fail(LB_ERR_ARG, "lb_qmodel_set_qtensor: qtensor is NULL");
    if (st != LB_OK) return lb_qtensor_free(qt), st;
    qslot *s = &q->s[i];
    const lb_tensor *t = s->e.tensor;
    if (s->e.state != LB_QSTATE_QUANTIZED) {
        lb_qtensor_free(qt);
        return lb__fail(LB_ERR_ARG, "lb_qmodel_set_qtensor: %s has no spec (set one first)", t->name);
    }
    if (!same_spec(&qt->spec, &s->e.spec) || qt->rows != t->shape[0] || qt->cols != t->shape[1]) {
        char want[96], got[96];
        lb_qspec_format(&s->e.spec, want, sizeof want);
        lb_qspec_format(&qt->spec, got, sizeof got);
        st = lb__fail(LB_ERR_ARG, "lb_qmodel_set_qtensor: %s is [%llu, %llu] under %s; the tensor given is [%zu, %zu] "
                      "under %s", t->name, (unsigned long long)t->shape[0], (unsigned long long)t->shape[1], want,
                      qt->rows, qt->cols, got);
        lb_qtensor_free(qt);
        return st;
    }
    lb__qslot_drop_qtensor(s);
    s->qt = qt;
    s->e.has_qtensor = 1;
    return LB_OK;
}

lb_status lb_qmodel_set_act(lb_qmodel *q, size_t i, const lb_qact *act)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_set_act");
    if (st != LB_OK) return st;
    if (!act) return lb__fail(LB_ERR_ARG, "lb_qmodel_set_act: act is NULL");
    qslot *s = &q->s[i];
    const char *name = s->e.tensor->name;
    lb_qact a = *act;
    if ((unsigned)a.mode > (unsigned)LB_ACT_LOCAL)
        return lb__fail(LB_ERR_ARG, "%s: activation mode %d is unknown", name, (int)a.mode);
    switch (a.mode) {
    case LB_ACT_NONE:
        memset(&a.spec, 0, sizeof a.spec);
        s->e.act = a;
        return LB_OK;
    case LB_ACT_DYNAMIC:
        if (a.spec.granularity == LB_GRAN_TENSOR)
            return lb__fail(LB_ERR_ARG, "%s: dynamic activations are per token or per group, not per tensor", name);
        break;
    case LB_ACT_STATIC:
        if (a.spec.granularity != LB_GRAN_TENSOR)
            return lb__fail(LB_ERR_ARG, "%s: static activation scales are per tensor", name);
        break;
    case LB_ACT_LOCAL:
        if (!a.spec.two_level || a.spec.granularity != LB_GRAN_GROUP)
            return lb__fail(LB_ERR_ARG, "%s: local activation scales need a two-level group spec (nvfp4)", name);
        break;
    }
    if ((st = need_matrix(q, i, "lb_qmodel_set_act")) != LB_OK) return st;
    if ((st = lb_qspec_validate(&a.spec)) != LB_OK) return lb__fail(st, "%s activations: %s", name, lb_last_error());
    s->e.act = a;
    return LB_OK;
}

lb_status lb_qmodel_set_input_amax(lb_qmodel *q, size_t i, float amax)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_set_input_amax");
    if (st != LB_OK) return st;
    if (!(amax >= 0) || isinf(amax))
        return lb__fail(LB_ERR_ARG, "lb_qmodel_set_input_amax: %s: %g is not a finite magnitude",
                        q->s[i].e.tensor->name, (double)amax);
    q->s[i].e.input_amax = amax;
    return LB_OK;
}

lb_status lb_qmodel_source_f32(const lb_qmodel *q, size_t i, float *dst)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_source_f32");
    if (st != LB_OK) return st;
    if (!dst) return lb__fail(LB_ERR_ARG, "lb_qmodel_source_f32: dst is NULL");
    return source_f32(q, i, dst);
}

lb_status lb_qmodel_quantized(const lb_qmodel *q, size_t i, int threads, lb_qtensor **out, int *owned)
{
    return lb__qmodel_quantized_scratch(q, i, threads, NULL, out, owned);
}

lb_status lb__qmodel_quantized_scratch(const lb_qmodel *q, size_t i, int threads, float *scratch, lb_qtensor **out,
                                       int *owned)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_quantized");
    if (st != LB_OK) return st;
    if (!out || !owned) return lb__fail(LB_ERR_ARG, "lb_qmodel_quantized: NULL argument");
    *out = NULL;
    *owned = 0;
    const qslot *s = &q->s[i];
    const lb_tensor *t = s->e.tensor;
    if (s->e.state != LB_QSTATE_QUANTIZED)
        return lb__fail(LB_ERR_ARG, "lb_qmodel_quantized: %s is not quantized", t->name);
    if (s->qt) return *out = s->qt, LB_OK;
    float amax = 0;
    if ((st = lb__qmodel_group_amax(q, i, &amax)) != LB_OK) return st;
    float *x = scratch ? scratch : malloc(t->n_elements * sizeof *x);
    if (!x) return lb__fail(LB_ERR_NOMEM, "cannot allocate an fp32 copy of %s", t->name);
    st = source_f32(q, i, x);
    zero_outliers(s, x);
    if (st == LB_OK) {
        st = lb__quantize_ex(&s->e.spec, x, (size_t)t->shape[0], (size_t)t->shape[1], threads, amax, out);
        if (st != LB_OK) st = lb__fail(st, "quantizing %s: %s", t->name, lb_last_error());
    }
    if (x != scratch) free(x);
    if (st == LB_OK) *owned = 1;
    return st;
}

/* Rounds n values to the output's 16-bit dtype and back, as a writer
 * stores them (lb_dtype_from_f32). */
lb_status lb__qmodel_round_to_dtype(lb_dtype dt, float *x, uint64_t n, const char *name)
{
    if (dt == LB_DT_F32) return LB_OK;
    uint16_t *codes = malloc((n ? n : 1) * sizeof *codes);
    if (!codes) return lb__fail(LB_ERR_NOMEM, "cannot round %s to 16 bits", name);
    lb_status st = lb_dtype_from_f32(dt, x, (size_t)n, codes);
    if (st == LB_OK) st = lb_dtype_to_f32(dt, codes, (size_t)n, x);
    free(codes);
    return st;
}

lb_status lb_qmodel_values_f32(const lb_qmodel *q, size_t i, float *dst, int threads)
{
    lb_status st = lb__qmodel_check_index(q, i, "lb_qmodel_values_f32");
    if (st != LB_OK) return st;
    if (!dst) return lb__fail(LB_ERR_ARG, "lb_qmodel_values_f32: dst is NULL");
    const qslot *s = &q->s[i];
    if (s->e.ggml != LB_DT_COUNT) return lb__qmodel_ggml_values(q, i, dst, threads);
    switch (s->e.state) {
    case LB_QSTATE_STORED: return source_f32(q, i, dst);
    case LB_QSTATE_KEPT:
    case LB_QSTATE_REPLACED:
        st = source_f32(q, i, dst);
        if (st == LB_OK) st = lb__qmodel_round_to_dtype(q->dtype, dst, s->e.tensor->n_elements, s->e.tensor->name);
        return st;
    case LB_QSTATE_QUANTIZED: {
        lb_qtensor *qt = NULL;
        int owned = 0;
        st = lb_qmodel_quantized(q, i, threads, &qt, &owned);
        if (st == LB_OK) st = lb_dequantize(qt, dst, threads);
        if (owned) lb_qtensor_free(qt);
        if (st == LB_OK && s->n_outliers) st = lb__qmodel_put_outliers(q, i, dst);
        return st;
    }
    }
    return lb__fail(LB_ERR_ARG, "lb_qmodel_values_f32: %s has an unknown state", s->e.tensor->name);
}

lb_status lb_qmodel_set_dtype(lb_qmodel *q, lb_dtype dtype)
{
    if (!q) return lb__fail(LB_ERR_ARG, "lb_qmodel_set_dtype: qmodel is NULL");
    if (dtype != LB_DT_BF16 && dtype != LB_DT_F16 && dtype != LB_DT_F32)
        return lb__fail(LB_ERR_ARG, "lb_qmodel_set_dtype: the 16-bit dtype is bf16, f16 or f32, not %s",
                        lb_dtype_get(dtype) ? lb_dtype_get(dtype)->name : "an unknown dtype");
    q->dtype = dtype;
    return LB_OK;
}

lb_dtype lb_qmodel_dtype(const lb_qmodel *q) { return q ? q->dtype : LB_DT_BF16; }

lb_status lb_qmodel_set_kv(lb_qmodel *q, lb_format kv)
{
    if (!q) return lb__fail(LB_ERR_ARG, "lb_qmodel_set_kv: qmodel is NULL");
    if (kv != LB_FMT_FP32 && kv != LB_FMT_FP8_E4M3)
        return lb__fail(LB_ERR_ARG, "lb_qmodel_set_kv: the KV cache of a quantized model is fp8_e4m3 (static "
                        "per-layer scales) or none, not %s",
                        lb_format_get(kv) ? lb_format_get(kv)->name : "an unknown format");
    if (kv == LB_FMT_FP8_E4M3 && !q->kv_amax) {
        /* a layer holds tensors: more layers than tensors is a broken header, not a reason to allocate */
        if (q->n_layers == 0 || q->n_layers > q->n)
            return lb__fail(LB_ERR_ARG, "lb_qmodel_set_kv: the model says %u layers over %zu tensors", q->n_layers,
                            q->n);
        q->kv_amax = calloc(2 * (size_t)q->n_layers, sizeof *q->kv_amax);
        if (!q->kv_amax) return lb__fail(LB_ERR_NOMEM, "cannot allocate KV ranges of %u layers", q->n_layers);
    }
    q->kv = kv;
    return LB_OK;
}

lb_format lb_qmodel_kv(const lb_qmodel *q) { return q ? q->kv : LB_FMT_FP32; }

lb_status lb_qmodel_set_kv_amax(lb_qmodel *q, uint32_t layer, float k_amax, float v_amax)
{
    if (!q) return lb__fail(LB_ERR_ARG, "lb_qmodel_set_kv_amax: qmodel is NULL");
    if (!q->kv_amax || q->kv == LB_FMT_FP32)
        return lb__fail(LB_ERR_ARG, "lb_qmodel_set_kv_amax: the quantized model has no KV format");
    if (layer >= q->n_layers)
        return lb__fail(LB_ERR_ARG, "lb_qmodel_set_kv_amax: layer %u, the model has %u", layer, q->n_layers);
    if (!(k_amax >= 0) || isinf(k_amax) || !(v_amax >= 0) || isinf(v_amax))
        return lb__fail(LB_ERR_ARG, "lb_qmodel_set_kv_amax: layer %u: k %g, v %g are not finite magnitudes", layer,
                        (double)k_amax, (double)v_amax);
    q->kv_amax[2 * layer] = k_amax;
    q->kv_amax[2 * layer + 1] = v_amax;
    return LB_OK;
}

lb_status lb_qmodel_kv_amax(const lb_qmodel *q, uint32_t layer, float *k_amax, float *v_amax)
{
    if (!q || !k_amax || !v_amax) return lb__fail(LB_ERR_ARG, "lb_qmodel_kv_amax: NULL argument");
    if (!q->kv_amax || q->kv == LB_FMT_FP32)
        return lb__fail(LB_ERR_ARG, "lb_qmodel_kv_amax: the quantized model has no KV format");
    if (layer >= q->n_layers)
        return lb__fail(LB_ERR_ARG, "lb_qmodel_kv_amax: layer %u, the model has %u", layer, q->n_layers);
    *k_amax = q->kv_amax[2 * layer];
    *v_amax = q->kv_amax[2 * layer + 1];
    return LB_OK;
}

void lb__qmodel_unfuse(lb_qmodel *q)
{
    if (!q) return;
    for (size_t i = 0; i < q->n; i++) q->s[i].e.fused_group = -1, q->s[i].e.group_amax = 0, q->s[i].group_known = 0;
}

/* A deep copy of a quantized tensor (same allocators as lb_quantize's). */
static lb_status clone_qtensor(const lb_qtensor *a, lb_qtensor **out)
{
    lb_qtensor *b = calloc(1, sizeof *b);
    if (!b) return lb__fail(LB_ERR_NOMEM, "out of memory");
    *b = *a;
    size_t data = a->rows * a->row_bytes, scales = lb_format_bytes(a->spec.scale_format, a->scale_count);
    size_t zps = (a->spec.granularity == LB_GRAN_TENSOR ? 1 : a->rows) * a->zp_row_bytes;
    b->data = lb__alloc_large(data);
    b->scales = lb__alloc_large(scales);
    b->zero_points = a->zero_points ? lb__alloc_large(zps) : NULL;
    if (!b->data || !b->scales || (a->zero_points && !b->zero_points)) {
        b->zero_points = a->zero_points ? b->zero_points : NULL;
        lb_qtensor_free(b);
        return lb__fail(LB_ERR_NOMEM, "out of memory for a copy of a %zu x %zu quantized tensor", a->rows, a->cols);
    }
    memcpy(b->data, a->data, data);
    memcpy(b->scales, a->scales, scales);
    if (a->zero_points) memcpy(b->zero_points, a->zero_points, zps);
    *out = b;
    return LB_OK;
}

lb_status lb__qmodel_quantized_owned(const lb_qmodel *q, size_t i, int threads, lb_qtensor **out)
{
    lb_qtensor *qt = NULL;
    int owned = 0;
    lb_status st = lb_qmodel_quantized(q, i, threads, &qt, &owned);
    if (st != LB_OK) return st;
    if (owned) return *out = qt, LB_OK;
    return clone_qtensor(qt, out);
}
