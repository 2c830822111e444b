/* A decoder's shape and its parameter count: from config.json, from an
 * open checkpoint, or from a built-in preset (a config.json of a known
 * model, read by the same code). */
#include <stdio.h>
#include <string.h>

#include "io/json.h"
#include "io/model_internal.h"
#include "plan/plan_internal.h"
#include "util/checked.h"
#include "util/error.h"

/* ----- config.json ----- */

/* Integer member: 1 if present (then *out set), 0 if absent; -1 if present
 * but not a non-negative integer (reported). */
static int get_u64(const lb__json *cfg, const char *key, const char *what, uint64_t *out, lb_status *st)
{
    const lb__json *v = lb__json_get(cfg, key);
    if (!v || v->type == LB_JSON_NULL) return 0;
    if (!lb__json_u64(v, out)) {
        *st = lb__fail(LB_ERR_PARSE, "%s: \"%s\" must be a non-negative integer", what, key);
        return -1;
    }
    return 1;
}

static int get_bool(const lb__json *cfg, const char *key, int dflt)
{
    const lb__json *v = lb__json_get(cfg, key);
    return v && (v->type == LB_JSON_TRUE || v->type == LB_JSON_FALSE) ? v->type == LB_JSON_TRUE : dflt;
}

/* The first of several spellings of one field (num_experts, num_local_experts, ...). */
static int get_any(const lb__json *cfg, const char *const *keys, const char *what, uint64_t *out, lb_status *st)
{
    for (; *keys; keys++) {
        int r = get_u64(cfg, *keys, what, out, st);
        if (r) return r;
    }
    return 0;
}

static lb_status require(const lb__json *cfg, const char *key, const char *what, uint64_t *out)
{
    lb_status st = LB_OK;
    int r = get_u64(cfg, key, what, out, &st);
    if (r == 0) return lb__fail(LB_ERR_PARSE, "%s: the required field \"%s\" is missing", what, key);
    return st;
}

/* layer_types (["full_attention", "sliding_attention", "linear_attention", ...])
 * or full_attention_interval say which layers keep a KV cache. */
static lb_status kv_layers(const lb__json *cfg, const char *what, lb_shape *s)
{
    lb_status st = LB_OK;
    const lb__json *types = lb__json_get(cfg, "layer_types");
    uint64_t interval = 0;
    s->n_full_layers = s->n_layers, s->n_sliding_layers = 0;
    if (types && types->type == LB_JSON_ARRAY) {
        if (types->len != s->n_layers)
            return lb__fail(LB_ERR_PARSE, "%s: \"layer_types\" lists %zu layers but num_hidden_layers is %llu", what,
                            types->len, (unsigned long long)s->n_layers);
        s->n_full_layers = 0;
        for (size_t i = 0; i < types->len; i++) {
            const lb__json *t = &types->items[i];
            if (t->type != LB_JSON_STRING) return lb__fail(LB_ERR_PARSE, "%s: layer_types[%zu] is not a string", what, i);
            if (strcmp(t->str, "full_attention") == 0 || strcmp(t->str, "attention") == 0) s->n_full_layers++;
            else if (strcmp(t->str, "sliding_attention") == 0) s->n_sliding_layers++;
        }
    } else if (get_u64(cfg, "full_attention_interval", what, &interval, &st) == 1 && interval > 0) {
        s->n_full_layers = s->n_layers / interval;
    }
    if (st != LB_OK) return st;
    if (s->n_sliding_layers && get_u64(cfg, "sliding_window", what, &s->sliding_window, &st) != 1)
        return st != LB_OK ? st : lb__fail(LB_ERR_PARSE, "%s: sliding layers need \"sliding_window\"", what);
    return LB_OK;
}

static lb_status shape_from_json(const lb__json *root, const char *what, lb_shape *s)
{
    memset(s, 0, sizeof *s);
    if (!root || root->type != LB_JSON_OBJECT) return lb__fail(LB_ERR_PARSE, "%s: not a JSON object", what);
    const lb__json *text = lb__json_get(root, "text_config"); /* multimodal configs nest the decoder */
    const lb__json *cfg = text && text->type == LB_JSON_OBJECT ? text : root;
    const char *type = lb__json_str(cfg, "model_type");
    if (!type) type = lb__json_str(root, "model_type");
    snprintf(s->name, sizeof s->name, "%s", type ? type : "");
    lb_status st;
    if ((st = require(cfg, "hidden_size", what, &s->dim)) != LB_OK) return st;
    if ((st = require(cfg, "num_hidden_layers", what, &s->n_layers)) != LB_OK) return st;
    if ((st = require(cfg, "num_attention_heads", what, &s->n_heads)) != LB_OK) return st;
    if ((st = require(cfg, "vocab_size", what, &s->vocab_size)) != LB_OK) return st;
    if (s->n_heads == 0 || s->n_layers == 0 || s->dim == 0)
        return lb__fail(LB_ERR_PARSE, "%s: hidden_size, num_hidden_layers and num_attention_heads must be positive",
                        what);
    st = LB_OK;
    if (get_u64(cfg, "num_key_value_heads", what, &s->n_kv_heads, &st) == 0) s->n_kv_heads = s->n_heads;
    if (get_u64(cfg, "head_dim", what, &s->head_dim, &st) == 0) s->head_dim = s->dim / s->n_heads;
    get_u64(cfg, "intermediate_size", what, &s->hidden_dim, &st);
    get_u64(cfg, "max_position_embeddings", what, &s->max_ctx, &st);
    if (st != LB_OK) return st;
    s->tied_embeddings = get_bool(cfg, "tie_word_embeddings", get_bool(root, "tie_word_embeddings", 0));
    int qwen2 = type && strncmp(type, "qwen2", 5) == 0;
    s->qkv_bias = get_bool(cfg, "attention_bias", qwen2);
    s->o_bias = get_bool(cfg, "attention_bias", 0);
    s->qk_norm = type && strncmp(type, "qwen3", 5) == 0;
    static const char *const experts[] = {"num_experts", "num_local_experts", "n_routed_experts", NULL};
    static const char *const per_tok[] = {"num_experts_per_tok", "moe_topk", NULL};
    if (get_any(cfg, experts, what, &s->n_experts, &st) == 1 && s->n_experts > 0) {
        if (get_any(cfg, per_tok, what, &s->experts_per_token, &st) != 1)
            return st != LB_OK ? st : lb__fail(LB_ERR_PARSE, "%s: a mixture of experts needs \"num_experts_per_tok\"", what);
        if (get_u64(cfg, "moe_intermediate_size", what, &s->moe_hidden_dim, &st) == 0) s->moe_hidden_dim = s->hidden_dim;
        uint64_t shared_width = 0;
        if (get_u64(cfg, "n_shared_experts", what, &s->n_shared_experts, &st) == 1) {
            s->shared_hidden_dim = s->moe_hidden_dim; /* DeepSeek: shared experts as wide as routed ones */
        } else if (get_u64(cfg, "shared_expert_intermediate_size", what, &shared_width, &st) == 1 && shared_width) {
            s->n_shared_experts = 1, s->shared_hidden_dim = shared_width, s->shared_expert_gate = 1; /* Qwen-MoE */
        }
        get_u64(cfg, "first_k_dense_replace", what, &s->n_dense_layers, &st);
        if (s->experts_per_token > s->n_experts)
            return lb__fail(LB_ERR_PARSE, "%s: %llu experts per token but only %llu experts", what,
                            (unsigned long long)s->experts_per_token, (unsigned long long)s->n_experts);
    }
    if (st != LB_OK) return st;
    if (!s->n_experts && !s->hidden_dim)
        return lb__fail(LB_ERR_PARSE, "%s: the required field \"intermediate_size\" is missing", what);
    get_u64(cfg, "q_lora_rank", what, &s->q_lora_rank, &st);
    if (get_u64(cfg, "kv_lora_rank", what, &s->kv_lora_rank, &st) == 1) {
        get_u64(cfg, "qk_nope_head_dim", what, &s->qk_nope_head_dim, &st);
        get_u64(cfg, "qk_rope_head_dim", what, &s->qk_rope_head_dim, &st);
        get_u64(cfg, "v_head_dim", what, &s->v_head_dim, &st);
    }
    if (st != LB_OK) return st;
    if (s->n_kv_heads == 0 || s->n_heads % s->n_kv_heads)
        return lb__fail(LB_ERR_PARSE, "%s: %llu attention heads are not a multiple of %llu key/value heads", what,
                        (unsigned long long)s->n_heads, (unsigned long long)s->n_kv_heads);
    if (s->n_dense_layers > s->n_layers) s->n_dense_layers = s->n_layers;
    return kv_layers(cfg, what, s);
}

lb_status lb_shape_from_config(const char *json, size_t len, const char *what, lb_shape *out)
{
    if (!json || !out) return lb__fail(LB_ERR_ARG, "lb_shape_from_config: NULL argument");
    if (!what) what = "config.json";
    lb__json *root;
    lb_status st = lb__json_parse(json, len, what, &root);
    if (st != LB_OK) return st;
    st = shape_from_json(root, what, out);
    lb__json_free(root);
    return st == LB_OK ? lb__shape_check(out, what) : st;
}

/* ----- checkpoints ----- */

lb_status lb_shape_from_model(const lb_model *m, lb_shape *out)
{
    if (!m || !out) return lb__fail(LB_ERR_ARG, "lb_shape_from_model: NULL argument");
    const lb_arch *a = lb_model_arch(m);
    memset(out, 0, sizeof *out);
    if (!a->n_layers || !a->dim || !a->n_heads || !a->vocab_size)
        return lb__fail(LB_ERR_PARSE, "the model does not say its shape (layers %u, dim %u, heads %u, vocab %u); "
                                      "give its config.json", a->n_layers, a->dim, a->n_heads, a->vocab_size);
    snprintf(out->name, sizeof out->name, "%s", a->name);
    out->n_layers = a->n_layers, out->dim = a->dim, out->n_heads = a->n_heads;
    out->n_kv_heads = a->n_kv_heads ? a->n_kv_heads : a->n_heads;
    out->head_dim = a->head_dim ? a->head_dim : a->dim / a->n_heads;
    out->hidden_dim = a->hidden_dim, out->vocab_size = a->vocab_size, out->max_ctx = a->max_seq_len;
    out->tied_embeddings = a->tied_embeddings, out->qkv_bias = a->qkv_bias, out->qk_norm = a->qk_norm;
    out->n_full_layers = a->n_layers;
    if (lb_model_get_kind(m) == LB_MODEL_GGUF) { /* llama.cpp's MoE keys */
        struct { const char *suffix; uint64_t *field; } keys[] = {
            {"expert_count", &out->n_experts}, {"expert_used_count", &out->experts_per_token},
            {"expert_feed_forward_length", &out->moe_hidden_dim}, {"expert_shared_count", &out->n_shared_experts},
            {"leading_dense_block_count", &out->n_dense_layers},
        };
        char key[96];
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            snprintf(key, sizeof key, "%s.%s", a->name, keys[i].suffix);
            lb__gguf_get_u64(&m->gguf, key, keys[i].field);
        }
        if (out->n_experts && !out->moe_hidden_dim) out->moe_hidden_dim = out->hidden_dim;
        out->shared_hidden_dim = out->n_shared_experts ? out->moe_hidden_dim : 0;
    }
    return lb__shape_check(out, a->name);
}

/* ----- presets: the config.json fields of known models ----- */

typedef struct preset {
    const char *name, *config;
} preset;

static const preset presets[] = {
    {"llama-3-8b", "{\"model_type\":\"llama\",\"hidden_size\":4096,\"num_hidden_layers\":32,\"num_attention_heads\":32,"
                   "\"num_key_value_heads\":8,\"intermediate_size\":14336,\"vocab_size\":128256,"
                   "\"max_position_embeddings\":8192,\"tie_word_embeddings\":false}"},
    {"llama-3-70b", "{\"model_type\":\"llama\",\"hidden_size\":8192,\"num_hidden_layers\":80,\"num_attention_heads\":64,"
                    "\"num_key_value_heads\":8,\"intermediate_size\":28672,\"vocab_size\":128256,"
                    "\"max_position_embeddings\":8192,\"tie_word_embeddings\":false}"},
    {"llama-3.1-405b", "{\"model_type\":\"llama\",\"hidden_size\":16384,\"num_hidden_layers\":126,"
                       "\"num_attention_heads\":128,\"num_key_value_heads\":8,\"intermediate_size\":53248,"
                       "\"vocab_size\":128256,\"max_position_embeddings\":131072,\"tie_word_embeddings\":false}"},
    {"qwen3-8b", "{\"model_type\":\"qwen3\",\"hidden_size\":4096,\"num_hidden_layers\":36,\"num_attention_heads\":32,"
                 "\"num_key_value_heads\":8,\"head_dim\":128,\"intermediate_size\":12288,\"vocab_size\":151936,"
                 "\"max_position_embeddings\":40960,\"tie_word_embeddings\":false}"},
    {"qwen3-30b-a3b", "{\"model_type\":\"qwen3_moe\",\"hidden_size\":2048,\"num_hidden_layers\":48,"
                      "\"num_attention_heads\":32,\"num_key_value_heads\":4,\"head_dim\":128,\"intermediate_size\":6144,"
                      "\"moe_intermediate_size\":768,\"num_experts\":128,\"num_experts_per_tok\":8,"
                      "\"vocab_size\":151936,\"max_position_embeddings\":40960,\"tie_word_embeddings\":false}"},
    {"mixtral-8x7b", "{\"model_type\":\"mixtral\",\"hidden_size\":4096,\"num_hidden_layers\":32,"
                     "\"num_attention_heads\":32,\"num_key_value_heads\":8,\"intermediate_size\":14336,"
                     "\"num_local_experts\":8,\"num_experts_per_tok\":2,\"vocab_size\":32000,"
                     "\"max_position_embeddings\":32768,\"tie_word_embeddings\":false}"},
    {"deepseek-v3", "{\"model_type\":\"deepseek_v3\",\"hidden_size\":7168,\"num_hidden_layers\":61,"
                    "\"num_attention_heads\":128,\"num_key_value_heads\":128,\"intermediate_size\":18432,"
                    "\"moe_intermediate_size\":2048,\"n_routed_experts\":256,\"num_experts_per_tok\":8,"
                    "\"n_shared_experts\":1,\"first_k_dense_replace\":3,\"q_lora_rank\":1536,\"kv_lora_rank\":512,"
                    "\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"v_head_dim\":128,\"vocab_size\":129280,"
                    "\"max_position_embeddings\":163840,\"tie_word_embeddings\":false}"},
    {"smollm2-135m", "{\"model_type\":\"llama\",\"hidden_size\":576,\"num_hidden_layers\":30,\"num_attention_heads\":9,"
                     "\"num_key_value_heads\":3,\"intermediate_size\":1536,\"vocab_size\":49152,"
                     "\"max_position_embeddings\":8192,\"tie_word_embeddings\":true}"},
};

#define N_PRESETS (sizeof presets / sizeof presets[0])

const char *const *lb_shape_preset_names(void)
{
    static const char *names[N_PRESETS + 1];
    for (size_t i = 0; i < N_PRESETS; i++) names[i] = presets[i].name;
    names[N_PRESETS] = NULL;
    return names;
}

lb_status lb_shape_preset(const char *name, lb_shape *out)
{
    if (!name || !out) return lb__fail(LB_ERR_ARG, "lb_shape_preset: NULL argument");
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(name, presets[i].name) == 0) {
            lb_status st = lb_shape_from_config(presets[i].config, strlen(presets[i].config), name, out);
            return st;
        }
    char list[512] = "";
    for (size_t i = 0; i < N_PRESETS; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, presets[i].name, sizeof list - strlen(list) - 1);
    }
    return lb__fail(LB_ERR_ARG, "unknown model preset '%s' (presets: %s)", name, list);
}

/* ----- parameters ----- */

/* Checked arithmetic that remembers the first term that overflowed: the
 * counts are written as plainly as before, and a shape whose numbers wrap
 * is reported instead of counted. */
typedef struct ck {
    const char *bad; /* the first term that overflowed, or NULL */
} ck;

static uint64_t mul(ck *c, const char *term, uint64_t a, uint64_t b)
{
    uint64_t r;
    if (lb__mul_u64_checked(a, b, &r)) return r;
    if (!c->bad) c->bad = term;
    return UINT64_MAX;
}

static uint64_t add(ck *c, const char *term, uint64_t a, uint64_t b)
{
    uint64_t r;
    if (lb__add_u64_checked(a, b, &r)) return r;
    if (!c->bad) c->bad = term;
    return UINT64_MAX;
}

static uint64_t sub(ck *c, const char *term, uint64_t a, uint64_t b)
{
    uint64_t r;
    if (lb__sub_u64_checked(a, b, &r)) return r;
    if (!c->bad) c->bad = term;
    return 0;
}

static uint64_t mul3(ck *c, const char *term, uint64_t a, uint64_t b, uint64_t d) { return mul(c, term, mul(c, term, a, b), d); }

static uint64_t attention_params(ck *c, const lb_shape *s)
{
    uint64_t d = s->dim, h = s->n_heads;
    if (s->kv_lora_rank) { /* MLA: low-rank q and compressed kv */
        const char *t = "the latent attention (hidden_size, num_attention_heads, q_lora_rank, kv_lora_rank, "
                        "qk_nope_head_dim, qk_rope_head_dim, v_head_dim)";
        uint64_t qk = add(c, t, s->qk_nope_head_dim, s->qk_rope_head_dim);
        uint64_t q = s->q_lora_rank ? add(c, t, add(c, t, mul(c, t, d, s->q_lora_rank), s->q_lora_rank),
                                          mul3(c, t, s->q_lora_rank, h, qk))
                                    : mul3(c, t, d, h, qk);
        uint64_t kv = add(c, t, add(c, t, mul(c, t, d, add(c, t, s->kv_lora_rank, s->qk_rope_head_dim)), s->kv_lora_rank),
                          mul3(c, t, s->kv_lora_rank, h, add(c, t, s->qk_nope_head_dim, s->v_head_dim)));
        return add(c, t, add(c, t, q, kv), mul3(c, t, h, s->v_head_dim, d));
    }
    const char *t = "the attention (hidden_size x num_attention_heads x head_dim, num_key_value_heads)";
    uint64_t q = mul(c, t, h, s->head_dim), kv = mul(c, t, s->n_kv_heads, s->head_dim);
    uint64_t p = add(c, t, add(c, t, mul(c, t, d, q), mul3(c, t, 2, d, kv)), mul(c, t, q, d));
    if (s->qkv_bias) p = add(c, t, p, add(c, t, q, mul(c, t, 2, kv)));
    if (s->o_bias) p = add(c, t, p, d);
    if (s->qk_norm) p = add(c, t, p, mul(c, t, 2, s->head_dim));
    return p;
}

/* The counts, or the name of the first term that overflows 64 bits. */
static const char *count_params(const lb_shape *s, lb_param_count *out)
{
    ck c = {NULL};
    memset(out, 0, sizeof *out);
    uint64_t d = s->dim;
    const char *t_emb = "the embedding (vocab_size x hidden_size)", *t_layers = "num_hidden_layers x a layer's parameters";
    const char *t_mlp = "the MLP (num_hidden_layers x 3 x hidden_size x intermediate_size)";
    const char *t_moe = "the experts (num_hidden_layers x num_experts x 3 x hidden_size x moe_intermediate_size)";
    out->embedding = mul(&c, t_emb, s->vocab_size, d);
    out->lm_head = s->tied_embeddings ? 0 : out->embedding;
    out->attention = mul(&c, t_layers, s->n_layers, attention_params(&c, s));
    out->norms = add(&c, t_layers, mul3(&c, t_layers, s->n_layers, 2, d), d);
    uint64_t moe_layers = s->n_experts ? sub(&c, "first_k_dense_replace beyond num_hidden_layers", s->n_layers, s->n_dense_layers) : 0;
    uint64_t dense_layers = s->n_layers - moe_layers;
    uint64_t expert = mul3(&c, t_moe, 3, d, s->moe_hidden_dim);
    uint64_t shared = mul(&c, t_moe, s->n_shared_experts, mul3(&c, t_moe, 3, d, s->shared_hidden_dim));
    uint64_t dense_mlp = mul(&c, t_mlp, dense_layers, mul3(&c, t_mlp, 3, d, s->hidden_dim));
    uint64_t moe_mlp = mul(&c, t_moe, moe_layers,
                           add(&c, t_moe, add(&c, t_moe, mul(&c, t_moe, s->n_experts, expert), shared), s->shared_expert_gate ? d : 0));
    out->router = mul3(&c, t_moe, moe_layers, d, s->n_experts);
    out->mlp = add(&c, t_mlp, dense_mlp, moe_mlp);
    const char *t_total = "the total parameter count";
    out->total = add(&c, t_total, add(&c, t_total, add(&c, t_total, out->embedding, out->lm_head), add(&c, t_total, out->attention, out->norms)),
                     add(&c, t_total, out->mlp, out->router));
    uint64_t idle = mul3(&c, t_moe, moe_layers, sub(&c, "num_experts_per_tok beyond num_experts", s->n_experts, s->experts_per_token), expert);
    out->active = sub(&c, t_total, out->total, idle);
    return c.bad;
}

void lb_shape_params(const lb_shape *s, lb_param_count *out)
{
    if (count_params(s, out)) { /* no count to give: every figure saturated (lb__shape_check says why) */
        memset(out, 0xff, sizeof *out);
    }
}

lb_status lb__shape_check(const lb_shape *s, const char *what)
{
    if (!s->dim || !s->n_layers || !s->n_heads)
        return lb__fail(LB_ERR_ARG, "%s: hidden_size, num_hidden_layers and num_attention_heads must be positive",
                        what && what[0] ? what : "the model");
    if (!s->head_dim && !s->kv_lora_rank)
        return lb__fail(LB_ERR_ARG, "%s: head_dim is 0 (hidden_size %llu / num_attention_heads %llu, or as given)",
                        what && what[0] ? what : "the model", (unsigned long long)s->dim, (unsigned long long)s->n_heads);
    lb_param_count p;
    const char *bad = count_params(s, &p);
    if (!bad) return LB_OK;
    char moe[256] = "";
    if (s->n_experts)
        snprintf(moe, sizeof moe, ", num_experts %llu, num_experts_per_tok %llu, moe_intermediate_size %llu",
                 (unsigned long long)s->n_experts, (unsigned long long)s->experts_per_token,
                 (unsigned long long)s->moe_hidden_dim);
    return lb__fail(LB_ERR_ARG, "%s: %s overflows 64-bit arithmetic: not a model lowbit can plan (hidden_size %llu, "
                    "num_hidden_layers %llu, num_attention_heads %llu, num_key_value_heads %llu, head_dim %llu, "
                    "intermediate_size %llu, vocab_size %llu%s)", what && what[0] ? what : "the model", bad,
                    (unsigned long long)s->dim, (unsigned long long)s->n_layers, (unsigned long long)s->n_heads,
                    (unsigned long long)s->n_kv_heads, (unsigned long long)s->head_dim,
                    (unsigned long long)s->hidden_dim, (unsigned long long)s->vocab_size, moe);
}
