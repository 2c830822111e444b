/* The qmodel side of the recipe options (cli_recipe.h): building the
 * quantized model a recipe says and calibrating it, one way for quantize
 * and the evaluation commands alike. */
#include "cli_recipe.h"

#include <stdlib.h>

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

int cli_recipe_calibrate(const char *cmd, int json, lb_qmodel *q, const lb_tokenizer *tok, const char *path,
                         size_t max_tokens, int threads)
{
    char *text;
    size_t len;
    int rc = cli_read_file(cmd, json, path, SIZE_MAX / 2, &text, &len);
    if (rc != EXIT_OK) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    lb_status st = lb_tokenize(tok, text, len, lb_tokenizer_add_bos(tok), &ids, &n);
    free(text);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    /* BOS alone is no calibration: the ranges would come from one token */
    size_t text_tokens = n - (n && lb_tokenizer_add_bos(tok) && ids[0] == lb_tokenizer_bos(tok));
    if (text_tokens == 0) {
        free(ids);
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "the calibration text %s is empty (no tokens besides "
                        "BOS): --calib needs text like the one the model will see", path);
    }
    size_t want = max_tokens ? max_tokens : CLI_CALIB_DEFAULT_TOKENS;
    if (n > want) n = want;
    cli_progress_ctx pc = {cmd, "calibration window", NULL};
    lb_calib_options o = {.threads = threads, .ctx = CLI_CALIB_CTX, .progress = cli_progress_fn, .progress_ctx = &pc};
    st = lb_calibrate(q, ids, n, &o);
    free(ids);
    return st == LB_OK ? EXIT_OK : cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
}

