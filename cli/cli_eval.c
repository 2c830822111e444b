#include "cli_eval.h"

#include <stdlib.h>
#include <string.h>

#include "cli_model.h"

int cli_eval_option(const char *cmd, int json, int argc, char **argv, int *i, cli_eval_args *a)
{
    const char *o = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    const char **slot = strcmp(o, "--spec") == 0         ? &a->spec
                        : strcmp(o, "--spec-attn") == 0  ? &a->spec_attn
                        : strcmp(o, "--spec-mlp") == 0   ? &a->spec_mlp
                        : strcmp(o, "--spec-embed") == 0 ? &a->spec_embed
                        : strcmp(o, "--spec-head") == 0  ? &a->spec_head
                        : strcmp(o, "--tokenizer") == 0  ? &a->tokenizer
                                                          : NULL;
    int threads = strcmp(o, "--threads") == 0;
    if (!slot && !threads) return 0;
    if (!v) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s needs a value", o), -1;
    if (threads) {
        char *end;
        long t = strtol(v, &end, 10);
        if (*end || t < 1 || t > 64) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--threads takes 1..64, not '%s'", v), -1;
        a->threads = (int)t;
    } else {
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

int cli_eval_runner(const char *cmd, int json, const cli_eval_args *a, cli_eval_model *e)
{
    lb_qspec attn, mlp, embed, head;
    lb_runner_options o = {.threads = a->threads, .max_ctx = a->max_ctx};
    int rc = parse_spec(cmd, json, a->spec_attn ? a->spec_attn : a->spec, &attn, &o.attn);
    if (rc == EXIT_OK) rc = parse_spec(cmd, json, a->spec_mlp ? a->spec_mlp : a->spec, &mlp, &o.mlp);
    if (rc == EXIT_OK) rc = parse_spec(cmd, json, a->spec_embed, &embed, &o.embed);
    if (rc == EXIT_OK) rc = parse_spec(cmd, json, a->spec_head, &head, &o.head);
    if (rc != EXIT_OK) return rc;
    lb_status st = lb_runner_new(e->model, &o, &e->runner);
    return st == LB_OK ? EXIT_OK : cli_fail_lb(cmd, json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
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

void cli_eval_close(cli_eval_model *e)
{
    lb_runner_free(e->runner);
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

void cli_eval_progress(void *label, size_t done, size_t total) { cli_progress(label, done, total); }

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

