/* A model's architecture from whichever description its file carries:
 * GGUF metadata, a Hugging Face config.json, or the tensors' shapes. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/model_internal.h"
#include "util/error.h"

static lb_status u32_field(uint64_t v, const char *what, const char *key, uint32_t *out)
{
    if (v > UINT32_MAX) return lb__fail(LB_ERR_PARSE, "%s: %s = %llu is out of range", what, key, (unsigned long long)v);
    *out = (uint32_t)v;
    return LB_OK;
}

/* rope theta and the norm epsilon: positive, finite numbers or nothing */
static lb_status check_float(double v, const char *what, const char *key)
{
    if (!(v > 0) || isinf(v)) return lb__fail(LB_ERR_PARSE, "%s: %s = %g must be a positive finite number", what, key, v);
    return LB_OK;
}

static lb_status check_heads(lb_arch *a, const char *what)
{
    if (a->n_heads && !a->n_kv_heads) a->n_kv_heads = a->n_heads;
    if (a->n_heads && !a->head_dim && a->dim % a->n_heads == 0) a->head_dim = a->dim / a->n_heads;
    if (a->n_kv_heads && a->n_heads % a->n_kv_heads)
        return lb__fail(LB_ERR_PARSE, "%s: %u attention heads are not a multiple of %u key/value heads", what,
                        a->n_heads, a->n_kv_heads);
    return LB_OK;
}

lb_status lb__arch_from_gguf(const lb__gguf_file *f, const char *what, lb_arch *a)
{
    memset(a, 0, sizeof *a);
    const char *name;
    uint64_t len;
    if (!lb__gguf_get_str(f, "general.architecture", &name, &len)) return LB_OK; /* not a model: tensors only */
    if (len >= sizeof a->name) return lb__fail(LB_ERR_PARSE, "%s: general.architecture is %llu bytes long", what,
                                               (unsigned long long)len);
    memcpy(a->name, name, len);
    a->name[len] = '\0';
    struct { const char *suffix; uint32_t *field; } u32s[] = {
        {"block_count", &a->n_layers},          {"embedding_length", &a->dim},
        {"feed_forward_length", &a->hidden_dim}, {"attention.head_count", &a->n_heads},
        {"attention.head_count_kv", &a->n_kv_heads}, {"attention.key_length", &a->head_dim},
        {"vocab_size", &a->vocab_size},          {"context_length", &a->max_seq_len},
    };
    char key[96];
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        uint64_t v;
        snprintf(key, sizeof key, "%s.%s", a->name, u32s[i].suffix);
        if (lb__gguf_get_u64(f, key, &v)) {
            lb_status st = u32_field(v, what, key, u32s[i].field);
            if (st != LB_OK) return st;
        }
    }
    double d;
    snprintf(key, sizeof key, "%s.rope.freq_base", a->name);
    a->rope_theta = lb__gguf_get_f64(f, key, &d) ? d : 10000.0;
    lb_status st = check_float(a->rope_theta, what, key);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a->name);
    a->norm_eps = lb__gguf_get_f64(f, key, &d) ? d : 1e-5;
    if (st == LB_OK) st = check_float(a->norm_eps, what, key);
    if (st != LB_OK) return st;
    if (!a->vocab_size) {
        const lb__gguf_kv *tok = lb__gguf_find(f, "tokenizer.ggml.tokens");
        if (tok && tok->type == LB_GGUF_ARRAY && tok->n <= UINT32_MAX) a->vocab_size = (uint32_t)tok->n;
    }
    /* llama.cpp's converter permutes q/k rows for the llama family (its
     * "NORM" rope); qwen2/qwen3 keep Hugging Face's order ("NEOX" rope) */
    a->rope_layout = strcmp(a->name, "llama") == 0 || strcmp(a->name, "mistral") == 0 ? LB_ROPE_ADJACENT : LB_ROPE_HALF;
    return check_heads(a, what);
}

/* A non-negative integer member, if present. */
static lb_status cfg_u32(const lb__json *cfg, const char *key, const char *what, uint32_t *out)
{
    const lb__json *v = lb__json_get(cfg, key);
    if (!v || v->type == LB_JSON_NULL) return LB_OK;
    uint64_t u;
    if (!lb__json_u64(v, &u)) return lb__fail(LB_ERR_PARSE, "%s: \"%s\" is not a non-negative integer", what, key);
    return u32_field(u, what, key, out);
}

/* A positive finite number member, or dflt when absent. */
static lb_status cfg_float(const lb__json *cfg, const char *key, const char *what, double dflt, double *out)
{
    const lb__json *v = lb__json_get(cfg, key);
    *out = dflt;
    if (!v || v->type == LB_JSON_NULL) return LB_OK;
    if (v->type != LB_JSON_NUMBER) return lb__fail(LB_ERR_PARSE, "%s: \"%s\" is not a number", what, key);
    *out = v->number;
    return check_float(v->number, what, key);
}

lb_status lb__arch_from_config(const lb__json *cfg, const char *what, lb_arch *a)
{
    memset(a, 0, sizeof *a);
    if (!cfg || cfg->type != LB_JSON_OBJECT) return lb__fail(LB_ERR_PARSE, "%s: not a JSON object", what);
    const char *type = lb__json_str(cfg, "model_type");
    if (type) snprintf(a->name, sizeof a->name, "%s", type);
    struct { const char *key; uint32_t *field; } u32s[] = {
        {"num_hidden_layers", &a->n_layers},    {"hidden_size", &a->dim},
        {"intermediate_size", &a->hidden_dim},  {"num_attention_heads", &a->n_heads},
        {"num_key_value_heads", &a->n_kv_heads}, {"head_dim", &a->head_dim},
        {"vocab_size", &a->vocab_size},         {"max_position_embeddings", &a->max_seq_len},
    };
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        lb_status st = cfg_u32(cfg, u32s[i].key, what, u32s[i].field);
        if (st != LB_OK) return st;
    }
    lb_status st = cfg_float(cfg, "rope_theta", what, 10000.0, &a->rope_theta);
    if (st == LB_OK) st = cfg_float(cfg, "rms_norm_eps", what, 1e-6, &a->norm_eps);
    if (st != LB_OK) return st;
    const lb__json *v;
    const lb__json *rs = lb__json_get(cfg, "rope_scaling");
    const char *rt = rs ? lb__json_str(rs, "rope_type") : NULL;
    if (!rt && rs) rt = lb__json_str(rs, "type");
    if (rt && strcmp(rt, "llama3") == 0) { /* Llama 3.1's frequency-dependent scaling */
        uint32_t orig = 0;
        st = cfg_float(rs, "factor", what, 0, &a->rope_scale_factor);
        if (st == LB_OK) st = cfg_float(rs, "low_freq_factor", what, 1, &a->rope_low_freq_factor);
        if (st == LB_OK) st = cfg_float(rs, "high_freq_factor", what, 4, &a->rope_high_freq_factor);
        if (st == LB_OK) st = cfg_u32(rs, "original_max_position_embeddings", what, &orig);
        if (st != LB_OK) return st;
        a->rope_original_ctx = orig ? orig : 8192;
    }
    v = lb__json_get(cfg, "tie_word_embeddings");
    a->tied_embeddings = v && v->type == LB_JSON_TRUE;
    a->rope_layout = LB_ROPE_HALF;
    return check_heads(a, what);
}

static const lb_tensor *find(const lb_model *m, const char *name) { return lb_model_find(m, name); }

void lb__arch_from_tensors(const lb_model *m, lb_arch *a)
{
    const lb_tensor *emb = find(m, "model.embed_tokens.weight");
    if (emb && emb->n_dims == 2) {
        if (!a->vocab_size && emb->shape[0] <= UINT32_MAX) a->vocab_size = (uint32_t)emb->shape[0];
        if (!a->dim && emb->shape[1] <= UINT32_MAX) a->dim = (uint32_t)emb->shape[1];
    }
    if (!a->n_layers) {
        char name[80];
        uint32_t l = 0;
        for (; l < 100000; l++) {
            snprintf(name, sizeof name, "model.layers.%u.input_layernorm.weight", l);
            if (!find(m, name)) break;
        }
        a->n_layers = l;
    }
    const lb_tensor *gate = find(m, "model.layers.0.mlp.gate_proj.weight");
    if (!a->hidden_dim && gate && gate->n_dims == 2 && gate->shape[0] <= UINT32_MAX)
        a->hidden_dim = (uint32_t)gate->shape[0];
    a->qkv_bias = find(m, "model.layers.0.self_attn.q_proj.bias") != NULL;
    a->qk_norm = find(m, "model.layers.0.self_attn.q_norm.weight") != NULL;
    if (emb && !find(m, "lm_head.weight")) a->tied_embeddings = 1;
    /* a config without hidden_size gets it from the embedding, and then its head size */
    if (a->n_heads && !a->n_kv_heads) a->n_kv_heads = a->n_heads;
    if (a->n_heads && !a->head_dim && a->dim % a->n_heads == 0) a->head_dim = a->dim / a->n_heads;
}
