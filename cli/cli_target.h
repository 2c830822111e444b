/* lowbit quantize --target-bpw B | --target-size S | --max-kld K: a spec
 * (or ggml type) per tensor chosen from candidates by measured KLD under a
 * budget, written as a recipe file the quantize run then follows. */
#ifndef LOWBIT_CLI_TARGET_H
#define LOWBIT_CLI_TARGET_H

#include "cli_gguf.h"
#include "cli_recipe.h"

/* Candidate lists by default: llama.cpp's types for a GGUF (each falls
 * back where a tensor's rows do not fit its blocks, as llama-quantize
 * does), the engine formats' weight-only specs otherwise. */
#define CLI_TARGET_GGUF_CANDIDATES "Q3_K,IQ4_XS,Q4_K,Q5_K,Q6_K,Q8_0"
#define CLI_TARGET_SPEC_CANDIDATES \
    "int4:g32:scale=bf16:range=full,int4:g128:scale=bf16:range=full,int8:channel:scale=bf16,keep"
#define CLI_TARGET_MAX_CANDIDATES 16
/* windows of the calibration text the units are measured on, by default */
#define CLI_TARGET_DEFAULT_WINDOWS 8

typedef struct cli_target_args {
    double bpw;             /* --target-bpw */
    double size_bytes;      /* --target-size, bytes */
    double max_kld;         /* --max-kld */
    const char *candidates; /* --candidates LIST; NULL: the defaults above */
    const char *recipe_out; /* --recipe-out FILE; NULL: OUT.recipe.json */
    const char *sweep;      /* --sweep FILE: the measured costs, read if it exists (same run), else written */
    int given;
} cli_target_args;

/* Consumes argv[*i] (and its value) if it is one of the options above: 1
 * consumed, 0 not ours, -1 reported. */
int cli_target_option(const char *cmd, int json, int argc, char **argv, int *i, cli_target_args *t);

typedef struct cli_target_result {
    char recipe[4096]; /* the recipe file written */
    char *json;        /* the choice as a JSON object (malloc'd; NULL without --json) */
} cli_target_result;

/* Builds one quantized model per candidate (with the method of ra, on
 * calib), measures every weight alone under each on the calibration
 * windows (lb_sensitivity), chooses (lb_mix_choose), measures the chosen
 * mix as a whole and the best uniform candidate within the same bits
 * (the mix is replaced by it if that measures better), prints the Pareto
 * front and writes the recipe (a GGUF recipe with gguf). EXIT_OK or
 * reported; out->json is the caller's to free. */
int cli_target_choose(const char *cmd, int json, const char *model, const char *out, int gguf, const cli_gguf_args *gg,
                      const cli_recipe_args *ra, const char *calib, size_t calib_tokens, int threads,
                      const cli_target_args *t, cli_target_result *res);

#define CLI_TARGET_HELP                                                                                     \
    "Mixed precision under a budget (a spec or GGUF type per weight, chosen by measurement):\n"              \
    "  --target-bpw B      bits per weight of all weights (scales counted) at most B\n"                    \
    "  --target-size S     the tensors at most S bytes (e.g. 95MB, 1.2GB; GGUF metadata not counted)\n"     \
    "  --max-kld K         the fewest bits whose predicted KLD (the units' sum) is at most K\n"            \
    "  --candidates LIST   what each weight may become: ggml types for a GGUF (default\n"                  \
    "                      " CLI_TARGET_GGUF_CANDIDATES "), else specs or keep (default\n"                      \
    "                      " CLI_TARGET_SPEC_CANDIDATES ")\n" \
    "  --sweep FILE        keep the measurement: written if FILE does not exist, read (instead of measuring)\n" \
    "                      if it does and was made from the same model, candidates, text and windows\n"   \
    "  --recipe-out FILE   where the chosen recipe goes (default OUT.recipe.json); rerun with --recipe FILE\n" \
    "                      (and the same --imatrix or --method options) for the same file, byte for byte\n"  \
    "  Each weight is quantized alone under each candidate and its KLD measured on --calib FILE\n"        \
    "  (--calib-tokens N, default " CLI_STR(CLI_TARGET_DEFAULT_WINDOWS) " windows of 512), the rest as stored; taking those costs\n" \
    "  as additive, the greedy of bit allocation spends the bits where they save the most KLD per\n"   \
    "  bit. The chosen mix is then measured whole, beside the best uniform candidate within the same\n" \
    "  bits, which is taken instead if it measures better. Prints the Pareto front explored.\n"
#endif
