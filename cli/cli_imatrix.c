/* Importance matrices for the CLI (cli_imatrix.h). */
#include <stdlib.h>

#include "cli_eval.h"
#include "cli_imatrix.h"
#include "cli_output.h"

typedef struct progress_ctx {
    const char *cmd;
} progress_ctx;

static void progress_windows(void *ctx, size_t done, size_t total)
{
    const progress_ctx *p = ctx;
    cli_progress(p->cmd, "imatrix window", done, total, NULL);
}

int cli_imatrix_compute(const char *cmd, int json, const lb_model *m, const lb_tokenizer *tok, const char *path,
                        uint32_t ctx, size_t chunks, int threads, int process_output, lb_imatrix **out,
                        size_t *n_tokens)
{
    *out = NULL;
    int rc = cli_protect(cmd, json, path, "the calibration text");
    if (rc != EXIT_OK) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    if ((rc = cli_eval_tokens(cmd, json, tok, path, &ids, &n)) != EXIT_OK) return rc;
    if (n_tokens) *n_tokens = n;
    if (n < 2 * (size_t)ctx) {
        free(ids);
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s is %zu tokens; windows of %u need at least %zu "
                        "(two windows, as llama-imatrix demands)", path, n, ctx, 2 * (size_t)ctx);
    }
    if ((rc = cli_eval_check_windows(cmd, json, m, n, ctx)) != EXIT_OK) {
        free(ids);
        return rc;
    }
    progress_ctx pc = {cmd};
    lb_imatrix_options o = {.ctx = ctx, .max_chunks = chunks, .threads = threads, .process_output = process_output,
                            .bos = lb_tokenizer_add_bos(tok) ? lb_tokenizer_bos(tok) : -1, .dataset = path,
                            .progress = progress_windows, .progress_ctx = &pc};
    cli_progress(cmd, "imatrix window", 0, chunks && chunks < n / ctx ? chunks : n / ctx, NULL);
    lb_status st = lb_imatrix_compute(m, ids, n, &o, out);
    free(ids);
    return st == LB_OK ? EXIT_OK : cli_fail_lb(cmd, json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
}

int cli_imatrix_get(const char *cmd, int json, const char *file, const char *text, const lb_model *m,
                    const lb_tokenizer *tok, int threads, lb_imatrix **out)
{
    *out = NULL;
    if (file) {
        int rc = cli_protect(cmd, json, file, "the --imatrix file");
        if (rc != EXIT_OK) return rc;
        lb_status st = lb_imatrix_load(file, out);
        return st == LB_OK ? EXIT_OK : cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    }
    if (!text) return EXIT_OK;
    return cli_imatrix_compute(cmd, json, m, tok, text, 512, 0, threads, 0, out, NULL);
}
