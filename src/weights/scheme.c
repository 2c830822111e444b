/* Schemes: the presets users name (llm-compressor's PRESET_SCHEMES in
 * compressed-tensors quantization/quant_scheme.py, ModelOpt's quant_algo
 * names), one table row each, each a one-rule recipe over the linear
 * layers of the decoder blocks. Everything a scheme does not match stays
 * 16-bit, so the output head, a tied embedding and the embedding stay
 * 16-bit (what llm-compressor's examples do with ignore=["lm_head"]), and
 * norms and biases are never weights. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "weights/recipe_internal.h"

/* Which part of a scheme a ":gN" suffix may change. */
typedef enum group_override {
    GROUP_FIXED = 0,   /* the format fixes the block (MX 32, NVFP4 16) or a per-tensor scale */
    GROUP_WEIGHTS = 1, /* integer schemes: the weights' group (a channel scheme becomes groups of N) */
    GROUP_BOTH = 2     /* FP8-BLOCK: the weight blocks (NxN) and the activation groups together */
} group_override;

typedef struct scheme_row {
    lb_scheme s;         /* s.aliases: other spellings, compared as names are */
    group_override group;
} scheme_row;

/* The rule a scheme applies: every weight of a decoder block (q/k/v/o,
 * gate/up/down; norms are not weights). */
#define SCHEME_PATTERN "model.layers.*"

/* Integer weight scales are bf16 (compressed-tensors stores scales in the
 * model's dtype: bf16 for a bf16 model); FP8 weight scales fp32 (what
 * llm-compressor and ModelOpt write). MXFP4 rounds its E8M0 scales as
 * compressed-tensors does (round=even: amax carried to the next power of
 * two from mantissa 1.75), MXFP8 as ModelOpt does (round=rceil: ceil of
 * log2(amax / 448), so nothing saturates).
 *
 * FP8-BLOCK: compressed-tensors' FP8_BLOCK (and the DeepSeek-V3 / Qwen3
 * FP8 checkpoints): one scale per 128x128 block of weights (b128x128,
 * block_structure [128, 128]), dynamic FP8 activations per group of 128 of
 * each token. Its weight scales are bf16 as the package writes them for a
 * bf16 model (the scale takes the model's dtype). */
static const scheme_row rows[] = {
    {{"W8A8-FP8", "FP8 E4M3 weights per channel, dynamic per-token FP8 activations", "fp8_e4m3:channel:scale=bf16",
      LB_ACT_DYNAMIC, "fp8_e4m3:token", 0, "FP8_DYNAMIC"},
     GROUP_FIXED},
    {{"W8A8-FP8-STATIC", "FP8 E4M3 weights per tensor, static per-tensor FP8 activations (calibrated)",
      "fp8_e4m3:tensor:scale=bf16", LB_ACT_STATIC, "fp8_e4m3:tensor", 1, "FP8"},
     GROUP_FIXED},
    {{"FP8-BLOCK", "FP8 E4M3 weights in 128x128 blocks (bf16 scales), dynamic per-group-128 FP8 activations",
      "fp8_e4m3:b128x128:scale=bf16", LB_ACT_DYNAMIC, "fp8_e4m3:g128", 0, "FP8_BLOCK"},
     GROUP_BOTH},
    {{"W8A8-INT8", "int8 weights per channel (bf16 scales), dynamic per-token int8 activations",
      "int8:channel:scale=bf16", LB_ACT_DYNAMIC, "int8:token", 0, "INT8 W8A8 INT8_W8A8"},
     GROUP_WEIGHTS},
    {{"W8A16", "int8 weights in groups of 128 (bf16 scales), 16-bit activations", "int8:g128:scale=bf16",
      LB_ACT_NONE, NULL, 0, ""},
     GROUP_WEIGHTS},
    /* range=full, not int4's default range=signed: compressed-tensors checkpoints keep positive scales
     * (README, "Quantization specs": what vLLM's kernels were read to do with negative ones) */
    {{"W4A16", "int4 symmetric weights in groups of 128 (bf16 scales), 16-bit activations",
      "int4:g128:scale=bf16:range=full", LB_ACT_NONE, NULL, 0, ""},
     GROUP_WEIGHTS},
    {{"W4A16-ASYM", "int4 affine weights (zero points) in groups of 128 (bf16 scales), 16-bit activations",
      "int4:g128:affine:scale=bf16", LB_ACT_NONE, NULL, 0, ""},
     GROUP_WEIGHTS},
    {{"NVFP4", "NVFP4 weights and activations (E2M1, E4M3 scales per 16, fp32 global; activation global "
               "calibrated)",
      "nvfp4", LB_ACT_LOCAL, "nvfp4", 1, "W4A4-NVFP4"},
     GROUP_FIXED},
    {{"NVFP4A16", "NVFP4 weights (E2M1, E4M3 scales per 16, fp32 global), 16-bit activations", "nvfp4",
      LB_ACT_NONE, NULL, 0, "W4A16-NVFP4"},
     GROUP_FIXED},
    {{"MXFP4", "MXFP4 weights and dynamic MXFP4 activations (E2M1, E8M0 scales per 32)", "mxfp4:round=even",
      LB_ACT_DYNAMIC, "mxfp4:round=even", 0, ""},
     GROUP_FIXED},
    {{"MXFP4A16", "MXFP4 weights (E2M1, E8M0 scales per 32), 16-bit activations", "mxfp4:round=even",
      LB_ACT_NONE, NULL, 0, ""},
     GROUP_FIXED},
    {{"MXFP8", "MXFP8 E4M3 weights and dynamic MXFP8 activations (E8M0 scales per 32)",
      "mxfp8_e4m3:round=rceil", LB_ACT_DYNAMIC, "mxfp8_e4m3:round=rceil", 0, ""},
     GROUP_FIXED},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

size_t lb_scheme_count(void)
{
    return N_ROWS;
}

const lb_scheme *lb_scheme_at(size_t i)
{
    return i < N_ROWS ? &rows[i].s : NULL;
}

/* Names compare case-insensitively with '-' and '_' the same
 * (W8A8-FP8 = w8a8_fp8), over n bytes of a and all of b. */
static int same_name(const char *a, size_t n, const char *b)
{
    size_t i = 0;
    for (; i < n && b[i]; i++) {
        char x = a[i] == '_' ? '-' : (char)toupper((unsigned char)a[i]);
        char y = b[i] == '_' ? '-' : (char)toupper((unsigned char)b[i]);
        if (x != y) return 0;
    }
    return i == n && b[i] == '\0';
}

static const scheme_row *find_row(const char *name, size_t n)
{
    for (size_t i = 0; i < N_ROWS; i++) {
        if (same_name(name, n, rows[i].s.name)) return &rows[i];
        const char *a = rows[i].s.aliases;
        while (*a) {
            size_t len = strcspn(a, " ");
            char alias[32];
            if (len < sizeof alias) {
                memcpy(alias, a, len);
                alias[len] = '\0';
                if (same_name(name, n, alias)) return &rows[i];
            }
            a += len;
            while (*a == ' ') a++;
        }
    }
    return NULL;
}

const lb_scheme *lb_scheme_find(const char *name)
{
    if (!name) return NULL;
    const scheme_row *r = find_row(name, strlen(name));
    return r ? &r->s : NULL;
}

/* The recipe of a row, its weights' group (and for GROUP_BOTH the
 * activations') set to group when group > 0. */
static lb_status row_recipe(const scheme_row *row, size_t group, lb_recipe **out)
{
    lb_rule rule = {SCHEME_PATTERN, 0, {0}, {row->s.act_mode, {0}}};
    if (lb_qspec_parse(row->s.weights, &rule.spec) != LB_OK)
        return lb__fail(LB_ERR_ARG, "scheme %s: weights '%s': %s", row->s.name, row->s.weights, lb_last_error());
    if (row->s.act && lb_qspec_parse(row->s.act, &rule.act.spec) != LB_OK)
        return lb__fail(LB_ERR_ARG, "scheme %s: activations '%s': %s", row->s.name, row->s.act, lb_last_error());
    if (group > 0) {
        rule.spec.granularity = LB_GRAN_GROUP;
        rule.spec.group = group;
        if (rule.spec.group_rows > 1) rule.spec.group_rows = group; /* FP8-BLOCK:g64: 64x64 blocks */
        if (row->group == GROUP_BOTH) rule.act.spec.group = group;
    }
    lb_recipe *r;
    lb_status s = lb_recipe_new(&r);
    if (s != LB_OK) return s;
    s = lb_recipe_add(r, &rule);
    if (s != LB_OK) {
        lb_recipe_free(r);
        return s;
    }
    *out = r;
    return LB_OK;
}

lb_status lb_scheme_recipe(const lb_scheme *s, lb_recipe **out)
{
    if (!s || !out) return lb__fail(LB_ERR_ARG, "lb_scheme_recipe: NULL argument");
    for (size_t i = 0; i < N_ROWS; i++)
        if (&rows[i].s == s) return row_recipe(&rows[i], 0, out);
    return lb__fail(LB_ERR_ARG, "lb_scheme_recipe: not a scheme of lb_scheme_at");
}

static void list_names(char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_ROWS && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", rows[i].s.name);
}

lb_status lb_scheme_recipe_named(const char *text, lb_recipe **out)
{
    if (!text || !out) return lb__fail(LB_ERR_ARG, "lb_scheme_recipe_named: NULL argument");
    const char *colon = strchr(text, ':');
    size_t n = colon ? (size_t)(colon - text) : strlen(text);
    const scheme_row *row = find_row(text, n);
    if (!row) {
        char names[512];
        list_names(names, sizeof names);
        return lb__fail(LB_ERR_ARG, "unknown scheme '%.*s' (schemes: %s; lowbit quantize --list)", (int)(n > 64 ? 64 : n),
                        text, names);
    }
    size_t group = 0;
    if (colon) {
        const char *g = colon + 1;
        char *end = NULL;
        unsigned long long v = 0;
        if ((g[0] == 'g' || g[0] == 'G') && g[1] >= '0' && g[1] <= '9') v = strtoull(g + 1, &end, 10);
        if (!end || *end || v == 0 || v > (1ull << 20))
            return lb__fail(LB_ERR_ARG, "scheme '%s': after ':' comes a group size gN (1 <= N <= %u), e.g. %s:g64",
                            text, 1u << 20, row->s.name);
        if (row->group == GROUP_FIXED)
            return lb__fail(LB_ERR_ARG, "scheme '%s': %s has no group size to change (its weights are '%s')", text,
                            row->s.name, row->s.weights);
        group = (size_t)v;
    }
    return row_recipe(row, group, out);
}
