/* The outlier method options every command that builds a quantized model
 * from a recipe shares (cli_recipe.h): --method, --alpha, --calib-seqs,
 * --calib-len, GPTQ's --damp, --block, --[no-]actorder, --[no-]true-sequential,
 * and applying the
 * method to the quantized model (lb_qmodel_apply_method) on the --calib
 * text. */
#include "cli_recipe.h"

#include <stdlib.h>
#include <string.h>

#define METHODS "rtn, smoothquant, awq, gptq or awq+gptq"

/* Where a user finds a calibration text: the two the repository ships
 * (data/PROVENANCE.md), never the evaluation text. */
#define CALIB_TEXTS                                                                                     \
    "data/wikitext-2-raw/wiki.train.excerpt.raw (WikiText-2 train, for general models) or "           \
    "data/tinystories/calib-excerpt.txt (TinyStories, for stories260K), never the text you evaluate on"

static int parse_count(const char *cmd, int json, const char *opt, const char *v, long long lo, long long hi,
                       uint32_t *out)
{
    char *end;
    long long n = strtoll(v, &end, 10);
    if (end == v || *end || n < lo || n > hi)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s takes %lld..%lld, not '%s'", opt, lo, hi, v), -1;
    *out = (uint32_t)n;
    return 1;
}

static int is_gptq(lb_method m) { return m == LB_METHOD_GPTQ || m == LB_METHOD_AWQ_GPTQ; }

/* A GPTQ switch and its --no- form (o is the argument at hand): 1 when o
 * is either, *given set to it and *negated to whether it was the --no-
 * form; -1 (said) when one of them came before; 0 when o is neither. */
static int flag_pair(const char *cmd, int json, const char *o, const char *flag, const char **given, int *negated)
{
    int yes = strcmp(o, flag) == 0, no = strncmp(o, "--no-", 5) == 0 && strcmp(o + 5, flag + 2) == 0;
    if (!yes && !no) return 0;
    if (*given) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s is given after %s: give one", o, *given), -1;
    *given = o, *negated = no;
    return 1;
}

int cli_method_option(const char *cmd, int json, int argc, char **argv, int *i, cli_recipe_args *a)
{
    const char *o = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(o, "--gptq-scales") == 0) {
        if (a->gptq_scales) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--gptq-scales is given twice"), -1;
        if (!v || (strcmp(v, "mse") != 0 && strcmp(v, "minmax") != 0))
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--gptq-scales takes mse or minmax, not '%s'",
                            v ? v : "nothing"), -1;
        a->gptq_scales = v, a->gptq_minmax = strcmp(v, "minmax") == 0;
        *i += 1;
        return 1;
    }
    int pair = flag_pair(cmd, json, o, "--actorder", &a->actorder, &a->file_order);
    if (!pair) pair = flag_pair(cmd, json, o, "--true-sequential", &a->sequential, &a->layer_sequential);
    if (pair) return pair;
    int method = strcmp(o, "--method") == 0, alpha = strcmp(o, "--alpha") == 0,
        seqs = strcmp(o, "--calib-seqs") == 0, len = strcmp(o, "--calib-len") == 0, damp = strcmp(o, "--damp") == 0,
        block = strcmp(o, "--block") == 0;
    if (!method && !alpha && !seqs && !len && !damp && !block) return 0;
    if (!v) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s needs a value", o), -1;
    if ((method && a->method) || (alpha && a->alpha) || (seqs && a->calib_seqs) || (len && a->calib_len) ||
        (damp && a->damp) || (block && a->block))
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s is given twice", o), -1;
    int r = 1;
    if (method) {
        if (lb_method_parse(v, &a->method_id) != LB_OK)
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--method takes " METHODS ", not '%s'%s",
                            v, strchr(v, ',') ? " (one method: compare the methods with one run each)" : ""), -1;
        a->method = v;
    } else if (alpha) {
        char *end;
        double x = strtod(v, &end);
        if (strcmp(v, "search") == 0) a->alpha_search = 1;
        else if (end == v || *end || !(x >= 0 && x <= 1))
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--alpha takes a number in [0, 1] (SmoothQuant's "
                            "migration strength; the paper uses 0.5) or 'search', not '%s'", v), -1;
        else a->alpha_value = (float)x;
        a->alpha = v;
    } else if (damp) {
        char *end;
        double x = strtod(v, &end);
        if (end == v || *end || !(x > 0 && x <= 1))
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--damp takes a number in (0, 1] (GPTQ's "
                            "dampening, a fraction of the Hessian's mean diagonal; the paper uses 0.01), not '%s'",
                            v), -1;
        a->damp_value = x;
        a->damp = v;
    } else if (block) {
        r = parse_count(cmd, json, o, v, 1, 1 << 16, &a->block_value);
        if (r > 0) a->block = v;
    } else if (seqs) {
        r = parse_count(cmd, json, o, v, 1, 1 << 16, &a->calib_seqs);
    } else {
        r = parse_count(cmd, json, o, v, 2, 1 << 20, &a->calib_len);
    }
    if (r > 0) *i += 1;
    return r;
}

int cli_method_given(const cli_recipe_args *a)
{
    return a->method && a->method_id != LB_METHOD_RTN;
}

/* Whether the method folds scales into the weights' input channels (and
 * the norms before them): an importance matrix measured on the unscaled
 * model then weighs the wrong channels. GPTQ leaves the channels as they
 * are; its GGUF block scales are chosen with the imatrix like RTN's. */
static int rescales_channels(lb_method m)
{
    switch (m) {
    case LB_METHOD_RTN:
    case LB_METHOD_GPTQ:
    case LB_METHOD_COUNT:
        return 0;
    case LB_METHOD_SMOOTHQUANT:
    case LB_METHOD_AWQ:
    case LB_METHOD_AWQ_GPTQ:
        return 1;
    }
    return 1;
}

int cli_method_imatrix_check(const char *cmd, int json, const cli_recipe_args *a, int has_imatrix)
{
    if (!has_imatrix || !a->method || !rescales_channels(a->method_id)) return EXIT_OK;
    return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--method %s scales the weights' input channels, which an "
                    "importance matrix of the unscaled model does not describe: give that method or an imatrix, not "
                    "both (--method gptq takes an imatrix)", a->method);
}

int cli_method_check(const char *cmd, int json, const cli_recipe_args *a, const char *calib)
{
    if (a->alpha && !(a->method && a->method_id == LB_METHOD_SMOOTHQUANT))
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--alpha is SmoothQuant's migration strength: it "
                        "needs --method smoothquant");
    if ((a->damp || a->block || a->actorder || a->sequential || a->gptq_scales) && !(a->method && is_gptq(a->method_id)))
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s is GPTQ's: it needs --method gptq or awq+gptq",
                        a->damp ? "--damp" : a->block ? "--block" : a->actorder ? a->actorder
                        : a->sequential ? a->sequential : "--gptq-scales");
    if (!cli_method_given(a)) {
        /* a loop over methods passes the same options to rtn: a note, no error */
        if (a->calib_seqs || a->calib_len)
            fprintf(stderr, "lowbit %s: note: %s unused: %s the calibration of --method smoothquant, awq or gptq\n", cmd,
                    a->calib_seqs && a->calib_len ? "--calib-seqs and --calib-len are" : a->calib_seqs ? "--calib-seqs is"
                    : "--calib-len is", a->calib_seqs && a->calib_len ? "they size" : "it sizes");
        return EXIT_OK;
    }
    if (!calib)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--method %s calibrates on a text: give --calib FILE, "
                        "e.g. " CALIB_TEXTS, a->method);
    return EXIT_OK;
}

/* The library's warnings (GPTQ's raised dampening): on stderr, whatever
 * --json or --quiet say, since they qualify the result. */
static void warn_fn(void *ctx, const char *message)
{
    fprintf(stderr, "lowbit %s: warning: %s\n", (const char *)ctx, message);
}

int cli_method_apply(const char *cmd, int json, lb_qmodel *q, const lb_tokenizer *tok, const char *calib,
                     const cli_recipe_args *a, int threads)
{
    if (!cli_method_given(a)) return EXIT_OK;
    char *text;
    size_t len;
    int rc = cli_read_file(cmd, json, calib, SIZE_MAX / 2, &text, &len);
    if (rc != EXIT_OK) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    lb_status st = lb_tokenize(tok, text, len, lb_tokenizer_add_bos(tok), &ids, &n);
    free(text);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    char note[64];
    snprintf(note, sizeof note, "%s", a->method);
    cli_progress_ctx pc = {cmd, "calibration layer", note};
    lb_method_options o = {.method = a->method_id,
                           .alpha = a->alpha && !a->alpha_search ? a->alpha_value : CLI_METHOD_DEFAULT_ALPHA,
                           .alpha_search = a->alpha_search,
                           .calib_seqs = a->calib_seqs ? a->calib_seqs : CLI_METHOD_DEFAULT_SEQS,
                           .calib_len = a->calib_len ? a->calib_len : CLI_METHOD_DEFAULT_LEN,
                           .damp = a->damp ? a->damp_value : 0, .block = a->block ? a->block_value : 0,
                           .gptq_order = a->file_order ? LB_GPTQ_ORDER_FILE : LB_GPTQ_ORDER_ACT,
                           .gptq_sequential = a->layer_sequential ? LB_GPTQ_SEQ_LAYER : LB_GPTQ_SEQ_SUBLAYER,
                           .gptq_scales = a->gptq_minmax ? LB_GPTQ_SCALES_MINMAX : LB_GPTQ_SCALES_MSE,
                           .threads = threads, .progress = cli_progress_fn,
                           .progress_ctx = &pc, .warn = warn_fn, .warn_ctx = (void *)cmd};
    st = lb_qmodel_apply_method(q, ids, n, &o);
    free(ids);
    if (st == LB_OK) return EXIT_OK;
    /* a text too short for one window, a spec the method does not serve: the command line's */
    return cli_fail(cmd, json, st == LB_ERR_ARG || st == LB_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME,
                    lb_status_name(st), "--method %s on %s: %s", a->method, calib,
                    st == LB_ERR_NOMEM ? "out of memory" : lb_last_error());
}

void cli_method_print(FILE *out, const cli_recipe_args *a, const char *calib, int json)
{
    int given = cli_method_given(a);
    uint32_t seqs = a->calib_seqs ? a->calib_seqs : CLI_METHOD_DEFAULT_SEQS;
    uint32_t len = a->calib_len ? a->calib_len : CLI_METHOD_DEFAULT_LEN;
    int sq = given && a->method_id == LB_METHOD_SMOOTHQUANT, gptq = given && is_gptq(a->method_id);
    if (json) {
        fprintf(out, ", \"method\": ");
        json_string(out, given ? a->method : "rtn");
        fprintf(out, ", \"alpha\": ");
        if (sq && a->alpha_search) json_string(out, "search");
        else if (sq) json_number(out, a->alpha ? a->alpha_value : CLI_METHOD_DEFAULT_ALPHA);
        else fprintf(out, "null");
        if (given) fprintf(out, ", \"calib_seqs\": %u, \"calib_len\": %u", seqs, len);
        else fprintf(out, ", \"calib_seqs\": null, \"calib_len\": null");
        if (gptq) {
            fprintf(out, ", \"damp\": ");
            json_number(out, a->damp ? a->damp_value : CLI_METHOD_DEFAULT_DAMP);
            fprintf(out, ", \"block\": %u, \"actorder\": %s, \"true_sequential\": %s, \"gptq_scales\": \"%s\"",
                    a->block ? a->block_value : CLI_METHOD_DEFAULT_BLOCK, a->file_order ? "false" : "true",
                    a->layer_sequential ? "false" : "true", a->gptq_minmax ? "minmax" : "mse");
        }
        return;
    }
    if (!given) {
        fprintf(out, "rtn");
        return;
    }
    fprintf(out, "%s", a->method);
    if (sq && a->alpha_search) fprintf(out, " (alpha searched)");
    else if (sq) fprintf(out, " (alpha %g)", (double)(a->alpha ? a->alpha_value : CLI_METHOD_DEFAULT_ALPHA));
    if (gptq)
        fprintf(out, " (damp %g, block %u%s%s, %s scales)", a->damp ? a->damp_value : CLI_METHOD_DEFAULT_DAMP,
                a->block ? a->block_value : CLI_METHOD_DEFAULT_BLOCK, a->file_order ? ", file order" : ", act-order",
                a->layer_sequential ? ", layer-sequential" : ", true-sequential", a->gptq_minmax ? "minmax" : "mse");
    fprintf(out, ", %u x %u tokens of %s", seqs, len, calib ? calib : "?");
}
