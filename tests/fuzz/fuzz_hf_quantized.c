/* Fuzz harness for the reader of quantized Hugging Face checkpoints
 * (src/io/hf_quantized.c): a config.json with a quantization_config and a
 * model.safetensors of quantized modules. Every input must either be
 * refused with a message or open, and then every tensor must decode
 * (lb_tensor_to_f32) without error: a plan the reader accepted is one whose
 * every read is in bounds (ASan, `make asan`, checks that).
 *
 * Input: a 4-byte little-endian length N, N bytes of config.json, then the
 * safetensors file. They are written to a temporary directory and opened
 * with lb_model_open, as a user's directory would be.
 *
 * With -DLB_LIBFUZZER (`make fuzz`) it is a libFuzzer target; otherwise its
 * main() mutates a built-in checkpoint (`make test`): the config's fields
 * (formats, strategies, bits, group sizes, symmetric, targets, shapes and
 * dtypes in the safetensors header, input_activations and kv_cache_scheme)
 * drawn from the values that matter, plus random bytes and truncations.
 * Every model that opens is also turned into the qmodel an evaluation
 * runs (lb_qmodel_from_checkpoint: activation and KV scales read and
 * checked), which must be built or refused with a message. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lowbit.h"

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_hf_quantized: %s\n", what);
    abort();
}

static char dir[64], cfg_path[96], st_path[96];

static void put(const char *path, const uint8_t *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(d, 1, n, f) != n) || fclose(f) != 0) fail("cannot write the temporary files");
}

static float values[1 << 16];
static long opened, decoded, built; /* how much of the reader the inputs reach */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        strcpy(dir, "/tmp/fuzz_hf_quantized.XXXXXX");
        if (!mkdtemp(dir)) fail("mkdtemp");
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
        snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    }
    if (size < 4) return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
    if (n > size - 4) return 0;
    put(cfg_path, data + 4, n);
    put(st_path, data + 4 + n, size - 4 - n);
    lb_model *m;
    if (lb_model_open(dir, &m) != LB_OK) {
        if (lb_last_error()[0] == '\0') fail("refused without a message");
        return 0;
    }
    for (size_t i = 0; i < lb_model_tensor_count(m); i++) {
        const lb_tensor *t = lb_model_tensor(m, i);
        if (t->dtype != LB_DT_QUANTIZED) continue;
        if (!lb_model_quantization(m)) fail("a quantized tensor in a model without a quantization description");
        if (t->n_elements > sizeof values / sizeof *values) continue; /* the seed's are small; shapes may grow */
        if (lb_tensor_to_f32(t, values) != LB_OK) fail("an accepted quantized tensor does not decode");
        decoded++;
        lb_tensor_release(t);
    }
    /* the qmodel an evaluation builds from it (activation and KV scales
     * read): built, or refused with a message */
    for (unsigned flags = 0; flags <= LB_CKPT_WEIGHTS_ONLY; flags++) {
        lb_qmodel *q = NULL;
        if (lb_qmodel_from_checkpoint(m, flags, &q) != LB_OK) {
            if (lb_last_error()[0] == '\0') fail("a checkpoint's qmodel refused without a message");
        } else {
            built++;
        }
        lb_qmodel_free(q);
    }
    opened++;
    lb_model_close(m);
    return 0;
}

#ifndef LB_LIBFUZZER
static uint64_t s = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
}
static const char *pick(const char *const *v, size_t n) { return v[rnd() % n]; }
#define PICK(a) pick(a, sizeof a / sizeof *a)

static const char *const formats[] = {"pack-quantized", "nvfp4-pack-quantized", "mxfp4-pack-quantized", "float-quantized",
                                      "int-quantized", "naive-quantized", "mxfp8-quantized", "dense", "mixed-precision"};
static const char *const strategies[] = {"group", "channel", "tensor", "tensor_group", "block", "token"};
static const char *const bits[] = {"4", "4", "8", "3", "1", "0", "9", "-1", "2.5", "\"4\""};
static const char *const groups[] = {"16", "16", "32", "8", "-1", "0", "null", "12", "1", "4294967297"};
static const char *const bools[] = {"true", "false", "null", "1"};
static const char *const types[] = {"int", "float", "fp"};
static const char *const targets[] = {"\"Linear\"", "\"re:.*down_proj\"", "\"re:.*up_proj\"", "\"re:(\"",
                                      "\"model.layers.0.mlp.down_proj\"", "\"Embedding\"", "3"};
static const char *const methods[] = {"compressed-tensors", "compressed-tensors", "modelopt", "gptq"};
static const char *const dtypes[] = {"I32", "U8", "F8_E4M3", "F16", "F32", "I64", "BF16", "I8"};
/* input_activations of group_1 and the KV cache scheme */
static const char *const acts[] = {
    "{\"num_bits\": 4, \"type\": \"float\", \"symmetric\": true, \"group_size\": 16, \"strategy\": \"tensor_group\", "
    "\"dynamic\": \"local\"}",
    "{\"num_bits\": 8, \"type\": \"float\", \"symmetric\": true, \"strategy\": \"tensor\", \"dynamic\": false}",
    "{\"num_bits\": 8, \"type\": \"int\", \"symmetric\": false, \"strategy\": \"token\", \"dynamic\": true}",
    "{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"group\", \"group_size\": 128, \"dynamic\": true}",
    "{\"num_bits\": 4, \"type\": \"float\", \"strategy\": \"group\", \"group_size\": 32, \"dynamic\": true, "
    "\"scale_dtype\": \"torch.uint8\"}",
    "{\"num_bits\": 8, \"type\": \"float\", \"dynamic\": \"sometimes\"}", "null", "7"};
static const char *const kvs[] = {
    "null", "{\"num_bits\": 8, \"type\": \"float\", \"symmetric\": true, \"strategy\": \"tensor\", \"dynamic\": false}",
    "{\"num_bits\": 4, \"type\": \"int\", \"strategy\": \"tensor\"}", "[]"};

/* 2-D blocks (compressed-tensors' FP8_BLOCK): block_structure values */
static const char *const block_structures[] = {"[4, 8]", "[4, 8]", "[8, 8]", "[3, 5]", "[1, 1]", "[0, 8]", "[8]",
                                               "[4, 8, 2]", "\"4x8\"", "[4294967297, 8]", "[16777216, 1]", "null"};

/* The block seed's config: down_proj FP8 in 4 x 8 blocks (10 x 32: a
 * partial last row of blocks), up_proj FP8 per channel; k > 0 draws the
 * block structure, strategy and format. */
static size_t make_block_config(char *out, size_t cap, int k)
{
    return (size_t)snprintf(
        out, cap,
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 32, "
        "\"intermediate_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 32, "
        "\"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", "
        "\"ignore\": [\"lm_head\"], \"config_groups\": {"
        "\"group_0\": {\"targets\": [\"re:.*down_proj\"], \"format\": \"%s\", \"weights\": {\"num_bits\": 8, "
        "\"type\": \"float\", \"symmetric\": true, \"group_size\": null, \"strategy\": \"%s\", "
        "\"block_structure\": %s}},"
        "\"group_1\": {\"targets\": [\"re:.*up_proj\"], \"format\": \"float-quantized\", \"weights\": "
        "{\"num_bits\": 8, \"type\": \"float\", \"symmetric\": true, \"strategy\": \"%s\", "
        "\"block_structure\": %s}}}}}",
        k ? PICK(formats) : "float-quantized", k ? PICK(strategies) : "block", k ? PICK(block_structures) : "[4, 8]",
        k ? PICK(strategies) : "channel", k ? PICK(block_structures) : "null");
}

/* The config, each field drawn (k = 0: the seed's values). */
static size_t make_config(char *out, size_t cap, int k)
{
    return (size_t)snprintf(
        out, cap,
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 32, "
        "\"intermediate_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 32, "
        "\"quantization_config\": {\"quant_method\": \"%s\", \"format\": \"mixed-precision\", \"ignore\": [\"lm_head\"], "
        "\"kv_cache_scheme\": %s, \"config_groups\": {"
        "\"group_0\": {\"targets\": [%s], \"format\": \"%s\", \"weights\": {\"num_bits\": %s, \"type\": \"%s\", "
        "\"symmetric\": %s, \"group_size\": %s, \"strategy\": \"%s\"}},"
        "\"group_1\": {\"targets\": [%s], \"format\": \"%s\", \"weights\": {\"num_bits\": %s, \"type\": \"%s\", "
        "\"symmetric\": %s, \"group_size\": %s, \"strategy\": \"%s\"}, \"input_activations\": %s}}}}",
        k ? PICK(methods) : "compressed-tensors", k ? PICK(kvs) : kvs[0], k ? PICK(targets) : "\"re:.*down_proj\"",
        k ? PICK(formats) : "pack-quantized", k ? PICK(bits) : "4", k ? PICK(types) : "int",
        k ? PICK(bools) : "false", k ? PICK(groups) : "16", k ? PICK(strategies) : "group",
        k ? PICK(targets) : "\"re:.*up_proj\"", k ? PICK(formats) : "nvfp4-pack-quantized", k ? PICK(bits) : "4",
        k ? PICK(types) : "float", k ? PICK(bools) : "true", k ? PICK(groups) : "16",
        k ? PICK(strategies) : "tensor_group", k ? PICK(acts) : acts[0]);
}

typedef struct spec { const char *name, *dtype; unsigned d0, d1; int dims; unsigned esize; } spec;

/* The block seed's tensors: scales [ceil(10 / 4), 32 / 8] = [3, 4]. */
static spec block_tensors[] = {
    {"model.layers.0.mlp.down_proj.weight", "F8_E4M3", 10, 32, 2, 1},
    {"model.layers.0.mlp.down_proj.weight_scale", "F32", 3, 4, 2, 4},
    {"model.layers.0.mlp.up_proj.weight", "F8_E4M3", 8, 16, 2, 1},
    {"model.layers.0.mlp.up_proj.weight_scale", "BF16", 8, 1, 2, 2},
    {"model.norm.weight", "F32", 32, 0, 1, 4},
};

/* The safetensors file: names sorted, data contiguous; k > 0 redraws one
 * tensor's dtype or shape. block: the block seed's tensors. */
static size_t make_st(uint8_t *out, size_t cap, int k, int block)
{
    spec t[] = {
        {"model.layers.0.mlp.down_proj.weight_packed", "I32", 8, 4, 2, 4},
        {"model.layers.0.mlp.down_proj.weight_scale", "F16", 8, 2, 2, 2},
        {"model.layers.0.mlp.down_proj.weight_shape", "I64", 2, 0, 1, 8},
        {"model.layers.0.mlp.down_proj.weight_zero_point", "I32", 1, 2, 2, 4},
        {"model.layers.0.mlp.up_proj.input_global_scale", "F32", 1, 0, 1, 4},
        {"model.layers.0.mlp.up_proj.weight_global_scale", "F32", 1, 0, 1, 4},
        {"model.layers.0.mlp.up_proj.weight_packed", "U8", 8, 16, 2, 1},
        {"model.layers.0.mlp.up_proj.weight_scale", "F8_E4M3", 8, 2, 2, 1},
        {"model.norm.weight", "F32", 32, 0, 1, 4},
    };
    size_t nt = sizeof t / sizeof *t;
    if (block) {
        nt = sizeof block_tensors / sizeof *block_tensors;
        memcpy(t, block_tensors, sizeof block_tensors);
    }
    static const unsigned sizes[] = {1, 2, 3, 4, 7, 8, 16, 32, 0, 10, 5};
    if (k) {
        spec *x = &t[rnd() % nt];
        switch (rnd() % 4) {
        case 0: x->dtype = PICK(dtypes); break;
        case 1: x->d0 = sizes[rnd() % 11]; break;
        case 2: x->d1 = sizes[rnd() % 11]; break;
        default: x->dims = (int)(rnd() % 3); break;
        }
        x->esize = strcmp(x->dtype, "I32") == 0 || strcmp(x->dtype, "F32") == 0 ? 4
                   : strcmp(x->dtype, "I64") == 0                               ? 8
                   : x->dtype[1] == '1' || x->dtype[0] == 'B'                   ? 2 : 1;
    }
    char h[4096];
    size_t hl = 0, off = 0;
    hl += (size_t)snprintf(h + hl, sizeof h - hl, "{");
    for (size_t i = 0; i < nt; i++) {
        size_t n = t[i].dims == 0 ? 1 : t[i].dims == 1 ? t[i].d0 : (size_t)t[i].d0 * t[i].d1;
        char shape[48];
        if (t[i].dims == 0) snprintf(shape, sizeof shape, "[]");
        else if (t[i].dims == 1) snprintf(shape, sizeof shape, "[%u]", t[i].d0);
        else snprintf(shape, sizeof shape, "[%u, %u]", t[i].d0, t[i].d1);
        hl += (size_t)snprintf(h + hl, sizeof h - hl, "%s\"%s\": {\"dtype\": \"%s\", \"shape\": %s, \"data_offsets\": [%zu, %zu]}",
                               i ? ", " : "", t[i].name, t[i].dtype, shape, off, off + n * t[i].esize);
        off += n * t[i].esize;
    }
    hl += (size_t)snprintf(h + hl, sizeof h - hl, "}");
    while (hl % 8) h[hl++] = ' ';
    if (8 + hl + off > cap) fail("seed buffer too small");
    for (int b = 0; b < 8; b++) out[b] = (uint8_t)((uint64_t)hl >> (8 * b));
    memcpy(out + 8, h, hl);
    uint8_t *d = out + 8 + hl;
    for (size_t i = 0; i < off; i++) d[i] = (uint8_t)(rnd() >> 24);
    /* the seed's weight_shape is [8, 32] and its scales ordinary numbers */
    size_t at = 8 * 4 * 4 + 8 * 2 * 2;
    if (block) { /* fp8 codes without NaNs, scales 1.0 (f32) and bf16 1.0 */
        for (size_t i = 0; i < off; i++) d[i] &= 0x77;
        if (!k) {
            for (size_t i = 320; i < 320 + 48; i += 4) d[i] = d[i + 1] = 0, d[i + 2] = 0x80, d[i + 3] = 0x3f;
            for (size_t i = 368 + 128; i < 368 + 128 + 16; i += 2) d[i] = 0x80, d[i + 1] = 0x3f;
        }
        return 8 + hl + off;
    }
    if (!k) {
        memset(d + at, 0, 16), d[at] = 8, d[at + 8] = 32;
        for (size_t i = 128; i < 128 + 32; i += 2) d[i] = 0, d[i + 1] = 0x3c; /* f16 1.0 */
    }
    return 8 + hl + off;
}

/* The block seed with its scales in a wrong shape (transposed, flat, 3-D,
 * rows counted with floor) must be refused, naming the scale tensor. */
static void refuse_bad_block_scales(const char *cfg, size_t n, uint8_t *buf)
{
    static const struct { unsigned d0, d1; int dims; } bad[] = {{4, 3, 2}, {12, 0, 1}, {2, 4, 2}, {10, 4, 2}};
    spec keep = block_tensors[1];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        block_tensors[1].d0 = bad[i].d0, block_tensors[1].d1 = bad[i].d1, block_tensors[1].dims = bad[i].dims;
        size_t len = 4 + n + make_st(buf + 4 + n, 65536 - 4 - n, 0, 1);
        put(cfg_path, (const uint8_t *)cfg, n);
        put(st_path, buf + 4 + n, len - 4 - n);
        lb_model *m;
        if (lb_model_open(dir, &m) == LB_OK) fail("a block checkpoint with misshapen scales opened");
        if (!strstr(lb_last_error(), "down_proj.weight_scale")) {
            fprintf(stderr, "%s\n", lb_last_error());
            fail("the refusal of misshapen block scales does not name the scale tensor");
        }
    }
    block_tensors[1] = keep;
}

int main(void)
{
    static uint8_t buf[1 << 16];
    char cfg[4096];
    long runs = 0;
    for (int it = 0; it < 4000; it++, runs++) {
        /* it >= 3000: the 2-D block seed (FP8_BLOCK), from it == 3000 unchanged */
        int block = it >= 3000, k = it != 0 && it != 3000;
        size_t n = block ? make_block_config(cfg, sizeof cfg, k && it % 3 == 0)
                         : make_config(cfg, sizeof cfg, k && it % 3 == 0);
        memcpy(buf + 4, cfg, n);
        for (int b = 0; b < 4; b++) buf[b] = (uint8_t)(n >> (8 * b));
        size_t len = 4 + n + make_st(buf + 4 + n, sizeof buf - 4 - n, k && it % 3 == 1, block);
        if (k && it % 3 == 2) /* raw mutations: bytes anywhere, or a truncation */
            for (int mu = 0; mu < 1 + it % 4; mu++) {
                size_t pos = 4 + (size_t)(rnd() % (len - 4));
                switch (rnd() % 3) {
                case 0: buf[pos] ^= (uint8_t)(1u << (rnd() % 8)); break;
                case 1: buf[pos] = (uint8_t)rnd(); break;
                default: if (pos > 4 + n) len = pos; break;
                }
            }
        if (!k) { /* the seed must open, and decode */
            LLVMFuzzerTestOneInput(buf, len);
            lb_model *m;
            if (lb_model_open(dir, &m) != LB_OK) {
                fprintf(stderr, "%s\n", lb_last_error());
                fail("the seed must open");
            }
            const lb_model_quant *q = lb_model_quantization(m);
            if (!q || q->quantized != 2 || q->hidden != (block ? 2 : 6))
                fail("the seed has 2 quantized modules and 6 (block seed: 2) set-aside tensors");
            lb_model_close(m);
            if (block) refuse_bad_block_scales(cfg, n, buf);
            continue;
        }
        LLVMFuzzerTestOneInput(buf, len);
    }
    unlink(cfg_path), unlink(st_path), rmdir(dir);
    printf("fuzz_hf_quantized: %ld inputs (%ld opened, %ld quantized tensors decoded, %ld qmodels built)\n%ld passed, "
           "0 failed\n", runs, opened, decoded, built, runs);
    return 0;
}
#endif
