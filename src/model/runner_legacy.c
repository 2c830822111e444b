/* lb_runner_new: the runner of lowbit.h's class options (attn, mlp, embed,
 * head specs; W8A8 activations; any KV format) as a runner over a private
 * quantized model that holds those specs, each tensor on its own (no fused
 * groups), so the bytes and logits are the ones lb_runner_new always gave. */
#include <string.h>

#include "kernel/qmat.h"
#include "model/kvcache.h"
#include "model/runner_internal.h"
#include "util/error.h"
#include "weights/qmodel_internal.h"

/* The projections of a decoder layer: attention first (q, k, v, o), then the MLP's. */
static const char *const weight_suffix[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                            "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                            "mlp.down_proj"};
enum { W_ATTN = 4, W_COUNT = sizeof weight_suffix / sizeof weight_suffix[0] }; /* W_ATTN: q, k, v, o */

/* lb_runner_new's class of a weight (its spec among attn, mlp, embed,
 * head), by canonical name: NULL for anything else. */
static const lb_qspec *class_spec(const lb_runner_options *o, const char *name)
{
    if (strcmp(name, "model.embed_tokens.weight") == 0) return o->embed;
    if (strcmp(name, "lm_head.weight") == 0) return o->head;
    if (strncmp(name, "model.layers.", 13) != 0) return NULL;
    const char *p = name + 13;
    while (*p >= '0' && *p <= '9') p++;
    if (p == name + 13) return NULL;
    for (int w = 0; w < W_COUNT; w++) {
        size_t n = strlen(weight_suffix[w]);
        if (p[0] == '.' && strncmp(p + 1, weight_suffix[w], n) == 0 && strcmp(p + 1 + n, ".weight") == 0)
            return w < W_ATTN ? o->attn : o->mlp;
    }
    return NULL;
}

lb_status lb_runner_new(const lb_model *m, const lb_runner_options *o, lb_runner **out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb_runner_new: out is NULL");
    *out = NULL;
    if (!m) return lb__fail(LB_ERR_ARG, "lb_runner_new: model is NULL");
    lb_runner_options defaults = {0};
    if (!o) o = &defaults;
    const lb_qspec *specs[4] = {o->attn, o->mlp, o->embed, o->head};
    for (int i = 0; i < 4; i++)
        if (specs[i] && !lb__qspec_is_plain(specs[i]) && lb_qspec_validate(specs[i]) != LB_OK)
            return lb_qspec_validate(specs[i]);
    if (o->act != LB_FMT_FP32 && o->act != LB_FMT_INT8 && o->act != LB_FMT_FP8_E4M3)
        return lb__fail(LB_ERR_ARG, "activation format %d: W8A8 takes int8 or fp8_e4m3", (int)o->act);
    if (lb__kv_format_check(o->kv) != LB_OK) return LB_ERR_FORMAT;
    if (o->ggml_act && o->act != LB_FMT_FP32)
        return lb__fail(LB_ERR_ARG, "llama.cpp's activation rounding (ggml_act) and W8A8 activations (act) exclude "
                        "each other: give one");
    if (o->act != LB_FMT_FP32 && o->fake)
        return lb__fail(LB_ERR_ARG, "8-bit activations run on packed weights: they do not combine with fake quantization");
    /* a private qmodel with the class specs, each tensor on its own (no
     * fused groups): the bytes lb_runner_new always ran on */
    lb_qmodel *q = NULL;
    lb_status st = lb_qmodel_new(m, &q);
    if (st != LB_OK) return st;
    lb__qmodel_unfuse(q);
    for (size_t i = 0, n = lb_qmodel_count(q); i < n && st == LB_OK; i++) {
        const lb_tensor *t = lb_model_tensor(m, i);
        const lb_qspec *spec = class_spec(o, t->name);
        if (!spec || t->n_dims != 2 || !t->shape[0] || !t->shape[1]) continue; /* shapes are checked when loading */
        st = lb__qspec_is_plain(spec) ? lb__qmodel_keep_plain(q, i, spec) : lb_qmodel_set_spec(q, i, spec);
    }
    if (st == LB_OK) st = lb__runner_build_ex(q, o, o->act, 0, out);
    lb_qmodel_free(q);
    return st;
}

