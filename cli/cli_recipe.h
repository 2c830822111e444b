/* The quantization choices every command that builds a quantized model
 * shares (quantize, ppl, kld, generate, compare): --scheme S,
 * --recipe FILE, --rule PATTERN=SPEC (repeatable), --keep PATTERN
 * (repeatable), --kv fp8. Rules given on the command line come first
 * (first match wins), in the order given, then the recipe file's, then the
 * scheme's. */
#ifndef LOWBIT_CLI_RECIPE_H
#define LOWBIT_CLI_RECIPE_H

#include "cli.h"

#define CLI_RECIPE_MAX_RULES 64
/* --keep-sensitive's largest count (more decoder layers than any model has) */
#define CLI_KEEP_SENSITIVE_MAX 1024

/* A macro's value as a string literal, for help texts. */
#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x)

typedef struct cli_recipe_args {
    const char *scheme;                      /* NULL: none */
    const char *recipe_file;                 /* NULL: none */
    const char *rules[CLI_RECIPE_MAX_RULES]; /* "PATTERN=SPEC" or, for --keep, "PATTERN=keep" storage below */
    int rule_is_keep[CLI_RECIPE_MAX_RULES];
    size_t n_rules;
    const char *kv;                          /* "fp8" or NULL */
    size_t keep_sensitive;                   /* --keep-sensitive N: keep the N costliest layers 16-bit; 0: none */
    float outlier_threshold;                 /* --outlier-threshold T: LLM.int8() outlier columns; 0: none */
    /* the outlier method applied to the quantized model (cli_method.c) */
    const char *method;                      /* --method as given; NULL: rtn */
    lb_method method_id;
    const char *alpha;                       /* --alpha as given; NULL: CLI_METHOD_DEFAULT_ALPHA */
    float alpha_value;
    int alpha_search;                        /* --alpha search */
    uint32_t calib_seqs, calib_len;          /* --calib-seqs, --calib-len; 0: the defaults below */
    const char *damp;                        /* --damp as given (GPTQ); NULL: the library's 0.01 */
    double damp_value;
    const char *block;                       /* --block as given (GPTQ); NULL: the library's 128 */
    uint32_t block_value;
    const char *actorder;                    /* --actorder or --no-actorder as given (GPTQ); NULL: act order */
    int file_order;                          /* --no-actorder: GPTQ rounds the columns in the file's order */
    const char *sequential;                  /* --true-sequential or --no-true-sequential as given (GPTQ); NULL:
                                                true-sequential */
    int layer_sequential;                    /* --no-true-sequential: a layer's weights against its unrounded inputs */
    const char *gptq_scales;                 /* --gptq-scales as given (GPTQ); NULL: mse */
    int gptq_minmax;                         /* --gptq-scales minmax */
} cli_recipe_args;

/* The calibration of a method (--method smoothquant|awq|gptq|awq+gptq): calib_seqs
 * windows of calib_len tokens drawn from the --calib text (as the field
 * calibrates: 128 x 512), SmoothQuant's alpha as the paper's default. */
#define CLI_METHOD_DEFAULT_SEQS 128
#define CLI_METHOD_DEFAULT_LEN 512
#define CLI_METHOD_DEFAULT_ALPHA 0.5f
/* GPTQ's, as the library's defaults (lowbit.h lb_method_options), for printing */
#define CLI_METHOD_DEFAULT_DAMP 0.01
#define CLI_METHOD_DEFAULT_BLOCK 128u

/* Consumes argv[*i] (and its value) if it is one of the options above
 * or a method option (--method, --alpha, --calib-seqs, --calib-len,
 * --damp, --block, --[no-]actorder, --gptq-scales):
 * returns 1 (consumed), 0 (not ours) or -1 (reported usage error). */
int cli_recipe_option(const char *cmd, int json, int argc, char **argv, int *i, cli_recipe_args *a);
/* Whether any recipe option was given: not --keep-sensitive or
 * --outlier-threshold alone (they refine a recipe), nor the method options
 * (they say what to do to a recipe's model, and are no recipe themselves). */
int cli_recipe_given(const cli_recipe_args *a);

/* The method options (cli_method.c): cli_recipe_option's part (1
 * consumed, 0 not a method option, -1 reported). */
int cli_method_option(const char *cmd, int json, int argc, char **argv, int *i, cli_recipe_args *a);
/* Whether a method other than rtn was asked for. */
int cli_method_given(const cli_recipe_args *a);
/* An importance matrix (--imatrix, --imatrix-from) with a method that
 * rescales input channels (smoothquant, awq, awq+gptq) is a usage error;
 * with rtn or gptq it is used. EXIT_OK or the reported exit code. */
int cli_method_imatrix_check(const char *cmd, int json, const cli_recipe_args *a, int has_imatrix);
/* Their combination, before any work: --alpha only with smoothquant,
 * --damp, --block, --[no-]actorder and --gptq-scales only with gptq or awq+gptq; a
 * method other than rtn needs calib (the --calib FILE; a usage error
 * naming the shipped calibration texts otherwise); --calib-seqs and
 * --calib-len without one are noted on stderr as unused. EXIT_OK or the
 * reported exit code. */
int cli_method_check(const char *cmd, int json, const cli_recipe_args *a, const char *calib);
/* lb_qmodel_apply_method on q with the text at calib (tokenized with tok,
 * BOS first when the model adds one); nothing for rtn. Methods change the
 * weights, so this comes after the recipe is applied and before static
 * scales are calibrated or anything is exported. EXIT_OK or reported. */
int cli_method_apply(const char *cmd, int json, lb_qmodel *q, const lb_tokenizer *tok, const char *calib,
                     const cli_recipe_args *a, int threads);
/* The method as JSON fields (leading comma: "method", "alpha",
 * "calib_seqs", "calib_len", and for gptq and awq+gptq "damp", "block",
 * "actorder", "gptq_scales") or as text ("awq, 128 x 512 tokens of FILE"; "rtn" alone
 * for none). */
void cli_method_print(FILE *out, const cli_recipe_args *a, const char *calib, int json);
/* The recipe the options say (none: an empty recipe, every weight 16-bit,
 * with --kv fp8 the KV cache alone); EXIT_OK or a reported exit code. */
int cli_recipe_build(const char *cmd, int json, const cli_recipe_args *a, lb_recipe **out);
/* A qmodel over m with the recipe applied (lb_qmodel_new +
 * lb_qmodel_apply); EXIT_OK or a reported exit code (a rule that matches
 * nothing is a usage error). */
int cli_recipe_qmodel(const char *cmd, int json, const lb_model *m, const lb_recipe *r, lb_qmodel **out);
/* Whether the qmodel has static scales to calibrate (static or local
 * activations, an FP8 KV cache). */
int cli_recipe_needs_calib(const lb_qmodel *q);
/* lb_calibrate on the first max_tokens (0: CLI_CALIB_DEFAULT_TOKENS)
 * tokens of the text file at path, windows of CLI_CALIB_CTX: quantize and
 * the evaluation commands call this one function, so they calibrate the
 * same way and evaluate what quantize writes. */
#define CLI_CALIB_DEFAULT_TOKENS 4096
#define CLI_CALIB_CTX 512
int cli_recipe_calibrate(const char *cmd, int json, lb_qmodel *q, const lb_tokenizer *tok, const char *path,
                         size_t max_tokens, int threads);

/* What the steps after the recipe found (cli_recipe_prepare), for the
 * commands to print. */
typedef struct cli_recipe_steps {
    const char *calib;          /* the calibration text */
    int outliers;               /* --outlier-threshold ran */
    float threshold;
    uint64_t outlier_columns;   /* columns set over all weights */
    double outlier_seconds;
    lb_layer_kld *ranking;      /* --keep-sensitive ran: [n_layers], largest KLD first; else NULL */
    size_t n_layers, keep;
    size_t windows;             /* of ctx tokens, measured on */
    uint32_t ctx;
    double sensitivity_seconds;
} cli_recipe_steps;
/* 1 if the options ask for steps on the calibration text beyond static
 * scales (--keep-sensitive, --outlier-threshold). */
int cli_recipe_wants_calib(const cli_recipe_args *a);
/* The steps on the calibration text at path (its first max_tokens tokens;
 * 0: CLI_CALIB_DEFAULT_TOKENS), in order: outlier columns
 * (--outlier-threshold: lb_qmodel_select_outliers), static scales (when
 * the qmodel has them: lb_calibrate, as cli_recipe_calibrate), layer
 * sensitivity (--keep-sensitive: lb_qmodel_keep_sensitive on windows of
 * CLI_CALIB_CTX, BOS first). EXIT_OK or a reported exit code; out is
 * cli_recipe_steps_free'd by the caller either way. */
int cli_recipe_prepare(const char *cmd, int json, const cli_recipe_args *a, lb_qmodel *q, const lb_tokenizer *tok,
                       const char *path, size_t max_tokens, int threads, cli_recipe_steps *out);
void cli_recipe_steps_free(cli_recipe_steps *s);
/* What the recipe's model costs and what the steps found: JSON fields
 * (leading commas: "bits_per_weight", "layer_bits_per_weight",
 * "outlier_columns", "outlier_threshold", "sensitivity") with json, else
 * lines of text (bits per weight; the layer ranking). */
void cli_recipe_print(FILE *out, const lb_qmodel *q, const cli_recipe_steps *s, int json);

/* `lowbit quantize --list`: every scheme with its weights, activations and
 * bits per weight (of a CLI_SCHEME_BPW_SIZE square matrix, every scale
 * counted), as a table or JSON on stdout. Returns EXIT_OK. */
#define CLI_SCHEME_BPW_SIZE 4096
int cli_scheme_list(int json);

/* The help lines of the options, for usage texts. */
#define CLI_RECIPE_HELP                                                                                 \
    "  --scheme S[:gN]     a named scheme (lowbit quantize --list): W4A16, W8A8-FP8, NVFP4, ...;\n"    \
    "                      :gN sets the group size of W4A16, W4A16-ASYM, W8A16, W8A8-INT8, FP8-BLOCK\n" \
    "  --recipe FILE       a JSON recipe file (README, \"Recipe files\")\n"                             \
    "  --rule PATTERN=SPEC quantize the weights matching PATTERN (glob, or re:REGEX) under SPEC\n"      \
    "  --keep PATTERN      keep the weights matching PATTERN in 16-bit\n"                              \
    "  --keep-sensitive N  keep in 16-bit the N decoder layers whose quantization costs the most KLD,\n"   \
    "                      each measured alone on --calib FILE (windows of " CLI_STR(CLI_CALIB_CTX) "; --calib-tokens, default\n" \
    "                      " CLI_STR(CLI_CALIB_DEFAULT_TOKENS) "); prints the ranking\n"                                        \
    "  --outlier-threshold T  LLM.int8() outlier columns: the input features whose largest |x| on --calib\n" \
    "                      FILE exceeds T (paper: 6) keep their weight columns in 16-bit beside the\n"   \
    "                      quantized rest (ppl, kld, generate only: no engine format carries them)\n"  \
    "  --kv fp8            FP8 KV cache with calibrated per-layer scales\n"                          \
    CLI_METHOD_HELP

/* The method options' help lines. */
#define CLI_METHOD_HELP                                                                                   \
    "  --method M          rtn (round to nearest, the default), smoothquant (Xiao et al. 2023: for\n"    \
    "                      quantized activations, W8A8) or awq (Lin et al. 2024: for weight-only\n"      \
    "                      specs): scales per input channel, calibrated on --calib FILE, folded\n"       \
    "                      into the norms and layers in front, so the output needs nothing special;\n" \
    "                      gptq (Frantar et al. 2023: any weight spec): each weight column rounded in\n" \
    "                      turn, its error compensated in the columns left, layer after layer on\n"   \
    "                      the inputs of the layers already quantized; awq+gptq: awq, then gptq\n"     \
    "  --alpha A|search    SmoothQuant's migration strength in [0, 1] (default 0.5), or chosen per\n"  \
    "                      layer by output error\n"                                                      \
    "  --damp D            GPTQ's dampening, a fraction in (0, 1] of the Hessian's mean diagonal\n"   \
    "                      (default 0.01; raised, with a warning, where the Hessian needs more)\n"   \
    "  --block B           GPTQ's columns per lazy batch update (default 128; speed only)\n"         \
    "  --actorder          GPTQ rounds the columns of largest input energy first (the default; scales\n" \
    "                      of every group fixed before rounding; stored in the original order)\n"  \
    "  --no-actorder       GPTQ rounds the columns in the file's order\n"                          \
    "  --true-sequential   GPTQ rounds a layer's weights in model order, each against the inputs the\n" \
    "                      weights before it in the layer make rounded (the default; the reference\n" \
    "                      code's flag): o_proj after q/k/v, down_proj after gate/up\n"              \
    "  --no-true-sequential  every weight of a layer against the unrounded layer's inputs\n"        \
    "                      (llm-compressor's pipeline; runs each layer twice)\n"                      \
    "  --gptq-scales S     how GPTQ chooses each group's scales before rounding it: mse (default:\n"  \
    "                      the clipping of least squared error, as a spec's clip=mse; where the\n"   \
    "                      scales take it: not e8m0, two-level or GGUF types, whose blocks take\n"     \
    "                      llama.cpp's search) or minmax (the group's range, as\n"                     \
    "                      round-to-nearest and the paper's code). The checkpoint's format is the same\n" \
    "  --calib FILE        the calibration text of a method (and of static scales): never the text\n" \
    "                      you evaluate on. Shipped: data/wikitext-2-raw/wiki.train.excerpt.raw\n"     \
    "                      (general models), data/tinystories/calib-excerpt.txt (stories260K)\n"       \
    "  --calib-seqs N      a method's calibration windows (default " CLI_STR(CLI_METHOD_DEFAULT_SEQS) ", fewer if the text is short),\n" \
    "  --calib-len L       of L tokens each (default " CLI_STR(CLI_METHOD_DEFAULT_LEN) ", at most the model's context), drawn\n"       \
    "                      deterministically from the text's non-overlapping windows\n"

#endif
