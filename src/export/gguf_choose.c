/* lb_gguf_choose: a qmodel's tensors as llama-quantize sees them (GGUF
 * names, ggml shapes and types, the model's layer and head counts), the
 * mix's answer (gguf_mix.c), and that answer recorded on the qmodel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/gguf_export.h"
#include "export/gguf_mix.h"
#include "io/model_internal.h"
#include "util/error.h"

const char *lb_ggml_type_name(int ggml_type) { return lb__ggml_type_name(ggml_type); }
int lb_ggml_type_by_name(const char *name) { return lb__ggml_type_by_name(name); }

lb_status lb_qmodel_gguf_name(const lb_qmodel *q, size_t i, char *buf, size_t size)
{
    if (!q || !buf || !size) return lb__fail(LB_ERR_ARG, "lb_qmodel_gguf_name: NULL argument");
    if (i >= lb_qmodel_count(q)) return lb__fail(LB_ERR_ARG, "lb_qmodel_gguf_name: index %zu out of range", i);
    const lb_model *m = lb_qmodel_model(q);
    const lb_tensor *t = lb_model_tensor(m, i);
    int n = m->kind == LB_MODEL_GGUF ? snprintf(buf, size, "%s", t->file_name) : lb_name_to_gguf(t->name, buf, size);
    if (n < 0 || (size_t)n >= size) return lb__fail(LB_ERR_ARG, "tensor '%s': GGUF name longer than %zu", t->name, size - 1);
    if (strlen(buf) >= LB_GGUF_MAX_NAME)
        return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s': GGUF name '%s' is longer than ggml's 63 bytes", t->name, buf);
    return LB_OK;
}

/* What a tensor not quantized keeps: its GGUF type; from other inputs a
 * 1-D tensor becomes F32 (ggml multiplies by norms in fp32, and llama.cpp's
 * converter writes them so), any other its type when GGUF has it. */
static int kept_type(const lb_model *m, const lb_tensor *t)
{
    int g = lb_dtype_get(t->dtype)->ggml_type;
    if (m->kind == LB_MODEL_GGUF) return g;
    if (t->n_dims <= 1 || g < 0 || t->dtype == LB_DT_QUANTIZED) return 0;
    return g;
}

lb_status lb__gguf_view_make(const lb_qmodel *q, lb__gguf_view *v)
{
    memset(v, 0, sizeof *v);
    const lb_model *m = lb_qmodel_model(q);
    size_t n = lb_qmodel_count(q);
    v->n = n;
    v->t = calloc(n ? n : 1, sizeof *v->t);
    v->names = calloc(n ? n : 1, sizeof *v->names);
    if (!v->t || !v->names) return lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const lb_tensor *t = lb_model_tensor(m, i);
        lb_status st = lb_qmodel_gguf_name(q, i, v->names[i], sizeof v->names[i]);
        if (st != LB_OK) return st;
        if (t->n_dims > 4) return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s' has %d dimensions; GGUF holds 4", t->name, t->n_dims);
        lb__mix_tensor *x = &v->t[i];
        x->name = v->names[i];
        x->n_dims = t->n_dims ? t->n_dims : 1;
        for (int d = 0; d < 4; d++) x->ne[d] = 1;
        for (int d = 0; d < t->n_dims; d++) x->ne[d] = t->shape[t->n_dims - 1 - d];
        x->type = kept_type(m, t);
    }
    const lb_arch *a = lb_model_arch(m);
    v->model.arch = a->name;
    v->model.n_layer = a->n_layers, v->model.n_head = a->n_heads, v->model.n_head_kv = a->n_kv_heads;
    if (m->kind == LB_MODEL_GGUF) {
        char key[64];
        uint64_t e = 0;
        snprintf(key, sizeof key, "%s.expert_count", a->name);
        if (lb__gguf_get_u64(&m->gguf, key, &e) && e <= UINT32_MAX) v->model.n_expert = (uint32_t)e;
    }
    return LB_OK;
}

void lb__gguf_view_free(lb__gguf_view *v)
{
    free(v->t), free(v->names);
    memset(v, 0, sizeof *v);
}

static lb_status ggml_type_arg(const char *what, const char *name, int *out)
{
    *out = -1;
    if (!name) return LB_OK;
    if ((*out = lb__ggml_type_by_name(name)) < 0)
        return lb__fail(LB_ERR_ARG, "%s: unknown ggml type '%s' (f32, f16, bf16, q8_0, q5_0, q5_1, q4_0, q4_1, q2_K, "
                        "q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, mxfp4, nvfp4)", what, name);
    return LB_OK;
}

lb_status lb__gguf_mix_options(const lb_gguf_options *o, lb__mix_options *mo, lb__mix_override **ov)
{
    memset(mo, 0, sizeof *mo);
    *ov = NULL;
    const lb__ftype_info *f = lb__ftype_by_name(o->type);
    if (!f) {
        char list[512] = "";
        for (size_t k = 0; lb__ftype_at(k); k++) {
            strncat(list, k ? ", " : "", sizeof list - strlen(list) - 1);
            strncat(list, lb__ftype_at(k)->name, sizeof list - strlen(list) - 1);
        }
        return lb__fail(LB_ERR_ARG, "unknown GGUF type '%s' (%s)", o->type ? o->type : "(none)", list);
    }
    mo->ftype = f->ftype, mo->pure = o->pure, mo->leave_output = o->leave_output;
    lb_status st = ggml_type_arg("--output-tensor-type", o->output_tensor_type, &mo->output_type);
    if (st == LB_OK) st = ggml_type_arg("--token-embedding-type", o->token_embedding_type, &mo->token_embd_type);
    if (st != LB_OK) return st;
    if (!o->n_tensor_types) return LB_OK;
    *ov = calloc(o->n_tensor_types, sizeof **ov);
    if (!*ov) return lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < o->n_tensor_types; k++) {
        const char *spec = o->tensor_types[k], *eq = spec ? strchr(spec, '=') : NULL; /* the first, as llama-quantize */
        if (!eq || eq == spec || !eq[1])
            return lb__fail(LB_ERR_ARG, "--tensor-type '%s': expected PATTERN=TYPE", spec ? spec : "");
        (*ov)[k].pattern = spec; /* the '=' ends it: copied below */
        if ((st = ggml_type_arg("--tensor-type", eq + 1, &(*ov)[k].type)) != LB_OK) return st;
    }
    mo->overrides = *ov, mo->n_overrides = o->n_tensor_types;
    return LB_OK;
}

int lb__gguf_imatrix_keeps(const lb_gguf_options *o, const char *name)
{
    for (size_t k = 0; k < o->n_imatrix_exclude; k++)
        if (o->imatrix_exclude[k] && strstr(name, o->imatrix_exclude[k])) return 0;
    for (size_t k = 0; k < o->n_imatrix_include; k++)
        if (o->imatrix_include[k] && strstr(name, o->imatrix_include[k])) return 1;
    return o->n_imatrix_include == 0;
}

size_t lb__gguf_imatrix_kept(const lb_gguf_options *o)
{
    size_t n = 0, all = o->imatrix ? lb_imatrix_count(o->imatrix) : 0;
    for (size_t i = 0; i < all; i++) {
        lb_imatrix_entry e;
        if (lb_imatrix_entry_at(o->imatrix, i, &e) == LB_OK && lb__gguf_imatrix_keeps(o, e.name)) n++;
    }
    return n;
}

static int is_token_embd(const char *name)
{
    return strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0;
}

/* The importance llama-quantize hands tensor i (converted to another
 * type): its entry when kept and as long as a row times the experts; none
 * without an entry; a length that differs is an error, but for the token
 * embedding (none: llama.cpp expects that one to differ). */
static lb_status imatrix_for(const lb_gguf_options *o, const lb__gguf_view *v, size_t i, const float **w, size_t *n)
{
    *w = NULL, *n = 0;
    lb_imatrix_entry e;
    if (!lb_imatrix_find(o->imatrix, v->names[i], &e) || !lb__gguf_imatrix_keeps(o, e.name)) return LB_OK;
    uint64_t want = v->t[i].ne[0] * v->t[i].ne[2];
    size_t have = e.cols * e.n_mat;
    if (have == want) {
        *w = e.values, *n = have;
        return LB_OK;
    }
    if (is_token_embd(v->names[i])) return LB_OK;
    return lb__fail(LB_ERR_ARG, "imatrix entry '%s' holds %zu values; tensor '%s' needs %llu (its rows of %llu "
                    "times %llu experts): an imatrix of another model? (llama-quantize refuses it too)",
                    e.name, have, v->names[i], (unsigned long long)want, (unsigned long long)v->t[i].ne[0],
                    (unsigned long long)v->t[i].ne[2]);
}

lb_status lb_gguf_choose(lb_qmodel *q, const lb_gguf_options *o, int *ggml_types)
{
    if (!q || !o) return lb__fail(LB_ERR_ARG, "lb_gguf_choose: NULL argument");
    lb__mix_options mo;
    lb__mix_override *ov = NULL;
    lb__gguf_view v;
    memset(&v, 0, sizeof v);
    size_t n = lb_qmodel_count(q);
    int *types = malloc((n ? n : 1) * sizeof *types);
    const float **im = calloc(n ? n : 1, sizeof *im);
    size_t *n_im = calloc(n ? n : 1, sizeof *n_im);
    char **patterns = NULL;
    lb_status st = types && im && n_im ? lb__gguf_mix_options(o, &mo, &ov) : lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK && o->imatrix && o->n_imatrix_include && o->n_imatrix_exclude)
        st = lb__fail(LB_ERR_ARG, "imatrix weights to include and to exclude: one or the other (as llama-quantize)");
    if (st == LB_OK && mo.n_overrides) { /* the pattern without its "=TYPE" */
        patterns = calloc(mo.n_overrides, sizeof *patterns);
        for (size_t k = 0; patterns && k < mo.n_overrides; k++) {
            const char *eq = strchr(ov[k].pattern, '=');
            if ((patterns[k] = strndup(ov[k].pattern, (size_t)(eq - ov[k].pattern))) != NULL) ov[k].pattern = patterns[k];
            else st = lb__fail(LB_ERR_NOMEM, "out of memory");
        }
        if (!patterns) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    if (st == LB_OK) st = lb__gguf_view_make(q, &v);
    /* llama-quantize's rules change once an imatrix is given: one that keeps
     * entries, or importance vectors already set on the qmodel */
    if (o->imatrix) mo.has_imatrix = lb__gguf_imatrix_kept(o) > 0;
    for (size_t i = 0; st == LB_OK && !o->imatrix && i < n; i++) {
        lb_qentry e;
        if ((st = lb_qmodel_entry(q, i, &e)) == LB_OK && e.has_imatrix) mo.has_imatrix = 1;
    }
    if (st == LB_OK) st = lb__gguf_mix(&v.model, v.t, n, &mo, types, NULL);
    if (st == LB_OK && ggml_types) memcpy(ggml_types, types, n * sizeof *types);
    /* every type must be one lowbit names before anything changes */
    for (size_t i = 0; st == LB_OK && i < n; i++) {
        lb_dtype d;
        if (lb_dtype_from_ggml(types[i], &d) != LB_OK || d == LB_DT_QUANTIZED)
            st = lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s': lowbit has no %s yet", v.names[i],
                          lb__ggml_type_name(types[i]));
    }
    /* the importance of each tensor whose type changes (llama-quantize's
     * `quantize`), checked before anything changes */
    for (size_t i = 0; st == LB_OK && o->imatrix && mo.has_imatrix && i < n; i++)
        if (types[i] != lb_dtype_get(lb_model_tensor(lb_qmodel_model(q), i)->dtype)->ggml_type)
            st = imatrix_for(o, &v, i, &im[i], &n_im[i]);
    for (size_t i = 0; st == LB_OK && i < n; i++) {
        lb_dtype d;
        lb_dtype_from_ggml(types[i], &d);
        st = lb_qmodel_set_ggml(q, i, d);
        if (st == LB_OK && o->imatrix) st = lb_qmodel_set_imatrix(q, i, im[i], n_im[i]);
    }
    lb__gguf_view_free(&v);
    for (size_t k = 0; patterns && k < mo.n_overrides; k++) free(patterns[k]);
    free(patterns), free(ov), free(types), free(im), free(n_im);
    return st;
}
