/* One naming for Llama-family tensors: Hugging Face's, with llama.cpp's
 * GGUF names mapped onto it (llama.cpp's tensor_mapping for the llama,
 * mistral, qwen2 and qwen3 architectures). llama2.c's stacked arrays are
 * named per layer in llama2c.c with the same canonical names. */
#include <stdio.h>
#include <string.h>

#include "lowbit.h"

typedef struct name_pair {
    const char *gguf, *hf; /* per-layer names omit the "blk.N." / "model.layers.N." prefix */
} name_pair;

static const name_pair global_names[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
    /* a weight's per-tensor scale (NVFP4's second level) and the input
     * scale llama.cpp loads beside it */
    {"output.scale", "lm_head.scale"},
    {"output.input_scale", "lm_head.input_scale"},
};

static const name_pair layer_names[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"attn_q.scale", "self_attn.q_proj.scale"},
    {"attn_k.scale", "self_attn.k_proj.scale"},
    {"attn_v.scale", "self_attn.v_proj.scale"},
    {"attn_output.scale", "self_attn.o_proj.scale"},
    {"ffn_gate.scale", "mlp.gate_proj.scale"},
    {"ffn_up.scale", "mlp.up_proj.scale"},
    {"ffn_down.scale", "mlp.down_proj.scale"},
    {"attn_q.input_scale", "self_attn.q_proj.input_scale"},
    {"attn_k.input_scale", "self_attn.k_proj.input_scale"},
    {"attn_v.input_scale", "self_attn.v_proj.input_scale"},
    {"attn_output.input_scale", "self_attn.o_proj.input_scale"},
    {"ffn_gate.input_scale", "mlp.gate_proj.input_scale"},
    {"ffn_up.input_scale", "mlp.up_proj.input_scale"},
    {"ffn_down.input_scale", "mlp.down_proj.input_scale"},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Splits "PREFIX<digits>.rest" into the layer number and rest. */
static int split_layer(const char *name, const char *prefix, unsigned *layer, const char **rest)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0) return 0;
    const char *p = name + n;
    unsigned v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 7) v = v * 10 + (unsigned)(*p++ - '0'), digits++;
    if (!digits || *p != '.' || (digits > 1 && name[n] == '0')) return 0;
    *layer = v, *rest = p + 1;
    return 1;
}

static int copy_out(char *buf, size_t size, const char *s)
{
    snprintf(buf, size, "%s", s);
    return 0;
}

static int map_name(const char *name, char *buf, size_t size, int to_hf)
{
    for (size_t i = 0; i < COUNT(global_names); i++) {
        const char *from = to_hf ? global_names[i].gguf : global_names[i].hf;
        const char *to = to_hf ? global_names[i].hf : global_names[i].gguf;
        if (strcmp(name, from) == 0) return snprintf(buf, size, "%s", to) < (int)size;
    }
    unsigned layer;
    const char *rest;
    if (!split_layer(name, to_hf ? "blk." : "model.layers.", &layer, &rest)) return copy_out(buf, size, name);
    for (size_t i = 0; i < COUNT(layer_names); i++) {
        const char *from = to_hf ? layer_names[i].gguf : layer_names[i].hf;
        const char *to = to_hf ? layer_names[i].hf : layer_names[i].gguf;
        if (strcmp(rest, from) == 0)
            return snprintf(buf, size, to_hf ? "model.layers.%u.%s" : "blk.%u.%s", layer, to) < (int)size;
    }
    return copy_out(buf, size, name);
}

int lb_name_from_gguf(const char *gguf_name, char *buf, size_t size) { return map_name(gguf_name, buf, size, 1); }
int lb_name_to_gguf(const char *hf_name, char *buf, size_t size) { return map_name(hf_name, buf, size, 0); }
