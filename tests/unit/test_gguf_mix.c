/* llama-quantize's per-tensor types (export/gguf_mix.c) on a hand-made
 * 8-layer model, each expectation worked out from the rules of the pinned
 * llama.cpp (tests/llamacpp/test_gguf_mix.py compares with llama-quantize
 * itself where it is built): file type names, the layers that get more
 * bits, the 256-block fallback, tied output, overrides, the order. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "export/gguf_mix.h"
#include "lowbit.h"

#define N_LAYER 8
#define PER_LAYER 5
#define N_T (3 + N_LAYER * PER_LAYER)

static char names[N_T][64];
static lb__mix_tensor t[N_T];
static int types[N_T];
static size_t n_t;

static void add(const char *name, uint64_t ne0, uint64_t ne1)
{
    snprintf(names[n_t], sizeof names[n_t], "%s", name);
    t[n_t] = (lb__mix_tensor){names[n_t], ne1 > 1 ? 2 : 1, {ne0, ne1, 1, 1}, LB_GGML_F32};
    n_t++;
}

/* width 512 (256 divides), ffn 1376 (only 32 divides); tied: no output.weight */
static void model(int tied)
{
    char n[64];
    n_t = 0;
    add("token_embd.weight", 512, 1000);
    add("output_norm.weight", 512, 1);
    if (!tied) add("output.weight", 512, 1000);
    for (int l = N_LAYER - 1; l >= 0; l--) { /* reverse: the mix must order them itself */
        snprintf(n, sizeof n, "blk.%d.attn_v.weight", l), add(n, 512, 128);
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l), add(n, 1376, 512);
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", l), add(n, 512, 1376);
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l), add(n, 512, 1);
        snprintf(n, sizeof n, "blk.%d.attn_output.weight", l), add(n, 512, 512);
    }
}

static int type_of(const char *name)
{
    for (size_t i = 0; i < n_t; i++)
        if (strcmp(t[i].name, name) == 0) return types[i];
    return -2;
}

static lb_status mix(lb__ftype f, const lb__mix_options *extra)
{
    lb__mix_model m = {"llama", N_LAYER, 8, 2, 0}; /* GQA 4 */
    lb__mix_options o = {.ftype = f, .output_type = -1, .token_embd_type = -1};
    if (extra) o = *extra, o.ftype = f;
    return lb__gguf_mix(&m, t, n_t, &o, types, NULL);
}

int main(void)
{
    CHECK(lb__ftype_by_name("q4_k_m") && lb__ftype_by_name("q4_k_m")->ftype == LB_FTYPE_Q4_K_M, "name");
    CHECK(lb__ftype_by_name("Q4_K")->ftype == LB_FTYPE_Q4_K_M && lb__ftype_by_name("Q3_K")->ftype == LB_FTYPE_Q3_K_M,
          "aliases");
    CHECK(!lb__ftype_by_name("Q4_K_X") && !lb__ftype_by_name(NULL), "unknown");
    CHECK(lb__ggml_type_by_name("Q4_k") == LB_GGML_Q4_K && strcmp(lb__ggml_type_name(LB_GGML_IQ4_NL), "iq4_nl") == 0,
          "ggml names");

    model(0);
    CHECK(mix(LB_FTYPE_Q4_K_M, NULL) == LB_OK, "%s", lb_last_error());
    /* more bits in layers 0, 3, 6, 7 of 8 (the first and last eighth, every third between) */
    for (int l = 0; l < N_LAYER; l++) {
        char n[64];
        int more = l == 0 || l == 3 || l == 6 || l == 7;
        snprintf(n, sizeof n, "blk.%d.attn_v.weight", l);
        CHECK(type_of(n) == (more ? LB_GGML_Q6_K : LB_GGML_Q4_K), "%s: %d", n, type_of(n));
        /* ffn_down: q6_K where more bits, but rows of 1376 fall back: q6_K -> q8_0, q4_K -> q5_0 */
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l);
        CHECK(type_of(n) == (more ? LB_GGML_Q8_0 : LB_GGML_Q5_0), "%s: %d", n, type_of(n));
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l);
        CHECK(type_of(n) == LB_GGML_F32, "%s", n);
    }
    CHECK(type_of("output.weight") == LB_GGML_Q6_K && type_of("token_embd.weight") == LB_GGML_Q4_K, "untied");

    model(1);
    CHECK(mix(LB_FTYPE_Q4_0, NULL) == LB_OK, "%s", lb_last_error());
    CHECK(type_of("token_embd.weight") == LB_GGML_Q6_K, "tied embedding takes the output's rule: %d",
          type_of("token_embd.weight"));
    CHECK(type_of("blk.2.ffn_up.weight") == LB_GGML_Q4_0, "default");

    lb__mix_options pure = {.pure = 1, .output_type = -1, .token_embd_type = -1};
    CHECK(mix(LB_FTYPE_Q4_K_S, &pure) == LB_OK, "%s", lb_last_error());
    CHECK(type_of("token_embd.weight") == LB_GGML_Q4_K && type_of("blk.0.attn_v.weight") == LB_GGML_Q4_K &&
          type_of("blk.0.ffn_down.weight") == LB_GGML_Q5_0, "pure: default, fallback only");

    lb__mix_override ov[] = {{"ATTN_V", LB_GGML_Q8_0}, {"blk\\.[0-3]\\.ffn_up", LB_GGML_IQ4_NL}};
    lb__mix_options with = {.output_type = -1, .token_embd_type = LB_GGML_Q5_K, .overrides = ov, .n_overrides = 2};
    CHECK(mix(LB_FTYPE_Q4_K_M, &with) == LB_OK, "%s", lb_last_error());
    CHECK(type_of("blk.5.attn_v.weight") == LB_GGML_Q8_0 && type_of("blk.3.ffn_up.weight") == LB_GGML_IQ4_NL &&
          type_of("blk.4.ffn_up.weight") == LB_GGML_Q4_K, "overrides (regex, lowercased) before the mix");
    CHECK(type_of("token_embd.weight") == LB_GGML_Q5_K, "token embedding type");

    lb__mix_override bad[] = {{"(", LB_GGML_Q8_0}};
    lb__mix_options broken = {.output_type = -1, .token_embd_type = -1, .overrides = bad, .n_overrides = 1};
    CHECK(mix(LB_FTYPE_Q8_0, &broken) == LB_ERR_ARG, "a pattern that does not compile");

    CHECK(mix(LB_FTYPE_F16, NULL) == LB_OK && type_of("blk.1.ffn_down.weight") == LB_GGML_F16 &&
          type_of("token_embd.weight") == LB_GGML_F16 && type_of("output_norm.weight") == LB_GGML_F32, "F16");
    CHECK(mix(LB_FTYPE_MXFP4_MOE, NULL) == LB_OK && type_of("blk.1.ffn_up.weight") == LB_GGML_Q8_0, "dense MXFP4_MOE");
    CHECK(mix(LB_FTYPE_NVFP4, NULL) == LB_OK && type_of("blk.1.ffn_up.weight") == LB_GGML_NVFP4 &&
          type_of("blk.1.ffn_down.weight") == LB_GGML_Q8_0, "NVFP4, rows 64 does not divide");

    size_t order[N_T];
    CHECK(lb__gguf_order(t, n_t, order) == LB_OK, "order");
    CHECK(strcmp(t[order[0]].name, "output_norm.weight") == 0 && strcmp(t[order[1]].name, "token_embd.weight") == 0 &&
          strcmp(t[order[2]].name, "blk.0.attn_norm.weight") == 0 &&
          strcmp(t[order[n_t - 1]].name, "blk.7.ffn_up.weight") == 0, "by layer, then name");
    return check_summary();
}
