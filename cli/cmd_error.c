/* lowbit error: quantize every weight matrix of a model with each spec (in
 * memory, one tensor at a time) and report what each spec costs, tensor by
 * tensor and for the whole model. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_model.h"

#define ERROR_MAX_SPECS 16
#define WORST 3

static const char usage[] =
    "usage: lowbit error MODEL --spec SPEC[,SPEC...] [--threads N] [--json] [--quiet]\n\n"
    "Quantizes every weight matrix (2-D projections, embeddings, output head; not\n"
    "norms or biases) with each spec, in memory, and reports per tensor the SQNR\n"
    "(dB) and MSE against the tensor as stored (a quantized GGUF tensor is first\n"
    "dequantized: that is the reference), then per spec: bits per weight including\n"
    "scales, the model's size with the other tensors kept as stored, the SQNR over\n"
    "all weights together, and the worst tensors. Tensors are read one at a time,\n"
    "so memory stays near the largest tensor's size, not the model's.\n";

typedef struct spec_total {
    double signal, noise;   /* sums over all weights: x^2 and (x - x')^2 */
    double bits;            /* quantized bits of all weight tensors, scales included */
    size_t worst[WORST];    /* tensor indices, lowest SQNR first */
    int n_worst;
} spec_total;

typedef struct tensor_row {
    size_t index;
    double sqnr[ERROR_MAX_SPECS], mse[ERROR_MAX_SPECS];
} tensor_row;

/* Keeps the WORST lowest-SQNR tensors of spec s, lowest first. */
static void note_worst(spec_total *t, const tensor_row *rows, size_t row, int s)
{
    int k;
    if (t->n_worst < WORST) k = t->n_worst++;
    else if (rows[row].sqnr[s] < rows[t->worst[WORST - 1]].sqnr[s]) k = WORST - 1;
    else return;
    t->worst[k] = row;
    for (; k > 0 && rows[t->worst[k]].sqnr[s] < rows[t->worst[k - 1]].sqnr[s]; k--) {
        size_t tmp = t->worst[k];
        t->worst[k] = t->worst[k - 1], t->worst[k - 1] = tmp;
    }
}

static double db(double signal, double noise) { return noise > 0 ? 10 * log10(signal / noise) : INFINITY; }

/* One weight tensor under every spec. */
static lb_status measure(const lb_tensor *t, const float *x, float *xhat, const lb_qspec *specs, size_t n_specs,
                         int threads, tensor_row *row, spec_total *tot)
{
    uint64_t rows, cols;
    cli_tensor_matrix(t, &rows, &cols);
    double signal = 0;
    for (size_t i = 0; i < t->n_elements; i++) signal += (double)x[i] * x[i];
    for (size_t s = 0; s < n_specs; s++) {
        lb_qstats qs;
        lb_status st = cli_quant_stats(&specs[s], x, rows, cols, threads, xhat, &qs);
        if (st != LB_OK) return st;
        row->sqnr[s] = qs.sqnr_db, row->mse[s] = qs.mse;
        tot[s].signal += signal;
        tot[s].noise += qs.mse * (double)qs.count;
        tot[s].bits += qs.bits_per_value * (double)qs.count;
    }
    return LB_OK;
}

static void print_text(const lb_model *m, const char *path, char (*names)[256], size_t n_specs, const tensor_row *rows,
                       size_t n_rows, const spec_total *tot, uint64_t weights, uint64_t other_bytes)
{
    char safe[4096];
    printf("model: %s (%s), %zu weight tensors, %llu weights; other tensors kept as stored: %llu bytes\n\n", cli_escape(safe, sizeof safe, path),
           cli_model_kind_name(lb_model_get_kind(m)), n_rows, (unsigned long long)weights,
           (unsigned long long)other_bytes);
    printf("%-44s", "SQNR dB / MSE");
    for (size_t s = 0; s < n_specs; s++) printf(" %22.22s", names[s]);
    printf("\n");
    for (size_t r = 0; r < n_rows; r++) {
        printf("%-44.44s", cli_escape(safe, 45, lb_model_tensor(m, rows[r].index)->name));
        for (size_t s = 0; s < n_specs; s++) {
            char cell[64];
            snprintf(cell, sizeof cell, "%.2f / %.3g", rows[r].sqnr[s], rows[r].mse[s]);
            printf(" %22s", cell);
        }
        printf("\n");
    }
    printf("\n%-24s %12s %12s %12s %12s  %s\n", "spec", "bits/weight", "size MB", "SQNR dB", "mean dB",
           "worst tensors (SQNR dB)");
    for (size_t s = 0; s < n_specs; s++) {
        double mean = 0;
        for (size_t r = 0; r < n_rows; r++) mean += rows[r].sqnr[s] / (double)n_rows;
        printf("%-24s %12.3f %12.2f %12.2f %12.2f  ", names[s], weights ? tot[s].bits / (double)weights : 0,
               (tot[s].bits / 8 + (double)other_bytes) / 1e6, db(tot[s].signal, tot[s].noise), mean);
        for (int k = 0; k < tot[s].n_worst; k++)
            printf("%s%s (%.2f)", k ? ", " : "", cli_escape(safe, sizeof safe, lb_model_tensor(m, rows[tot[s].worst[k]].index)->name),
                   rows[tot[s].worst[k]].sqnr[s]);
        printf("\n");
    }
}

static void print_json(const char *path, const lb_model *m, char (*names)[256], size_t n_specs, const tensor_row *rows,
                       size_t n_rows, const spec_total *tot, uint64_t weights, uint64_t other_bytes)
{
    printf("{\"model\": ");
    json_string(stdout, path);
    printf(", \"weights\": %llu, \"other_bytes\": %llu, \"specs\": [", (unsigned long long)weights,
           (unsigned long long)other_bytes);
    for (size_t s = 0; s < n_specs; s++) {
        printf("%s{\"spec\": ", s ? ", " : "");
        json_string(stdout, names[s]);
        json_field(stdout, "bits_per_weight", weights ? tot[s].bits / (double)weights : 0);
        json_field(stdout, "size_bytes", tot[s].bits / 8 + (double)other_bytes);
        json_field(stdout, "sqnr_db", db(tot[s].signal, tot[s].noise));
        printf(", \"worst\": [");
        for (int k = 0; k < tot[s].n_worst; k++) {
            printf("%s", k ? ", " : "");
            json_string(stdout, lb_model_tensor(m, rows[tot[s].worst[k]].index)->name);
        }
        printf("]}");
    }
    printf("], \"tensors\": [");
    for (size_t r = 0; r < n_rows; r++) {
        printf("%s{\"name\": ", r ? ", " : "");
        json_string(stdout, lb_model_tensor(m, rows[r].index)->name);
        printf(", \"sqnr_db\": [");
        for (size_t s = 0; s < n_specs; s++) printf("%s", s ? ", " : ""), json_number(stdout, rows[r].sqnr[s]);
        printf("], \"mse\": [");
        for (size_t s = 0; s < n_specs; s++) printf("%s", s ? ", " : ""), json_number(stdout, rows[r].mse[s]);
        printf("]}");
    }
    printf("]}\n");
}

static int run(int argc, char **argv)
{
    int json = 0, threads = 0;
    const char *path = NULL, *spec_text = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) json = 1;
        else if (strcmp(a, "--quiet") == 0) cli_progress_set_quiet(1);
        else if (strcmp(a, "--spec") == 0 && i + 1 < argc) spec_text = argv[++i];
        else if (strcmp(a, "--threads") == 0 && i + 1 < argc) {
            if (cli_parse_threads("error", json, argv[++i], &threads) != EXIT_OK) return EXIT_USAGE;
        } else if (a[0] == '-' && a[1]) return cli_fail("error", json, EXIT_USAGE, "bad_argument",
                                                        "unknown option or missing value: '%s'", a);
        else if (path) return cli_fail("error", json, EXIT_USAGE, "bad_argument", "more than one MODEL");
        else path = a;
    }
    if (!path) return cli_fail("error", json, EXIT_USAGE, "bad_argument", "no MODEL given\n%s", usage);
    if (!spec_text) return cli_fail("error", json, EXIT_USAGE, "bad_argument", "--spec is required, e.g. --spec int4:g128,mxfp4");
    lb_qspec specs[ERROR_MAX_SPECS];
    char names[ERROR_MAX_SPECS][256];
    size_t n_specs;
    int rc = cli_parse_specs("error", json, spec_text, specs, names, ERROR_MAX_SPECS, &n_specs, 0);
    if (rc != EXIT_OK) return rc;
    lb_model *m;
    lb_status st = lb_model_open(path, &m);
    if (st != LB_OK) return cli_fail_lb("error", json, EXIT_RUNTIME, st);
    size_t n = lb_model_tensor_count(m), n_rows = 0;
    uint64_t weights = 0, other_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const lb_tensor *t = lb_model_tensor(m, i);
        if (lb_tensor_is_weight(t)) n_rows++, weights += t->n_elements;
        else other_bytes += t->n_bytes;
    }
    tensor_row *rows = calloc(n_rows ? n_rows : 1, sizeof *rows);
    spec_total tot[ERROR_MAX_SPECS];
    memset(tot, 0, sizeof tot);
    float *x = NULL, *xhat = NULL;
    size_t cap = 0, done = 0;
    if (!rows) {
        lb_model_close(m);
        return cli_fail("error", json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    }
    for (size_t i = 0; st == LB_OK && i < n; i++) {
        const lb_tensor *t = lb_model_tensor(m, i);
        if (!lb_tensor_is_weight(t)) continue;
        cli_progress("error", "tensor", done, n_rows, NULL);
        size_t old_cap = cap;
        st = cli_tensor_f32(t, &x, &cap);
        if (st == LB_OK && (cap > old_cap || !xhat)) {
            float *p = realloc(xhat, cap * sizeof *xhat);
            if (!p) st = LB_ERR_NOMEM;
            else xhat = p;
        }
        lb_tensor_release(t); /* the fp32 copy is all that is needed now */
        rows[done].index = i;
        if (st == LB_OK) st = measure(t, x, xhat, specs, n_specs, threads, &rows[done], tot);
        if (st != LB_OK) {
            char msg[1200];
            snprintf(msg, sizeof msg, "tensor '%s': %s", t->name, st == LB_ERR_NOMEM ? "out of memory" : lb_last_error());
            free(rows), free(x), free(xhat);
            lb_model_close(m);
            return cli_fail("error", json, EXIT_RUNTIME, lb_status_name(st), "%s", msg);
        }
        for (size_t s = 0; s < n_specs; s++) note_worst(&tot[s], rows, done, (int)s);
        done++;
    }
    cli_progress("error", "tensor", n_rows, n_rows, NULL);
    free(x), free(xhat);
    if (json) print_json(path, m, names, n_specs, rows, n_rows, tot, weights, other_bytes);
    else print_text(m, path, names, n_specs, rows, n_rows, tot, weights, other_bytes);
    free(rows);
    lb_model_close(m);
    return EXIT_OK;
}

const cli_command cmd_error = {"error", "quantization error of every weight tensor, specs side by side", usage, run};
