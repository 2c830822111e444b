/* lowbit compare: one row per spec of what it costs a model: bits per
 * weight, size, weight SQNR, perplexity, KL divergence and top-1 agreement
 * on a text. The main job of `make demo`. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_eval.h"
#include "cli_model.h"
#include "cli_output.h"
#include "cli_plot.h"

#define COMPARE_MAX_SPECS 16
#define COMPARE_MAX_ROWS (COMPARE_MAX_SPECS * LB_METHOD_COUNT)

static const char usage[] =
    "usage: lowbit compare MODEL --text FILE --spec SPEC[,SPEC...] [--spec-embed SPEC] [--spec-head SPEC]\n"
    "                     [--ctx 512] [--chunks N] [--fake] [--act int8|fp8_e4m3 [--calib FILE [--calib-tokens N]]]\n"
    "                     [--kv FORMAT] [--decode-act int8|exact] [--tokenizer FILE] [--threads N] [--tmpdir DIR] [--plot] [--json] [--quiet]\n"
    "                     [--method M[,M...] [--alpha A|search] [--damp D] [--block B] [--actorder|--no-actorder] [--gptq-scales S] --calib FILE\n"
    "                      [--true-sequential|--no-true-sequential] [--calib-seqs N] [--calib-len L]]\n\n"
    "For each spec, applied to the attention and MLP projections (and the embedding\n"
    "and output head under --spec-embed and --spec-head, the same in every row): bits\n"
    "per weight of the quantized matrices with their scales, the model's size with\n"
    "every other tensor as stored, the SQNR of those matrices against the model as\n"
    "stored, and on the text the perplexity +- its standard error, its change, the\n"
    "mean KL divergence from the stored model +- its standard error and the top-1\n"
    "agreement (lowbit ppl and lowbit kld explain the measures). The first row is\n"
    "the model as stored. --fake, --act and --kv apply to every row, never to the\n"
    "model as stored. With several specs the base model's distributions are\n"
    "kept for the later rows in a file of 8 + 2 x vocab bytes per scored token\n"
    "in --tmpdir (default $TMPDIR or /tmp): its size is said on stderr first,\n"
    "and a disk without room for it is refused before any work. --plot adds a text scatter\n"
    "of KLD against bits per weight and the rows' KLD as bars.\n\n"
    "--method rtn,awq,gptq gives one row per spec and method: each row's model is built\n"
    "as lowbit quantize builds it (q/k/v and gate/up share NVFP4's global scales), the method\n"
    "applied on the --calib text (with --act, --calib also fixes static activation scales, as\n"
    "without --method). SQNR is shown for rtn rows only: a method's weights are scaled by design.\n"
    CLI_EVAL_RUNNER_HELP
    "  --method M[,M...]   rtn, smoothquant (for --act), awq (weight-only), gptq (any), awq+gptq: see\n"
    "                      lowbit quantize --help\n"
    "  --alpha A|search    SmoothQuant's migration strength (default 0.5)\n"
    "  --damp D, --block B, --actorder|--no-actorder, --true-sequential|--no-true-sequential, --gptq-scales S\n"
    "                      GPTQ's options (gptq and awq+gptq rows): see lowbit\n"
    "                      quantize --help\n"
    "  --calib-seqs N      calibration windows of a method (default " CLI_STR(CLI_METHOD_DEFAULT_SEQS) "), --calib-len L tokens each (default "
    CLI_STR(CLI_METHOD_DEFAULT_LEN) ")\n";

static int is_projection(const lb_tensor *t)
{
    return lb_tensor_is_weight(t) && (strstr(t->name, ".self_attn.") || strstr(t->name, ".mlp."));
}

typedef struct weight_cost {
    double bits, signal, noise, size_bytes;
} weight_cost;

/* The spec a tensor runs under, as the runner applies them: the
 * projections the row's, the embedding --spec-embed's (a tied one serves
 * as the head too), an untied head --spec-head's; NULL: as stored. */
static const lb_qspec *spec_of(const lb_model *m, const lb_tensor *t, const lb_qspec *proj, const lb_qspec *embed,
                               const lb_qspec *head)
{
    if (is_projection(t)) return proj;
    if (strcmp(t->name, "model.embed_tokens.weight") == 0) return embed;
    if (strcmp(t->name, "lm_head.weight") == 0 && !lb_model_arch(m)->tied_embeddings) return head;
    return NULL;
}

/* The matrices under their specs: bits, SQNR; the rest of the model as stored. */
static lb_status weight_costs(const lb_model *m, const lb_qspec *spec, const lb_qspec *embed, const lb_qspec *head,
                              int threads, weight_cost *c)
{
    memset(c, 0, sizeof *c);
    float *x = NULL, *xhat = NULL;
    size_t cap = 0;
    lb_status st = LB_OK;
    double n_weights = 0;
    for (size_t i = 0; st == LB_OK && i < lb_model_tensor_count(m); i++) {
        const lb_tensor *t = lb_model_tensor(m, i);
        const lb_qspec *under = spec_of(m, t, spec, embed, head);
        if (!under) {
            c->size_bytes += (double)t->n_bytes;
            continue;
        }
        size_t old = cap;
        if ((st = cli_tensor_f32(t, &x, &cap)) != LB_OK) break;
        if (cap > old || !xhat) {
            float *p = realloc(xhat, cap * sizeof *xhat);
            if (!p) {
                st = LB_ERR_NOMEM; /* reported as "out of memory" below */
                break;
            }
            xhat = p;
        }
        uint64_t rows, cols;
        cli_tensor_matrix(t, &rows, &cols);
        lb_qstats qs;
        st = cli_quant_stats(under, x, rows, cols, threads, xhat, &qs);
        double count = (double)qs.count, se = qs.mse * count, bits = qs.bits_per_value;
        if (st != LB_OK) break;
        for (size_t k = 0; k < t->n_elements; k++) c->signal += (double)x[k] * x[k];
        c->noise += se;
        c->bits += bits * count;
        n_weights += count;
    }
    free(x), free(xhat);
    if (st == LB_OK) {
        c->size_bytes += c->bits / 8;
        c->bits = n_weights > 0 ? c->bits / n_weights : 0;
    }
    return st;
}

/* --method's comma-separated list: each a method, none twice. */
static int parse_methods(int json, const char *text, lb_method *out, size_t *n)
{
    *n = 0;
    char buf[256];
    if (strlen(text) >= sizeof buf)
        return cli_fail("compare", json, EXIT_USAGE, "bad_argument", "--method '%.40s...' is too long", text);
    strcpy(buf, text);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        lb_method m;
        if (lb_method_parse(t, &m) != LB_OK)
            return cli_fail("compare", json, EXIT_USAGE, "bad_argument", "--method takes rtn, smoothquant, awq, gptq or awq+gptq "
                            "(comma-separated), not '%s'", t);
        for (size_t k = 0; k < *n; k++)
            if (out[k] == m) return cli_fail("compare", json, EXIT_USAGE, "bad_argument", "--method names %s twice", t);
        out[(*n)++] = m;
    }
    if (*n == 0) return cli_fail("compare", json, EXIT_USAGE, "bad_argument", "--method needs a method");
    return EXIT_OK;
}

/* The method options of a row: the shared --alpha, --calib-seqs and
 * --calib-len with the row's method. */
static cli_recipe_args row_method(const cli_recipe_args *shared, lb_method m)
{
    cli_recipe_args r;
    memset(&r, 0, sizeof r);
    r.method = lb_method_name(m), r.method_id = m;
    if (m == LB_METHOD_SMOOTHQUANT) r.alpha = shared->alpha, r.alpha_value = shared->alpha_value,
                                    r.alpha_search = shared->alpha_search;
    if (m == LB_METHOD_GPTQ || m == LB_METHOD_AWQ_GPTQ)
        r.damp = shared->damp, r.damp_value = shared->damp_value, r.block = shared->block,
        r.block_value = shared->block_value, r.actorder = shared->actorder, r.file_order = shared->file_order,
        r.sequential = shared->sequential, r.layer_sequential = shared->layer_sequential,
        r.gptq_scales = shared->gptq_scales, r.gptq_minmax = shared->gptq_minmax;
    r.calib_seqs = shared->calib_seqs, r.calib_len = shared->calib_len;
    return r;
}

static int run(int argc, char **argv)
{
    int json = 0, plot = 0;
    const char *model = NULL, *text = NULL, *spec_text = NULL, *method_text = NULL, *tmpdir = getenv("TMPDIR");
    cli_eval_args ea = {0};
    uint32_t ctx = 512;
    size_t chunks = 0;
    for (int i = 1; i < argc; i++) {
        int r;
        if (strcmp(argv[i], "--spec") == 0 && i + 1 < argc) spec_text = argv[++i];
        else if (strcmp(argv[i], "--method") == 0 && method_text)
            return cli_fail("compare", json, EXIT_USAGE, "bad_argument", "--method is given twice (list the methods: "
                            "--method rtn,awq)");
        else if (strcmp(argv[i], "--method") == 0 && i + 1 < argc) method_text = argv[++i];
        else if (strcmp(argv[i], "--tmpdir") == 0 && i + 1 < argc) tmpdir = argv[++i];
        else if (strcmp(argv[i], "--spec-attn") == 0 || strcmp(argv[i], "--spec-mlp") == 0)
            return cli_fail("compare", json, EXIT_USAGE, "bad_argument", "unknown option '%s' for compare: each row's "
                            "--spec applies to the attention and the MLP projections", argv[i]);
        else if (strcmp(argv[i], "--scheme") == 0 || strcmp(argv[i], "--recipe") == 0 || strcmp(argv[i], "--rule") == 0 ||
                 strcmp(argv[i], "--keep") == 0 || strcmp(argv[i], "--weights-only") == 0 ||
                 strcmp(argv[i], "--keep-sensitive") == 0 || strcmp(argv[i], "--outlier-threshold") == 0)
            return cli_fail("compare", json, EXIT_USAGE, "bad_argument", "unknown option '%s' for compare: its rows "
                            "come from --spec; measure a scheme or recipe with ppl or kld", argv[i]);
        else if ((r = cli_eval_option("compare", json, argc, argv, &i, &ea)) || (r = cli_parse_window("compare", json, argc, argv, &i, &ctx, &chunks))) {
            if (r < 0) return EXIT_USAGE;
        } else if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--plot") == 0) plot = 1;
        else if (strcmp(argv[i], "--text") == 0 && i + 1 < argc) text = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1]) return cli_fail("compare", json, EXIT_USAGE, "bad_argument", "unknown option or missing value: '%s'", argv[i]);
        else if (model) return cli_fail("compare", json, EXIT_USAGE, "bad_argument", "more than one MODEL");
        else model = argv[i];
    }
    if (!model || !text || !spec_text)
        return cli_fail("compare", json, EXIT_USAGE, "bad_argument", "need MODEL, --text FILE and --spec\n%s", usage);
    lb_qspec specs[COMPARE_MAX_SPECS];
    char names[COMPARE_MAX_SPECS][256];
    size_t n_specs;
    int rc = cli_parse_specs("compare", json, spec_text, specs, names, COMPARE_MAX_SPECS, &n_specs, 1);
    if (rc != EXIT_OK) return rc;
    lb_method methods[LB_METHOD_COUNT];
    size_t n_methods = 0;
    if (method_text && (rc = parse_methods(json, method_text, methods, &n_methods)) != EXIT_OK) return rc;
    /* the method options, checked as for one method: smoothquant's alpha, a non-rtn one's text */
    cli_recipe_args check = ea.recipe;
    for (size_t k = 0; k < n_methods; k++)
        if (!cli_method_given(&check) || methods[k] == LB_METHOD_SMOOTHQUANT) check = row_method(&ea.recipe, methods[k]);
    if (n_methods) check.alpha = ea.recipe.alpha; /* an alpha without smoothquant among them is refused */
    /* GPTQ's options need a gptq row among them (each gptq row gets them from row_method) */
    int gptq_rows = 0;
    for (size_t k = 0; k < n_methods; k++) gptq_rows |= methods[k] == LB_METHOD_GPTQ || methods[k] == LB_METHOD_AWQ_GPTQ;
    if ((ea.recipe.damp || ea.recipe.block || ea.recipe.actorder || ea.recipe.sequential || ea.recipe.gptq_scales) &&
        !gptq_rows)
        return cli_fail("compare", json, EXIT_USAGE, "bad_argument", "%s is GPTQ's: it needs gptq or awq+gptq in "
                        "--method", ea.recipe.damp ? "--damp" : ea.recipe.block ? "--block"
                        : ea.recipe.actorder ? ea.recipe.actorder : ea.recipe.sequential ? ea.recipe.sequential
                        : "--gptq-scales");
    check.damp = NULL, check.block = NULL, check.actorder = NULL, check.file_order = 0;
    check.sequential = NULL, check.layer_sequential = 0;
    check.gptq_scales = NULL, check.gptq_minmax = 0;
    if ((rc = cli_method_check("compare", json, &check, ea.calib)) != EXIT_OK) return rc;
    /* the rows: every spec, under every method (one row per spec without --method) */
    size_t per_spec = n_methods ? n_methods : 1, n_rows = n_specs * per_spec;
    char rows[COMPARE_MAX_ROWS][300];
    for (size_t r = 0; r < n_rows; r++)
        snprintf(rows[r], sizeof rows[r], "%s%s%s", names[r / per_spec], n_methods ? " " : "",
                 n_methods ? lb_method_name(methods[r % per_spec]) : "");
    lb_qspec embed, head; /* the same in every row (cli_eval_option took one spec each) */
    char embed_name[1][256], head_name[1][256];
    size_t one;
    if (ea.spec_embed && (rc = cli_parse_specs("compare", json, ea.spec_embed, &embed, embed_name, 1, &one, 1)) != EXIT_OK)
        return rc;
    if (ea.spec_head && (rc = cli_parse_specs("compare", json, ea.spec_head, &head, head_name, 1, &one, 1)) != EXIT_OK)
        return rc;
    const lb_qspec *embed_spec = ea.spec_embed ? &embed : NULL, *head_spec = ea.spec_head ? &head : NULL;
    /* the table's first column fits the longest name */
    int w = (int)strlen("(as stored)");
    for (size_t r = 0; r < n_rows; r++)
        if ((int)strlen(rows[r]) > w) w = (int)strlen(rows[r]);
    ea.max_ctx = ctx;
    cli_eval_model base;
    if ((rc = cli_eval_open("compare", json, model, &ea, 0, &base)) != EXIT_OK) return rc;
    const lb_model_quant *mq = lb_model_quantization(base.model);
    if (mq) { /* its rows would quantize dequantized weights again: not what a user of the checkpoint runs */
        rc = cli_fail("compare", json, EXIT_USAGE, "bad_argument", "%s is a quantized checkpoint (%s, %s): compare's "
                      "--spec rows would quantize its dequantized weights again. Give compare the 16-bit model it "
                      "was made from, or measure the checkpoint with ppl or kld", model, mq->method, mq->format);
        cli_eval_close(&base);
        return rc;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    rc = cli_eval_tokens("compare", json, base.tok, text, &ids, &n);
    if (rc == EXIT_OK) rc = cli_eval_check_windows("compare", json, base.model, n, ctx);
    cli_eval_args base_args = ea; /* the model as stored, fp32 cache: what every row is measured against */
    base_args.spec_embed = base_args.spec_head = NULL;
    base_args.kv = base_args.act = base_args.calib = NULL;
    base_args.fake = 0, base_args.calib_tokens = 0;
    memset(&base_args.recipe, 0, sizeof base_args.recipe);
    if (rc == EXIT_OK) rc = cli_eval_runner("compare", json, &base_args, &base);
    cli_progress_ctx progress = {"compare", "window", NULL};
    lb_eval_options o = {.ctx = ctx, .max_chunks = chunks, .bos = lb_tokenizer_add_bos(base.tok) ? lb_tokenizer_bos(base.tok) : -1,
                         .progress = cli_progress_fn, .progress_ctx = &progress};
    /* the base model's distributions, computed once for every spec: in
     * --tmpdir, (8 + 2 vocab) bytes per scored token, removed at the end;
     * exact (16 bits per log-probability, as kld --base), where keeping
     * only the top-k would change every KLD */
    char saved[512] = "";
    if (!tmpdir || !tmpdir[0]) tmpdir = "/tmp";
    /* a free name: outputs never replace an existing file (one left by a
     * killed process with our id is not ours to delete) */
    for (int k = 0; k < 100; k++) {
        snprintf(saved, sizeof saved, "%s/lowbit-compare-%ld%s%.0d.kld", tmpdir, (long)getpid(), k ? "-" : "", k);
        if (access(saved, F_OK) != 0) break;
    }
    cli_remove_on_signal(saved); /* complete after the first row, removed at the end: by a SIGINT too */
    size_t windows = n / ctx < chunks || !chunks ? n / ctx : chunks;
    uint64_t cache_bytes = lb_kld_base_bytes(lb_runner_vocab_size(base.runner), ctx, windows);
    if (rc == EXIT_OK && n_rows > 1) {
        rc = cli_check_room("compare", json, tmpdir, cache_bytes, "a file of the base model's distributions");
        if (rc == EXIT_OK)
            fprintf(stderr, "lowbit compare: the base model's distributions for rows 2..%zu go to %s: %.1f MB "
                    "(%llu bytes: %zu windows x %u scored tokens x (8 + 2 x %u) bytes), removed at the end\n",
                    n_rows, saved, cache_bytes / 1e6, (unsigned long long)cache_bytes, windows, ctx - 1 - ctx / 2,
                    lb_runner_vocab_size(base.runner));
    }
    lb_ppl_result ref = {0}; /* the model as stored: from the first spec's KL run, which scores it anyway */
    double stored_bytes = 0;
    for (size_t i = 0; i < lb_model_tensor_count(base.model); i++) stored_bytes += (double)lb_model_tensor(base.model, i)->n_bytes;
    lb_status st = LB_OK;
    weight_cost costs[COMPARE_MAX_ROWS];
    lb_kld_result klds[COMPARE_MAX_ROWS];
    lb_runner_saturation sats[COMPARE_MAX_ROWS];
    int scaled[COMPARE_MAX_ROWS]; /* a method other than rtn: no SQNR against the stored weights */
    size_t done = 0;
    const char *unit = n_methods ? "row" : "spec"; /* a row is a spec under a method */
    for (size_t s = 0; rc == EXIT_OK && st == LB_OK && s < n_rows; s++) {
        size_t spec = s / per_spec;
        cli_eval_args qa = ea;
        qa.spec = names[spec];
        memset(&qa.recipe, 0, sizeof qa.recipe); /* the method options are the row's */
        cli_recipe_args method = n_methods ? row_method(&ea.recipe, methods[s % per_spec]) : qa.recipe;
        scaled[s] = cli_method_given(&method);
        cli_eval_model q = {.model = base.model, .tok = base.tok};
        char row[300];
        /* a long spec name is cut in the progress note (the table has it whole) */
        if (snprintf(row, sizeof row, "%s %zu/%zu %s", unit, s + 1, n_rows, rows[s]) < 0) row[0] = '\0';
        progress.note = row;
        cli_progress("compare", unit, s, n_rows, NULL);
        if (s % per_spec == 0) st = weight_costs(base.model, &specs[spec], embed_spec, head_spec, ea.threads, &costs[s]);
        else costs[s] = costs[s - 1];
        if (st != LB_OK) break;
        rc = n_methods ? cli_eval_method_runner("compare", json, &qa, &method, &q) : cli_eval_runner("compare", json, &qa, &q);
        if (rc != EXIT_OK) {
            lb_qmodel_free(q.qmodel);
            break;
        }
        st = lb_kld(s == 0 ? base.runner : NULL, q.runner, ids, n, &o, s == 0 && n_rows > 1 ? saved : NULL,
                    s == 0 ? NULL : saved, &klds[s]);
        lb_runner_saturation_get(q.runner, &sats[s]);
        if (st == LB_OK && !json && (qa.kv || qa.act)) fprintf(stderr, "%s ", rows[s]); /* the row, then its line */
        if (st == LB_OK) cli_eval_print_saturation("compare", json ? NULL : stderr, q.runner, &qa, 0);
        lb_runner_free(q.runner); /* the model and tokenizer are base's */
        lb_qmodel_free(q.qmodel);
        if (st != LB_OK) break;
        const weight_cost *c = &costs[s];
        const lb_kld_result *k = &klds[s];
        if (s == 0) {
            ref.ppl = k->ppl_base, ref.ppl_err = k->ppl_base_err, ref.tokens = k->tokens, ref.chunks = k->chunks;
            if (!json) {
                printf("%s on %s: %zu windows of %u tokens, %llu scored; projections quantized", model, text,
                       ref.chunks, ctx, (unsigned long long)ref.tokens);
                if (embed_spec) printf(", embedding %s", ea.spec_embed);
                if (head_spec && lb_model_arch(base.model)->tied_embeddings)
                    printf(", head tied to the embedding (--spec-head has none to quantize)");
                else if (head_spec) printf(", head %s", ea.spec_head);
                printf(", the rest as stored\n\n");
                printf("%-*s %11s %9s %9s %10s %9s %9s %9s %9s %8s\n", w, "spec", "bits/weight", "size MB", "SQNR dB",
                       "PPL", "+/-", "dPPL", "KLD", "+/-", "top-1 %");
                printf("%-*s %11s %9.3f %9s %10.4f %9.4f\n", w, "(as stored)", "", stored_bytes / 1e6, "", ref.ppl,
                       ref.ppl_err);
            }
        }
        if (!json) {
            double sqnr = c->noise > 0 ? 10 * log10(c->signal / c->noise) : INFINITY;
            char sq[32];
            if (scaled[s]) snprintf(sq, sizeof sq, "-");
            else snprintf(sq, sizeof sq, "%.2f", sqnr);
            printf("%-*s %11.3f %9.3f %9s %10.4f %9.4f %+9.4f %9.5f %9.5f %8.2f\n", w, rows[s], c->bits,
                   c->size_bytes / 1e6, sq, k->ppl, k->ppl_err, k->dppl, k->kld_mean, k->kld_err,
                   100 * k->top1_agreement);
            fflush(stdout);
        }
        done++;
        cli_progress("compare", unit, done, n_rows, rows[s]);
    }
    cli_remove_on_signal(NULL);
    remove(saved);
    if (rc == EXIT_OK && st != LB_OK)
        rc = cli_fail("compare", json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, lb_status_name(st), "%s",
                      st == LB_ERR_NOMEM ? "out of memory" : lb_last_error());
    if (rc == EXIT_OK && plot && !json && done) {
        const char *labels[COMPARE_MAX_ROWS];
        double x[COMPARE_MAX_ROWS], y[COMPARE_MAX_ROWS];
        for (size_t s = 0; s < done; s++) labels[s] = rows[s], x[s] = costs[s].bits, y[s] = klds[s].kld_mean;
        printf("\n");
        cli_plot_scatter(stdout, "KLD against bits per weight (down and left is better)", "bits per weight",
                         "mean KLD", labels, x, y, done, 60, 14);
        cli_plot_bars(stdout, "\nmean KLD per row", labels, y, done, 40, "%.5f");
    }
    if (rc == EXIT_OK && json) { /* printed whole, only once everything is known */
        printf("{\"model\": ");
        json_string(stdout, model);
        printf(", \"spec_embed\": ");
        json_string(stdout, ea.spec_embed ? ea.spec_embed : "");
        printf(", \"spec_head\": ");
        json_string(stdout, ea.spec_head ? ea.spec_head : "");
        printf(", \"ctx\": %u, \"chunks\": %zu, \"scored_tokens\": %llu", ctx, ref.chunks, (unsigned long long)ref.tokens);
        json_field(stdout, "ppl", ref.ppl);
        json_field(stdout, "ppl_err", ref.ppl_err);
        json_field(stdout, "size_bytes", stored_bytes);
        printf(", \"specs\": [");
        for (size_t s = 0; s < done; s++) {
            const weight_cost *c = &costs[s];
            const lb_kld_result *k = &klds[s];
            printf("%s{\"spec\": ", s ? ", " : "");
            json_string(stdout, names[s / per_spec]);
            if (n_methods) {
                cli_recipe_args m = row_method(&ea.recipe, methods[s % per_spec]);
                cli_method_print(stdout, &m, ea.calib, 1);
            } else
                printf(", \"method\": \"rtn\"");
            json_field(stdout, "bits_per_weight", c->bits);
            json_field(stdout, "size_bytes", c->size_bytes);
            if (scaled[s]) printf(", \"sqnr_db\": null");
            else json_field(stdout, "sqnr_db", c->noise > 0 ? 10 * log10(c->signal / c->noise) : INFINITY);
            json_field(stdout, "ppl", k->ppl);
            json_field(stdout, "ppl_err", k->ppl_err);
            json_field(stdout, "dppl", k->dppl);
            json_field(stdout, "dppl_err", k->dppl_err);
            json_field(stdout, "kld_mean", k->kld_mean);
            json_field(stdout, "kld_err", k->kld_err);
            json_field(stdout, "kld_p99", k->kld_p99);
            json_field(stdout, "top1_agreement", k->top1_agreement);
            printf(", \"saturation\": {\"kv\": %llu, \"kv_values\": %llu, \"act\": %llu, \"act_values\": %llu}}",
                   (unsigned long long)sats[s].kv_saturated, (unsigned long long)sats[s].kv_values,
                   (unsigned long long)sats[s].act_saturated, (unsigned long long)sats[s].act_values);
        }
        printf("]}\n");
    }
    free(ids);
    cli_eval_close(&base);
    return rc;
}

const cli_command cmd_compare = {"compare", "one row per spec: bits, size, SQNR, perplexity, KL divergence, top-1",
                                 usage, run};
