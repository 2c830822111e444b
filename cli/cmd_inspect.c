/* lowbit inspect: what a checkpoint holds, and which tensors will be hard
 * to quantize (heavy tails, one dominant channel, far outliers). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_model.h"

#define INSPECT_HIST_BINS 64 /* the usage text says 64 */

static const char usage[] =
    "usage: lowbit inspect MODEL [--json [--histogram [--spec S]]] [--quiet]\n\n"
    "MODEL is a .gguf, .safetensors or llama2.c .bin file, or a Hugging Face model\n"
    "directory (config.json + model.safetensors or sharded model-*.safetensors).\n"
    "Prints the architecture, parameter count and bytes, and per tensor: canonical\n"
    "(Hugging Face) name, stored dtype, shape, bytes, absmax, standard deviation,\n"
    "kurtosis (3 for a normal distribution), the outlier ratio (largest row absmax\n"
    "over the median row's: rows are a weight's output channels) and the count of\n"
    "values beyond 6 standard deviations from the mean.\n"
    "A quantized checkpoint (compressed-tensors or ModelOpt directory) shows its\n"
    "format and each config group's weights and input activations; its quantized\n"
    "weights are listed as dtype 'quantized', their bytes counting every scale.\n"
    "--histogram (with --json) adds each weight's histogram: 64 equal bins over [-absmax, absmax];\n"
    "--spec S also the element grid of S at the tensor's absmax (one scale for the whole tensor:\n"
    "the coarse grid a per-tensor scale gives; group scales refine it per group). lowbit report\n"
    "draws them.\n";

/* A quantized checkpoint's config, before the tensor table. */
static void print_quant(const lb_model_quant *q)
{
    char a[256], b[256], c[256];
    printf("quantization: %s, format %s, %zu quantized weights (%zu scale and component tensors folded in or set "
           "aside), kv cache %s\n", q->method, cli_escape(a, sizeof a, q->format), q->quantized, q->hidden,
           cli_escape(b, sizeof b, q->kv_cache));
    for (size_t i = 0; i < q->n_groups; i++) {
        const lb_quant_group *g = &q->groups[i];
        printf("  %s: %s, %zu modules; weights %s; input %s\n", cli_escape(a, sizeof a, g->name),
               cli_escape(b, sizeof b, g->format), g->modules, cli_escape(c, sizeof c, g->weights), g->input);
    }
    printf("\n");
}

static void json_quant(const lb_model_quant *q)
{
    printf(", \"quantization\": {\"method\": ");
    json_string(stdout, q->method);
    printf(", \"format\": ");
    json_string(stdout, q->format);
    printf(", \"kv_cache\": ");
    json_string(stdout, q->kv_cache);
    printf(", \"quantized\": %zu, \"hidden\": %zu, \"groups\": [", q->quantized, q->hidden);
    for (size_t i = 0; i < q->n_groups; i++) {
        const lb_quant_group *g = &q->groups[i];
        printf("%s{\"name\": ", i ? ", " : "");
        json_string(stdout, g->name);
        printf(", \"format\": ");
        json_string(stdout, g->format);
        printf(", \"weights\": ");
        json_string(stdout, g->weights);
        printf(", \"input\": ");
        json_string(stdout, g->input);
        printf(", \"modules\": %zu}", g->modules);
    }
    printf("]}");
}

static void print_arch(const char *path, const lb_model *m, uint64_t params, uint64_t bytes)
{
    const lb_arch *a = lb_model_arch(m);
    char safe_path[4096], safe_name[256];
    printf("model: %s (%s)\n", cli_escape(safe_path, sizeof safe_path, path), cli_model_kind_name(lb_model_get_kind(m)));
    printf("architecture: %s, %u layers, dim %u, hidden %u, heads %u/%u kv (head_dim %u), vocab %u",
           a->name[0] ? cli_escape(safe_name, sizeof safe_name, a->name) : "unknown", a->n_layers, a->dim, a->hidden_dim, a->n_heads, a->n_kv_heads,
           a->head_dim, a->vocab_size);
    if (a->max_seq_len) printf(", context %u", a->max_seq_len);
    printf("\n  rope theta %g (%s pairs), rms eps %g%s%s%s\n", a->rope_theta,
           a->rope_layout == LB_ROPE_ADJACENT ? "adjacent" : "half-split", a->norm_eps,
           a->tied_embeddings ? ", tied embeddings" : "", a->qkv_bias ? ", qkv bias" : "", a->qk_norm ? ", q/k norm" : "");
    printf("parameters: %llu (%.1f M); bytes: %llu (%.1f MB, %.2f bits per parameter)\n\n", (unsigned long long)params,
           (double)params / 1e6, (unsigned long long)bytes, (double)bytes / 1e6,
           params ? 8.0 * (double)bytes / (double)params : 0.0);
}

/* Counts of x over INSPECT_HIST_BINS equal bins of [-absmax, absmax]. */
static void fill_histogram(const float *x, uint64_t n, double absmax, uint64_t *counts)
{
    if (!(absmax > 0)) {
        counts[INSPECT_HIST_BINS / 2] += n;
        return;
    }
    for (uint64_t k = 0; k < n; k++) {
        long b = (long)floor(((double)x[k] + absmax) / (2 * absmax) * INSPECT_HIST_BINS);
        counts[b < 0 ? 0 : b >= INSPECT_HIST_BINS ? INSPECT_HIST_BINS - 1 : b]++;
    }
}

/* The finite values of an element format (every code of at most 9 bits), sorted, distinct; 0 for wider ones. */
static size_t element_grid(lb_format f, float *out, size_t cap)
{
    const lb_format_info *fi = lb_format_get(f);
    if (!fi || fi->bits > 9) return 0;
    size_t n = 0;
    for (uint32_t c = 0; c < (1u << fi->bits) && n < cap; c++) {
        float v;
        if (lb_decode_value(f, c, &v) != LB_OK || !isfinite(v)) continue;
        size_t k = 0;
        while (k < n && out[k] < v) k++;
        if (k < n && out[k] == v) continue;
        memmove(out + k + 1, out + k, (n - k) * sizeof *out);
        out[k] = v, n++;
    }
    return n;
}

static void print_histogram(const uint64_t *counts, double absmax, const float *grid, size_t n_grid, const char *spec)
{
    printf(", \"histogram\": {\"lo\": ");
    json_number(stdout, -absmax);
    printf(", \"hi\": ");
    json_number(stdout, absmax);
    printf(", \"counts\": [");
    for (int b = 0; b < INSPECT_HIST_BINS; b++) printf("%s%llu", b ? ", " : "", (unsigned long long)counts[b]);
    printf("]}");
    if (!spec) return;
    double top = 0;
    for (size_t k = 0; k < n_grid; k++) top = fmax(top, fabs(grid[k]));
    printf(", \"grid_spec\": ");
    json_string(stdout, spec);
    printf(", \"grid\": [");
    for (size_t k = 0; k < n_grid; k++) {
        printf("%s", k ? ", " : "");
        json_number(stdout, top > 0 ? grid[k] / top * absmax : 0);
    }
    printf("]");
}

static int run(int argc, char **argv)
{
    int json = 0, histogram = 0;
    const char *path = NULL, *spec_text = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--histogram") == 0) histogram = 1;
        else if (strcmp(argv[i], "--spec") == 0 && i + 1 < argc) spec_text = argv[++i];
        else if (strcmp(argv[i], "--quiet") == 0) cli_progress_set_quiet(1);
        else if (argv[i][0] == '-' && argv[i][1]) return cli_fail("inspect", json, EXIT_USAGE, "bad_argument",
                                                                   "unknown option '%s'", argv[i]);
        else if (path) return cli_fail("inspect", json, EXIT_USAGE, "bad_argument", "more than one MODEL");
        else path = argv[i];
    }
    if (!path) return cli_fail("inspect", json, EXIT_USAGE, "bad_argument", "no MODEL given\n%s", usage);
    if ((histogram || spec_text) && !json)
        return cli_fail("inspect", json, EXIT_USAGE, "bad_argument", "--histogram and --spec go with --json");
    if (spec_text && !histogram)
        return cli_fail("inspect", json, EXIT_USAGE, "bad_argument", "--spec draws its grid over --histogram");
    lb_qspec spec;
    float grid[512];
    size_t n_grid = 0;
    if (spec_text) {
        lb_status ps = lb_qspec_parse(spec_text, &spec);
        if (ps != LB_OK) return cli_fail_lb("inspect", json, EXIT_USAGE, ps);
        n_grid = element_grid(spec.element, grid, sizeof grid / sizeof *grid);
    }
    lb_model *m;
    lb_status st = lb_model_open(path, &m);
    if (st != LB_OK) return cli_fail_lb("inspect", json, EXIT_RUNTIME, st);
    size_t n = lb_model_tensor_count(m);
    uint64_t params = lb_model_param_count(m), bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += lb_model_tensor(m, i)->n_bytes;
    /* all statistics first: a failure (a NaN in a tensor) prints nothing half-done */
    lb_tensor_stats *stats = calloc(n ? n : 1, sizeof *stats);
    uint64_t *hist = histogram ? calloc((n ? n : 1) * INSPECT_HIST_BINS, sizeof *hist) : NULL;
    float *buf = NULL;
    size_t cap = 0;
    if (!stats || (histogram && !hist)) {
        free(hist);
        lb_model_close(m);
        return cli_fail("inspect", json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    }
    for (size_t i = 0; st == LB_OK && i < n; i++) {
        const lb_tensor *t = lb_model_tensor(m, i);
        uint64_t rows, cols;
        cli_tensor_matrix(t, &rows, &cols);
        cli_progress("inspect", "tensor", i, n, NULL);
        if (t->n_elements == 0) continue;
        st = cli_tensor_f32(t, &buf, &cap);
        if (st == LB_OK) st = lb_tensor_stats_compute(buf, rows, cols, &stats[i]);
        if (st == LB_OK && hist && lb_tensor_is_weight(t)) fill_histogram(buf, t->n_elements, stats[i].absmax, hist + i * INSPECT_HIST_BINS);
        if (st != LB_OK) {
            char msg[1200];
            snprintf(msg, sizeof msg, "tensor '%s': %s", t->name, st == LB_ERR_NOMEM ? "out of memory" : lb_last_error());
            free(stats), free(buf), free(hist);
            lb_model_close(m);
            return cli_fail("inspect", json, EXIT_RUNTIME, lb_status_name(st), "%s", msg);
        }
        lb_tensor_release(t);
    }
    cli_progress("inspect", "tensor", n, n, NULL);
    free(buf);
    if (json) {
        printf("{\"model\": ");
        json_string(stdout, path);
        printf(", \"kind\": \"%s\", \"architecture\": {", cli_model_kind_name(lb_model_get_kind(m)));
        cli_arch_json(stdout, lb_model_arch(m));
        printf("}");
        if (lb_model_quantization(m)) json_quant(lb_model_quantization(m));
        printf(", \"parameters\": %llu, \"bytes\": %llu, \"tensors\": [", (unsigned long long)params,
               (unsigned long long)bytes);
    } else {
        print_arch(path, m, params, bytes);
        if (lb_model_quantization(m)) print_quant(lb_model_quantization(m));
        printf("%-48s %-7s %-14s %11s %9s %9s %9s %8s %7s\n", "tensor", "dtype", "shape", "bytes", "absmax", "std",
               "kurtosis", "outlier", ">6 std");
    }
    for (size_t i = 0; i < n; i++) {
        const lb_tensor *t = lb_model_tensor(m, i);
        const lb_tensor_stats *s = &stats[i];
        char shape[128];
        cli_shape_string(t, shape, sizeof shape);
        const char *dt = lb_dtype_get(t->dtype)->name;
        if (json) {
            printf("%s{\"name\": ", i ? ", " : "");
            json_string(stdout, t->name);
            printf(", \"file_name\": ");
            json_string(stdout, t->file_name);
            printf(", \"dtype\": \"%s\", \"shape\": [", dt);
            for (int d = 0; d < t->n_dims; d++) printf("%s%llu", d ? ", " : "", (unsigned long long)t->shape[d]);
            printf("], \"bytes\": %llu", (unsigned long long)t->n_bytes);
            json_field(stdout, "absmax", s->absmax);
            json_field(stdout, "mean", s->mean);
            json_field(stdout, "std", s->std);
            json_field(stdout, "kurtosis", s->kurtosis);
            json_field(stdout, "outlier_ratio", s->outlier_ratio);
            printf(", \"beyond_6std\": %llu", (unsigned long long)s->beyond_6std);
            if (hist && lb_tensor_is_weight(t)) print_histogram(hist + i * INSPECT_HIST_BINS, s->absmax, grid, n_grid, spec_text);
            printf("}");
        } else {
            char name[1024]; /* escaped: a name from the file may hold terminal escapes */
            printf("%-48s %-7s %-14s %11llu %9.4g %9.4g %9.4g %8.3g %7llu\n", cli_escape(name, sizeof name, t->name), dt, shape,
                   (unsigned long long)t->n_bytes, s->absmax, s->std, s->kurtosis, s->outlier_ratio,
                   (unsigned long long)s->beyond_6std);
        }
    }
    if (json) printf("]}\n");
    free(stats), free(hist);
    lb_model_close(m);
    return EXIT_OK;
}

const cli_command cmd_inspect = {"inspect", "show a model's architecture, tensors and their statistics", usage, run};
