#include "cli_eval.h"

#include <stdlib.h>
#include <string.h>

#include "cli_model.h"
#include "cli_output.h"

/* How the last checkpoint runner evaluated (cli_eval_print_setup): 0 not a
 * checkpoint, 1 as the engine computes it, 2 its weights alone. */
static int checkpoint_mode;

static int gguf_runner(const char *cmd, int json, const cli_eval_args *a, cli_eval_model *e);

int cli_eval_option(const char *cmd, int json, int argc, char **argv, int *i, cli_eval_args *a)
{
    /* compare sweeps --spec rows: a GGUF type is no row */
    int g = strcmp(argv[*i], "--dry-run") == 0 || strcmp(cmd, "compare") == 0
                ? 0 : cli_gguf_option(cmd, json, argc, argv, i, &a->gguf);
    if (g) return g;
    const char *o = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    const char **slot = strcmp(o, "--spec") == 0         ? &a->spec
                        : strcmp(o, "--spec-attn") == 0  ? &a->spec_attn
                        : strcmp(o, "--spec-mlp") == 0   ? &a->spec_mlp
                        : strcmp(o, "--spec-embed") == 0 ? &a->spec_embed
                        : strcmp(o, "--spec-head") == 0  ? &a->spec_head
                        : strcmp(o, "--tokenizer") == 0  ? &a->tokenizer
                                                          : NULL;
    if (strcmp(o, "--fake") == 0) {
        a->fake = 1;
        return 1;
    }
    if (strcmp(o, "--quiet") == 0) {
        cli_progress_set_quiet(1);
        return 1;
    }
    if (strcmp(o, "--weights-only") == 0) {
        a->weights_only = 1;
        return 1;
    }
    if (strcmp(o, "--decode-act") == 0) {
        if (!v || (strcmp(v, "int8") != 0 && strcmp(v, "exact") != 0))
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--decode-act takes int8 (activations rounded to "
                            "int8 per block of 32, integer dot products) or exact, not '%s'", v ? v : ""), -1;
        a->decode_act = strcmp(v, "int8") == 0 ? LB_FMT_INT8 : LB_FMT_FP32;
        *i += 1;
        return 1;
    }
    if (!slot) slot = strcmp(o, "--kv") == 0 ? &a->kv : strcmp(o, "--act") == 0 ? &a->act
                      : strcmp(o, "--calib") == 0 ? &a->calib : NULL;
    int threads = strcmp(o, "--threads") == 0, calib_tokens = strcmp(o, "--calib-tokens") == 0;
    if (!slot && !threads && !calib_tokens) /* --kv is ours (a slot above): the recipe's fp8 is one of its values */
        return cli_recipe_option(cmd, json, argc, argv, i, &a->recipe);
    if (!v) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s needs a value", o), -1;
    if (calib_tokens) {
        char *end;
        long long t = strtoll(v, &end, 10);
        if (*end || t < 1 || t > (1 << 20))
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--calib-tokens takes 1..1048576, not '%s'", v), -1;
        a->calib_tokens = (size_t)t;
    } else if (threads) {
        if (cli_parse_threads(cmd, json, v, &a->threads) != EXIT_OK) return -1;
    } else {
        int is_spec = slot == &a->spec || slot == &a->spec_attn || slot == &a->spec_mlp || slot == &a->spec_embed ||
                      slot == &a->spec_head;
        if (is_spec && strchr(v, ',')) /* a list: lb_qspec_parse would only say "unknown part" */
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument",
                            strcmp(cmd, "compare") == 0 ? "%s takes one spec ('%s' is several): the rows come from --spec"
                                                        : "%s takes one spec ('%s' is several); use compare for several",
                            o, v), -1;
        *slot = v;
    }
    *i += 1;
    return 1;
}

static int parse_spec(const char *cmd, int json, const char *text, lb_qspec *spec, const lb_qspec **slot)
{
    *slot = NULL;
    if (!text) return EXIT_OK;
    if (cli_plain_float_spec(text, spec)) { /* the runner rounds to it, no scale */
        *slot = spec;
        return EXIT_OK;
    }
    lb_status st = lb_qspec_parse(text, spec);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_USAGE, st);
    *slot = spec;
    return EXIT_OK;
}

/* --kv and --act name formats; each allows a few */
static int parse_format(const char *cmd, int json, const char *opt, const char *text, const lb_format *allowed,
                        size_t n_allowed, lb_format *out)
{
    *out = LB_FMT_FP32;
    if (!text) return EXIT_OK;
    lb_format f;
    if (lb_format_by_name(text, &f) == LB_OK)
        for (size_t i = 0; i < n_allowed; i++)
            if (allowed[i] == f) return *out = f, EXIT_OK;
    char list[256] = "";
    for (size_t i = 0; i < n_allowed; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", lb_format_get(allowed[i])->name);
    return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s takes %s, not '%s'", opt, list, text);
}

int cli_eval_formats(const char *cmd, int json, const cli_eval_args *a, lb_runner_options *o)
{
    static const lb_format kv[] = {LB_FMT_FP32, LB_FMT_BF16, LB_FMT_FP16, LB_FMT_FP8_E4M3, LB_FMT_FP8_E5M2, LB_FMT_INT8, LB_FMT_INT4};
    static const lb_format act[] = {LB_FMT_INT8, LB_FMT_FP8_E4M3};
    int rc = parse_format(cmd, json, "--kv", a->kv, kv, sizeof kv / sizeof *kv, &o->kv);
    /* --act ggml: each GGUF block-typed weight's input rounded as llama.cpp's CPU matmul quantizes it */
    o->ggml_act = a->act && strcmp(a->act, "ggml") == 0;
    if (rc == EXIT_OK && !o->ggml_act)
        rc = parse_format(cmd, json, "--act", a->act, act, sizeof act / sizeof *act, &o->act);
    if (rc == EXIT_OK && o->ggml_act && a->calib)
        rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--act ggml rounds as llama.cpp does, per block at run "
                      "time: it takes no --calib");
    if (rc == EXIT_OK && a->calib && !a->act)
        rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--calib sets static activation scales: it needs --act");
    if (rc == EXIT_OK && a->calib_tokens && !a->calib)
        rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--calib-tokens needs --calib FILE");
    if (rc == EXIT_OK && a->fake && !a->spec && !a->spec_attn && !a->spec_mlp && !a->spec_embed && !a->spec_head)
        rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--fake simulates a --spec: give one");
    if (rc == EXIT_OK && a->act && a->fake)
        rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--act runs on packed weights: it does not combine with --fake");
    return rc;
}

/* Static activation scales: the first tokens of the calibration text. */
static int calibrate(const char *cmd, int json, const cli_eval_args *a, cli_eval_model *e)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = cli_eval_tokens(cmd, json, e->tok, a->calib, &ids, &n);
    if (rc != EXIT_OK) return rc;
    /* BOS alone is no calibration: the scales would come from one token
     * that every window starts with, and clip everything else */
    size_t text_tokens = n - (n && lb_tokenizer_add_bos(e->tok) && ids[0] == lb_tokenizer_bos(e->tok));
    if (text_tokens == 0) {
        free(ids);
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "the calibration text %s is empty (no tokens besides "
                        "BOS): --calib needs text like the one measured", a->calib);
    }
    size_t want = a->calib_tokens ? a->calib_tokens : 512; /* the runner cuts them into windows of its context */
    if (n > want) n = want;
    lb_status st = lb_runner_calibrate(e->runner, ids, n);
    free(ids);
    return st == LB_OK ? EXIT_OK : cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
}

/* The KV format the last recipe runner got (a recipe file's kv_cache
 * counts, not only --kv), for cli_eval_print_setup: one command runs per
 * process. */
static lb_format recipe_kv = LB_FMT_FP32;
/* Whether that recipe had static scales to calibrate on --calib (else
 * --calib served a method alone, or nothing). */
static int recipe_static;

/* The recipe options: the qmodel `lowbit quantize` builds from them
 * (same recipe, same calibration), and a runner over it. */
/* What the last recipe runner's steps on the calibration text found
 * (cli_eval_print_recipe), as recipe_kv. */
static cli_recipe_steps recipe_steps;

void cli_eval_print_recipe(FILE *out, const cli_eval_model *e, int json)
{
    if (!e->qmodel || checkpoint_mode || !e->qmodel_is_recipe) return;
    cli_recipe_print(out, e->qmodel, &recipe_steps, json);
}

static int recipe_runner(const char *cmd, int json, const cli_eval_args *a, cli_eval_model *e)
{
    if (a->spec || a->spec_attn || a->spec_mlp || a->spec_embed || a->spec_head || a->act)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--scheme, --recipe, --rule and --keep say how every "
                        "weight and activation is quantized: they do not combine with --spec* or --act");
    cli_recipe_args ra = a->recipe;
    ra.kv = NULL;
    if (a->kv && strcmp(a->kv, "fp32") != 0) {
        if (strcmp(a->kv, "fp8") != 0 && strcmp(a->kv, "fp8_e4m3") != 0)
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "with a recipe, --kv takes fp8 (FP8 E4M3 with "
                            "calibrated per-layer scales, what quantize writes), not '%s'", a->kv);
        ra.kv = "fp8";
    }
    if (a->calib_tokens && !a->calib)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--calib-tokens needs --calib FILE");
    lb_recipe *r;
    int rc = cli_recipe_build(cmd, json, &ra, &r);
    if (rc != EXIT_OK) return rc;
    lb_status st = lb_runner_supports(e->model, a->max_ctx);
    if (st != LB_OK) rc = cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    if (rc == EXIT_OK) rc = cli_recipe_qmodel(cmd, json, e->model, r, &e->qmodel);
    e->qmodel_is_recipe = rc == EXIT_OK;
    lb_recipe_free(r);
    if (rc != EXIT_OK) return rc;
    recipe_kv = lb_qmodel_kv(e->qmodel);
    int needs = cli_recipe_needs_calib(e->qmodel), wants = cli_recipe_wants_calib(&ra);
    recipe_static = needs;
    if ((needs || wants) && !a->calib)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s: give --calib FILE, text like the one measured "
                        "(never the evaluation text itself)", needs ? "the recipe has static scales (static or NVFP4 "
                        "activations, or --kv fp8)" : "--keep-sensitive and --outlier-threshold measure on a "
                        "calibration text");
    if (!needs && !wants && a->calib && !cli_method_given(&ra) && !a->calib_used) /* a loop over schemes passes --calib to all: a note */
        fprintf(stderr, "lowbit %s: note: --calib %s is unused: the recipe has no static scales to calibrate (its "
                "activations are dynamic or 16-bit, no --kv fp8) and no --method\n", cmd, a->calib);
    /* the method changes the weights; outlier columns, static scales and the layer sensitivity are then
     * taken on the transformed model, as quantize does */
    if ((rc = cli_method_apply(cmd, json, e->qmodel, e->tok, a->calib, &ra, a->threads)) != EXIT_OK) return rc;
    cli_recipe_steps_free(&recipe_steps);
    if ((needs || wants) && (rc = cli_recipe_prepare(cmd, json, &ra, e->qmodel, e->tok, a->calib, a->calib_tokens,
                                                     a->threads, &recipe_steps)) != EXIT_OK)
        return rc;
    if (a->qmodel_only) return EXIT_OK;
    cli_progress_ctx loading = {cmd, "loading layer", NULL};
    lb_runner_options o = {.threads = a->threads, .max_ctx = a->max_ctx, .fake = a->fake,
                           .progress = cli_progress_fn, .progress_ctx = &loading, .decode_act = a->decode_act};
    st = lb_runner_from_qmodel(e->qmodel, &o, &e->runner);
    if (st != LB_OK) return cli_fail_lb(cmd, json, st == LB_ERR_ARG || st == LB_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME, st);
    return EXIT_OK;
}


/* A quantized checkpoint: the qmodel it holds (weights, activations, KV
 * cache), nothing on top. */
static int checkpoint_runner(const char *cmd, int json, const cli_eval_args *a, cli_eval_model *e)
{
    const char *given = cli_recipe_given(&a->recipe) ? "--scheme, --recipe, --rule or --keep"
                        : a->recipe.method || a->recipe.alpha || a->recipe.calib_seqs || a->recipe.calib_len
                            ? "--method, --alpha, --calib-seqs or --calib-len"
                        : a->spec || a->spec_attn || a->spec_mlp || a->spec_embed || a->spec_head ? "--spec"
                        : a->act ? "--act" : a->kv ? "--kv" : a->calib ? "--calib" : a->fake ? "--fake" : NULL;
    const lb_model_quant *mq = lb_model_quantization(e->model);
    if (given)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "the model is a quantized checkpoint (%s, %s): it says "
                        "how its weights, activations and KV cache are quantized, and %s would quantize its "
                        "dequantized weights again. Evaluate it as it is (--weights-only for its weights alone), or "
                        "give %s the 16-bit model it was made from", mq->method, mq->format, given, given);
    lb_status st = lb_runner_supports(e->model, a->max_ctx);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    st = lb_qmodel_from_checkpoint(e->model, a->weights_only ? LB_CKPT_WEIGHTS_ONLY : 0, &e->qmodel);
    /* what the config asks that lowbit does not simulate is said (and --weights-only offered), never guessed at */
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    checkpoint_mode = a->weights_only ? 2 : 1;
    cli_progress_ctx loading = {cmd, "loading layer", NULL};
    lb_runner_options o = {.threads = a->threads, .max_ctx = a->max_ctx, .progress = cli_progress_fn,
                           .progress_ctx = &loading, .decode_act = a->decode_act};
    st = lb_runner_from_qmodel(e->qmodel, &o, &e->runner);
    return st == LB_OK ? EXIT_OK : cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
}

int cli_eval_runner(const char *cmd, int json, const cli_eval_args *a, cli_eval_model *e)
{
    if (lb_model_quantization(e->model)) return checkpoint_runner(cmd, json, a, e);
    if (a->weights_only)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--weights-only evaluates a quantized checkpoint "
                        "directory's weights without its activation and KV-cache quantization; this model is not "
                        "one (it has no quantization_config)");
    int rc = EXIT_OK;
    if (cli_method_given(&a->recipe) && !a->gguf.given && !cli_recipe_given(&a->recipe))
        rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--method %s transforms the quantized model that "
                      "--scheme, --recipe, --rule or --type T describe (what lowbit quantize writes); --spec runs "
                      "no such model: give e.g. --rule 'model.layers.*=SPEC' instead of --spec SPEC", a->recipe.method);
    if (rc == EXIT_OK) rc = cli_method_check(cmd, json, &a->recipe, a->calib);
    if (rc != EXIT_OK) return rc;
    if (a->gguf.given) return gguf_runner(cmd, json, a, e);
    if (cli_recipe_given(&a->recipe)) return recipe_runner(cmd, json, a, e);
    lb_qspec attn, mlp, embed, head;
    cli_progress_ctx loading = {cmd, "loading layer", NULL};
    lb_runner_options o = {.threads = a->threads, .max_ctx = a->max_ctx, .fake = a->fake,
                           .progress = cli_progress_fn, .progress_ctx = &loading, .decode_act = a->decode_act};
    rc = parse_spec(cmd, json, a->spec_attn ? a->spec_attn : a->spec, &attn, &o.attn);
    if (rc == EXIT_OK) rc = parse_spec(cmd, json, a->spec_mlp ? a->spec_mlp : a->spec, &mlp, &o.mlp);
    if (rc == EXIT_OK) rc = parse_spec(cmd, json, a->spec_embed, &embed, &o.embed);
    if (rc == EXIT_OK) rc = parse_spec(cmd, json, a->spec_head, &head, &o.head);
    if (rc == EXIT_OK) rc = cli_eval_formats(cmd, json, a, &o);
    if (rc != EXIT_OK) return rc;
    /* a model the forward pass cannot run is the input's fault, not the command line's */
    lb_status st = lb_runner_supports(e->model, o.max_ctx);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    st = lb_runner_new(e->model, &o, &e->runner);
    if (st != LB_OK) return cli_fail_lb(cmd, json, st == LB_ERR_ARG || st == LB_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME, st);
    return a->calib ? calibrate(cmd, json, a, e) : EXIT_OK;
}

/* The recipe options as given: JSON fields, or " (scheme S; recipe F;
 * rules A=B, C=keep; kv fp8, calibrated on F)". */
static void print_recipe(FILE *out, const cli_eval_args *a, int json)
{
    const cli_recipe_args *r = &a->recipe;
    if (json) {
        fprintf(out, ", \"scheme\": ");
        if (r->scheme) json_string(out, r->scheme);
        else fprintf(out, "null");
        fprintf(out, ", \"recipe\": ");
        if (r->recipe_file) json_string(out, r->recipe_file);
        else fprintf(out, "null");
        fprintf(out, ", \"rules\": [");
        for (size_t k = 0; k < r->n_rules; k++) {
            char rule[1200];
            snprintf(rule, sizeof rule, "%s%s", r->rules[k], r->rule_is_keep[k] ? "=keep" : "");
            if (k) fprintf(out, ", ");
            json_string(out, rule);
        }
        fprintf(out, "], \"keep_sensitive\": %zu, \"fake\": %s, \"kv\": ", r->keep_sensitive, a->fake ? "true" : "false");
        json_string(out, recipe_kv == LB_FMT_FP8_E4M3 ? "fp8" : "fp32");
        fprintf(out, ", \"calib\": ");
        json_string(out, a->calib ? a->calib : "");
        cli_method_print(out, r, a->calib, 1);
        return;
    }
    const char *sep = " (";
    if (r->scheme) fprintf(out, "%sscheme %s", sep, r->scheme), sep = "; ";
    if (r->recipe_file) fprintf(out, "%srecipe %s", sep, r->recipe_file), sep = "; ";
    for (size_t k = 0; k < r->n_rules; k++)
        fprintf(out, "%s%s%s%s", k ? ", " : sep, k ? "" : "rules ", r->rules[k], r->rule_is_keep[k] ? "=keep" : ""),
            sep = "; ";
    if (r->keep_sensitive) fprintf(out, "%skeep-sensitive %zu", sep, r->keep_sensitive), sep = "; ";
    if (r->outlier_threshold > 0) fprintf(out, "%soutlier columns above %g", sep, (double)r->outlier_threshold), sep = "; ";
    if (a->fake) fprintf(out, "%sfake", sep), sep = "; ";
    if (recipe_kv == LB_FMT_FP8_E4M3) fprintf(out, "%skv fp8", sep), sep = "; ";
    if (a->calib && recipe_static) fprintf(out, "%scalibrated on %s", sep, a->calib), sep = "; ";
    if (cli_method_given(r)) {
        fprintf(out, "%s", sep);
        cli_method_print(out, r, a->calib, 0);
    }
    fputc(')', out);
}

void cli_eval_print_setup(FILE *out, const cli_eval_args *a, int json)
{
    if (checkpoint_mode) {
        if (json) fprintf(out, ", \"checkpoint\": \"%s\"", checkpoint_mode == 2 ? "weights-only" : "engine");
        else fprintf(out, " (%s)", checkpoint_mode == 2 ? "checkpoint weights only" : "checkpoint as an engine runs it");
        return;
    }
    if (cli_recipe_given(&a->recipe)) {
        print_recipe(out, a, json);
        return;
    }
    if (json) {
        fprintf(out, ", \"fake\": %s, \"act\": ", a->fake ? "true" : "false");
        json_string(out, a->act ? a->act : "fp32");
        fprintf(out, ", \"kv\": ");
        json_string(out, a->kv ? a->kv : "fp32");
        fprintf(out, ", \"calib\": ");
        json_string(out, a->calib ? a->calib : "");
        cli_method_print(out, &a->recipe, a->calib, 1);
        return;
    }
    if (cli_method_given(&a->recipe)) { /* --type T with a method */
        fprintf(out, " (");
        cli_method_print(out, &a->recipe, a->calib, 0);
        fputc(')', out);
        return;
    }
    if (!a->fake && !a->act && !a->kv) return;
    const char *sep = " (";
    if (a->fake) fprintf(out, "%sfake", sep), sep = "; ";
    if (a->act && strcmp(a->act, "ggml") == 0) fprintf(out, "%sact as llama.cpp's CPU matmuls round it", sep), sep = "; ";
    else if (a->act) fprintf(out, "%sact %s%s%s", sep, a->act, a->calib ? ", static from " : ", per token", a->calib ? a->calib : ""), sep = "; ";
    if (a->kv) fprintf(out, "%skv %s", sep, a->kv);
    fputc(')', out);
}

/* VmRSS and VmHWM (peak) from /proc/self/status, in bytes; 0 where absent */
static void resident(unsigned long long *now, unsigned long long *peak)
{
    *now = *peak = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) *now = kb * 1024;
        if (sscanf(line, "VmHWM: %llu kB", &kb) == 1) *peak = kb * 1024;
    }
    fclose(f);
}

void cli_eval_print_memory(FILE *out, const lb_runner *r, int json)
{
    lb_runner_memory m;
    lb_runner_memory_get(r, &m);
    unsigned long long rss, peak;
    resident(&rss, &peak);
    if (json) {
        fprintf(out, ", \"memory\": {\"weights_bytes\": %llu, \"weights_fp32_bytes\": %llu, \"other_bytes\": %llu, "
               "\"kv_cache_bytes\": %llu, \"packed_matrices\": %llu, \"fp32_matrices\": %llu, \"rss_bytes\": %llu, "
               "\"rss_peak_bytes\": %llu, \"decode_act\": \"%s\", \"int8_act_matrices\": %llu, "
               "\"int8_kernels\": \"%s\"}",
               (unsigned long long)m.weights, (unsigned long long)m.weights_fp32, (unsigned long long)m.other,
               (unsigned long long)m.kv_cache, (unsigned long long)m.packed_matrices,
               (unsigned long long)m.fp32_matrices, rss, peak, m.decode_act == LB_FMT_INT8 ? "int8" : "exact",
               (unsigned long long)m.int8_act_matrices, m.int8_kernels);
        return;
    }
    const double mib = 1024.0 * 1024.0;
    fprintf(out, "memory: weight matrices %.1f MiB as held (%llu packed, %llu fp32; all fp32: %.1f MiB), "
           "other %.1f MiB, KV cache %.1f MiB; resident now %.1f MiB (peak %.1f)\n",
           m.weights / mib, (unsigned long long)m.packed_matrices, (unsigned long long)m.fp32_matrices,
           m.weights_fp32 / mib, m.other / mib, m.kv_cache / mib, rss / mib, peak / mib);
    if (m.decode_act == LB_FMT_INT8) /* what the mode reached: a GGUF's ggml blocks and fp32 copies stay exact */
        fprintf(out, "decode activations: int8 on %llu of %llu matrices, kernels %s (the rest exact: %s)\n",
                (unsigned long long)m.int8_act_matrices, (unsigned long long)(m.packed_matrices + m.fp32_matrices),
                m.int8_kernels, m.int8_act_matrices == m.packed_matrices + m.fp32_matrices ? "none"
                : "fp32 copies, other ggml blocks than the K-quants, IQ4, Q4_0, Q5_0, Q8_0 and MXFP4, and formats "
                  "these kernels do not take or whose blocks do not fit them");
}

void cli_eval_print_saturation(const char *cmd, FILE *out, const lb_runner *r, const cli_eval_args *a, int json)
{
    lb_runner_saturation s;
    lb_runner_saturation_get(r, &s);
    const char *kv = a->kv ? a->kv : checkpoint_mode == 1 ? "fp8_e4m3" : "fp32",
               *act = a->act ? a->act : checkpoint_mode == 1 ? "8-bit" : "fp32";
    if (out && json) {
        fprintf(out, ", \"saturation\": {\"kv\": %llu, \"kv_values\": %llu, \"act\": %llu, \"act_values\": %llu}",
                (unsigned long long)s.kv_saturated, (unsigned long long)s.kv_values,
                (unsigned long long)s.act_saturated, (unsigned long long)s.act_values);
    } else if (out && (a->kv || a->act)) {
        int ggml = a->act && strcmp(a->act, "ggml") == 0; /* block scales never saturate: nothing to count */
        if (ggml && !a->kv) return;
        fprintf(out, "saturated:");
        if (a->kv) fprintf(out, " kv %llu of %llu values (%s)%s", (unsigned long long)s.kv_saturated,
                           (unsigned long long)s.kv_values, kv, a->act && !ggml ? "," : "");
        if (a->act && !ggml) fprintf(out, " act %llu of %llu values (%s)", (unsigned long long)s.act_saturated,
                            (unsigned long long)s.act_values, act);
        fputc('\n', out);
    }
    if (s.kv_saturated && checkpoint_mode)
        fprintf(stderr, "lowbit %s: note: %llu of %llu KV cache values were beyond the checkpoint's k/v scales and "
                "saturated to fp8_e4m3's largest value, as an engine saturates them\n", cmd,
                (unsigned long long)s.kv_saturated, (unsigned long long)s.kv_values);
    else if (s.kv_saturated)
        fprintf(stderr, "lowbit %s: warning: %llu of %llu KV cache values were beyond %s's range and saturated to its "
                "largest value: the results are distorted (a wider --kv keeps them)\n", cmd,
                (unsigned long long)s.kv_saturated, (unsigned long long)s.kv_values, kv);
    if (s.act_saturated && checkpoint_mode)
        fprintf(stderr, "lowbit %s: note: %llu of %llu activations were beyond the checkpoint's static input scales "
                "and clipped, as an engine clips them\n", cmd, (unsigned long long)s.act_saturated,
                (unsigned long long)s.act_values);
    else if (s.act_saturated)
        fprintf(stderr, "lowbit %s: warning: %llu of %llu %s activations were beyond the static --calib scales and "
                "clipped: the results are distorted (calibrate on more text, or drop --calib)\n", cmd,
                (unsigned long long)s.act_saturated, (unsigned long long)s.act_values, act);
}

/* With GGUF options, the recipe's --rule P=X whose X is a ggml type are
 * GGUF choices (gg); what remains (ra) must be empty. */
static void split_gguf(const cli_eval_args *a, cli_recipe_args *ra, cli_gguf_args *gg)
{
    *ra = a->recipe, *gg = a->gguf;
    if (gg->given) cli_gguf_take_rules(ra, gg);
}

/* The weights as `lowbit quantize --format gguf --type T` writes them: each
 * tensor in the ggml type llama-quantize picks, held as that type's round
 * trip (lb_qmodel_set_ggml). */
static int gguf_runner(const char *cmd, int json, const cli_eval_args *a, cli_eval_model *e)
{
    cli_recipe_args ra;
    cli_gguf_args gg;
    split_gguf(a, &ra, &gg);
    if (cli_recipe_given(&ra) || a->spec || a->spec_attn || a->spec_mlp || a->spec_embed || a->spec_head || a->act ||
        (a->calib && !cli_method_given(&ra) && !a->calib_used) || a->calib_tokens || a->fake || (a->kv && strcmp(a->kv, "fp32") != 0))
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--type T says how every weight is stored (as in the "
                        "GGUF lowbit quantize writes): it does not combine with --scheme, --recipe, --keep, lowbit "
                        "--rule specs, --spec*, --act, --calib (but a --method's), --calib-tokens, --fake or --kv");
    if (!gg.type) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "the GGUF options need --type T");
    int rc = cli_method_imatrix_check(cmd, json, &ra, gg.imatrix_file || gg.imatrix_text);
    if (rc != EXIT_OK) return rc;
    lb_status st = lb_runner_supports(e->model, a->max_ctx);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    if ((st = lb_qmodel_new(e->model, &e->qmodel)) != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    /* --imatrix / --imatrix-from: the qmodel keeps each tensor's importance vector (copied) */
    rc = cli_gguf_imatrix(cmd, json, &gg, e->model, e->tok, a->threads);
    if (rc == EXIT_OK) rc = cli_gguf_choose(cmd, json, e->qmodel, &gg, a->threads, NULL);
    if (rc == EXIT_OK) rc = cli_method_apply(cmd, json, e->qmodel, e->tok, a->calib, &ra, a->threads);
    lb_imatrix_free(gg.imatrix);
    if (rc != EXIT_OK || a->qmodel_only) return rc;
    cli_progress_ctx loading = {cmd, "loading layer", NULL};
    lb_runner_options o = {.threads = a->threads, .max_ctx = a->max_ctx, .progress = cli_progress_fn,
                           .progress_ctx = &loading, .decode_act = a->decode_act};
    st = lb_runner_from_qmodel(e->qmodel, &o, &e->runner);
    if (st != LB_OK) return cli_fail_lb(cmd, json, st == LB_ERR_ARG || st == LB_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME, st);
    return EXIT_OK;
}

int cli_eval_open(const char *cmd, int json, const char *path, const cli_eval_args *a, int want_runner,
                  cli_eval_model *out)
{
    memset(out, 0, sizeof *out);
    lb_qspec probe;
    const lb_qspec *slot;
    int rc = parse_spec(cmd, json, a->spec, &probe, &slot); /* bad specs are usage errors, before any work */
    if (rc == EXIT_OK) rc = parse_spec(cmd, json, a->spec_attn, &probe, &slot);
    if (rc == EXIT_OK) rc = parse_spec(cmd, json, a->spec_mlp, &probe, &slot);
    if (rc == EXIT_OK) rc = parse_spec(cmd, json, a->spec_embed, &probe, &slot);
    if (rc == EXIT_OK) rc = parse_spec(cmd, json, a->spec_head, &probe, &slot);
    if (rc == EXIT_OK && !a->gguf.given && cli_recipe_given(&a->recipe)) { /* a bad rule or recipe file, before any work */
        cli_recipe_args ra = a->recipe;
        ra.kv = NULL;
        lb_recipe *r;
        if ((rc = cli_recipe_build(cmd, json, &ra, &r)) == EXIT_OK) lb_recipe_free(r);
    }
    if (rc != EXIT_OK) return rc;
    lb_status st = lb_model_open(path, &out->model);
    if (st == LB_OK)
        st = a->tokenizer ? lb_tokenizer_from_file(a->tokenizer, lb_model_arch(out->model)->vocab_size, &out->tok)
                          : lb_tokenizer_from_model(out->model, path, &out->tok);
    if (st != LB_OK) {
        rc = cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
        cli_eval_close(out);
        return rc;
    }
    /* the tokenizer file found beside the model is an input too (no output may replace it) */
    if ((rc = cli_protect(cmd, json, lb_tokenizer_source(out->tok), "the tokenizer")) != EXIT_OK) {
        cli_eval_close(out);
        return rc;
    }
    uint32_t tv = lb_tokenizer_vocab_size(out->tok), mv = lb_model_arch(out->model)->vocab_size;
    if (mv && tv > mv) { /* smaller is legitimate: embeddings are often padded */
        rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "the tokenizer has %u tokens but the model only %u: "
                      "they do not belong together", tv, mv);
        cli_eval_close(out);
        return rc;
    }
    if (want_runner && (rc = cli_eval_runner(cmd, json, a, out)) != EXIT_OK) cli_eval_close(out);
    return rc;
}

int cli_eval_check_windows(const char *cmd, int json, const lb_model *m, size_t n_tokens, uint32_t ctx)
{
    if (n_tokens / ctx == 0)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "the text has %zu tokens, fewer than one window of %u",
                        n_tokens, ctx);
    uint32_t trained = lb_model_arch(m)->max_seq_len;
    if (trained && ctx > trained)
        fprintf(stderr, "lowbit %s: warning: windows of %u tokens are longer than the %u the model was trained on\n",
                cmd, ctx, trained);
    return EXIT_OK;
}

cli_eval_args cli_eval_base_args(const cli_eval_args *ea)
{
    cli_eval_args b = *ea;
    b.spec = b.spec_attn = b.spec_mlp = b.spec_embed = b.spec_head = NULL;
    b.kv = b.act = b.calib = NULL;
    b.fake = b.weights_only = 0, b.calib_tokens = 0;
    b.decode_act = LB_FMT_FP32; /* the base is exact */
    memset(&b.recipe, 0, sizeof b.recipe);
    memset(&b.gguf, 0, sizeof b.gguf);
    return b;
}

int cli_eval_compares(const cli_eval_args *ea)
{
    return ea->spec || ea->spec_attn || ea->spec_mlp || ea->spec_embed || ea->spec_head || ea->kv || ea->act ||
           ea->decode_act != LB_FMT_FP32 || cli_recipe_given(&ea->recipe) || ea->gguf.given;
}

void cli_eval_close(cli_eval_model *e)
{
    lb_runner_free(e->runner);
    lb_qmodel_free(e->qmodel);
    lb_tokenizer_free(e->tok);
    lb_model_close(e->model);
    memset(e, 0, sizeof *e);
}

int cli_eval_tokens(const char *cmd, int json, const lb_tokenizer *tok, const char *path, int32_t **ids, size_t *n)
{
    char *text;
    size_t len;
    int rc = cli_read_file(cmd, json, path, SIZE_MAX / 2, &text, &len);
    if (rc != EXIT_OK) return rc;
    lb_status st = lb_tokenize(tok, text, len, lb_tokenizer_add_bos(tok), ids, n);
    free(text);
    return st == LB_OK ? EXIT_OK : cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
}

int cli_parse_window(const char *cmd, int json, int argc, char **argv, int *i, uint32_t *ctx, size_t *chunks)
{
    const char *o = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    int is_ctx = strcmp(o, "--ctx") == 0, is_chunks = strcmp(o, "--chunks") == 0;
    if (!is_ctx && !is_chunks) return 0;
    char *end = NULL;
    unsigned long long x = v ? strtoull(v, &end, 10) : 0;
    if (!v || *end || !(v[0] >= '0' && v[0] <= '9') || x == 0 || (is_ctx && x > 1u << 20))
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s takes a positive count%s", o, is_ctx ? " (up to 1048576)" : ""), -1;
    if (is_ctx) *ctx = (uint32_t)x;
    else *chunks = (size_t)x;
    *i += 1;
    return 1;
}

