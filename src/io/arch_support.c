/* The architectures the forward pass (model/runner.c) implements, in one
 * table, and the refusal of everything else: another architecture, or a
 * feature its description asks for that the Llama layer loop does not
 * compute (experts, sliding windows, other activations, norms, rope
 * scalings, softcaps, scaled embeddings, parallel residuals, tensors it
 * would not read). Running such a model as Llama gives a plausible but
 * wrong number (SmolLM2 relabelled gemma: PPL 248 instead of 32), so it is
 * an error, never a silent approximation. Only the runner asks: inspect,
 * error and convert (to quantized types too) read any architecture. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/arch_support.h"
#include "io/model_internal.h"
#include "util/error.h"

typedef enum variant { V_NO, V_OPTIONAL, V_REQUIRED } variant;

typedef struct arch_row {
    const char *name;     /* GGUF general.architecture and config.json model_type */
    const char *hf_class; /* config.json architectures[] */
    variant qkv_bias;     /* q/k/v projection biases (not o_proj's: never implemented) */
    variant qk_norm;      /* per-head RMSNorm of q and k */
    int window_by_flag;   /* config.json: sliding_window applies only with use_sliding_window true */
    const char *variants; /* for messages */
} arch_row;

static const arch_row runnable[] = {
    {"llama", "LlamaForCausalLM", V_OPTIONAL, V_NO, 0, "tied or untied head, Llama-3 rope scaling, q/k/v biases"},
    {"mistral", "MistralForCausalLM", V_NO, V_NO, 0, "full attention"},
    {"qwen2", "Qwen2ForCausalLM", V_REQUIRED, V_NO, 1, "q/k/v biases"},
    {"qwen3", "Qwen3ForCausalLM", V_NO, V_REQUIRED, 1, "q/k RMSNorm"},
};
/* a bare .safetensors file (no config.json beside it) names no
 * architecture: its tensors, read by their Llama names, say what it has */
static const arch_row unlabelled = {"", "", V_OPTIONAL, V_OPTIONAL, 0, ""};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const arch_row *row_named(const char *name)
{
    for (size_t i = 0; i < COUNT(runnable); i++)
        if (strcmp(runnable[i].name, name) == 0) return &runnable[i];
    return NULL;
}

static int known_class(const char *cls)
{
    for (size_t i = 0; i < COUNT(runnable); i++)
        if (strcmp(runnable[i].hf_class, cls) == 0) return 1;
    return 0;
}

const char *lb__arch_hf_class(const char *name)
{
    const arch_row *row = row_named(name);
    return row ? row->hf_class : NULL;
}

/* "llama (tied or untied head, ...), mistral (...), ..." into buf */
static const char *supported_list(char *buf, size_t size)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < COUNT(runnable) && at < size; i++) {
        int n = snprintf(buf + at, size - at, "%s%s (%s)", i ? ", " : "", runnable[i].name, runnable[i].variants);
        if (n < 0) break;
        at += (size_t)n;
    }
    return buf;
}

/* The first lacking feature wins: later ones would only repeat the verdict. */
static void lacks(lb__arch_notes *n, const char *fmt, ...) LB__PRINTF(2, 3);
static void lacks(lb__arch_notes *n, const char *fmt, ...)
{
    if (n->lacking[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->lacking, sizeof n->lacking, fmt, ap);
    va_end(ap);
}

/* ---- GGUF metadata: llama.cpp's {arch}.* keys ---- */

static int gguf_num(const lb__gguf_file *f, const char *arch, const char *suffix, double *v, char *key, size_t size)
{
    snprintf(key, size, "%s.%s", arch, suffix);
    return lb__gguf_get_f64(f, key, v);
}

void lb__arch_notes_from_gguf(const lb__gguf_file *f, const char *arch, lb__arch_notes *n)
{
    memset(n, 0, sizeof *n);
    if (!arch[0]) return;
    n->described = 1;
    char key[128];
    double v;
    /* numbers that must be absent or zero: each is a computation the layer loop lacks */
    static const struct { const char *suffix, *feature; } zero[] = {
        {"expert_count", "mixture of experts"},
        {"expert_used_count", "mixture of experts"},
        {"expert_shared_count", "shared experts"},
        {"attn_logit_softcapping", "attention logit softcapping"},
        {"final_logit_softcapping", "final logit softcapping"},
        {"attention.clamp_kqv", "q/k/v clamping"},
        {"attention.scale", "a custom attention scale"},
        {"attention.layer_norm_epsilon", "LayerNorm (the forward pass implements RMSNorm)"},
    };
    for (size_t i = 0; i < COUNT(zero); i++)
        if (gguf_num(f, arch, zero[i].suffix, &v, key, sizeof key) && v != 0)
            lacks(n, "%s (%s = %g)", zero[i].feature, key, v);
    /* multipliers that must be absent or one */
    static const struct { const char *suffix, *feature; } one[] = {
        {"embedding_scale", "embedding scaling"},
        {"residual_scale", "residual scaling"},
        {"logit_scale", "logit scaling"},
    };
    for (size_t i = 0; i < COUNT(one); i++)
        if (gguf_num(f, arch, one[i].suffix, &v, key, sizeof key) && v != 1)
            lacks(n, "%s (%s = %g)", one[i].feature, key, v);
    int b;
    snprintf(key, sizeof key, "%s.use_parallel_residual", arch);
    if (lb__gguf_get_bool(f, key, &b) && b) lacks(n, "parallel attention and MLP residuals (%s)", key);
    /* rope scaling: llama.cpp reads a factor with no type as linear */
    const char *type = NULL;
    uint64_t len = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    int typed = lb__gguf_get_str(f, key, &type, &len);
    int none = typed && len == 4 && memcmp(type, "none", 4) == 0;
    if (typed && !none) lacks(n, "rope scaling '%.*s' (%s)", (int)(len < 32 ? len : 32), type, key);
    if (!none && ((gguf_num(f, arch, "rope.scaling.factor", &v, key, sizeof key) && v != 0 && v != 1) ||
                  (gguf_num(f, arch, "rope.scale_linear", &v, key, sizeof key) && v != 0 && v != 1)))
        lacks(n, "linear rope scaling (%s = %g)", key, v);
    if (gguf_num(f, arch, "attention.sliding_window", &v, key, sizeof key) && v > 0)
        n->sliding_window = v < 4294967295.0 ? (uint32_t)v : UINT32_MAX;
    if (gguf_num(f, arch, "rope.dimension_count", &v, key, sizeof key) && v >= 0)
        n->rotary_dim = v < 4294967295.0 ? (uint32_t)v : UINT32_MAX;
}

/* ---- config.json: Hugging Face's keys ---- */

static int cfg_number(const lb__json *cfg, const char *key, double *v)
{
    const lb__json *j = lb__json_get(cfg, key);
    if (!j || j->type != LB_JSON_NUMBER) return 0;
    *v = j->number;
    return 1;
}

static int cfg_true(const lb__json *cfg, const char *key)
{
    const lb__json *j = lb__json_get(cfg, key);
    return j && j->type == LB_JSON_TRUE;
}

static void config_window(const lb__json *cfg, const arch_row *row, lb__arch_notes *n)
{
    double w;
    const lb__json *flag = lb__json_get(cfg, "use_sliding_window");
    int on = flag && (flag->type == LB_JSON_TRUE || flag->type == LB_JSON_FALSE) ? flag->type == LB_JSON_TRUE
                                                                                : !(row && row->window_by_flag);
    const lb__json *types = lb__json_get(cfg, "layer_types"); /* newer configs: one entry per layer */
    if (types && types->type == LB_JSON_ARRAY)
        for (size_t i = 0; i < types->len; i++) {
            const lb__json *t = &types->items[i];
            if (t->type != LB_JSON_STRING || strcmp(t->str, "full_attention") == 0) continue;
            if (strcmp(t->str, "sliding_attention") == 0) on = 1;
            else lacks(n, "layer type '%.40s' (layer_types[%zu])", t->str, i);
        }
    if (on && cfg_number(cfg, "sliding_window", &w) && w > 0)
        n->sliding_window = w < 4294967295.0 ? (uint32_t)w : UINT32_MAX;
}

void lb__arch_notes_from_config(const lb__json *cfg, lb__arch_notes *n)
{
    memset(n, 0, sizeof *n);
    if (!cfg || cfg->type != LB_JSON_OBJECT) return;
    const char *type = lb__json_str(cfg, "model_type");
    const lb__json *classes = lb__json_get(cfg, "architectures");
    n->described = type != NULL || classes != NULL;
    if (classes && classes->type == LB_JSON_ARRAY)
        for (size_t i = 0; i < classes->len && !n->hf_class[0]; i++) {
            const lb__json *c = &classes->items[i];
            if (c->type != LB_JSON_STRING || !known_class(c->str))
                snprintf(n->hf_class, sizeof n->hf_class, "%.60s", c->type == LB_JSON_STRING ? c->str : "?");
        }
    double v;
    static const char *const experts[] = {"num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"};
    for (size_t i = 0; i < COUNT(experts); i++)
        if (cfg_number(cfg, experts[i], &v) && v != 0) lacks(n, "mixture of experts (%s = %g)", experts[i], v);
    static const char *const acts[] = {"hidden_act", "hidden_activation"};
    for (size_t i = 0; i < COUNT(acts); i++) {
        const char *act = lb__json_str(cfg, acts[i]);
        if (act && strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
            lacks(n, "activation '%.40s' (%s; the forward pass implements silu)", act, acts[i]);
    }
    const lb__json *rs = lb__json_get(cfg, "rope_scaling");
    if (rs && rs->type != LB_JSON_NULL) {
        const char *rt = lb__json_str(rs, "rope_type");
        if (!rt) rt = lb__json_str(rs, "type");
        if (rs->type != LB_JSON_OBJECT || !rt) lacks(n, "rope_scaling without a rope_type");
        else if (strcmp(rt, "default") != 0 && strcmp(rt, "llama3") != 0)
            lacks(n, "rope scaling '%.40s' (rope_scaling; the forward pass implements llama3)", rt);
        else if (lb__json_get(rs, "mrope_section")) lacks(n, "multimodal rope (rope_scaling.mrope_section)");
        else if (strcmp(rt, "llama3") == 0 && !lb__json_get(rs, "factor"))
            lacks(n, "llama3 rope scaling without a factor (rope_scaling.factor)"); /* arch.c would apply none */
    }
    static const char *const fractions[] = {"partial_rotary_factor", "rotary_pct"};
    for (size_t i = 0; i < COUNT(fractions); i++)
        if (cfg_number(cfg, fractions[i], &v) && v != 1) lacks(n, "partial rotary embedding (%s = %g)", fractions[i], v);
    static const char *const caps[] = {"attn_logit_softcapping", "final_logit_softcapping"};
    for (size_t i = 0; i < COUNT(caps); i++)
        if (cfg_number(cfg, caps[i], &v)) lacks(n, "logit softcapping (%s = %g)", caps[i], v);
    static const char *const scales[] = {"embedding_multiplier", "scale_emb", "residual_multiplier",
                                         "logits_scaling", "attention_multiplier", "logit_scale"};
    for (size_t i = 0; i < COUNT(scales); i++)
        if (cfg_number(cfg, scales[i], &v) && v != 1) lacks(n, "scaling (%s = %g)", scales[i], v);
    static const char *const layer_norms[] = {"layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"};
    for (size_t i = 0; i < COUNT(layer_norms); i++)
        if (lb__json_get(cfg, layer_norms[i])) lacks(n, "LayerNorm (%s; the forward pass implements RMSNorm)", layer_norms[i]);
    static const char *const parallel[] = {"use_parallel_residual", "parallel_attn", "parallel_residual"};
    for (size_t i = 0; i < COUNT(parallel); i++)
        if (cfg_true(cfg, parallel[i])) lacks(n, "parallel attention and MLP residuals (%s)", parallel[i]);
    if (cfg_true(cfg, "mlp_bias")) lacks(n, "MLP biases (mlp_bias)");
    config_window(cfg, type ? row_named(type) : NULL, n);
}

/* ---- the tensors: each one the forward pass reads, or refused ---- */

static const char *const layer_tensors[] = {
    "input_layernorm.weight",  "post_attention_layernorm.weight", "self_attn.q_proj.weight",
    "self_attn.k_proj.weight", "self_attn.v_proj.weight",         "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",    "mlp.up_proj.weight",              "mlp.down_proj.weight",
    "self_attn.rotary_emb.inv_freq", /* old Hugging Face checkpoints: recomputed, the same numbers */
};
static const char *const bias_tensors[] = {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"};
static const char *const qk_norm_tensors[] = {"self_attn.q_norm.weight", "self_attn.k_norm.weight"};
static const char *const global_tensors[] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                                             "rope_freqs.weight"};
/* A GGUF's per-tensor weight scales (NVFP4's second level: the runner
 * multiplies the product by it, as llama.cpp does) and the input scales
 * llama.cpp loads beside them and never uses (nor does the runner). */
static const char *const layer_scale_tensors[] = {
    "self_attn.q_proj.scale",       "self_attn.k_proj.scale",       "self_attn.v_proj.scale",
    "self_attn.o_proj.scale",       "mlp.gate_proj.scale",          "mlp.up_proj.scale",
    "mlp.down_proj.scale",          "self_attn.q_proj.input_scale", "self_attn.k_proj.input_scale",
    "self_attn.v_proj.input_scale", "self_attn.o_proj.input_scale", "mlp.gate_proj.input_scale",
    "mlp.up_proj.input_scale",      "mlp.down_proj.input_scale",
};
static const char *const head_scale_tensors[] = {"lm_head.scale", "lm_head.input_scale"};

static int listed(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0) return 1;
    return 0;
}

/* Whether the forward pass reads tensor `name` of a model with n_layers layers. */
static int read_by_runner(const char *name, const arch_row *row, uint32_t n_layers)
{
    if (listed(name, global_tensors, COUNT(global_tensors))) return 1;
    if (listed(name, head_scale_tensors, COUNT(head_scale_tensors))) return 1; /* lb_runner_new checks the head is untied */
    const char *prefix = "model.layers.";
    size_t np = strlen(prefix);
    if (strncmp(name, prefix, np) != 0 || name[np] < '0' || name[np] > '9') return 0;
    char *end;
    unsigned long layer = strtoul(name + np, &end, 10);
    if (*end != '.' || layer >= n_layers) return 0;
    const char *rest = end + 1;
    return listed(rest, layer_tensors, COUNT(layer_tensors)) || listed(rest, layer_scale_tensors, COUNT(layer_scale_tensors)) ||
           (row->qkv_bias != V_NO && listed(rest, bias_tensors, COUNT(bias_tensors))) ||
           (row->qk_norm != V_NO && listed(rest, qk_norm_tensors, COUNT(qk_norm_tensors)));
}

lb_status lb__model_runnable(const lb_model *m, size_t ctx)
{
    const lb_arch *a = &m->arch;
    const lb__arch_notes *n = &m->notes;
    char list[384];
    const arch_row *row = a->name[0] ? row_named(a->name) : n->described ? NULL : &unlabelled;
    if (!row) {
        if (!a->name[0])
            return lb__fail(LB_ERR_UNSUPPORTED, "the model's description names no architecture (model_type); the "
                                                "forward pass implements %s", supported_list(list, sizeof list));
        return lb__fail(LB_ERR_UNSUPPORTED, "architecture '%s' is not one the forward pass implements: %s (inspect, "
                        "error and convert read any architecture)", a->name, supported_list(list, sizeof list));
    }
    if (n->hf_class[0])
        return lb__fail(LB_ERR_UNSUPPORTED, "config.json architectures names '%s', which the forward pass does not "
                        "implement (it runs %s)", n->hf_class, supported_list(list, sizeof list));
    const char *arch = row->name[0] ? row->name : "unlabelled";
    if (n->lacking[0])
        return lb__fail(LB_ERR_UNSUPPORTED, "the model asks for %s, which the forward pass does not implement "
                        "(architecture %s; it implements %s)", n->lacking, arch, supported_list(list, sizeof list));
    if (n->sliding_window && ctx > n->sliding_window)
        return lb__fail(LB_ERR_UNSUPPORTED, "the model uses sliding-window attention (a window of %u positions), "
                        "which the forward pass does not implement: a context of %zu positions would attend past "
                        "the window (up to %u positions is exact)", n->sliding_window, ctx, n->sliding_window);
    if (n->rotary_dim && a->head_dim && n->rotary_dim != a->head_dim)
        return lb__fail(LB_ERR_UNSUPPORTED, "the model rotates %u of each head's %u dimensions (rope.dimension_count): "
                        "partial rotary embedding is not implemented", n->rotary_dim, a->head_dim);
    if (row->qkv_bias == V_REQUIRED && !a->qkv_bias)
        return lb__fail(LB_ERR_UNSUPPORTED, "architecture %s has q/k/v biases, and the model has no "
                        "self_attn.q_proj.bias", arch);
    if (row->qk_norm == V_REQUIRED && !a->qk_norm)
        return lb__fail(LB_ERR_UNSUPPORTED, "architecture %s has q/k norms, and the model has no "
                        "self_attn.q_norm.weight", arch);
    for (size_t i = 0; i < m->n_tensors; i++) {
        const lb_tensor *t = &m->tensors[i];
        if (!read_by_runner(t->name, row, a->n_layers))
            return lb__fail(LB_ERR_UNSUPPORTED, "tensor '%s' is not one the forward pass reads (architecture %s, "
                            "%u layers): running without it would be silently wrong", t->file_name, arch, a->n_layers);
    }
    return LB_OK;
}
