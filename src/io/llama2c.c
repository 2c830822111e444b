/* llama2.c's legacy checkpoint: a header of seven int32 (dim, hidden_dim,
 * n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size
 * means the classifier is stored separately), then fp32 arrays stacked over
 * layers in the order run.c's memory_map_weights reads them. Each layer's
 * slice becomes one tensor under its Hugging Face name; the rotary pairs
 * stay adjacent (LB_ROPE_ADJACENT), as llama2.c computes them. */
#include "io/llama2c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

/* Bounds well beyond any llama2.c model, so that every product below fits
 * 64 bits with room to spare. */
#define MAX_DIM (1u << 16)
#define MAX_LAYERS 1024u
#define MAX_VOCAB (1u << 22)
#define MAX_SEQ (1u << 22)

static int32_t read_i32(const uint8_t *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* One stacked array of the file: n_layers slices of rows x cols (or one
 * slice for the unstacked ones). */
typedef struct l2c_array {
    const char *hf;       /* canonical name, %u for the layer */
    const char *file;     /* llama2.c's field name */
    int per_layer;
    uint64_t rows, cols;  /* cols = 0: a vector of rows */
} l2c_array;

static lb_status check_header(const int32_t h[7], const char *what, lb_arch *a, int *shared)
{
    static const char *const field[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size",
                                         "seq_len"};
    static const uint32_t limit[7] = {MAX_DIM, 4 * MAX_DIM, MAX_LAYERS, MAX_DIM, MAX_DIM, MAX_VOCAB, MAX_SEQ};
    uint32_t v[7];
    for (int i = 0; i < 7; i++) {
        int64_t x = h[i];
        if (i == 5 && x < 0) x = -x; /* the sign of vocab_size only says whether the classifier is shared */
        if (x <= 0 || x > limit[i])
            return lb__fail(LB_ERR_PARSE, "%s: llama2.c header field %s = %d (byte %d) is outside 1..%u", what,
                            field[i], h[i], 4 * i, limit[i]);
        v[i] = (uint32_t)x;
    }
    if (v[0] % v[3]) return lb__fail(LB_ERR_PARSE, "%s: dim %u is not a multiple of n_heads %u", what, v[0], v[3]);
    if (v[4] > v[3] || v[3] % v[4])
        return lb__fail(LB_ERR_PARSE, "%s: n_heads %u is not a multiple of n_kv_heads %u", what, v[3], v[4]);
    if ((v[0] / v[3]) % 2)
        return lb__fail(LB_ERR_PARSE, "%s: head size %u is odd (rotary pairs need it even)", what, v[0] / v[3]);
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "llama");
    a->dim = v[0], a->hidden_dim = v[1], a->n_layers = v[2], a->n_heads = v[3], a->n_kv_heads = v[4];
    a->vocab_size = v[5], a->max_seq_len = v[6];
    a->head_dim = v[0] / v[3];
    a->rope_theta = 10000.0; /* run.c's fixed base */
    /* run.c's rmsnorm adds the float 1e-5f; as a double it is also what a
     * GGUF written from this model carries (the key is an f32), so the
     * two evaluate the same model (1e-5 itself flipped the rounding of a
     * row's norm scale about once in a few thousand rows) */
    a->norm_eps = 1e-5f;
    a->rope_layout = LB_ROPE_ADJACENT;
    *shared = h[5] > 0;
    a->tied_embeddings = *shared;
    return LB_OK;
}

/* The file stacks each array over all layers; the model view lists
 * layer by layer (embedding, layer 0, layer 1, ..., final norm, head), as
 * the other file types do. Insertion sort: a few hundred tensors. */
static unsigned layer_rank(const lb_tensor *t, uint32_t n_layers)
{
    unsigned l;
    if (sscanf(t->name, "model.layers.%u.", &l) == 1) return 1 + l;
    return strcmp(t->name, "model.embed_tokens.weight") == 0 ? 0 : n_layers + 1;
}

static void sort_by_layer(lb_tensor *t, size_t n, uint32_t n_layers)
{
    for (size_t i = 1; i < n; i++) {
        lb_tensor x = t[i];
        unsigned r = layer_rank(&x, n_layers);
        size_t j = i;
        for (; j > 0 && layer_rank(&t[j - 1], n_layers) > r; j--) t[j] = t[j - 1];
        t[j] = x;
    }
}

lb_status lb__l2c_parse(const uint8_t *buf, size_t len, const char *what, lb__l2c_model *out)
{
    memset(out, 0, sizeof *out);
    if (len < 28) return lb__fail(LB_ERR_PARSE, "%s: %zu bytes is shorter than a llama2.c header (28)", what, len);
    if (memcmp(buf, "ak42", 4) == 0 || read_i32(buf) == 0x616b3432)
        return lb__fail(LB_ERR_UNSUPPORTED, "%s: llama2.c version %d files are not supported (only the legacy layout)",
                        what, read_i32(buf + 4));
    int32_t h[7];
    for (int i = 0; i < 7; i++) h[i] = read_i32(buf + 4 * i);
    lb_arch a;
    int shared = 0;
    lb_status st = check_header(h, what, &a, &shared);
    if (st != LB_OK) return st;
    uint64_t L = a.n_layers, d = a.dim, hd = a.hidden_dim, kv = (uint64_t)a.n_kv_heads * a.head_dim;
    uint64_t q = (uint64_t)a.n_heads * a.head_dim;
    const l2c_array arrays[] = {
        {"model.embed_tokens.weight", "token_embedding_table", 0, a.vocab_size, d},
        {"model.layers.%u.input_layernorm.weight", "rms_att_weight", 1, d, 0},
        {"model.layers.%u.self_attn.q_proj.weight", "wq", 1, q, d},
        {"model.layers.%u.self_attn.k_proj.weight", "wk", 1, kv, d},
        {"model.layers.%u.self_attn.v_proj.weight", "wv", 1, kv, d},
        {"model.layers.%u.self_attn.o_proj.weight", "wo", 1, d, q},
        {"model.layers.%u.post_attention_layernorm.weight", "rms_ffn_weight", 1, d, 0},
        {"model.layers.%u.mlp.gate_proj.weight", "w1", 1, hd, d},
        {"model.layers.%u.mlp.down_proj.weight", "w2", 1, d, hd},
        {"model.layers.%u.mlp.up_proj.weight", "w3", 1, hd, d},
        {"model.norm.weight", "rms_final_weight", 0, d, 0},
        {NULL, "freq_cis_real", 0, a.max_seq_len, a.head_dim / 2}, /* legacy rotary tables: skipped */
        {NULL, "freq_cis_imag", 0, a.max_seq_len, a.head_dim / 2},
        {"lm_head.weight", "wcls", 0, a.vocab_size, d},
    };
    size_t n_arrays = sizeof arrays / sizeof arrays[0] - (shared ? 1 : 0);
    uint64_t floats = 0; /* all bounded above: at most ~2^56 */
    size_t n_tensors = 0;
    for (size_t i = 0; i < n_arrays; i++) {
        uint64_t slice = arrays[i].rows * (arrays[i].cols ? arrays[i].cols : 1);
        floats += slice * (arrays[i].per_layer ? L : 1);
        if (arrays[i].hf) n_tensors += arrays[i].per_layer ? L : 1;
    }
    uint64_t want = 28 + floats * 4;
    if (len != want)
        return lb__fail(LB_ERR_PARSE,
                        "%s: llama2.c file is %zu bytes; its header (dim %u, %u layers, vocab %u, %s classifier) "
                        "needs exactly %llu",
                        what, len, a.dim, a.n_layers, a.vocab_size, shared ? "shared" : "separate",
                        (unsigned long long)want);
    out->tensors = calloc(n_tensors, sizeof *out->tensors);
    out->names = malloc(n_tensors * 128);
    if (!out->tensors || !out->names) {
        lb__l2c_free(out);
        return lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    const uint8_t *p = buf + 28;
    size_t k = 0;
    for (size_t i = 0; i < n_arrays; i++) {
        const l2c_array *ar = &arrays[i];
        uint64_t slice = ar->rows * (ar->cols ? ar->cols : 1);
        uint32_t layers = ar->per_layer ? a.n_layers : 1;
        for (uint32_t l = 0; l < layers; l++, p += slice * 4) {
            if (!ar->hf) continue;
            lb_tensor *t = &out->tensors[k];
            char *name = out->names + k * 128;
            snprintf(name, 64, ar->hf, l); /* a format without %u ignores l */
            if (ar->per_layer) snprintf(name + 64, 64, "%s[%u]", ar->file, l);
            else snprintf(name + 64, 64, "%s", ar->file);
            t->name = name, t->file_name = name + 64;
            t->dtype = LB_DT_F32;
            t->n_dims = ar->cols ? 2 : 1;
            t->shape[0] = ar->rows, t->shape[1] = ar->cols;
            t->n_elements = slice, t->n_bytes = slice * 4;
            t->data = p;
            k++;
        }
    }
    out->n_tensors = k;
    sort_by_layer(out->tensors, k, a.n_layers);
    out->arch = a;
    out->shared_classifier = shared;
    return LB_OK;
}

void lb__l2c_free(lb__l2c_model *m)
{
    free(m->tensors), free(m->names);
    memset(m, 0, sizeof *m);
}

lb_status lb__l2c_vocab_parse(const uint8_t *buf, size_t len, uint32_t n_tokens, const char *what, lb__l2c_vocab *out)
{
    memset(out, 0, sizeof *out);
    if (len < 4) return lb__fail(LB_ERR_PARSE, "%s: %zu bytes is shorter than a tokenizer header", what, len);
    int32_t maxlen = read_i32(buf);
    if (maxlen <= 0 || maxlen > 65536)
        return lb__fail(LB_ERR_PARSE, "%s: max_token_length %d is outside 1..65536", what, maxlen);
    /* every token takes at least 8 bytes: bound the count by the file before allocating */
    if (n_tokens == 0 || n_tokens > (len - 4) / 8)
        return lb__fail(LB_ERR_PARSE, "%s: %zu bytes cannot hold %u tokens", what, len, n_tokens);
    out->n = n_tokens, out->max_token_length = (uint32_t)maxlen;
    out->scores = malloc(n_tokens * sizeof(float));
    out->tokens = calloc(n_tokens, sizeof(char *));
    out->lengths = malloc(n_tokens * sizeof(uint32_t));
    if (!out->scores || !out->tokens || !out->lengths) {
        lb__l2c_vocab_free(out);
        return lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    size_t at = 4;
    for (uint32_t i = 0; i < n_tokens; i++) {
        if (len - at < 8) {
            lb__l2c_vocab_free(out);
            return lb__fail(LB_ERR_PARSE, "%s: token %u at byte %zu is cut off by the end of the file", what, i, at);
        }
        memcpy(&out->scores[i], buf + at, 4);
        int32_t n = read_i32(buf + at + 4);
        at += 8;
        if (n < 0 || n > maxlen || (size_t)n > len - at) {
            lb__l2c_vocab_free(out);
            return lb__fail(LB_ERR_PARSE, "%s: token %u has length %d (byte %zu); max_token_length is %d and %zu bytes "
                                          "remain", what, i, n, at - 4, maxlen, len - at);
        }
        out->tokens[i] = malloc((size_t)n + 1);
        if (!out->tokens[i]) {
            lb__l2c_vocab_free(out);
            return lb__fail(LB_ERR_NOMEM, "out of memory");
        }
        memcpy(out->tokens[i], buf + at, (size_t)n);
        out->tokens[i][n] = '\0';
        out->lengths[i] = (uint32_t)n;
        at += (size_t)n;
    }
    if (at != len) {
        uint32_t n = out->n;
        lb__l2c_vocab_free(out);
        return lb__fail(LB_ERR_PARSE, "%s: %zu bytes follow the %u tokens the model's vocabulary has", what, len - at, n);
    }
    return LB_OK;
}

void lb__l2c_vocab_free(lb__l2c_vocab *v)
{
    if (v->tokens)
        for (uint32_t i = 0; i < v->n; i++) free(v->tokens[i]);
    free(v->scores), free(v->tokens), free(v->lengths);
    memset(v, 0, sizeof *v);
}
