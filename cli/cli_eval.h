/* What ppl, kld and generate share: a model with its tokenizer and a
 * runner (fake-quantized under --spec), and a text turned into tokens. */
#ifndef LOWBIT_CLI_EVAL_H
#define LOWBIT_CLI_EVAL_H

#include "cli.h"
#include "cli_gguf.h"
#include "cli_recipe.h"

typedef struct cli_eval_args {
    const char *spec;       /* --spec: the attention and MLP projections */
    const char *spec_attn;  /* --spec-attn: q/k/v/o only (overrides --spec for them) */
    const char *spec_mlp;   /* --spec-mlp: gate/up/down only */
    const char *spec_embed; /* --spec-embed */
    const char *spec_head;  /* --spec-head */
    const char *tokenizer;  /* --tokenizer FILE: instead of the model's own */
    int threads;
    uint32_t max_ctx;
    int fake;               /* --fake: simulate (fp32 copies) instead of computing on packed weights */
    const char *kv;         /* --kv FORMAT: the KV cache's element format */
    const char *act;        /* --act int8|fp8_e4m3: W8A8 activations */
    const char *calib;      /* --calib FILE: static activation scales from this text */
    size_t calib_tokens;    /* --calib-tokens N (default: up to 512, within the context; with a recipe
                               CLI_CALIB_DEFAULT_TOKENS, as quantize) */
    cli_recipe_args recipe; /* --scheme, --recipe, --rule, --keep: the model `lowbit quantize` would write
                               (instead of the --spec options; --kv fp8 then gives its calibrated KV cache) */
    int weights_only;       /* --weights-only: a quantized checkpoint's weights alone (no activation or KV
                               quantization) */
    int qmodel_only;        /* cli_eval_runner stops at the qmodel of a recipe or --type (no runner) */
    int calib_used;         /* the command uses --calib itself (no "unused" note) */
    lb_format decode_act;   /* --decode-act int8|exact: LB_FMT_INT8 or LB_FMT_FP32 (lb_runner_options.decode_act) */
    cli_gguf_args gguf;     /* --type T and llama-quantize's options: the weights as lowbit quantize --format
                               gguf writes them (--rule P=X with X a ggml type joins them) */
} cli_eval_args;

typedef struct cli_eval_model {
    lb_model *model;
    lb_tokenizer *tok;
    lb_runner *runner;
    lb_qmodel *qmodel;      /* with a recipe: what the runner was built from */
    int qmodel_is_recipe;   /* qmodel came from the recipe options (not a checkpoint or --type) */
} cli_eval_model;

/* Takes the shared options (--spec, --spec-attn, --spec-mlp,
 * --spec-embed, --spec-head, --tokenizer, --threads, --fake, --kv, --act,
 * --decode-act, --calib, --calib-tokens, --quiet, and the recipe options of
 * cli_recipe.h: --scheme, --recipe, --rule, --keep) at argv[*i]; 1 if it did (and moved *i), 0 if
 * argv[*i] is not one of them, -1 (reported) on a bad value. */
int cli_eval_option(const char *cmd, int json, int argc, char **argv, int *i, cli_eval_args *a);

/* Opens path with its tokenizer (checked against the model's vocabulary)
 * and, with want_runner, a runner. Returns EXIT_OK or the reported exit
 * code. */
int cli_eval_open(const char *cmd, int json, const char *path, const cli_eval_args *a, int want_runner,
                  cli_eval_model *out);
/* The runner of an opened model (after the text was found long enough). */
int cli_eval_runner(const char *cmd, int json, const cli_eval_args *a, cli_eval_model *e);
/* --kv and --act into o (kv, act, ggml_act) and their combinations with
 * --calib, --calib-tokens and --fake checked. EXIT_OK or reported. */
int cli_eval_formats(const char *cmd, int json, const cli_eval_args *a, lb_runner_options *o);
/* compare --method: the runner of one row, a quantized model built from
 * the --spec options as lb_runner_new would hold them (projections under
 * a->spec, the embedding and an untied head under --spec-embed and
 * --spec-head; --act: the projections' inputs per token, or with --calib
 * static per tensor from the first --calib-tokens (default 512) tokens),
 * then `method` applied on the --calib text before any static scale is
 * calibrated (cli_eval_spec_method.c). */
int cli_eval_method_runner(const char *cmd, int json, const cli_eval_args *a, const cli_recipe_args *method,
                           cli_eval_model *e);
/* Before building runners: the text gives at least one window (usage
 * error otherwise), and a window beyond the model's trained context gets
 * a warning on stderr, as llama.cpp gives one. */
int cli_eval_check_windows(const char *cmd, int json, const lb_model *m, size_t n_tokens, uint32_t ctx);
void cli_eval_close(cli_eval_model *e);
/* The base model's options: a's with everything that quantizes removed
 * (the model as stored, fp32 KV cache); kld's and eval's reference. */
cli_eval_args cli_eval_base_args(const cli_eval_args *a);
/* Whether a's options quantize the model (--spec*, --kv, --act, a recipe
 * or --type): something to compare with the base. */
int cli_eval_compares(const cli_eval_args *a);

/* The whole file as tokens (BOS first when the tokenizer has one). */
int cli_eval_tokens(const char *cmd, int json, const lb_tokenizer *tok, const char *path, int32_t **ids, size_t *n);

/* --ctx N and --chunks N at argv[*i]: 1 taken, 0 not these, -1 reported. */
int cli_parse_window(const char *cmd, int json, int argc, char **argv, int *i, uint32_t *ctx, size_t *chunks);

/* The usage lines of the runner options, for each command's help. */
#define CLI_EVAL_RUNNER_HELP                                                                              \
    "--spec stores the attention and MLP projections quantized and computes on the packed\n"            \
    "codes; --spec-attn and --spec-mlp one class only (overriding --spec); --spec-embed and\n"         \
    "--spec-head the embedding and output head. --fake simulates instead (quantize, then\n"            \
    "dequantize to fp32 copies). --act int8|fp8_e4m3 quantizes the projections' inputs per\n"          \
    "token (W8A8: needs int8 or fp8_e4m3 weights, channel or tensor scale); --calib FILE\n"            \
    "[--calib-tokens N] fixes static activation scales from that text instead. --kv FORMAT\n"          \
    "stores the KV cache as fp32 (default), bf16, fp16, fp8_e4m3, fp8_e5m2, int8 or int4\n"            \
    "(the last four with a scale per token and head). --decode-act int8 rounds the input of\n"     \
    "every product on packed 4-bit (int4, uint4, fp4) or int8 weights to int8 per block of 32\n"  \
    "and sums integer products (faster; README, \"Decode modes\"); exact (the default) does not.\n" \
    "--threads N: N threads (0, the\n"                                                              \
    "default: one per CPU; at most 64). Progress goes to stderr (a line every few seconds\n"    \
    "when it is not a terminal); --quiet or LOWBIT_QUIET=1 turns it off.\n"

/* A quantized checkpoint directory (compressed-tensors, ModelOpt) as MODEL. */
#define CLI_EVAL_CHECKPOINT_HELP                                                                          \
    "A quantized checkpoint directory (compressed-tensors, ModelOpt) runs as an engine computes\n"     \
    "it: its weights, its activation quantization (dynamic, or static with its input scales)\n"     \
    "and its FP8 KV cache with its k/v scales; --weights-only evaluates its weights alone.\n"        \
    "It takes none of --spec, --scheme, --recipe, --rule, --keep, --method, --act, --kv or --calib.\n"

/* The recipe options' paragraph (ppl, kld, generate). */
#define CLI_EVAL_RECIPE_HELP                                                                             \
    "--scheme S, --recipe FILE, --rule PATTERN=SPEC and --keep PATTERN (instead of --spec)\n"   \
    "evaluate exactly the model `lowbit quantize` writes with the same options; schemes\n"    \
    "with static scales (W8A8-FP8-STATIC, NVFP4) and --kv fp8 then need --calib FILE\n"       \
    "(calibrated as quantize does: the first " CLI_STR(CLI_CALIB_DEFAULT_TOKENS) " tokens, windows of " CLI_STR(CLI_CALIB_CTX) ").\n" \
    "--method smoothquant|awq|gptq|awq+gptq --calib FILE transforms that model as quantize\n"    \
    "does, before its static scales are calibrated (also with --type T: awq on the GGUF's types).\n" \
    "--type T (a llama.cpp file type: Q8_0, Q4_K_M, ...) with --pure, --output-tensor-type X,\n"   \
    "--token-embedding-type X, --tensor-type P=X, --leave-output-tensor, --rule P=X (X a ggml\n" \
    "type) and --imatrix FILE or --imatrix-from TEXT (with --include-weights S or\n"             \
    "--exclude-weights S) evaluate the GGUF `lowbit quantize --type T` writes with the same\n"  \
    "options.\n"

/* How the runner was asked to run, beyond --spec: JSON fields (leading
 * comma: "fake", "act", "kv", "calib") with json, else a short text such as
 * " (fake; act int8, static from FILE; kv fp8_e4m3)" ("" when default). */
void cli_eval_print_setup(FILE *out, const cli_eval_args *a, int json);

/* With the recipe options: bits per weight of the model measured and what
 * --outlier-threshold and --keep-sensitive found (cli_recipe_print): JSON
 * fields with json, else lines. Nothing otherwise. */
void cli_eval_print_recipe(FILE *out, const cli_eval_model *e, int json);

/* What the runner holds and the process's resident memory: one line on
 * stdout, or JSON fields (leading comma) with json. */
void cli_eval_print_memory(FILE *out, const lb_runner *r, int json);

/* The saturation counts of the runner's low-precision paths
 * (lb_runner_saturation): JSON fields (leading comma: "saturation": {...})
 * with json, else a line "saturated: kv N of M values (fp16), act N of M
 * values (int8)" when --kv or --act is set; and a warning on stderr naming
 * the path whenever a value saturated, as the results are distorted
 * (out NULL: the warnings only). */
void cli_eval_print_saturation(const char *cmd, FILE *out, const lb_runner *r, const cli_eval_args *a, int json);

/* EXIT_OK when dir is a writable directory whose disk (and the process's
 * file-size limit) holds bytes more; else reported, naming what needs them. */
int cli_check_room(const char *cmd, int json, const char *dir, uint64_t bytes, const char *what);

#endif
