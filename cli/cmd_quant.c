/* lowbit quant: quantize numbers with one or more specs; print the
 * dequantized values and what each spec cost. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define QUANT_MAX_SPECS 32

typedef struct input {
    float *x;
    size_t n, rows, cols;
} input;

/* Longest text value: more digits than any float needs, and a bound. */
#define QUANT_MAX_TOKEN 255

/* Decimal digits only (no sign, no space), no overflow; 0 if not so. */
static int parse_count(const char *s, size_t *out)
{
    size_t v = 0;
    if (!*s) return 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (SIZE_MAX - 9) / 10) return 0;
        v = v * 10 + (size_t)(*s - '0');
    }
    *out = v;
    return 1;
}

static int push_value(float **x, size_t *n, size_t *cap, float v)
{
    if (*n == *cap) {
        float *t = realloc(*x, (*cap *= 2) * sizeof **x);
        if (!t) return 0;
        *x = t;
    }
    (*x)[(*n)++] = v;
    return 1;
}

/* Next white-space separated token of f into tok; 0 at the end, -1 if
 * longer than QUANT_MAX_TOKEN. */
static int next_token(FILE *f, char tok[QUANT_MAX_TOKEN + 1])
{
    int c, len = 0;
    while ((c = getc(f)) != EOF && (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v')) {}
    for (; c != EOF && !(c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'); c = getc(f)) {
        if (len == QUANT_MAX_TOKEN) return -1;
        tok[len++] = (char)c;
    }
    tok[len] = '\0';
    return len > 0;
}

/* Reads FILE (or stdin for "-") as text numbers or raw fp32; raw input
 * may skip a header and stop after `count` values (0: all). */
static int read_input(const char *path, int raw, size_t skip, size_t count, int json, input *in)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) return cli_fail("quant", json, EXIT_RUNTIME, "io", "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1024, n = 0;
    float *x = malloc(cap * sizeof *x);
    int rc = EXIT_OK;
    if (!x) rc = cli_fail("quant", json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    for (size_t i = 0; raw && rc == EXIT_OK && i < skip; i++)
        if (fgetc(f) == EOF && !ferror(f))
            rc = cli_fail("quant", json, EXIT_USAGE, "parse", "'%s' is shorter than --skip %zu bytes", path, skip);
    if (raw && rc == EXIT_OK && !ferror(f)) {
        unsigned char b[4];
        size_t got = 0;
        while ((count == 0 || n < count) && (got = fread(b, 1, 4, f)) == 4) {
            uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
            float v;
            memcpy(&v, &u, 4);
            if (!push_value(&x, &n, &cap, v)) {
                rc = cli_fail("quant", json, EXIT_RUNTIME, "out_of_memory", "out of memory");
                break;
            }
        }
        if (rc == EXIT_OK && !ferror(f) && count && n < count)
            rc = cli_fail("quant", json, EXIT_USAGE, "parse", "'%s' holds %zu values%s, not --count %zu", path, n,
                          skip ? " after --skip" : "", count);
        else if (rc == EXIT_OK && !ferror(f) && !count && got != 0 && got != 4)
            rc = cli_fail("quant", json, EXIT_USAGE, "parse", "'%s' has %zu bytes of values: raw fp32 needs a "
                          "multiple of 4", path, 4 * n + got);
    } else if (rc == EXIT_OK) {
        char tok[QUANT_MAX_TOKEN + 1];
        int t;
        while (rc == EXIT_OK && (t = next_token(f, tok)) != 0) {
            char *end;
            if (t < 0) {
                rc = cli_fail("quant", json, EXIT_USAGE, "parse", "value %zu of '%s' is longer than %d characters",
                              n, path, QUANT_MAX_TOKEN);
                break;
            }
            double v = strtod(tok, &end);
            if (*end || end == tok)
                rc = cli_fail("quant", json, EXIT_USAGE, "parse", "value %zu of '%s', '%s', is not a number", n, path, tok);
            else if (isfinite(v) && !isfinite((float)v))
                rc = cli_fail("quant", json, EXIT_USAGE, "parse", "value %zu of '%s', '%s', overflows fp32 (max 3.4e38)",
                              n, path, tok);
            else if (!push_value(&x, &n, &cap, (float)v))
                rc = cli_fail("quant", json, EXIT_RUNTIME, "out_of_memory", "out of memory");
        }
    }
    if (rc == EXIT_OK && ferror(f))
        rc = cli_fail("quant", json, EXIT_RUNTIME, "io", "cannot read '%s': %s", path, strerror(errno));
    if (f != stdin) fclose(f);
    if (rc == EXIT_OK && n == 0) rc = cli_fail("quant", json, EXIT_USAGE, "bad_argument", "'%s' holds no values", path);
    if (rc != EXIT_OK) {
        free(x);
        return rc;
    }
    in->x = x, in->n = n;
    return EXIT_OK;
}

/* ROWSxCOLS, digits only, both at least 1, product without overflow. */
static int parse_shape(const char *s, size_t *rows, size_t *cols)
{
    char buf[64];
    const char *x = strpbrk(s, "xX");
    if (!x || (size_t)(x - s) >= sizeof buf) return 0;
    memcpy(buf, s, (size_t)(x - s));
    buf[x - s] = '\0';
    if (!parse_count(buf, rows) || !parse_count(x + 1, cols) || *rows == 0 || *cols == 0) return 0;
    return *rows <= SIZE_MAX / 4 / *cols;
}

static void print_values(const float *v, size_t rows, size_t cols)
{
    char buf[64];
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < cols; c++) {
            cli_format_float(buf, sizeof buf, v[r * cols + c]);
            printf("%s%s", c ? " " : "", buf);
        }
        printf("\n");
    }
}

static void json_stats(const lb_qstats *s, size_t cols)
{
    printf("\"stats\": {\"count\": %zu", s->count);
    json_field(stdout, "bits_per_value", s->bits_per_value);
    json_field(stdout, "mse", s->mse);
    json_field(stdout, "rmse", s->rmse);
    json_field(stdout, "mae", s->mae);
    json_field(stdout, "max_abs_error", s->max_abs_error);
    printf(", \"max_error_index\": %zu, \"max_error_row\": %zu, \"max_error_col\": %zu", s->max_error_index,
           s->max_error_index / cols, s->max_error_index % cols);
    json_field(stdout, "max_error_original", s->max_error_original);
    json_field(stdout, "max_error_dequantized", s->max_error_dequantized);
    json_field(stdout, "sqnr_db", s->sqnr_db);
    json_field(stdout, "saturated_fraction", s->saturated_fraction);
    json_field(stdout, "flushed_fraction", s->flushed_fraction);
    printf("}");
}

static int run(int argc, char **argv)
{
    const char *spec_text = NULL, *shape = NULL, *path = NULL;
    int json = 0, raw = 0, print = 0, stats = 0, threads = 0;
    size_t skip = 0, count = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--json") == 0) json = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) continue;
        else if (strcmp(a, "--raw") == 0) raw = 1;
        else if (strcmp(a, "--print") == 0) print = 1;
        else if (strcmp(a, "--stats") == 0) stats = 1;
        else if (strcmp(a, "--spec") == 0 || strcmp(a, "--shape") == 0 || strcmp(a, "--threads") == 0 ||
                 strcmp(a, "--skip") == 0 || strcmp(a, "--count") == 0) {
            if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
                return cli_fail("quant", json, EXIT_USAGE, "bad_argument", "%s needs a value", a);
            const char *v = argv[++i];
            if (strcmp(a, "--spec") == 0) spec_text = v;
            else if (strcmp(a, "--shape") == 0) shape = v;
            else if (strcmp(a, "--skip") == 0 || strcmp(a, "--count") == 0) {
                if (!parse_count(v, a[2] == 's' ? &skip : &count))
                    return cli_fail("quant", json, EXIT_USAGE, "bad_argument", "%s takes a byte or value count, not '%s'", a, v);
            } else if (cli_parse_threads("quant", json, v, &threads) != EXIT_OK) {
                return EXIT_USAGE;
            }
        } else if (a[0] == '-' && a[1] != '\0')
            return cli_fail("quant", json, EXIT_USAGE, "bad_argument", "unknown option '%s'", a);
        else if (path)
            return cli_fail("quant", json, EXIT_USAGE, "bad_argument", "one input file only ('%s', '%s')", path, a);
        else path = a;
    }
    if (!spec_text)
        return cli_fail("quant", json, EXIT_USAGE, "bad_argument", "--spec is required, e.g. --spec int8:channel,mxfp4");
    if (!print && !stats) stats = 1;

    lb_qspec specs[QUANT_MAX_SPECS];
    char names[QUANT_MAX_SPECS][256];
    size_t n_specs = 0;
    int rc = cli_parse_specs("quant", json, spec_text, specs, names, QUANT_MAX_SPECS, &n_specs, 0);
    if (rc != EXIT_OK) return rc;

    input in = {0};
    size_t shape_rows = 0, shape_cols = 0;
    if (shape && !parse_shape(shape, &shape_rows, &shape_cols)) /* before waiting on stdin */
        return cli_fail("quant", json, EXIT_USAGE, "bad_argument", "--shape takes ROWSxCOLS, e.g. 4x16, not '%s'", shape);
    if ((skip || count) && !raw)
        return cli_fail("quant", json, EXIT_USAGE, "bad_argument", "--skip and --count apply to --raw input");
    rc = read_input(path ? path : "-", raw, skip, count, json, &in);
    if (rc != EXIT_OK) return rc;
    in.rows = 1, in.cols = in.n;
    if (shape) {
        if (shape_rows * shape_cols != in.n) {
            free(in.x);
            return cli_fail("quant", json, EXIT_USAGE, "bad_argument", "--shape %s is %zu values but the input has %zu",
                            shape, shape_rows * shape_cols, in.n);
        }
        in.rows = shape_rows, in.cols = shape_cols;
    }
    float *xhat = malloc(in.n * sizeof *xhat);
    lb_qstats *st = calloc(n_specs, sizeof *st);
    float **deq = calloc(n_specs, sizeof *deq);
    if (!xhat || !st || !deq) {
        free(in.x), free(xhat), free(st), free(deq);
        return cli_fail("quant", json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    }
    for (size_t k = 0; k < n_specs && rc == EXIT_OK; k++) {
        lb_qtensor *q;
        lb_status s = lb_quantize(&specs[k], in.x, in.rows, in.cols, threads, &q);
        if (s != LB_OK) {
            rc = cli_fail_lb("quant", json, s == LB_ERR_NAN || s == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, s);
            break;
        }
        s = lb_dequantize(q, xhat, threads);
        if (s == LB_OK) s = lb_qstats_compute(in.x, xhat, q, &st[k]);
        lb_qtensor_free(q);
        if (s != LB_OK) {
            rc = cli_fail_lb("quant", json, EXIT_RUNTIME, s);
            break;
        }
        if (print) {
            deq[k] = malloc(in.n * sizeof(float));
            if (!deq[k]) { rc = cli_fail("quant", json, EXIT_RUNTIME, "out_of_memory", "out of memory"); break; }
            memcpy(deq[k], xhat, in.n * sizeof(float));
        }
    }
    if (rc == EXIT_OK && json) {
        printf("{\"rows\": %zu, \"cols\": %zu, \"results\": [", in.rows, in.cols);
        for (size_t k = 0; k < n_specs; k++) {
            char canon[128];
            lb_qspec_format(&specs[k], canon, sizeof canon);
            printf("%s\n  {\"spec\": ", k ? "," : "");
            json_string(stdout, names[k]);
            printf(", \"canonical\": ");
            json_string(stdout, canon);
            if (stats) {
                printf(", ");
                json_stats(&st[k], in.cols);
            }
            if (print) {
                printf(", \"dequantized\": [");
                for (size_t i = 0; i < in.n; i++) {
                    if (i) printf(", ");
                    json_number(stdout, deq[k][i]);
                }
                printf("]");
            }
            printf("}");
        }
        printf("\n]}\n");
    } else if (rc == EXIT_OK) {
        if (print)
            for (size_t k = 0; k < n_specs; k++) {
                printf("%s%s:\n", k ? "\n" : "", names[k]);
                print_values(deq[k], in.rows, in.cols);
            }
        if (stats) {
            if (print) printf("\n");
            printf("%zu values (%zu x %zu)\n", in.n, in.rows, in.cols);
            printf("%-22s %9s %11s %11s %11s %11s %11s %9s %8s %8s\n", "spec", "bits/val", "MSE", "RMSE", "MAE",
                   "max |err|", "at index", "SQNR dB", "sat %", "zero %");
            for (size_t k = 0; k < n_specs; k++) {
                char at[32];
                snprintf(at, sizeof at, "%zu,%zu", st[k].max_error_index / in.cols, st[k].max_error_index % in.cols);
                printf("%-22s %9.3f %11.4g %11.4g %11.4g %11.4g %11s %9.2f %8.3f %8.3f\n", names[k],
                       st[k].bits_per_value, st[k].mse, st[k].rmse, st[k].mae, st[k].max_abs_error, at, st[k].sqnr_db,
                       100 * st[k].saturated_fraction, 100 * st[k].flushed_fraction);
            }
        }
    }
    for (size_t k = 0; k < n_specs; k++) free(deq[k]);
    free(deq), free(st), free(xhat), free(in.x);
    return rc;
}

const cli_command cmd_quant = {
    "quant", "quantize numbers with one or more specs; error statistics",
    "usage: lowbit quant --spec SPEC[,SPEC...] [--shape RxC] [--raw [--skip B] [--count N]]\n"
    "                    [--print] [--stats] [--json] [--threads N] [FILE|-]\n\n"
    "Quantizes the numbers in FILE (stdin if absent or '-'): white-space\n"
    "separated text, or with --raw little-endian fp32. --shape gives ROWS x COLS\n"
    "(COLS is the reduction axis that blocks run along); default one row.\n"
    "Several specs print one comparison table, a row each.\n\n"
    "  --spec S      ELEMENT[:GRANULARITY][:OPTION]... or a preset, e.g.\n"
    "                int8:tensor  int8:channel  int4:g128:affine  fp8_e4m3:channel\n"
    "                mxfp8_e4m3 mxfp8_e5m2 mxfp6_e2m3 mxfp6_e3m2 mxfp4 mxint8 nvfp4\n"
    "                granularity: tensor | channel | token | gN (blocks of N)\n"
    "                options: sym | affine | scale=fp32|fp16|bf16|e8m0|ue4m3 | twolevel\n"
    "                         clip=absmax|mse | round=floor|ceil|even|rceil (e8m0 scales)\n"
    "                         range=signed|full|restricted (symmetric int8/int4: signed is\n"
    "                         ggml's Q4_0 rule, the block's largest magnitude on -8 and the\n"
    "                         scale negative when that value is positive, the default of int4\n"
    "                         under fp32/fp16/bf16 scales; full keeps the scale positive, codes\n"
    "                         -8..7 and -128..127, the default otherwise; restricted is +-7, +-127)\n"
    "  --raw         FILE is little-endian fp32; --skip B bytes first, then read\n"
    "                --count N values (default: all)\n"
    "  --print       print the dequantized values (one row per line)\n"
    "  --stats       print the error statistics (the default): bits per value with\n"
    "                all scales, MSE, RMSE, MAE, max |error| and where, SQNR,\n"
    "                % of values saturated and % flushed to zero\n"
    "  --json        one JSON object\n"
    "  --threads N   worker threads (0: one per CPU)\n\n"
    "example: lowbit quant --spec int8:tensor,int8:g16,int8:g4 values.txt\n",
    run};
