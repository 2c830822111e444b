/* The qmodel side of the recipe options (cli_recipe.h): building the
 * quantized model a recipe says, and the steps on the calibration text
 * (outlier columns, static scales, layer sensitivity), one way for
 * quantize and the evaluation commands alike; what they cost, printed. */
#include "cli_recipe.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int cli_recipe_needs_calib(const lb_qmodel *q)
{
    if (lb_qmodel_kv(q) != LB_FMT_FP32) return 1;
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        if (lb_qmodel_entry(q, i, &e) != LB_OK) continue;
        switch (e.act.mode) {
        case LB_ACT_STATIC:
        case LB_ACT_LOCAL: return 1;
        case LB_ACT_NONE:
        case LB_ACT_DYNAMIC: break;
        }
    }
    return 0;
}

int cli_recipe_qmodel(const char *cmd, int json, const lb_model *m, const lb_recipe *r, lb_qmodel **out)
{
    *out = NULL;
    lb_qmodel *q;
    lb_status st = lb_qmodel_new(m, &q);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    st = lb_qmodel_apply(q, r);
    if (st != LB_OK) {
        lb_qmodel_free(q);
        /* a rule that matches nothing, a spec that does not fit: the command line's (or recipe's) fault */
        return cli_fail_lb(cmd, json, st == LB_ERR_ARG || st == LB_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME, st);
    }
    *out = q;
    return EXIT_OK;
}

/* The first max_tokens (0: CLI_CALIB_DEFAULT_TOKENS) tokens of the text
 * at path, BOS first when the tokenizer adds one; a text of BOS alone is
 * a usage error. */
static int calib_tokens(const char *cmd, int json, const lb_tokenizer *tok, const char *path, size_t max_tokens,
                        int32_t **ids, size_t *n)
{
    char *text;
    size_t len;
    *ids = NULL, *n = 0;
    int rc = cli_read_file(cmd, json, path, SIZE_MAX / 2, &text, &len);
    if (rc != EXIT_OK) return rc;
    lb_status st = lb_tokenize(tok, text, len, lb_tokenizer_add_bos(tok), ids, n);
    free(text);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    /* BOS alone is no calibration: the ranges would come from one token */
    size_t text_tokens = *n - (*n && lb_tokenizer_add_bos(tok) && (*ids)[0] == lb_tokenizer_bos(tok));
    if (text_tokens == 0) {
        free(*ids), *ids = NULL;
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "the calibration text %s is empty (no tokens besides "
                        "BOS): --calib needs text like the one the model will see", path);
    }
    size_t want = max_tokens ? max_tokens : CLI_CALIB_DEFAULT_TOKENS;
    if (*n > want) *n = want;
    return EXIT_OK;
}

static int calibrate_static(const char *cmd, int json, lb_qmodel *q, const int32_t *ids, size_t n, int threads)
{
    cli_progress_ctx pc = {cmd, "calibration window", NULL};
    lb_calib_options o = {.threads = threads, .ctx = CLI_CALIB_CTX, .progress = cli_progress_fn, .progress_ctx = &pc};
    lb_status st = lb_calibrate(q, ids, n, &o);
    return st == LB_OK ? EXIT_OK : cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
}

int cli_recipe_calibrate(const char *cmd, int json, lb_qmodel *q, const lb_tokenizer *tok, const char *path,
                         size_t max_tokens, int threads)
{
    int32_t *ids;
    size_t n;
    int rc = calib_tokens(cmd, json, tok, path, max_tokens, &ids, &n);
    if (rc == EXIT_OK) rc = calibrate_static(cmd, json, q, ids, n, threads);
    free(ids);
    return rc;
}

int cli_recipe_wants_calib(const cli_recipe_args *a) { return a->keep_sensitive || a->outlier_threshold > 0; }

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int cli_recipe_prepare(const char *cmd, int json, const cli_recipe_args *a, lb_qmodel *q, const lb_tokenizer *tok,
                       const char *path, size_t max_tokens, int threads, cli_recipe_steps *out)
{
    memset(out, 0, sizeof *out);
    out->calib = path;
    int32_t *ids;
    size_t n;
    int rc = calib_tokens(cmd, json, tok, path, max_tokens, &ids, &n);
    if (rc != EXIT_OK) return rc;
    lb_status st = LB_OK;
    /* outlier columns first: static scales then come from the rest of each input */
    if (a->outlier_threshold > 0) {
        cli_progress_ctx pc = {cmd, "outlier window", NULL};
        lb_outlier_options o = {.threshold = a->outlier_threshold, .ctx = CLI_CALIB_CTX, .threads = threads,
                                .progress = cli_progress_fn, .progress_ctx = &pc};
        double t0 = seconds_now();
        st = lb_qmodel_select_outliers(q, ids, n, &o, &out->outlier_columns);
        out->outliers = st == LB_OK, out->threshold = a->outlier_threshold;
        out->outlier_seconds = seconds_now() - t0;
        if (st != LB_OK) rc = cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    }
    if (rc == EXIT_OK && cli_recipe_needs_calib(q)) rc = calibrate_static(cmd, json, q, ids, n, threads);
    /* last: each layer is measured as the rest of the recipe leaves it */
    if (rc == EXIT_OK && a->keep_sensitive) {
        out->n_layers = lb_model_arch(lb_qmodel_model(q))->n_layers;
        out->keep = a->keep_sensitive;
        out->ranking = calloc(out->n_layers + 1, sizeof *out->ranking);
        cli_progress_ctx pc = {cmd, "sensitivity (window x layer)", NULL};
        lb_sensitivity_options o = {.bos = lb_tokenizer_add_bos(tok) ? lb_tokenizer_bos(tok) : -1, .threads = threads,
                                    .progress = cli_progress_fn, .progress_ctx = &pc};
        uint32_t model_ctx = lb_model_arch(lb_qmodel_model(q))->max_seq_len;
        o.ctx = model_ctx && model_ctx < CLI_CALIB_CTX ? model_ctx : CLI_CALIB_CTX;
        out->ctx = o.ctx, out->windows = n / o.ctx;
        double t0 = seconds_now();
        if (!out->ranking) rc = cli_fail(cmd, json, EXIT_RUNTIME, "out_of_memory", "out of memory");
        else if (a->keep_sensitive > out->n_layers)
            rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--keep-sensitive %zu: the model has %zu layers",
                          a->keep_sensitive, out->n_layers);
        else if (out->windows == 0)
            rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--keep-sensitive measures on whole windows of %u "
                          "tokens: the calibration text gives %zu tokens (--calib-tokens, or a longer --calib text)",
                          o.ctx, n);
        else if ((st = lb_qmodel_keep_sensitive(q, ids, n, a->keep_sensitive, &o, out->ranking)) != LB_OK)
            rc = cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
        out->sensitivity_seconds = seconds_now() - t0;
        if (rc != EXIT_OK) free(out->ranking), out->ranking = NULL;
    }
    free(ids);
    return rc;
}

void cli_recipe_steps_free(cli_recipe_steps *s)
{
    free(s->ranking);
    memset(s, 0, sizeof *s);
}

static void print_ranking_json(FILE *out, const cli_recipe_steps *s)
{
    fprintf(out, ", \"sensitivity\": {\"calib\": ");
    json_string(out, s->calib ? s->calib : "");
    fprintf(out, ", \"windows\": %zu, \"ctx\": %u, \"keep\": %zu", s->windows, s->ctx, s->keep);
    json_field(out, "seconds", s->sensitivity_seconds);
    fprintf(out, ", \"layers\": [");
    for (size_t k = 0; k < s->n_layers; k++) {
        const lb_layer_kld *e = &s->ranking[k];
        fprintf(out, "%s{\"layer\": %u, \"measured\": %s", k ? ", " : "", e->layer, e->measured ? "true" : "false");
        json_field(out, "kld", e->kld);
        json_field(out, "kld_err", e->kld_err);
        fprintf(out, ", \"kept\": %s}", e->kept ? "true" : "false");
    }
    fprintf(out, "]}");
}

static void print_ranking_text(FILE *out, const cli_recipe_steps *s)
{
    fprintf(out, "layer sensitivity: each decoder layer quantized alone, KLD from the model as stored on %zu windows "
            "of %u of %s (%.1f s); the %zu largest kept in 16-bit\n", s->windows, s->ctx, s->calib,
            s->sensitivity_seconds, s->keep);
    fprintf(out, "%6s %6s %12s %12s\n", "rank", "layer", "KLD", "+/-");
    for (size_t k = 0; k < s->n_layers; k++) {
        const lb_layer_kld *e = &s->ranking[k];
        if (e->measured)
            fprintf(out, "%6zu %6u %12.6f %12.6f%s\n", k + 1, e->layer, e->kld, e->kld_err, e->kept ? "  kept" : "");
        else fprintf(out, "%6s %6u %12s %12s  (nothing quantized)\n", "-", e->layer, "", "");
    }
}

void cli_recipe_print(FILE *out, const lb_qmodel *q, const cli_recipe_steps *s, int json)
{
    lb_qmodel_size z;
    int sized = q && lb_qmodel_size_of(q, &z) == LB_OK;
    if (json) {
        if (sized) {
            json_field(out, "bits_per_weight", z.bits_per_weight);
            json_field(out, "layer_bits_per_weight", z.layer_bits_per_weight);
            fprintf(out, ", \"outlier_columns\": %llu, \"outlier_params\": %llu", (unsigned long long)z.outlier_columns,
                    (unsigned long long)z.outlier_params);
        }
        if (s && s->outliers) json_field(out, "outlier_threshold", s->threshold);
        if (s && s->ranking) print_ranking_json(out, s);
        return;
    }
    if (sized) {
        fprintf(out, "weights: %.3f bits per weight (every weight, scales counted), %.3f in the decoder layers",
                z.bits_per_weight, z.layer_bits_per_weight);
        if (s && s->outliers)
            fprintf(out, "; %llu outlier columns above |x| %g in 16-bit, %.3f%% of the weights (%.1f s)",
                    (unsigned long long)z.outlier_columns, (double)s->threshold,
                    z.weight_params ? 100.0 * (double)z.outlier_params / (double)z.weight_params : 0.0,
                    s->outlier_seconds);
        fputc('\n', out);
    }
    if (s && s->ranking) print_ranking_text(out, s);
}
