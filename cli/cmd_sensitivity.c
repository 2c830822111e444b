/* lowbit sensitivity: what quantizing each tensor, layer or class costs,
 * each alone, measured as KL divergence and perplexity on a text, with
 * the bits it saves and a proxy from calibration statistics beside it
 * (lb_sensitivity, lb_unit_proxy). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_eval.h"
#include "cli_output.h"
#include "cli_plot.h"
#include "cli_sensitivity.h"

/* The proxy's statistic: at most this many windows of --proxy-text (as
 * a calibration: enough for a mean of x^2, a fraction of a measurement). */
#define SENSITIVITY_PROXY_WINDOWS 32

static const char usage[] =
    "usage: lowbit sensitivity MODEL --text FILE (--spec S | --scheme S | --recipe FILE | --rule P=SPEC... |\n"
    "                          --type T [GGUF options]) [--unit tensor,layer,class] [--proxy-text FILE]\n"
    "                          [--method M --calib FILE ...] [--kv fp8 --calib FILE] [--decode-act int8|exact] [--ctx 512] [--chunks N]\n"
    "                          [--top N] [--plot] [--tokenizer FILE] [--threads N] [--json] [--quiet]\n\n"
    "Quantizes one unit at a time as the options say (the rest as stored) and measures\n"
    "what it costs on the text, as lowbit kld would for a recipe quantizing that unit\n"
    "alone: the mean KL divergence from the model as stored +- its standard error, the\n"
    "perplexity change, and the bits it saves. Units (--unit, a comma list; default\n"
    "layer,class): tensor (each quantized weight), layer (each decoder layer, the\n"
    "embedding, the head), class (attn, mlp, embed, head -- embed+head when tied --, kv\n"
    "with --kv fp8, act when activations are quantized). Sorted, costliest first.\n"
    "--spec S quantizes every decoder layer's projections under S (as --rule\n"
    "'model.layers.*=S'); --spec-attn, --spec-mlp, --spec-embed and --spec-head the same\n"
    "for their tensors.\n"
    "The proxy (with --proxy-text FILE, or the --calib text): the layer-output error each\n"
    "unit's weights cause, weighted by the mean squared input per column (an importance\n"
    "matrix computed on that text's first " CLI_STR(SENSITIVITY_PROXY_WINDOWS) " windows, llama-imatrix's statistic),\n"
    "sum_j E[x_j^2] |W_j - Q(W)_j|^2: no forward pass per unit. Its Spearman rank correlation\n"
    "with the measured KLD says"
    " whether its ranking can be trusted. Never give the --text file itself.\n"
    "Windows as lowbit kld: --ctx tokens each (default 512), the second half scored, every\n"
    "whole window of the text unless --chunks N. --top N: the N costliest of each kind in\n"
    "the table (default all); --plot draws them as bars.\n" CLI_EVAL_RECIPE_HELP CLI_RECIPE_HELP;

static const char *kind_name(lb_unit_kind k)
{
    switch (k) {
    case LB_UNIT_TENSOR: return "tensor";
    case LB_UNIT_LAYER: return "layer";
    case LB_UNIT_CLASS: return "class";
    case LB_UNIT_MODEL: return "model";
    }
    return "?";
}

/* --unit's list into want[3]; EXIT_OK or reported. */
static int parse_units(const char *text, int *want)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", text);
    want[0] = want[1] = want[2] = 0;
    for (char *p = strtok(buf, ","); p; p = strtok(NULL, ",")) {
        if (strcmp(p, "tensor") == 0) want[LB_UNIT_TENSOR] = 1;
        else if (strcmp(p, "layer") == 0) want[LB_UNIT_LAYER] = 1;
        else if (strcmp(p, "class") == 0) want[LB_UNIT_CLASS] = 1;
        else if (strcmp(p, "all") == 0) want[0] = want[1] = want[2] = 1;
        else return 0;
    }
    return want[0] || want[1] || want[2];
}

typedef struct row {
    lb_unit_info info;
    lb_unit_cost cost;
    double proxy;
} row;

static int by_cost(const void *pa, const void *pb)
{
    const row *a = pa, *b = pb;
    if (a->cost.kld != b->cost.kld) return a->cost.kld < b->cost.kld ? 1 : -1;
    return strcmp(a->info.name, b->info.name);
}

static void print_text(const row *rows, size_t n, size_t top, lb_unit_kind kind, double rho, int have_proxy,
                       const lb_sensitivity_summary *s, int plot)
{
    double base_ppl = exp(s->base_nll);
    printf("\n%s units: %zu, costliest first\n", kind_name(kind), n);
    printf("  %-4s %-40s %10s %9s %9s %10s %11s\n", "rank", "unit", "KLD", "+-", "dPPL", "saves", have_proxy ? "proxy" : "");
    size_t shown = top && top < n ? top : n;
    for (size_t i = 0; i < shown; i++) {
        const row *r = &rows[i];
        double saved = (r->cost.bits_stored - r->cost.bits) / 8;
        printf("  %-4zu %-40s %10.6f %9.6f %+9.4f %9.2fM", i + 1, r->info.name, r->cost.kld, r->cost.kld_err,
               exp(r->cost.nll) - base_ppl, saved / (1 << 20));
        if (have_proxy && isfinite(r->proxy)) printf(" %11.4g", r->proxy);
        else if (have_proxy) printf(" %11s", "n/a");
        printf("\n");
    }
    if (shown < n) printf("  ... %zu more (--top N, or --json for all)\n", n - shown);
    if (have_proxy) {
        if (isfinite(rho))
            printf("  proxy vs measured KLD: Spearman rank correlation %.3f over the units it scores (%s)\n", rho,
                   rho >= 0.9 ? "its ranking can be trusted" : rho >= 0.7 ? "roughly right: measure the top ones"
                                                                         : "do not trust its ranking");
        else printf("  proxy vs measured KLD: too few units the proxy scores for a rank correlation\n");
    }
    if (plot) {
        const char *labels[64];
        double values[64];
        size_t m = shown < 64 ? shown : 64;
        for (size_t i = 0; i < m; i++) labels[i] = rows[i].info.name, values[i] = rows[i].cost.kld;
        char title[96];
        snprintf(title, sizeof title, "  KLD per %s unit (nats per token)", kind_name(kind));
        cli_plot_bars(stdout, title, labels, values, m, 40, "%.5f");
    }
}

static void print_json_rows(const row *rows, size_t n, double base_ppl, int *first)
{
    for (size_t i = 0; i < n; i++) {
        const row *r = &rows[i];
        printf("%s{\"kind\": \"%s\", \"name\": ", *first ? "" : ", ", kind_name(r->info.kind));
        *first = 0;
        json_string(stdout, r->info.name);
        printf(", \"rank\": %zu, \"params\": %llu", i + 1, (unsigned long long)r->info.params);
        json_field(stdout, "kld", r->cost.kld);
        json_field(stdout, "kld_err", r->cost.kld_err);
        json_field(stdout, "ppl", exp(r->cost.nll));
        json_field(stdout, "dppl", exp(r->cost.nll) - base_ppl);
        json_field(stdout, "bits", r->cost.bits);
        json_field(stdout, "bits_stored", r->cost.bits_stored);
        printf(", \"proxy\": ");
        if (isfinite(r->proxy)) json_number(stdout, r->proxy);
        else printf("null");
        printf("}");
    }
}

/* One kind: units, measurement, proxy; rows sorted. */
static int sweep(const char *cmd, int json, lb_qmodel *q, lb_unit_kind kind, const int32_t *ids, size_t n,
                 const lb_sensitivity_options *so, const lb_imatrix *im, int threads, row **out, size_t *n_out,
                 double *rho, lb_sensitivity_summary *s)
{
    lb_units *units = NULL;
    lb_status st = lb_units_make(q, kind, &units);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_USAGE, st);
    size_t nu = lb_units_count(units);
    lb_unit_cost *costs = calloc(nu + 1, sizeof *costs);
    double *proxy = calloc(nu + 1, sizeof *proxy), *kld = calloc(nu + 1, sizeof *kld);
    row *rows = calloc(nu + 1, sizeof *rows);
    int rc = costs && proxy && kld && rows ? EXIT_OK : cli_fail(cmd, json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    if (rc == EXIT_OK) {
        cli_progress_ctx progress = {cmd, "measurement", kind_name(kind)};
        lb_sensitivity_options o = *so;
        o.progress = cli_progress_fn, o.progress_ctx = &progress;
        const lb_qmodel *cand = q;
        st = lb_sensitivity(&cand, 1, units, ids, n, &o, costs, s);
        if (st == LB_OK && im) st = lb_unit_proxy(q, units, im, threads, proxy);
        if (st != LB_OK) rc = cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    }
    for (size_t u = 0; u < nu && rc == EXIT_OK; u++) {
        lb_units_get(units, u, &rows[u].info);
        rows[u].cost = costs[u], rows[u].proxy = im ? proxy[u] : NAN, kld[u] = costs[u].kld;
        if (!im) proxy[u] = NAN;
    }
    *rho = rc == EXIT_OK ? lb_rank_correlation(proxy, kld, nu) : NAN;
    if (rc == EXIT_OK) qsort(rows, nu, sizeof *rows, by_cost);
    /* the names point into the units: copy them before they go */
    for (size_t u = 0; u < nu && rc == EXIT_OK; u++) {
        char *name = strdup(rows[u].info.name);
        if (!name) rc = cli_fail(cmd, json, EXIT_RUNTIME, "out_of_memory", "out of memory");
        rows[u].info.name = name, rows[u].info.entries = NULL;
    }
    free(costs), free(proxy), free(kld);
    lb_units_free(units);
    if (rc != EXIT_OK) {
        free(rows);
        return rc;
    }
    *out = rows, *n_out = nu;
    return EXIT_OK;
}

static void free_rows(row *rows, size_t n)
{
    for (size_t i = 0; rows && i < n; i++) free((char *)rows[i].info.name);
    free(rows);
}

static int run(int argc, char **argv)
{
    int json = 0, plot = 0, want[3] = {0, 1, 1};
    const char *model = NULL, *text = NULL, *proxy_text = NULL;
    cli_eval_args ea = {0};
    uint32_t ctx = 512;
    size_t chunks = 0, top = 0;
    for (int i = 1; i < argc; i++) {
        int r;
        if ((r = cli_eval_option("sensitivity", json, argc, argv, &i, &ea)) ||
            (r = cli_parse_window("sensitivity", json, argc, argv, &i, &ctx, &chunks))) {
            if (r < 0) return EXIT_USAGE;
        } else if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--plot") == 0) plot = 1;
        else if (strcmp(argv[i], "--text") == 0 && i + 1 < argc) text = argv[++i];
        else if (strcmp(argv[i], "--proxy-text") == 0 && i + 1 < argc) proxy_text = argv[++i];
        else if (strcmp(argv[i], "--unit") == 0 && i + 1 < argc) {
            if (!parse_units(argv[++i], want))
                return cli_fail("sensitivity", json, EXIT_USAGE, "bad_argument", "--unit takes a comma list of tensor, "
                                "layer, class (or all), not '%s'", argv[i]);
        } else if (strcmp(argv[i], "--top") == 0 && i + 1 < argc) {
            char *end;
            long long t = strtoll(argv[++i], &end, 10);
            if (*end || t < 1 || t > 1000000)
                return cli_fail("sensitivity", json, EXIT_USAGE, "bad_argument", "--top takes 1..1000000, not '%s'", argv[i]);
            top = (size_t)t;
        } else if (argv[i][0] == '-' && argv[i][1])
            return cli_fail("sensitivity", json, EXIT_USAGE, "bad_argument", "unknown option or missing value: '%s'", argv[i]);
        else if (model) return cli_fail("sensitivity", json, EXIT_USAGE, "bad_argument", "one MODEL only");
        else model = argv[i];
    }
    if (!model || !text)
        return cli_fail("sensitivity", json, EXIT_USAGE, "bad_argument", "need MODEL and --text FILE\n%s", usage);
    int rc = cli_sensitivity_spec_rules("sensitivity", json, &ea);
    if (rc != EXIT_OK) return rc;
    if (!ea.gguf.given && !cli_recipe_given(&ea.recipe))
        return cli_fail("sensitivity", json, EXIT_USAGE, "bad_argument", "say how to quantize: --spec S, --scheme S, "
                        "--recipe FILE, --rule P=SPEC or --type T");
    if (!proxy_text) proxy_text = ea.calib;
    ea.calib_used = ea.calib && proxy_text == ea.calib;
    if (proxy_text && strcmp(proxy_text, text) == 0)
        return cli_fail("sensitivity", json, EXIT_USAGE, "bad_argument", "the proxy's text %s is the --text measured "
                        "on: calibrate on other text", proxy_text);
    ea.max_ctx = ctx, ea.qmodel_only = 1;
    cli_eval_model e;
    if ((rc = cli_eval_open("sensitivity", json, model, &ea, 0, &e)) != EXIT_OK) return rc;
    if (lb_model_quantization(e.model)) {
        cli_eval_close(&e);
        return cli_fail("sensitivity", json, EXIT_USAGE, "bad_argument", "%s is a quantized checkpoint: measure the "
                        "model it was made from", model);
    }
    int32_t *ids = NULL, *pids = NULL;
    size_t n = 0, pn = 0;
    lb_imatrix *im = NULL;
    rc = cli_eval_tokens("sensitivity", json, e.tok, text, &ids, &n);
    if (rc == EXIT_OK) rc = cli_eval_check_windows("sensitivity", json, e.model, n, ctx);
    if (rc == EXIT_OK) rc = cli_eval_runner("sensitivity", json, &ea, &e);
    if (rc == EXIT_OK && proxy_text) rc = cli_eval_tokens("sensitivity", json, e.tok, proxy_text, &pids, &pn);
    int32_t bos = lb_tokenizer_add_bos(e.tok) ? lb_tokenizer_bos(e.tok) : -1;
    if (rc == EXIT_OK && proxy_text) {
        cli_progress_ctx progress = {"sensitivity", "proxy statistics window", NULL};
        lb_imatrix_options io = {.ctx = ctx, .bos = bos, .threads = ea.threads, .process_output = 1,
                                 .max_chunks = SENSITIVITY_PROXY_WINDOWS,
                                 .progress = cli_progress_fn, .progress_ctx = &progress};
        lb_status st = lb_imatrix_compute(e.model, pids, pn, &io, &im);
        if (st != LB_OK) rc = cli_fail_lb("sensitivity", json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
    }
    row *rows[3] = {NULL, NULL, NULL};
    size_t counts[3] = {0, 0, 0};
    double rho[3] = {NAN, NAN, NAN};
    lb_sensitivity_summary s = {0};
    double seconds = 0;
    lb_sensitivity_options so = {.ctx = ctx, .max_windows = chunks, .bos = bos, .threads = ea.threads};
    for (int k = 0; k < 3 && rc == EXIT_OK; k++)
        if (want[k]) {
            rc = sweep("sensitivity", json, e.qmodel, (lb_unit_kind)k, ids, n, &so, im, ea.threads, &rows[k],
                       &counts[k], &rho[k], &s);
            seconds += s.seconds;
        }
    if (rc == EXIT_OK) {
        double base_ppl = exp(s.base_nll);
        size_t measurements = 0;
        for (int k = 0; k < 3; k++) measurements += counts[k];
        if (json) {
            printf("{\"command\": \"sensitivity\", \"model\": ");
            json_string(stdout, model);
            cli_eval_print_setup(stdout, &ea, 1);
            printf(", \"ctx\": %u, \"windows\": %zu, \"scored_tokens\": %llu", s.ctx, s.windows,
                   (unsigned long long)s.scored_tokens);
            json_field(stdout, "ppl_base", base_ppl);
            json_field(stdout, "seconds", seconds);
            json_field(stdout, "seconds_per_unit", measurements ? seconds / (double)measurements : 0);
            printf(", \"proxy_text\": ");
            if (proxy_text) json_string(stdout, proxy_text);
            else printf("null");
            printf(", \"rank_correlation\": {");
            int first = 1;
            for (int k = 0; k < 3; k++)
                if (want[k]) {
                    printf("%s\"%s\": ", first ? "" : ", ", kind_name((lb_unit_kind)k));
                    first = 0;
                    if (isfinite(rho[k])) json_number(stdout, rho[k]);
                    else printf("null");
                }
            printf("}, \"units\": [");
            first = 1;
            for (int k = 0; k < 3; k++) print_json_rows(rows[k], counts[k], base_ppl, &first);
            printf("]");
            cli_eval_print_recipe(stdout, &e, 1);
            printf("}\n");
        } else {
            printf("%s: %zu windows of %u, %llu scored tokens; perplexity as stored %.4f\n", model, s.windows, s.ctx,
                   (unsigned long long)s.scored_tokens, base_ppl);
            cli_eval_print_recipe(stdout, &e, 0);
            for (int k = 0; k < 3; k++)
                if (want[k]) print_text(rows[k], counts[k], top, (lb_unit_kind)k, rho[k], im != NULL, &s, plot);
            if (!im) printf("\n(no proxy: give --proxy-text FILE or --calib FILE, calibration text)\n");
            printf("\n%zu units measured in %.1f s (%.2f s per unit, %zu windows each)\n", measurements, seconds,
                   measurements ? seconds / (double)measurements : 0, s.windows);
        }
    }
    for (int k = 0; k < 3; k++) free_rows(rows[k], counts[k]);
    lb_imatrix_free(im);
    free(ids), free(pids);
    cli_eval_close(&e);
    return rc;
}

const cli_command cmd_sensitivity = {"sensitivity", "what quantizing each tensor, layer or class costs, each alone",
                                     usage, run};
