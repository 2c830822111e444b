/* lowbit quantize --format gguf: llama-quantize's options (--type, --pure,
 * --output-tensor-type, --token-embedding-type, --tensor-type,
 * --leave-output-tensor, --imatrix, --include-weights, --exclude-weights),
 * lowbit's --imatrix-from TEXT, --dry-run, and --rule PATTERN=GGMLTYPE on
 * lowbit's canonical names; the choice and the writing are the library's
 * (lb_gguf_choose, lb_export_gguf). */
#ifndef LOWBIT_CLI_GGUF_H
#define LOWBIT_CLI_GGUF_H

#include "cli.h"
#include "cli_recipe.h"

#define CLI_GGUF_MAX_OVERRIDES 64
/* --rule P=X and a recipe's rules: one per tensor in a chosen mix */
#define CLI_GGUF_MAX_RULES 4096

typedef struct cli_gguf_args {
    const char *type;
    int pure, dry_run, leave_output, given;
    const char *output_type, *embd_type;
    const char *tensor_types[CLI_GGUF_MAX_OVERRIDES];
    size_t n_tensor_types;
    const char *rules[CLI_GGUF_MAX_RULES]; /* --rule PATTERN=GGMLTYPE (canonical names; cli_gguf_take_rules) */
    size_t n_rules;
    const char *imatrix_file;  /* --imatrix FILE (GGUF or legacy .dat) */
    const char *imatrix_text;  /* --imatrix-from TEXT: computed on the model, llama-imatrix's defaults */
    const char *include[CLI_GGUF_MAX_OVERRIDES], *exclude[CLI_GGUF_MAX_OVERRIDES]; /* --include/--exclude-weights */
    size_t n_include, n_exclude;
    const char *tokenizer;     /* lowbit quantize --tokenizer FILE: for --imatrix-from on a model without one */
    lb_imatrix *imatrix;       /* cli_gguf_imatrix's (the caller frees it) */
} cli_gguf_args;

/* Consumes argv[*i] (and its value) if it is a GGUF option: 1 consumed,
 * 0 not ours, -1 reported. */
int cli_gguf_option(const char *cmd, int json, int argc, char **argv, int *i, cli_gguf_args *g);
/* Writing a GGUF: moves the recipe's --rule P=X whose X is a ggml type
 * name (the text after the first '=', as recipe rules split) into g. */
void cli_gguf_take_rules(cli_recipe_args *ra, cli_gguf_args *g);
/* lb_gguf_choose with g's options, --rule P=X made overrides of the
 * weights P matches (a rule matching none is a usage error); types (may be
 * NULL): each entry's ggml type, also filled (and not an error) on a dry
 * run whose types lowbit cannot write yet. EXIT_OK or reported. */
int cli_gguf_choose(const char *cmd, int json, lb_qmodel *q, const cli_gguf_args *g, int threads, int *types);
/* The imatrix of --imatrix FILE or --imatrix-from TEXT (on m, tokenized
 * with tok) into g->imatrix (NULL without either); the combinations
 * llama-quantize refuses, and --include/--exclude-weights without an
 * imatrix, are usage errors. EXIT_OK or reported. */
int cli_gguf_imatrix(const char *cmd, int json, cli_gguf_args *g, const lb_model *m, const lb_tokenizer *tok,
                     int threads);
/* Opens model, chooses the types, applies the method of `method` (on the
 * text at calib; cli_method_apply) and prints the types (dry run) or
 * writes out. mix_json: NULL, or a "mix" object for the JSON output
 * (cli_target_choose's). */
int cli_quantize_gguf(const char *cmd, int json, const char *model, const char *out, const cli_gguf_args *g,
                      const cli_recipe_args *method, const char *calib, int threads, const char *mix_json);

/* A GGUF recipe file (README, "Recipe files"; what --target-bpw writes):
 * {"lowbit_recipe": 1, "format": "gguf", "type": T, "imatrix": FILE or
 * "imatrix_from": TEXT (optional), "rules": [{"match": P, "ggml": X}, ...]}
 * (a "description" anywhere, "mix" at the top: what chose it). */
typedef struct cli_gguf_recipe {
    struct lb__json *root;
    char **rules;
    size_t n_rules;
} cli_gguf_recipe;
/* Whether the file at path is a GGUF recipe ("format": "gguf"). */
int cli_gguf_recipe_is(const char *path);
/* Reads it into g: its type (a --type given must agree), its imatrix
 * (unless one is given), its rules after any --rule; strict: an unknown
 * key, a missing field or a type name ggml lacks is a usage error naming
 * the rule. The strings live in out until cli_gguf_recipe_free. */
int cli_gguf_recipe_load(const char *cmd, int json, const char *path, cli_gguf_args *g, cli_gguf_recipe *out);
void cli_gguf_recipe_free(cli_gguf_recipe *r);

#define CLI_GGUF_HELP                                                                                           \
    "GGUF (--format gguf, or an OUT ending in .gguf): llama-quantize's choices, tensor for tensor\n"            \
    "  --type T            F32 F16 BF16 Q8_0 Q5_0 Q5_1 Q4_0 Q4_1 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M\n"     \
    "                      Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS MXFP4_MOE NVFP4 (case-insensitive; Q3_K, Q4_K,\n"   \
    "                      Q5_K are the _M mixes); types lowbit cannot write yet are refused (the dry run\n"   \
    "                      still shows them)\n"                                                                 \
    "  --pure              every quantized tensor in T's default type (no mix rules)\n"                         \
    "  --output-tensor-type X, --token-embedding-type X   ggml type (q8_0, q6_K, f16, ...) of those tensors\n" \
    "  --tensor-type P=X   tensors whose GGUF name P (a regex) occurs in get ggml type X (repeatable)\n"         \
    "  --rule P=X          the same on lowbit's canonical names (glob, or re:REGEX), X a ggml type name\n"      \
    "  --leave-output-tensor  output.weight keeps its type\n"                                                   \
    "  --imatrix FILE      importance matrix (llama-imatrix's GGUF or legacy .dat, or lowbit imatrix's) for\n"   \
    "                      the quantizers, as llama-quantize --imatrix: each tensor that changes type gets the\n" \
    "                      entry of its GGUF name (none without one; a length that differs is refused, but\n" \
    "                      for token_embd), the mixes take their imatrix rules, and the file records\n"        \
    "                      quantize.imatrix.file, .dataset, .entries_count and .chunks_count\n"               \
    "  --imatrix-from TEXT the same, computed first on MODEL with lowbit imatrix's defaults (windows of 512,\n" \
    "                      all of TEXT; calibrate on other text than you evaluate on); quantize.imatrix.file\n" \
    "                      is not written, as there is no file; --tokenizer FILE for a model without one\n"     \
    "  --include-weights S, --exclude-weights S   only / not the imatrix entries whose name contains S\n"     \
    "                      (repeatable; one or the other)\n"                                                     \
    "  --dry-run           print each tensor's type (a table, or JSON with --json); writes nothing\n"

#endif
