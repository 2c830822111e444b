/* llama-quantize's per-tensor type choice (gguf_mix.h). The rules follow
 * the pinned llama.cpp's src/llama-quant.cpp in their order of precedence:
 * whether a tensor is quantized at all, the explicit overrides, the mix's
 * rules per tensor category, then the fallback for rows the block does not
 * divide. The per-layer rules count tensors of a category in the order
 * llama-quantize visits them (lb__gguf_order), as it does, so the order is
 * part of the answer. */
#include "export/gguf_mix.h"

#include <ctype.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/error.h"

/* ----- names: file types and ggml types ----- */

static const lb__ftype_info ftypes[] = {
    {"F32", LB_FTYPE_ALL_F32, LB_GGML_F32},       {"F16", LB_FTYPE_F16, LB_GGML_F16},
    {"BF16", LB_FTYPE_BF16, LB_GGML_BF16},        {"Q8_0", LB_FTYPE_Q8_0, LB_GGML_Q8_0},
    {"Q5_0", LB_FTYPE_Q5_0, LB_GGML_Q5_0},        {"Q5_1", LB_FTYPE_Q5_1, LB_GGML_Q5_1},
    {"Q4_0", LB_FTYPE_Q4_0, LB_GGML_Q4_0},        {"Q4_1", LB_FTYPE_Q4_1, LB_GGML_Q4_1},
    {"Q2_K", LB_FTYPE_Q2_K, LB_GGML_Q2_K},        {"Q3_K_S", LB_FTYPE_Q3_K_S, LB_GGML_Q3_K},
    {"Q3_K_M", LB_FTYPE_Q3_K_M, LB_GGML_Q3_K},    {"Q3_K_L", LB_FTYPE_Q3_K_L, LB_GGML_Q3_K},
    {"Q4_K_S", LB_FTYPE_Q4_K_S, LB_GGML_Q4_K},    {"Q4_K_M", LB_FTYPE_Q4_K_M, LB_GGML_Q4_K},
    {"Q5_K_S", LB_FTYPE_Q5_K_S, LB_GGML_Q5_K},    {"Q5_K_M", LB_FTYPE_Q5_K_M, LB_GGML_Q5_K},
    {"Q6_K", LB_FTYPE_Q6_K, LB_GGML_Q6_K},        {"IQ4_NL", LB_FTYPE_IQ4_NL, LB_GGML_IQ4_NL},
    {"IQ4_XS", LB_FTYPE_IQ4_XS, LB_GGML_IQ4_XS},  {"MXFP4_MOE", LB_FTYPE_MXFP4_MOE, LB_GGML_MXFP4},
    {"NVFP4", LB_FTYPE_NVFP4, LB_GGML_NVFP4},
};
/* llama-quantize's short names for the medium K mixes */
static const struct { const char *alias, *name; } aliases[] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};

const lb__ftype_info *lb__ftype_at(size_t k) { return k < sizeof ftypes / sizeof *ftypes ? &ftypes[k] : NULL; }

const lb__ftype_info *lb__ftype_by_name(const char *name)
{
    if (!name) return NULL;
    for (size_t k = 0; k < sizeof aliases / sizeof *aliases; k++)
        if (strcasecmp(name, aliases[k].alias) == 0) name = aliases[k].name;
    for (size_t k = 0; k < sizeof ftypes / sizeof *ftypes; k++)
        if (strcasecmp(name, ftypes[k].name) == 0) return &ftypes[k];
    return NULL;
}

/* ggml's spelling (ggml_type_name) and block sizes */
static const struct { int type; const char *name; unsigned block; } ggml_types[] = {
    {LB_GGML_F32, "f32", 1},       {LB_GGML_F16, "f16", 1},     {LB_GGML_Q4_0, "q4_0", 32},
    {LB_GGML_Q4_1, "q4_1", 32},    {LB_GGML_Q5_0, "q5_0", 32},  {LB_GGML_Q5_1, "q5_1", 32},
    {LB_GGML_Q8_0, "q8_0", 32},    {LB_GGML_Q2_K, "q2_K", 256}, {LB_GGML_Q3_K, "q3_K", 256},
    {LB_GGML_Q4_K, "q4_K", 256},   {LB_GGML_Q5_K, "q5_K", 256}, {LB_GGML_Q6_K, "q6_K", 256},
    {LB_GGML_IQ4_NL, "iq4_nl", 32}, {LB_GGML_IQ4_XS, "iq4_xs", 256}, {LB_GGML_BF16, "bf16", 1},
    {LB_GGML_MXFP4, "mxfp4", 32},  {LB_GGML_NVFP4, "nvfp4", 64},
};
#define N_GGML_TYPES (sizeof ggml_types / sizeof *ggml_types)

int lb__ggml_type_by_name(const char *name)
{
    for (size_t k = 0; name && k < N_GGML_TYPES; k++)
        if (strcasecmp(name, ggml_types[k].name) == 0) return ggml_types[k].type;
    return -1;
}

const char *lb__ggml_type_name(int type)
{
    for (size_t k = 0; k < N_GGML_TYPES; k++)
        if (ggml_types[k].type == type) return ggml_types[k].name;
    return "?";
}

unsigned lb__ggml_type_block(int type)
{
    for (size_t k = 0; k < N_GGML_TYPES; k++)
        if (ggml_types[k].type == type) return ggml_types[k].block;
    return 1; /* a source type the mixes do not name: never a quantization target */
}

static int is_quantized(int type) { return lb__ggml_type_block(type) > 1; }

/* ----- which tensors are quantized at all ----- */

/* Substrings that keep a tensor as it is: small or special tensors of
 * various architectures (routers, convolutions, RWKV's mixers, vision
 * towers' embeddings, ...), as llama.cpp lists them. */
static const char *const never_quantized[] = {
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
    "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
    "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
    "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
    "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd",
    "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
};
/* GLM-5-next keeps more of its tensors (its arch name in GGUF) */
static const char *const never_quantized_glm5[] = {
    "hc_", "indexer.attn_q_b", "indexer.attn_k", "indexer.proj", "indexer_compressor_gate", "indexer_compressor_ape",
    "ssm_f_a.weight", "ssm_f_b.weight", "ssm_g_a.weight", "ssm_g_b.weight", "ssm_beta.weight",
    "attn_kv_a_mqa.weight", "attn_k_b.weight", "attn_v_b.weight",
};

/* ggml_n_dims: trailing dimensions of 1 do not count */
static int real_dims(const lb__mix_tensor *t)
{
    int n = 1;
    for (int d = 1; d < 4 && d < t->n_dims; d++)
        if (t->ne[d] > 1) n = d + 1;
    return n;
}

static int is_glm5_next(const lb__mix_model *m) { return m->arch && strcmp(m->arch, "glm5-next") == 0; }

static int allows_quantization(const lb__mix_model *m, const lb__mix_options *o, const lb__mix_tensor *t)
{
    if (real_dims(t) < 2) return 0;
    size_t n = strlen(t->name);
    if (n < 6 || strcmp(t->name + n - 6, "weight") != 0) return 0;
    if (o->leave_output && strcmp(t->name, "output.weight") == 0) return 0;
    if (strcmp(t->name, "position_embd.weight") == 0 || strcmp(t->name, "token_types.weight") == 0) return 0;
    for (size_t k = 0; k < sizeof never_quantized / sizeof *never_quantized; k++)
        if (strstr(t->name, never_quantized[k])) return 0;
    for (size_t k = 0; is_glm5_next(m) && k < sizeof never_quantized_glm5 / sizeof *never_quantized_glm5; k++)
        if (strstr(t->name, never_quantized_glm5[k])) return 0;
    return 1;
}

/* ----- categories ----- */

typedef enum category {
    CAT_OTHER, CAT_OUTPUT, CAT_TOKEN_EMBD, CAT_ATTN_QKV, CAT_ATTN_KV_B, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_Q,
    CAT_ATTN_OUTPUT, CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN
} category;

/* first match wins, in llama.cpp's order */
static const struct { const char *part; category cat; } category_parts[] = {
    {"attn_qkv.weight", CAT_ATTN_QKV}, {"attn_kv_b.weight", CAT_ATTN_KV_B}, {"attn_v.weight", CAT_ATTN_V},
    {"attn_k.weight", CAT_ATTN_K},     {"attn_q.weight", CAT_ATTN_Q},       {"attn_output.weight", CAT_ATTN_OUTPUT},
    {"ffn_up", CAT_FFN_UP},            {"ffn_gate", CAT_FFN_GATE},          {"ffn_down", CAT_FFN_DOWN},
};

static category category_of(const char *name)
{
    if (strcmp(name, "output.weight") == 0) return CAT_OUTPUT;
    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0)
        return CAT_TOKEN_EMBD;
    for (size_t k = 0; k < sizeof category_parts / sizeof *category_parts; k++)
        if (strstr(name, category_parts[k].part)) return category_parts[k].cat;
    return CAT_OTHER;
}

/* tensors that carry attn_v's sensitivity (v, fused qkv, MLA's kv_b) */
static int is_attn_v(category c) { return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B; }

/* ----- order ----- */

static int layer_of(const char *name)
{
    int layer = -1;
    if (sscanf(name, "blk.%d.", &layer) != 1) layer = -1;
    return layer;
}

typedef struct order_key {
    const char *name;
    int layer;
    size_t index;
} order_key;

static int cmp_order(const void *a, const void *b)
{
    const order_key *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

lb_status lb__gguf_order(const lb__mix_tensor *t, size_t n, size_t *order)
{
    order_key *k = malloc((n ? n : 1) * sizeof *k);
    if (!k) return lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) k[i] = (order_key){t[i].name, layer_of(t[i].name), i};
    qsort(k, n, sizeof *k, cmp_order);
    for (size_t i = 0; i < n; i++) order[i] = k[i].index;
    free(k);
    return LB_OK;
}

/* ----- the mix ----- */

typedef struct state {
    const lb__mix_model *m;
    const lb__mix_options *o;
    int n_attn_v, i_attn_v, n_ffn, i_ffn_down, i_ffn_gate, i_ffn_up;
    int tied;      /* no output.weight: token_embd is the output too */
    int falcon;
    int is_70b;
    uint32_t gqa;
} state;

/* The architectures whose 80-layer (Jais-2: 68) model llama.cpp calls a
 * 70B, where attn_v gets more bits (gqa: only when heads are shared). */
static const struct { const char *arch; uint32_t layers; int gqa; } big_models[] = {
    {"llama", 80, 1}, {"deci", 80, 0}, {"olmo", 80, 0}, {"qwen2", 80, 0}, {"jais2", 68, 0},
};

static int is_70b(const lb__mix_model *m)
{
    for (size_t k = 0; m->arch && k < sizeof big_models / sizeof *big_models; k++)
        if (strcmp(m->arch, big_models[k].arch) == 0 && m->n_layer == big_models[k].layers)
            return !big_models[k].gqa || m->n_head != m->n_head_kv;
    return 0;
}

/* The layers that get more bits: the first and last eighth and every
 * third between. */
static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* The layer of an ffn tensor: its position among its kind, or in a
 * mixture of experts (whose expert tensors are not one per layer) the N
 * of its name. */
static lb_status layer_info(const state *s, int counter, const char *name, int *layer)
{
    *layer = counter;
    if (s->m->n_expert <= 1) return LB_OK;
    int l = layer_of(name);
    if (l < 0 || l >= s->n_ffn)
        return lb__fail(LB_ERR_PARSE, "tensor '%s': no layer below %d in its name (a mixture of experts needs it)",
                        name, s->n_ffn);
    *layer = l;
    return LB_OK;
}

static int has(lb__ftype f, const lb__ftype *list, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (list[k] == f) return 1;
    return 0;
}
#define IN(f, ...) has((f), (const lb__ftype[]){__VA_ARGS__}, sizeof((const lb__ftype[]){__VA_ARGS__}) / sizeof(lb__ftype))

static int output_rule(const state *s, const lb__mix_tensor *t, int type)
{
    if (s->o->output_type >= 0) return s->o->output_type;
    if (s->o->ftype == LB_FTYPE_MXFP4_MOE) return LB_GGML_Q8_0;
    if (s->falcon || t->ne[0] % lb__ggml_type_block(type) != 0) return LB_GGML_Q8_0;
    return type != LB_GGML_Q8_0 ? LB_GGML_Q6_K : type;
}

static int attn_v_rule(state *s, int type)
{
    lb__ftype f = s->o->ftype;
    if (f == LB_FTYPE_Q2_K) type = s->gqa >= 4 ? LB_GGML_Q4_K : LB_GGML_Q3_K;
    else if (f == LB_FTYPE_Q3_K_M) type = s->i_attn_v < 2 ? LB_GGML_Q5_K : LB_GGML_Q4_K;
    else if (f == LB_FTYPE_Q3_K_L) type = LB_GGML_Q5_K;
    else if (IN(f, LB_FTYPE_IQ4_NL, LB_FTYPE_IQ4_XS) && s->gqa >= 4) type = LB_GGML_Q5_K;
    else if (IN(f, LB_FTYPE_Q4_K_M, LB_FTYPE_Q5_K_M) && more_bits(s->i_attn_v, s->n_attn_v)) type = LB_GGML_Q6_K;
    else if (f == LB_FTYPE_Q4_K_S && s->i_attn_v < 4) type = LB_GGML_Q5_K;
    if (s->is_70b && (type == LB_GGML_Q3_K || type == LB_GGML_Q4_K)) type = LB_GGML_Q5_K;
    if (s->m->n_expert == 8) type = LB_GGML_Q8_0;
    s->i_attn_v++;
    return type;
}

static lb_status ffn_down_rule(state *s, const char *name, int *type)
{
    int i, n = s->n_ffn;
    lb_status st = layer_info(s, s->i_ffn_down, name, &i);
    if (st != LB_OK) return st;
    lb__ftype f = s->o->ftype;
    int has_imatrix = s->o->has_imatrix;
    if (f == LB_FTYPE_Q2_K) *type = LB_GGML_Q3_K;
    else if (f == LB_FTYPE_Q3_K_M)
        *type = i < n / 16 ? LB_GGML_Q5_K : !s->falcon || more_bits(i, n) ? LB_GGML_Q4_K : LB_GGML_Q3_K;
    else if (f == LB_FTYPE_Q3_K_L) *type = s->falcon ? LB_GGML_Q4_K : LB_GGML_Q5_K;
    else if (f == LB_FTYPE_Q4_K_M) {
        if (s->falcon) *type = i < n / 16 ? LB_GGML_Q6_K : more_bits(i, n) ? LB_GGML_Q5_K : LB_GGML_Q4_K;
        else if (more_bits(i, n)) *type = LB_GGML_Q6_K;
    } else if (i < n / 8 && IN(f, LB_FTYPE_IQ4_NL, LB_FTYPE_IQ4_XS) && !has_imatrix) *type = LB_GGML_Q5_K;
    else if (f == LB_FTYPE_Q5_K_M && more_bits(i, n)) *type = LB_GGML_Q6_K;
    else if (f == LB_FTYPE_Q4_K_S && !s->falcon && i < n / 8) *type = LB_GGML_Q5_K;
    else if (IN(f, LB_FTYPE_Q4_0, LB_FTYPE_Q5_0) && has_imatrix && i < n / 8)
        *type = f == LB_FTYPE_Q4_0 ? LB_GGML_Q4_1 : LB_GGML_Q5_1;
    s->i_ffn_down++;
    return LB_OK;
}

static int attn_output_rule(const state *s, int type)
{
    lb__ftype f = s->o->ftype;
    if (s->falcon) return f == LB_FTYPE_Q3_K_L ? LB_GGML_Q4_K : type;
    if (s->m->n_expert == 8)
        return IN(f, LB_FTYPE_Q2_K, LB_FTYPE_Q3_K_S, LB_FTYPE_Q3_K_M, LB_FTYPE_IQ4_NL, LB_FTYPE_Q4_K_S, LB_FTYPE_Q4_K_M,
                  LB_FTYPE_IQ4_XS) ? LB_GGML_Q5_K : type;
    if (f == LB_FTYPE_Q2_K) return LB_GGML_Q3_K;
    if (f == LB_FTYPE_Q3_K_M) return LB_GGML_Q4_K;
    if (f == LB_FTYPE_Q3_K_L) return LB_GGML_Q5_K;
    return type;
}

/* The mix's rule for one tensor (llama.cpp's llama_tensor_get_type_impl,
 * restricted to the file types lowbit offers: the IQ1/IQ2/IQ3/TQ branches
 * never apply). */
static lb_status mix_rule(state *s, const lb__mix_tensor *t, category c, int *type)
{
    const lb__mix_model *m = s->m;
    if (c == CAT_OUTPUT || (s->tied && c == CAT_TOKEN_EMBD)) {
        *type = output_rule(s, t, *type);
        return LB_OK;
    }
    if (s->o->ftype == LB_FTYPE_MXFP4_MOE) { /* experts MXFP4, the rest Q8_0 */
        int expert = t->n_dims >= 3 && t->ne[2] > 1;
        if (m->arch && strcmp(m->arch, "bailingmoe3") == 0)
            expert &= c == CAT_FFN_UP || c == CAT_FFN_GATE || c == CAT_FFN_DOWN;
        *type = expert ? LB_GGML_MXFP4 : LB_GGML_Q8_0;
        return LB_OK;
    }
    if (c == CAT_TOKEN_EMBD) {
        if (s->o->token_embd_type >= 0) *type = s->o->token_embd_type;
        return LB_OK;
    }
    if (is_attn_v(c)) {
        /* a fused qkv is attn_v-like and takes this rule: llama.cpp's own
         * qkv branch comes after this one and is never reached */
        *type = attn_v_rule(s, *type);
        return LB_OK;
    }
    switch (c) {
    case CAT_ATTN_K:
        if (m->n_expert == 8) *type = LB_GGML_Q8_0;
        return LB_OK;
    case CAT_FFN_DOWN: return ffn_down_rule(s, t->name, type);
    case CAT_ATTN_OUTPUT: *type = attn_output_rule(s, *type); return LB_OK;
    case CAT_FFN_GATE: case CAT_FFN_UP: { /* only IQ3_XS changes these; the counters (and the layer check) run */
        int layer, *counter = c == CAT_FFN_GATE ? &s->i_ffn_gate : &s->i_ffn_up;
        lb_status st = layer_info(s, *counter, t->name, &layer);
        (*counter)++;
        return st;
    }
    case CAT_ATTN_Q: case CAT_OTHER: case CAT_OUTPUT: case CAT_TOKEN_EMBD: case CAT_ATTN_QKV: case CAT_ATTN_KV_B:
    case CAT_ATTN_V:
        return LB_OK;
    }
    return LB_OK;
}

/* Rows the block does not divide: the nearest type whose block does
 * (256-blocks to a 32-block type of about the same bits), else F16. */
static int fallback(int type, uint64_t ncols)
{
    unsigned block = lb__ggml_type_block(type);
    if (ncols % block == 0) return type;
    int to;
    switch (type) {
    case LB_GGML_IQ4_XS: to = LB_GGML_IQ4_NL; break;
    case LB_GGML_Q2_K: case LB_GGML_Q3_K: to = LB_GGML_Q4_0; break;
    case LB_GGML_Q4_K: to = LB_GGML_Q5_0; break;
    case LB_GGML_Q5_K: to = LB_GGML_Q5_1; break;
    case LB_GGML_Q6_K: to = LB_GGML_Q8_0; break;
    case LB_GGML_NVFP4: to = LB_GGML_Q8_0; break; /* lowbit's: llama.cpp has no NVFP4 target */
    default: to = type; break;                    /* a 32-block type: nothing smaller; F16 below */
    }
    return ncols % lb__ggml_type_block(to) == 0 ? to : LB_GGML_F16;
}

/* ECMAScript's class escapes in POSIX extended syntax */
static char *posix_pattern(const char *p)
{
    size_t n = strlen(p);
    char *out = malloc(16 * n + 1), *w = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *rep = NULL;
        if (p[i] == '\\' && i + 1 < n) {
            switch (p[i + 1]) {
            case 'd': rep = "[0-9]"; break;
            case 'D': rep = "[^0-9]"; break;
            case 'w': rep = "[a-z0-9_]"; break; /* patterns and names are lowercase here */
            case 'W': rep = "[^a-z0-9_]"; break;
            case 's': rep = "[[:space:]]"; break;
            case 'S': rep = "[^[:space:]]"; break;
            default: break;
            }
        }
        if (rep) {
            strcpy(w, rep), w += strlen(rep), i++;
            continue;
        }
        *w++ = (char)tolower((unsigned char)p[i]);
    }
    *w = '\0';
    return out;
}

static lb_status compile_overrides(const lb__mix_options *o, regex_t *re)
{
    for (size_t k = 0; k < o->n_overrides; k++) {
        char *p = posix_pattern(o->overrides[k].pattern);
        if (!p) {
            for (size_t j = 0; j < k; j++) regfree(&re[j]);
            return lb__fail(LB_ERR_NOMEM, "out of memory");
        }
        int rc = regcomp(&re[k], p, REG_EXTENDED | REG_NOSUB);
        free(p);
        if (rc != 0) {
            char msg[128];
            regerror(rc, &re[k], msg, sizeof msg);
            for (size_t j = 0; j < k; j++) regfree(&re[j]);
            return lb__fail(LB_ERR_ARG, "--tensor-type pattern '%s': %s", o->overrides[k].pattern, msg);
        }
    }
    return LB_OK;
}

/* The first override whose pattern occurs in name, or -1. */
static int override_of(const lb__mix_options *o, const regex_t *re, const char *name)
{
    for (size_t k = 0; k < o->n_overrides; k++)
        if (regexec(&re[k], name, 0, NULL, 0) == 0) return (int)k;
    return -1;
}

/* --token-embedding-type and --output-tensor-type: llama.cpp takes them
 * as they are, and fails quantizing when the row does not fit the block;
 * lowbit falls back there as for any other type instead (the one place it
 * differs from llama-quantize, which writes no file then). */
static void explicit_type(int want, const lb__mix_tensor *t, int *type, lb__mix_reason *why)
{
    *type = fallback(want, t->ne[0]);
    *why = *type == want ? LB_MIX_OVERRIDE : LB_MIX_FALLBACK;
}

/* One tensor (llama.cpp's llama_tensor_get_type). */
static lb_status choose(state *s, const regex_t *re, const lb__mix_tensor *t, int *type, lb__mix_reason *why)
{
    const lb__mix_options *o = s->o;
    category c = category_of(t->name);
    if (!allows_quantization(s->m, o, t)) {
        *type = t->type, *why = LB_MIX_KEPT;
        return LB_OK;
    }
    if (o->token_embd_type >= 0 && c == CAT_TOKEN_EMBD &&
        !(strcmp(t->name, "per_layer_token_embd.weight") == 0 && override_of(o, re, t->name) >= 0)) {
        explicit_type(o->token_embd_type, t, type, why);
        return LB_OK;
    }
    if (o->output_type >= 0 && c == CAT_OUTPUT) {
        explicit_type(o->output_type, t, type, why);
        return LB_OK;
    }
    int chosen;
    const lb__ftype_info *fi = NULL;
    for (size_t k = 0; (fi = lb__ftype_at(k)) != NULL && fi->ftype != o->ftype; k++) {}
    if (!fi) return lb__fail(LB_ERR_ARG, "unknown file type %d", (int)o->ftype);
    chosen = fi->default_type;
    *why = LB_MIX_DEFAULT;
    if (!is_quantized(chosen)) {
        *type = chosen;
        return LB_OK;
    }
    int k = override_of(o, re, t->name);
    if (k >= 0) {
        chosen = o->overrides[k].type, *why = LB_MIX_OVERRIDE;
    } else if (!o->pure) {
        int before = chosen;
        lb_status st = mix_rule(s, t, c, &chosen);
        if (st != LB_OK) return st;
        if (chosen != before) *why = LB_MIX_RULE;
    }
    int fb = fallback(chosen, t->ne[0]);
    if (fb != chosen) *why = LB_MIX_FALLBACK;
    *type = fb;
    return LB_OK;
}

lb_status lb__gguf_mix(const lb__mix_model *m, const lb__mix_tensor *t, size_t n, const lb__mix_options *o,
                       int *types, lb__mix_reason *reasons)
{
    if (!m || !o || !types || (n && !t)) return lb__fail(LB_ERR_ARG, "lb__gguf_mix: NULL argument");
    state s = {.m = m, .o = o, .tied = 1};
    s.falcon = m->arch && strcmp(m->arch, "falcon") == 0;
    s.is_70b = is_70b(m);
    s.gqa = m->n_head_kv ? m->n_head / m->n_head_kv : 0;
    s.n_ffn = (int)m->n_layer;
    for (size_t i = 0; i < n; i++) {
        category c = category_of(t[i].name);
        s.n_attn_v += is_attn_v(c);
        if (c == CAT_OUTPUT) s.tied = 0;
    }
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    regex_t *re = calloc(o->n_overrides ? o->n_overrides : 1, sizeof *re);
    lb_status st = order && re ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    if (st == LB_OK) st = lb__gguf_order(t, n, order);
    int compiled = st == LB_OK && (st = compile_overrides(o, re)) == LB_OK;
    for (size_t k = 0; st == LB_OK && k < n; k++) {
        size_t i = order[k];
        lb__mix_reason why = LB_MIX_KEPT;
        st = choose(&s, re, &t[i], &types[i], &why);
        if (reasons) reasons[i] = why;
    }
    for (size_t k = 0; compiled && k < o->n_overrides; k++) regfree(&re[k]);
    free(order), free(re);
    return st;
}
