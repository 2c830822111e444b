/* lowbit quantize --format gguf (cli_gguf.h). */
#include <fnmatch.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_eval.h"
#include "cli_gguf.h"
#include "cli_imatrix.h"
#include "cli_output.h"
#include "cli_recipe.h"

static int value_of(const char *cmd, int json, int argc, char **argv, int *i, const char **out)
{
    if (*i + 1 >= argc) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s needs a value", argv[*i]), -1;
    *out = argv[++*i];
    return 1;
}

static int add(const char *cmd, int json, const char **list, size_t *n, const char *v, const char *opt)
{
    if (*n == CLI_GGUF_MAX_OVERRIDES)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "more than %d %s options", CLI_GGUF_MAX_OVERRIDES, opt), -1;
    list[(*n)++] = v;
    return 1;
}

int cli_gguf_option(const char *cmd, int json, int argc, char **argv, int *i, cli_gguf_args *g)
{
    const char *a = argv[*i], *v = NULL;
    int r = 0;
    if (strcmp(a, "--pure") == 0) g->pure = 1, r = 1;
    else if (strcmp(a, "--dry-run") == 0) g->dry_run = 1, r = 1;
    else if (strcmp(a, "--leave-output-tensor") == 0) g->leave_output = 1, r = 1;
    else if (strcmp(a, "--type") == 0) r = value_of(cmd, json, argc, argv, i, &g->type);
    else if (strcmp(a, "--output-tensor-type") == 0) r = value_of(cmd, json, argc, argv, i, &g->output_type);
    else if (strcmp(a, "--token-embedding-type") == 0) r = value_of(cmd, json, argc, argv, i, &g->embd_type);
    else if (strcmp(a, "--imatrix") == 0) r = value_of(cmd, json, argc, argv, i, &g->imatrix_file);
    else if (strcmp(a, "--imatrix-from") == 0) r = value_of(cmd, json, argc, argv, i, &g->imatrix_text);
    else if (strcmp(a, "--tensor-type") == 0) {
        if ((r = value_of(cmd, json, argc, argv, i, &v)) > 0)
            r = add(cmd, json, g->tensor_types, &g->n_tensor_types, v, "--tensor-type");
    } else if (strcmp(a, "--include-weights") == 0) {
        if ((r = value_of(cmd, json, argc, argv, i, &v)) > 0) r = add(cmd, json, g->include, &g->n_include, v, a);
    } else if (strcmp(a, "--exclude-weights") == 0) {
        if ((r = value_of(cmd, json, argc, argv, i, &v)) > 0) r = add(cmd, json, g->exclude, &g->n_exclude, v, a);
    }
    if (r > 0) g->given = 1;
    return r;
}

void cli_gguf_take_rules(cli_recipe_args *ra, cli_gguf_args *g)
{
    size_t kept = 0;
    for (size_t k = 0; k < ra->n_rules; k++) {
        const char *eq = ra->rule_is_keep[k] ? NULL : strchr(ra->rules[k], '=');
        if (eq && lb_ggml_type_by_name(eq + 1) >= 0 && g->n_rules < CLI_GGUF_MAX_RULES) {
            g->rules[g->n_rules++] = ra->rules[k];
            continue;
        }
        ra->rules[kept] = ra->rules[k], ra->rule_is_keep[kept] = ra->rule_is_keep[k], kept++;
    }
    ra->n_rules = kept;
}

/* "^name$" with every character outside [a-z0-9_] in a bracket, so a GGUF
 * name matches itself only. */
static char *exact_pattern(const char *name, const char *type)
{
    size_t n = strlen(name);
    char *p = malloc(4 * n + strlen(type) + 4), *w = p;
    if (!p) return NULL;
    *w++ = '^';
    for (const char *c = name; *c; c++) {
        int plain = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_';
        if (plain) *w++ = *c;
        else *w++ = '[', *w++ = *c, *w++ = ']';
    }
    sprintf(w, "$=%s", type);
    return p;
}

static int rule_matches(const char *pattern, regex_t *re, int is_re, const char *name)
{
    return is_re ? regexec(re, name, 0, NULL, 0) == 0 : fnmatch(pattern, name, 0) == 0;
}

/* --rule P=X as --tensor-type overrides of the GGUF names of the weights
 * P matches (before the --tensor-type ones: the first match wins). */
static int rule_overrides(const char *cmd, int json, const lb_qmodel *q, const cli_gguf_args *g, char ***owned,
                          size_t *n_owned)
{
    size_t n = lb_qmodel_count(q);
    *owned = calloc(g->n_rules * n + 1, sizeof **owned);
    *n_owned = 0;
    if (!*owned) return cli_fail(cmd, json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    for (size_t k = 0; k < g->n_rules; k++) {
        const char *eq = strchr(g->rules[k], '=');
        char pattern[1024], anchored[1040];
        snprintf(pattern, sizeof pattern, "%.*s", (int)(eq - g->rules[k]), g->rules[k]);
        int is_re = strncmp(pattern, "re:", 3) == 0;
        regex_t re;
        if (is_re) {
            snprintf(anchored, sizeof anchored, "^(%s)$", pattern + 3);
            if (regcomp(&re, anchored, REG_EXTENDED | REG_NOSUB) != 0)
                return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--rule '%s': not a POSIX extended regex",
                                g->rules[k]);
        }
        size_t hits = 0;
        for (size_t i = 0; i < n; i++) {
            lb_qentry e;
            char gname[160];
            if (lb_qmodel_entry(q, i, &e) != LB_OK || !lb_tensor_is_weight(e.tensor)) continue;
            if (!rule_matches(pattern, &re, is_re, e.tensor->name)) continue;
            if (lb_qmodel_gguf_name(q, i, gname, sizeof gname) != LB_OK) continue;
            char *p = exact_pattern(gname, eq + 1);
            if (!p) break;
            (*owned)[(*n_owned)++] = p;
            hits++;
        }
        if (is_re) regfree(&re);
        if (!hits)
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--rule '%s' matches no weight of the model",
                            g->rules[k]);
    }
    return EXIT_OK;
}

/* The order of the file (and of llama-quantize's listing): by the layer
 * number of "blk.N.", the rest first, then by name. */
typedef struct listed {
    char name[160];
    int layer;
    size_t i;
} listed;

static int cmp_listed(const void *a, const void *b)
{
    const listed *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void print_dry_run(int json, const lb_qmodel *q, const int *types, const char *type)
{
    size_t n = lb_qmodel_count(q);
    uint64_t bytes = 0, params = 0;
    listed *order = calloc(n ? n : 1, sizeof *order);
    for (size_t i = 0; order && i < n; i++) {
        order[i].i = i, order[i].layer = -1;
        if (lb_qmodel_gguf_name(q, i, order[i].name, sizeof order[i].name) != LB_OK) continue;
        if (sscanf(order[i].name, "blk.%d.", &order[i].layer) != 1) order[i].layer = -1;
    }
    if (order) qsort(order, n, sizeof *order, cmp_listed);
    if (json) printf("{\"type\": "), json_string(stdout, type), printf(", \"tensors\": [");
    for (size_t k = 0; k < n; k++) {
        size_t i = order ? order[k].i : k;
        lb_qentry e;
        char name[160];
        if (lb_qmodel_entry(q, i, &e) != LB_OK || lb_qmodel_gguf_name(q, i, name, sizeof name) != LB_OK) continue;
        const lb_tensor *t = e.tensor;
        const lb_dtype_info *src = lb_dtype_get(t->dtype);
        lb_dtype d;
        uint64_t b = 0;
        if (lb_dtype_from_ggml(types[i], &d) == LB_OK) lb_dtype_bytes(d, t->n_elements, &b);
        bytes += b, params += t->n_elements;
        if (json) {
            printf("%s\n  {\"name\": ", k ? "," : "");
            json_string(stdout, name);
            printf(", \"hf_name\": ");
            json_string(stdout, t->name);
            printf(", \"ne\": [");
            for (int a = t->n_dims - 1; a >= 0; a--) printf("%s%llu", a == t->n_dims - 1 ? "" : ", ", (unsigned long long)t->shape[a]);
            printf("], \"from\": ");
            json_string(stdout, src->ggml_type >= 0 ? lb_ggml_type_name(src->ggml_type) : src->name);
            printf(", \"type\": ");
            json_string(stdout, lb_ggml_type_name(types[i]));
            printf("}");
        } else {
            char shape[64] = "";
            for (int a = t->n_dims - 1; a >= 0; a--)
                snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%llu", a == t->n_dims - 1 ? "" : " x ",
                         (unsigned long long)t->shape[a]);
            printf("%-36s %-20s %-8s -> %s\n", name, shape,
                   src->ggml_type >= 0 ? lb_ggml_type_name(src->ggml_type) : src->name, lb_ggml_type_name(types[i]));
        }
    }
    free(order);
    if (json) printf("\n], \"bytes\": %llu}\n", (unsigned long long)bytes);
    else printf("%zu tensors, %.1f MB, %.3f bits per parameter\n", n, (double)bytes / 1e6,
                params ? 8.0 * (double)bytes / (double)params : 0.0);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int cli_gguf_imatrix(const char *cmd, int json, cli_gguf_args *g, const lb_model *m, const lb_tokenizer *tok,
                     int threads)
{
    g->imatrix = NULL;
    if (g->imatrix_file && g->imatrix_text)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--imatrix FILE or --imatrix-from TEXT, not both");
    if (g->n_include && g->n_exclude)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument",
                        "--include-weights and --exclude-weights cannot be used together (as in llama-quantize)");
    if ((g->n_include || g->n_exclude) && !g->imatrix_file && !g->imatrix_text)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--%s-weights selects imatrix entries: give --imatrix "
                        "FILE or --imatrix-from TEXT", g->n_include ? "include" : "exclude");
    int rc = cli_imatrix_get(cmd, json, g->imatrix_file, g->imatrix_text, m, tok, threads, &g->imatrix);
    if (rc != EXIT_OK || !g->imatrix || !g->imatrix_file) return rc;
    lb_imatrix_info info;
    lb_imatrix_get_info(g->imatrix, &info);
    if (!info.legacy && !info.has_metadata) { /* llama-quantize refuses it so */
        lb_imatrix_free(g->imatrix), g->imatrix = NULL;
        return cli_fail(cmd, json, EXIT_RUNTIME, "bad_input", "%s: a GGUF imatrix without imatrix.datasets, "
                        "imatrix.chunk_count and imatrix.chunk_size (llama-quantize refuses it too)", g->imatrix_file);
    }
    return EXIT_OK;
}

/* The library's options of g (the same for choosing and for writing). */
static lb_gguf_options options_of(const cli_gguf_args *g, int threads, const char **overrides, size_t n_overrides)
{
    lb_gguf_options o = {.type = g->type, .pure = g->pure, .output_tensor_type = g->output_type,
                         .token_embedding_type = g->embd_type, .leave_output = g->leave_output, .threads = threads,
                         .tensor_types = overrides, .n_tensor_types = n_overrides, .imatrix = g->imatrix,
                         .imatrix_file = g->imatrix_file, .imatrix_include = g->include,
                         .n_imatrix_include = g->n_include, .imatrix_exclude = g->exclude,
                         .n_imatrix_exclude = g->n_exclude};
    return o;
}

int cli_gguf_choose(const char *cmd, int json, lb_qmodel *q, const cli_gguf_args *g, int threads, int *types)
{
    char **owned = NULL;
    size_t n_owned = 0;
    const char **overrides = NULL;
    int rc = rule_overrides(cmd, json, q, g, &owned, &n_owned);
    if (rc == EXIT_OK && !(overrides = calloc(n_owned + g->n_tensor_types + 1, sizeof *overrides)))
        rc = cli_fail(cmd, json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    if (rc == EXIT_OK) {
        for (size_t k = 0; k < n_owned; k++) overrides[k] = owned[k];
        for (size_t k = 0; k < g->n_tensor_types; k++) overrides[n_owned + k] = g->tensor_types[k];
        lb_gguf_options o = options_of(g, threads, overrides, n_owned + g->n_tensor_types);
        lb_status st = lb_gguf_choose(q, &o, types);
        if (st == LB_ERR_UNSUPPORTED && types && g->dry_run) {
            if (!json) fprintf(stderr, "lowbit %s: note: %s\n", cmd, lb_last_error());
        } else if (st != LB_OK)
            rc = cli_fail_lb(cmd, json, st == LB_ERR_ARG || st == LB_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME, st);
    }
    for (size_t k = 0; k < n_owned; k++) free(owned[k]);
    free(owned), free(overrides);
    return rc;
}

/* Tensors quantized with an importance vector (those without an entry, as
 * token_embd usually, went without one). */
static size_t with_imatrix(const lb_qmodel *q)
{
    size_t n = 0;
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        n += lb_qmodel_entry(q, i, &e) == LB_OK && e.has_imatrix;
    }
    return n;
}

int cli_quantize_gguf(const char *cmd, int json, const char *model, const char *out, const cli_gguf_args *given,
                      const cli_recipe_args *method, const char *calib, int threads, const char *mix_json)
{
    cli_gguf_args ga = *given, *g = &ga;
    int with_method = cli_method_given(method);
    if (!g->type) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--format gguf needs --type T (Q4_K_M, Q8_0, ...)");
    int rc = cli_method_imatrix_check(cmd, json, method, g->imatrix_file || g->imatrix_text);
    if (rc != EXIT_OK) return rc;
    if (!g->dry_run && !out) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "need -o OUT.gguf (or --dry-run)");
    rc = cli_protect(cmd, json, model, "MODEL");
    if (rc == EXIT_OK && !g->dry_run) rc = cli_output_check(cmd, json, out);
    if (rc != EXIT_OK) return rc;
    double t0 = now();
    lb_model *m = NULL;
    lb_qmodel *q = NULL;
    int *types = NULL;
    lb_status st = LB_OK;
    cli_eval_model e = {0};
    if (g->imatrix_text || with_method) { /* the tokenizer too, to compute the imatrix or calibrate on the text */
        cli_eval_args ea = {.tokenizer = g->tokenizer, .threads = threads, .max_ctx = 512};
        if ((rc = cli_eval_open(cmd, json, model, &ea, 0, &e)) == EXIT_OK) m = e.model;
    } else if ((st = lb_model_open(model, &m)) != LB_OK)
        rc = cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    if (rc == EXIT_OK) rc = cli_gguf_imatrix(cmd, json, g, m, e.tok, threads);
    if (rc == EXIT_OK && (st = lb_qmodel_new(m, &q)) != LB_OK) rc = cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    if (rc == EXIT_OK && !(types = calloc(lb_qmodel_count(q) + 1, sizeof *types)))
        rc = cli_fail(cmd, json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    if (rc == EXIT_OK) rc = cli_gguf_choose(cmd, json, q, g, threads, types);
    /* the types chosen, the method scales and clips the weights they quantize */
    if (rc == EXIT_OK && !g->dry_run) rc = cli_method_apply(cmd, json, q, e.tok, calib, method, threads);
    if (rc == EXIT_OK && g->dry_run) print_dry_run(json, q, types, g->type);
    lb_gguf_options o = options_of(g, threads, NULL, 0);
    if (rc == EXIT_OK && !g->dry_run) {
        cli_progress_ctx progress = {cmd, "tensor", NULL};
        o.progress = cli_progress_fn, o.progress_ctx = &progress;
        lb_export_result r;
        memset(&r, 0, sizeof r);
        if ((st = lb_export_gguf(q, out, &o, &r)) != LB_OK)
            rc = cli_fail_lb(cmd, json, st == LB_ERR_ARG || st == LB_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME, st);
        else if (json) {
            printf("{\"output\": ");
            json_string(stdout, out);
            printf(", \"format\": \"gguf\", \"type\": ");
            json_string(stdout, g->type);
            cli_method_print(stdout, method, calib, 1);
            printf(", \"tensors\": %llu, \"quantized\": %llu, \"bytes\": %llu, \"weight_params\": %llu",
                   (unsigned long long)r.tensors, (unsigned long long)r.quantized, (unsigned long long)r.bytes,
                   (unsigned long long)r.weight_params);
            json_field(stdout, "bits_per_weight", r.bits_per_weight);
            if (g->imatrix) printf(", \"imatrix_tensors\": %zu", with_imatrix(q));
            json_field(stdout, "seconds", now() - t0);
            if (mix_json) printf(", \"mix\": %s", mix_json);
            printf("}\n");
        } else {
            printf("wrote %s (gguf %s", out, g->type);
            if (with_method) {
                printf("; ");
                cli_method_print(stdout, method, calib, 0);
            }
            printf("): %llu tensors, %llu quantized", (unsigned long long)r.tensors, (unsigned long long)r.quantized);
            if (g->imatrix) printf(" (%zu with an imatrix entry)", with_imatrix(q));
            printf(", %.3f bits per weight, %.1f s\n", r.bits_per_weight, now() - t0);
        }
    }
    free(types);
    lb_qmodel_free(q);
    lb_imatrix_free(g->imatrix);
    if (e.model) cli_eval_close(&e);
    else lb_model_close(m);
    return rc;
}
