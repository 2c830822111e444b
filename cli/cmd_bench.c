/* lowbit bench: how fast this machine reads memory, how close the packed
 * matvec kernels come to that, and what that gives a real model in decode,
 * prefill and KV-cache tokens/s. Every figure is a ratio against a baseline
 * measured by the same command in the same run (the machines are shared
 * and noisy: absolute numbers move, ratios much less). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kernel/qmat.h"
#include "kernel/readbw.h"
#include "kernel/w8a8.h"
#include "util/cpu.h"
#include "util/parallel.h"

static const char usage[] =
    "usage: lowbit bench [--threads N] [--gib X] [--specs LIST] [--decode-specs LIST] [--model PATH | --no-model]\n"
    "                    [--decode-tokens N] [--prefill-tokens N] [--kv LIST] [--kv-spec SPEC] [--quick] [--json]\n\n"
    "Measures, in one run, on this machine:\n"
    "  1. read bandwidth: a vectorized sum over a buffer as large as the matrices below\n"
    "     (pages touched first), on 1 and N threads, best of several passes;\n"
    "  2. the decode matrix-vector product (one token) on packed weights of each spec:\n"
    "     --gib GiB (default 1) of packed bytes, far beyond the L3 cache (GB/s, fraction\n"
    "     of the read bandwidth, G weights/s, speedup over fp32 and bf16), then ~8 MiB\n"
    "     that stay in L3 (cache, not memory), and the W8A8 int8 and fp8 products;\n"
    "  3. a model (default .cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; skipped with a\n"
    "     note when absent, unless --model names it): decode and prefill tokens/s with each\n"
    "     --decode-specs spec on attention, MLP and embedding (and so the tied head), against\n"
    "     the ratio of weight bytes read per token; then a long prefill and decode with each\n"
    "     --kv cache format. Prompts are a fixed pseudo-random sequence of token ids.\n\n"
    "--specs LIST      kernel specs (default fp32,bf16,fp16,fp8_e4m3:channel,fp8_e5m2:channel,\n"
    "                  fp8_e4m3:g32,int8:channel,int8:g32,int4:channel,int4:g32,int4:g128:affine,\n"
    "                  mxfp8_e4m3,mxfp6_e2m3,mxfp4,nvfp4); fp32, bf16, fp16 are plain (no scale).\n"
    "                  fp32 and bf16 are added as baselines when absent.\n"
    "--decode-specs    model specs (default fp32,bf16,fp8_e4m3:channel,int8:channel,int4:g32,mxfp4,\n"
    "                  nvfp4,int8:channel+act=int8,fp8_e4m3:channel+act=fp8_e4m3); SPEC+act=FORMAT\n"
    "                  adds W8A8 activations (int8 or fp8_e4m3). bf16 is added when absent.\n"
    "--kv LIST         KV cache formats (default fp32,bf16,fp16,fp8_e4m3,fp8_e5m2,int8,int4)\n"
    "--kv-spec SPEC    the weights' spec for the KV runs (default int4:g32)\n"
    "--threads N       threads (default one per CPU); --decode-tokens N (default 64),\n"
    "                  --prefill-tokens N (default 256); --no-model skips section 3.\n"
    "--quick           small sizes for tests: 64 MiB, few passes, short prompts.\n"
    "--json            everything as one JSON object.\n";

#define MAX_SPECS 48
#define MAX_ROWS (2 * MAX_SPECS) /* each spec, and a W8A8 row after an 8-bit one */
#define MAX_KV 8
#define SMALL_ROWS 256 /* the random matrix that is quantized once, then tiled */
#define COLS 4096
#define PROMPT_TOKENS 16

static const char *const default_specs = "fp32,bf16,fp16,fp8_e4m3:channel,fp8_e5m2:channel,fp8_e4m3:g32,int8:channel,"
                                         "int8:g32,int4:channel,int4:g32,int4:g128:affine,mxfp8_e4m3,mxfp6_e2m3,mxfp4,nvfp4";
static const char *const default_decode = "fp32,bf16,fp8_e4m3:channel,int8:channel,int4:g32,mxfp4,nvfp4,"
                                          "int8:channel+act=int8,fp8_e4m3:channel+act=fp8_e4m3";
static const char *const default_kv = "fp32,bf16,fp16,fp8_e4m3,fp8_e5m2,int8,int4";
static const char *const default_model = ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

typedef struct item {
    char name[96];
    lb_qspec spec;
    lb_format act; /* W8A8 activations, or LB_FMT_FP32 */
} item;

typedef struct opts {
    int threads, json, quick, no_model;
    double gib, l3_target;      /* bytes of the beyond-L3 and the cache-resident matrices */
    int reps_mem, reps_l3, runs; /* timed passes (best of) */
    double slow_pass_s, budget_s; /* a pass this long is cut to fewer rows; timing of one row stops after budget_s */
    double min_bytes;            /* a cut pass still reads this much */
    size_t decode_tokens, prefill_tokens, kv_prefill, kv_decode;
    const char *model;
    int model_given;
    item specs[MAX_SPECS], decode[MAX_SPECS];
    size_t n_specs, n_decode;
    lb_format kv[MAX_KV];
    size_t n_kv;
    item kv_spec;
} opts;

typedef struct read_result {
    char method[128];
    uint64_t bytes;
    double gbps1, gbps; /* 1 thread, the chosen threads */
} read_result;

/* One matvec row: the best pass at the chosen threads and on one thread. */
typedef struct mv_row {
    char name[128];
    int plain;          /* plain fp32/bf16/fp16: element is the format */
    lb_format element;
    size_t rows, cols;
    uint64_t bytes;
    double sec, sec1;   /* sec1 0: not measured */
    int shortened;      /* timed on fewer rows than asked: a slow kernel (rows_to_time) */
} mv_row;

typedef struct model_row {
    char name[96];
    uint64_t weights;   /* bytes of weight matrices read per decoded token */
    double decode_tps, prefill_tps;
    size_t decode_timed; /* decode steps in the best run (fewer than asked: cut by the time budget) */
} model_row;

typedef struct kv_row {
    lb_format kv;
    uint64_t cache_bytes;
    double tps, prefill_tps; /* decode steps after the long prefill; that prefill itself */
    size_t timed;
    char refused[256]; /* the runner's message when it does not offer this format; "" if measured */
} kv_row;

typedef struct results {
    char cpu[128];
    unsigned long long l3;
    read_result read;
    mv_row mem[MAX_ROWS], l3rows[MAX_ROWS];
    size_t n_mem, n_l3;
    const char *model_note; /* why the model section was skipped; NULL if it ran */
    uint32_t vocab;
    model_row dec[MAX_SPECS];
    size_t n_dec;
    kv_row kv[MAX_KV];
    size_t n_kv;
} results;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* On stderr only when it is a terminal: the full run takes minutes. */
static void progress(const char *fmt, const char *what)
{
    if (!isatty(STDERR_FILENO)) return;
    fprintf(stderr, "\r\033[K");
    fprintf(stderr, fmt, what);
    fflush(stderr);
}

static void progress_done(void)
{
    if (isatty(STDERR_FILENO)) fprintf(stderr, "\r\033[K");
}

/* ---- options ---- */

/* One spec: "f32" is an alias of fp32; fp32/bf16/fp16 alone are plain
 * (rounded, no scale); "+act=FORMAT" (only when allow_act) asks for W8A8. */
static int parse_item(const char *text, int allow_act, int json, item *it)
{
    char base[96];
    snprintf(it->name, sizeof it->name, "%s", text);
    snprintf(base, sizeof base, "%s", strcmp(text, "f32") == 0 ? "fp32" : text);
    it->act = LB_FMT_FP32;
    char *plus = strstr(base, "+act=");
    if (plus) {
        lb_format f;
        if (!allow_act || lb_format_by_name(plus + 5, &f) != LB_OK || (f != LB_FMT_INT8 && f != LB_FMT_FP8_E4M3))
            return cli_fail("bench", json, EXIT_USAGE, "bad_argument", "'%s': +act= takes int8 or fp8_e4m3%s", text,
                            allow_act ? "" : ", and only in --decode-specs");
        it->act = f;
        *plus = '\0';
    }
    if (cli_plain_float_spec(base, &it->spec)) return EXIT_OK;
    lb_status s = lb_qspec_parse(base, &it->spec);
    return s == LB_OK ? EXIT_OK : cli_fail_lb("bench", json, EXIT_USAGE, s);
}

static int parse_list(const char *opt, const char *text, int allow_act, int json, item *out, size_t *n)
{
    char list[1024];
    size_t len = strlen(text);
    *n = 0;
    if (len == 0 || len >= sizeof list || text[0] == ',' || text[len - 1] == ',' || strstr(text, ",,"))
        return cli_fail("bench", json, EXIT_USAGE, "bad_argument", "%s '%s': empty item or too long", opt, text);
    memcpy(list, text, len + 1);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_SPECS - 2) return cli_fail("bench", json, EXIT_USAGE, "bad_argument", "%s: at most %d items", opt, MAX_SPECS - 2);
        int rc = parse_item(t, allow_act, json, &out[*n]);
        if (rc != EXIT_OK) return rc;
        (*n)++;
    }
    return EXIT_OK;
}

static int is_plain_of(const item *it, lb_format f)
{
    return it->act == LB_FMT_FP32 && cli_is_plain_float(&it->spec) && it->spec.element == f;
}

/* The baselines every speedup divides by, put first (in the order given)
 * when the list lacks them. The list has room: parse_list keeps two free. */
static void ensure_baselines(item *list, size_t *n, const lb_format *f, const char *const *names, size_t nf)
{
    item add[2];
    size_t k = 0;
    for (size_t b = 0; b < nf && b < 2; b++) {
        size_t i = 0;
        while (i < *n && !is_plain_of(&list[i], f[b])) i++;
        if (i == *n) parse_item(names[b], 0, 0, &add[k++]);
    }
    memmove(list + k, list, *n * sizeof *list);
    memcpy(list, add, k * sizeof *add);
    *n += k;
}

static int parse_kv(const char *text, int json, opts *o)
{
    static const lb_format ok[] = {LB_FMT_FP32, LB_FMT_BF16, LB_FMT_FP16, LB_FMT_FP8_E4M3, LB_FMT_FP8_E5M2, LB_FMT_INT8, LB_FMT_INT4};
    char list[256];
    size_t len = strlen(text);
    o->n_kv = 0;
    if (len == 0 || len >= sizeof list || text[0] == ',' || text[len - 1] == ',' || strstr(text, ",,"))
        return cli_fail("bench", json, EXIT_USAGE, "bad_argument", "--kv '%s': empty item or too long", text);
    memcpy(list, text, len + 1);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        lb_format f;
        int good = lb_format_by_name(t, &f) == LB_OK && o->n_kv < MAX_KV;
        size_t k = 0;
        while (good && k < sizeof ok / sizeof *ok && ok[k] != f) k++;
        if (!good || k == sizeof ok / sizeof *ok)
            return cli_fail("bench", json, EXIT_USAGE, "bad_argument",
                            "--kv takes up to %d of fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, int8, int4; not '%s'", MAX_KV, t);
        o->kv[o->n_kv++] = f;
    }
    return EXIT_OK;
}

/* A count in [lo, hi], or -1 after reporting. */
static long long parse_count(const char *opt, const char *v, long long lo, long long hi, int json)
{
    char *end;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || *end || !(v[0] >= '0' && v[0] <= '9') || x < lo || x > hi)
        return cli_fail("bench", json, EXIT_USAGE, "bad_argument", "%s takes %lld..%lld, not '%s'", opt, lo, hi, v ? v : ""), -1;
    return x;
}

static int parse_options(int argc, char **argv, opts *o)
{
    const char *specs = default_specs, *decode = default_decode, *kv = default_kv, *kv_spec = "int4:g32";
    long long dec = -1, pre = -1, thr = -1;
    for (int i = 1; i < argc; i++) /* --json first: it decides how errors are reported */
        if (strcmp(argv[i], "--json") == 0) o->json = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) continue;
        if (strcmp(a, "--quick") == 0) o->quick = 1;
        else if (strcmp(a, "--no-model") == 0) o->no_model = 1;
        else if (!v || strncmp(a, "--", 2) != 0)
            return cli_fail("bench", o->json, EXIT_USAGE, "bad_argument", "unknown option or missing value: '%s'\n%s", a,
                            o->json ? "" : usage);
        else if (strcmp(a, "--specs") == 0) specs = v, i++;
        else if (strcmp(a, "--decode-specs") == 0) decode = v, i++;
        else if (strcmp(a, "--kv") == 0) kv = v, i++;
        else if (strcmp(a, "--kv-spec") == 0) kv_spec = v, i++;
        else if (strcmp(a, "--model") == 0) o->model = v, o->model_given = 1, i++;
        else if (strcmp(a, "--threads") == 0) { if ((thr = parse_count(a, v, 1, 64, o->json)) < 0) return EXIT_USAGE; i++; }
        else if (strcmp(a, "--decode-tokens") == 0) { if ((dec = parse_count(a, v, 1, 8192, o->json)) < 0) return EXIT_USAGE; i++; }
        else if (strcmp(a, "--prefill-tokens") == 0) { if ((pre = parse_count(a, v, 1, 8192, o->json)) < 0) return EXIT_USAGE; i++; }
        else if (strcmp(a, "--gib") == 0) {
            char *end;
            o->gib = strtod(v, &end);
            if (*end || !(o->gib >= 1.0 / 64 && o->gib <= 256))
                return cli_fail("bench", o->json, EXIT_USAGE, "bad_argument", "--gib takes 0.015625..256, not '%s'", v);
            i++;
        } else
            return cli_fail("bench", o->json, EXIT_USAGE, "bad_argument", "unknown option '%s'\n%s", a, o->json ? "" : usage);
    }
    if (o->no_model && o->model_given)
        return cli_fail("bench", o->json, EXIT_USAGE, "bad_argument", "--model and --no-model contradict each other");
    int rc = parse_list("--specs", specs, 0, o->json, o->specs, &o->n_specs);
    if (rc == EXIT_OK) rc = parse_list("--decode-specs", decode, 1, o->json, o->decode, &o->n_decode);
    if (rc == EXIT_OK) rc = parse_kv(kv, o->json, o);
    if (rc == EXIT_OK) rc = parse_item(kv_spec, 0, o->json, &o->kv_spec);
    if (rc != EXIT_OK) return rc;
    static const lb_format base[] = {LB_FMT_FP32, LB_FMT_BF16};
    static const char *const base_names[] = {"fp32", "bf16"};
    ensure_baselines(o->specs, &o->n_specs, base, base_names, 2);
    ensure_baselines(o->decode, &o->n_decode, base + 1, base_names + 1, 1);
    o->threads = thr > 0 ? (int)thr : lb__thread_count(0);
    if (!o->gib) o->gib = o->quick ? 1.0 / 16 : 1.0;
    o->l3_target = o->quick ? 2.0 * (1 << 20) : 8.0 * (1 << 20);
    o->reps_mem = o->quick ? 2 : 5;
    o->reps_l3 = o->quick ? 10 : 200;
    o->runs = o->quick ? 1 : 3;
    o->slow_pass_s = o->quick ? 0.1 : 2.0;
    o->budget_s = o->quick ? 1.0 : 8.0;
    o->min_bytes = o->quick ? 4.0 * (1 << 20) : 128.0 * (1 << 20); /* raised to 4 x L3 once the L3 is known */
    if (o->min_bytes > o->gib * (double)(1u << 30)) o->min_bytes = o->gib * (double)(1u << 30);
    o->decode_tokens = dec > 0 ? (size_t)dec : o->quick ? 8 : 64;
    o->prefill_tokens = pre > 0 ? (size_t)pre : o->quick ? 32 : 256;
    o->kv_prefill = o->quick ? 64 : 1024;
    o->kv_decode = o->quick ? 8 : 32;
    if (!o->model) o->model = default_model;
    return EXIT_OK;
}

/* ---- the machine ---- */

static void machine_info(results *r)
{
    snprintf(r->cpu, sizeof r->cpu, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(r->cpu, sizeof r->cpu, "%s", colon);
        break;
    }
    if (f) fclose(f);
    r->l3 = 0;
    f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    unsigned long long v;
    char unit = 0;
    if (f && fscanf(f, "%llu%c", &v, &unit) >= 1)
        r->l3 = v * (unit == 'K' ? 1024ull : unit == 'M' ? 1024ull * 1024 : 1);
    if (f) fclose(f);
}

/* ---- 1. read bandwidth ---- */

#define READ_UNIT ((size_t)1 << 20) /* the buffer is split over threads in whole MiB */

typedef struct read_job {
    const unsigned char *buf;
    uint64_t *sums; /* one per unit; a slice writes the one at its start */
    lb_isa isa;
} read_job;

static lb_status read_units(void *ctx, size_t b, size_t e)
{
    read_job *j = ctx;
    j->sums[b] = lb__read_sum(j->buf + b * READ_UNIT, (e - b) * READ_UNIT, j->isa);
    return LB_OK;
}

static double best_read(read_job *j, size_t units, int threads, int reps)
{
    double best = 1e30;
    for (int r = 0; r <= reps; r++) { /* pass 0 warms up */
        double t0 = now();
        lb__parallel_for(units, 1, threads, read_units, j);
        double dt = now() - t0;
        if (r && dt < best) best = dt;
    }
    return best;
}

static int measure_read(const opts *o, results *r)
{
    size_t units = (size_t)(o->gib * (double)(1u << 30) / (double)READ_UNIT);
    if (units == 0) units = 1;
    unsigned char *buf = aligned_alloc(64, units * READ_UNIT);
    uint64_t *sums = calloc(units, sizeof *sums);
    if (!buf || !sums) {
        free(buf), free(sums);
        return cli_fail("bench", o->json, EXIT_RUNTIME, "out_of_memory", "cannot allocate %zu MiB to measure reads", units);
    }
    memset(buf, 1, units * READ_UNIT); /* touch every page before timing */
    read_job j = {buf, sums, lb_isa_active()};
    snprintf(r->read.method, sizeof r->read.method, "%s", lb__read_sum_method(j.isa));
    r->read.bytes = (uint64_t)units * READ_UNIT;
    r->read.gbps1 = (double)r->read.bytes / best_read(&j, units, 1, o->reps_mem) / 1e9;
    r->read.gbps = o->threads == 1 ? r->read.gbps1 : (double)r->read.bytes / best_read(&j, units, o->threads, o->reps_mem) / 1e9;
    uint64_t total = 0; /* every sum is used: each unit holds 2^20 bytes of 1, so it is checkable */
    for (size_t u = 0; u < units; u++) total += sums[u];
    free(buf), free(sums);
    if (total != (uint64_t)units * (READ_UNIT / 8) * 0x0101010101010101ull)
        return cli_fail("bench", o->json, EXIT_RUNTIME, "internal", "the read loop summed the buffer wrongly");
    return EXIT_OK;
}

/* ---- 2. matrix-vector products ---- */

/* A big view made of copies of a small packed matrix's rows. */
typedef struct tiled {
    lb__qmat m;
    void *data, *scales, *zps;
} tiled;

static void *tile(const void *src, size_t bytes, size_t times)
{
    unsigned char *d = aligned_alloc(64, (bytes * times + 63) / 64 * 64 + 64);
    for (size_t i = 0; d && i < times; i++) memcpy(d + i * bytes, src, bytes);
    return d;
}

/* What a product reads for m (its lb__qmat.bytes, counted the same way). */
static uint64_t qmat_bytes(const lb__qmat *m)
{
    uint64_t b = (uint64_t)m->rows * m->row_bytes;
    if (!m->plain) b += lb_format_bytes(m->scale_format, m->one_scale ? 1 : m->rows * m->blocks);
    if (m->zero_points) b += m->one_scale ? m->zp_row_bytes : (uint64_t)m->rows * m->zp_row_bytes;
    if (!m->plain && m->spec.two_level) b += sizeof(float);
    return b;
}

static void tiled_free(tiled *t)
{
    free(t->data), free(t->scales), free(t->zps);
    memset(t, 0, sizeof *t);
}

/* At least `target` bytes: the small matrix's rows repeated. */
static int tile_matrix(const lb__qmat *small, double target, tiled *t)
{
    memset(t, 0, sizeof *t);
    double ratio = target / (double)qmat_bytes(small);
    size_t times = (size_t)ratio + ((double)(size_t)ratio < ratio); /* round up */
    if (times == 0) times = 1;
    t->m = *small;
    t->m.owned_q = NULL, t->m.owned_buf = NULL;
    t->m.rows = small->rows * times;
    t->m.data = t->data = tile(small->data, small->rows * small->row_bytes, times);
    int ok = t->data != NULL;
    if (!small->plain && !small->one_scale) {
        t->m.scales = t->scales = tile(small->scales, lb_format_bytes(small->scale_format, small->rows * small->blocks), times);
        ok = ok && t->scales;
    }
    if (small->zero_points && !small->one_scale) {
        t->m.zero_points = t->zps = tile(small->zero_points, small->rows * small->zp_row_bytes, times);
        ok = ok && t->zps;
    }
    t->m.bytes = qmat_bytes(&t->m);
    if (!ok) tiled_free(t);
    return ok ? 0 : -1;
}

typedef struct product {
    const lb__qmat *m;
    const lb__w8a8 *a8; /* non-NULL: the W8A8 product on m */
} product;

static lb_status run_product(const product *p, const float *x, float *y, int threads)
{
    return p->a8 ? lb__w8a8_matmul(p->a8, x, 1, 0.0f, y, threads) : lb__qmat_matmul(p->m, x, 1, y, threads);
}

/* Best of reps full passes, after one untimed pass (first-touch, caches);
 * the timed passes stop once they have taken `budget` seconds (at least
 * two: a slow kernel must not hold the run for minutes). */
static lb_status best_pass(const product *p, const float *x, float *y, int threads, int reps, double budget,
                           double *best)
{
    lb_status st = run_product(p, x, y, threads);
    double spent = 0;
    *best = 1e30;
    for (int r = 0; st == LB_OK && r < reps && (r < 2 || spent < budget); r++) {
        double t0 = now();
        st = run_product(p, x, y, threads);
        double dt = now() - t0;
        spent += dt;
        if (dt < *best) *best = dt;
    }
    return st;
}

/* A kernel that falls back to slow code would take minutes per pass over
 * the whole matrix: it is timed on its first rows instead, as many as one
 * pass of about o->slow_pass_s seconds reads but never fewer than min_bytes
 * (still well beyond the L3), and reported with the rows it ran on. */
static size_t rows_to_time(const product *p, const float *x, float *y, const opts *o, double min_bytes, lb_status *st)
{
    lb__qmat probe = *p->m;
    lb__w8a8 a8 = p->a8 ? *p->a8 : (lb__w8a8){0};
    product pp = {&probe, p->a8 ? &a8 : NULL};
    a8.m = &probe;
    probe.rows = (p->m->rows / 16 + SMALL_ROWS - 1) / SMALL_ROWS * SMALL_ROWS; /* a sixteenth, in whole tiles */
    if (probe.rows > p->m->rows) probe.rows = p->m->rows;
    double t0 = now();
    *st = run_product(&pp, x, y, o->threads);
    double full = (now() - t0) * (double)p->m->rows / (double)probe.rows;
    if (*st != LB_OK || full <= o->slow_pass_s) return p->m->rows;
    double per_row = (double)p->m->bytes / (double)p->m->rows;
    double want = (double)p->m->rows * o->slow_pass_s / full, least = min_bytes / per_row;
    if (want < least) want = least;
    size_t rows = ((size_t)want + SMALL_ROWS - 1) / SMALL_ROWS * SMALL_ROWS;
    return rows < p->m->rows ? rows : p->m->rows;
}

static lb_status measure_row(const product *p, const char *name, const item *it, const float *x, float *y,
                             const opts *o, int reps, double min_bytes, mv_row *row)
{
    memset(row, 0, sizeof *row);
    snprintf(row->name, sizeof row->name, "%s", name);
    row->plain = !p->a8 && cli_is_plain_float(&it->spec);
    row->element = it->spec.element;
    lb_status st = LB_OK;
    lb__qmat view = *p->m;
    lb__w8a8 a8 = p->a8 ? *p->a8 : (lb__w8a8){0};
    product pv = {&view, p->a8 ? &a8 : NULL};
    a8.m = &view;
    if (min_bytes > 0) { /* the beyond-L3 rows: maybe fewer rows for a slow kernel */
        view.rows = rows_to_time(p, x, y, o, min_bytes, &st);
        view.bytes = qmat_bytes(&view);
        row->shortened = view.rows < p->m->rows;
    }
    row->rows = view.rows, row->cols = view.cols, row->bytes = view.bytes;
    double budget = min_bytes > 0 ? o->budget_s : o->budget_s / 4;
    if (st == LB_OK) st = best_pass(&pv, x, y, o->threads, reps, budget, &row->sec);
    if (st == LB_OK && min_bytes > 0) { /* and on one thread */
        if (o->threads == 1) row->sec1 = row->sec;
        else st = best_pass(&pv, x, y, 1, reps, budget, &row->sec1);
    }
    return st;
}

/* The W8A8 rows ride on the int8:channel and fp8_e4m3:channel matrices. */
static lb_format w8a8_act(const lb_qspec *s)
{
    if (s->granularity != LB_GRAN_CHANNEL || s->affine || s->two_level) return LB_FMT_FP32;
    return s->element == LB_FMT_INT8 || s->element == LB_FMT_FP8_E4M3 ? s->element : LB_FMT_FP32;
}

/* One size class (beyond L3, or in L3) of one spec, with its W8A8 row. */
static lb_status measure_size(const lb__qmat *small, const item *it, double target, int reps, double min_bytes,
                              const float *x, const opts *o, mv_row *rows, size_t *n)
{
    tiled t;
    if (tile_matrix(small, target, &t) != 0) return LB_ERR_NOMEM;
    float *y = malloc(t.m.rows * sizeof *y);
    product p = {&t.m, NULL};
    lb_status st = y ? measure_row(&p, it->name, it, x, y, o, reps, min_bytes, &rows[(*n)++]) : LB_ERR_NOMEM;
    lb_format act = w8a8_act(&it->spec);
    if (st == LB_OK && act != LB_FMT_FP32) {
        lb__w8a8 k;
        char name[128];
        snprintf(name, sizeof name, "w8a8 %s (%s)", act == LB_FMT_INT8 ? "int8" : "fp8", it->name);
        st = lb__w8a8_init(&t.m, act, &k);
        if (st == LB_OK) {
            p.a8 = &k;
            st = measure_row(&p, name, it, x, y, o, reps, min_bytes, &rows[(*n)++]);
            lb__w8a8_free(&k);
        }
    }
    free(y);
    tiled_free(&t);
    return st;
}

static float *random_floats(size_t n, uint64_t seed)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; v && i < n; i++) { /* xorshift64: any values do; these are in [-1, 1) */
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        v[i] = (float)(seed >> 40) / 8388608.0f - 1.0f;
    }
    return v;
}

static int measure_matvec(const opts *o, results *r)
{
    float *w = random_floats((size_t)SMALL_ROWS * COLS, 1), *x = random_floats(COLS, 2);
    int rc = w && x ? EXIT_OK : cli_fail("bench", o->json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    for (size_t i = 0; rc == EXIT_OK && i < o->n_specs; i++) {
        const item *it = &o->specs[i];
        progress("bench: matvec %s\n", it->name);
        lb__qmat small;
        lb_status st = lb__qmat_from_f32(w, SMALL_ROWS, COLS, &it->spec, o->threads, &small);
        if (st != LB_OK) {
            rc = cli_fail_lb("bench", o->json, EXIT_RUNTIME, st);
            break;
        }
        if (qmat_bytes(&small) != small.bytes) /* the tiles are counted as the library counts */
            rc = cli_fail("bench", o->json, EXIT_RUNTIME, "internal", "%s: %llu bytes counted, the matrix says %llu",
                          it->name, (unsigned long long)qmat_bytes(&small), (unsigned long long)small.bytes);
        if (rc == EXIT_OK) st = measure_size(&small, it, o->gib * (double)(1u << 30), o->reps_mem, o->min_bytes, x, o, r->mem, &r->n_mem);
        if (rc == EXIT_OK && st == LB_OK) st = measure_size(&small, it, o->l3_target, o->reps_l3, 0, x, o, r->l3rows, &r->n_l3);
        if (rc == EXIT_OK && st != LB_OK)
            rc = st == LB_ERR_NOMEM ? cli_fail("bench", o->json, EXIT_RUNTIME, "out_of_memory", "%s: out of memory for %.2f GiB",
                                               it->name, o->gib)
                                    : cli_fail_lb("bench", o->json, EXIT_RUNTIME, st);
        lb__qmat_free(&small);
    }
    progress_done();
    free(w), free(x);
    return rc;
}

/* ---- 3. the model ---- */

typedef struct model_ctx {
    const opts *o;
    lb_model *m;
    int32_t *ids;  /* pseudo-random token ids */
    float *logits; /* vocab */
    uint32_t vocab;
} model_ctx;

static lb_status new_runner(const model_ctx *c, const item *it, lb_format kv, size_t ctx, lb_runner **out)
{
    lb_runner_options ro = {.threads = c->o->threads, .attn = &it->spec, .mlp = &it->spec, .embed = &it->spec,
                            .max_ctx = (uint32_t)ctx, .act = it->act, .kv = kv};
    return lb_runner_new(c->m, &ro, out);
}

/* Decode: prompt (untimed), then n single-token steps, timed. A run
 * stops early after the time budget (a slow kernel: tokens/s is then over
 * the steps done, at least 4), and no further run starts after one that did. */
static lb_status time_decode(const model_ctx *c, lb_runner *r, size_t prompt, size_t n, double *tps, size_t *timed)
{
    double best_rate = 0;
    lb_status st = LB_OK;
    int cut = 0;
    *timed = 0;
    for (int run = 0; st == LB_OK && run < c->o->runs && !cut; run++) {
        lb_runner_reset(r);
        st = lb_runner_forward(r, c->ids, prompt, c->logits, 1);
        double t0 = now(), dt = 0;
        size_t i = 0;
        for (; st == LB_OK && i < n && !(cut = i >= 4 && dt > c->o->budget_s); i++) {
            st = lb_runner_forward(r, c->ids + prompt + i, 1, c->logits, 1);
            dt = now() - t0;
        }
        if (st == LB_OK && (double)i / dt > best_rate) best_rate = (double)i / dt, *timed = i;
    }
    *tps = best_rate;
    return st;
}

static lb_status time_prefill(const model_ctx *c, lb_runner *r, size_t n, double *tps)
{
    double best = 1e30;
    lb_status st = LB_OK;
    for (int run = 0; st == LB_OK && run < c->o->runs && (run == 0 || best <= c->o->budget_s); run++) {
        lb_runner_reset(r);
        double t0 = now();
        st = lb_runner_forward(r, c->ids, n, c->logits, 1);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    *tps = (double)n / best;
    return st;
}

static lb_status model_rows(const model_ctx *c, results *res)
{
    const opts *o = c->o;
    size_t ctx = PROMPT_TOKENS + o->decode_tokens > o->prefill_tokens ? PROMPT_TOKENS + o->decode_tokens : o->prefill_tokens;
    lb_status st = LB_OK;
    for (size_t i = 0; st == LB_OK && i < o->n_decode; i++) {
        progress("bench: model %s\n", o->decode[i].name);
        lb_runner *r = NULL;
        model_row *row = &res->dec[res->n_dec];
        memset(row, 0, sizeof *row);
        snprintf(row->name, sizeof row->name, "%s", o->decode[i].name);
        st = new_runner(c, &o->decode[i], LB_FMT_FP32, ctx, &r);
        if (st == LB_OK) {
            lb_runner_memory mem;
            lb_runner_memory_get(r, &mem);
            row->weights = mem.weights;
            st = time_decode(c, r, PROMPT_TOKENS, o->decode_tokens, &row->decode_tps, &row->decode_timed);
        }
        if (st == LB_OK) st = time_prefill(c, r, o->prefill_tokens, &row->prefill_tps);
        if (st == LB_OK) res->n_dec++;
        lb_runner_free(r);
    }
    for (size_t i = 0; st == LB_OK && i < o->n_kv; i++) {
        progress("bench: KV cache %s\n", lb_format_get(o->kv[i])->name);
        lb_runner *r = NULL;
        kv_row *row = &res->kv[res->n_kv];
        memset(row, 0, sizeof *row);
        row->kv = o->kv[i];
        st = new_runner(c, &o->kv_spec, o->kv[i], o->kv_prefill + o->kv_decode, &r);
        if (st == LB_ERR_UNSUPPORTED) { /* a build without that cache format: a row that says so */
            snprintf(row->refused, sizeof row->refused, "%s", lb_last_error());
            st = LB_OK;
        } else if (st == LB_OK) {
            lb_runner_memory mem;
            lb_runner_memory_get(r, &mem);
            row->cache_bytes = mem.kv_cache;
            st = time_decode(c, r, o->kv_prefill, o->kv_decode, &row->tps, &row->timed);
            if (st == LB_OK) st = time_prefill(c, r, o->kv_prefill, &row->prefill_tps);
        }
        if (st == LB_OK) res->n_kv++;
        lb_runner_free(r);
    }
    progress_done();
    return st;
}

static int measure_model(const opts *o, results *res)
{
    if (o->no_model) return res->model_note = "skipped (--no-model)", EXIT_OK;
    if (!o->model_given && access(o->model, R_OK) != 0)
        return res->model_note = "skipped: the default model is not there (make .cache/smollm2/... fetches it; or --model PATH)",
               EXIT_OK;
    model_ctx c = {.o = o};
    lb_status st = lb_model_open(o->model, &c.m);
    if (st != LB_OK) return cli_fail_lb("bench", o->json, EXIT_RUNTIME, st);
    c.vocab = lb_model_arch(c.m)->vocab_size;
    size_t n_ids = PROMPT_TOKENS + o->decode_tokens + o->prefill_tokens + o->kv_prefill + o->kv_decode;
    c.ids = malloc(n_ids * sizeof *c.ids);
    c.logits = malloc((c.vocab ? c.vocab : 1) * sizeof *c.logits);
    if (!c.ids || !c.logits || c.vocab == 0) st = c.vocab ? LB_ERR_NOMEM : LB_ERR_PARSE;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; st == LB_OK && i < n_ids; i++) { /* a fixed pseudo-random sequence of valid ids */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        c.ids[i] = (int32_t)((s >> 33) % c.vocab);
    }
    res->vocab = c.vocab;
    if (st == LB_OK) st = model_rows(&c, res);
    int rc = st == LB_OK ? EXIT_OK
                         : c.vocab == 0 ? cli_fail("bench", o->json, EXIT_RUNTIME, "parse", "%s: no vocabulary size", o->model)
                                        : cli_fail_lb("bench", o->json, st == LB_ERR_ARG || st == LB_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME, st);
    free(c.ids), free(c.logits);
    lb_model_close(c.m);
    return rc;
}

/* ---- output ---- */

static double gw_per_s(const mv_row *r) { return (double)r->rows * (double)r->cols / r->sec / 1e9; }

static const mv_row *baseline(const mv_row *rows, size_t n, lb_format f)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].plain && rows[i].element == f) return &rows[i];
    return NULL;
}

static double speedup(const mv_row *r, const mv_row *base) { return base ? gw_per_s(r) / gw_per_s(base) : 0; }

/* The decode row of the bf16 baseline (the list always has one). */
static const model_row *model_bf16(const opts *o, const results *r)
{
    for (size_t i = 0; i < r->n_dec; i++)
        if (is_plain_of(&o->decode[i], LB_FMT_BF16)) return &r->dec[i];
    return NULL;
}

/* The KV row speedups divide by: the first one measured. */
static const kv_row *kv_base(const results *r)
{
    for (size_t i = 0; i < r->n_kv; i++)
        if (!r->kv[i].refused[0]) return &r->kv[i];
    return NULL;
}

static void print_mv_json(const char *key, const mv_row *rows, size_t n, const read_result *rd, int mem)
{
    const mv_row *f32 = baseline(rows, n, LB_FMT_FP32), *bf16 = baseline(rows, n, LB_FMT_BF16);
    printf(", \"%s\": [", key);
    for (size_t i = 0; i < n; i++) {
        const mv_row *r = &rows[i];
        double gbps = (double)r->bytes / r->sec / 1e9;
        printf("%s{\"spec\": ", i ? ", " : "");
        json_string(stdout, r->name);
        printf(", \"rows\": %zu, \"cols\": %zu, \"bytes\": %llu", r->rows, r->cols, (unsigned long long)r->bytes);
        json_field(stdout, "bits_per_weight", 8.0 * (double)r->bytes / ((double)r->rows * (double)r->cols));
        json_field(stdout, "seconds", r->sec);
        json_field(stdout, "gbps", gbps);
        json_field(stdout, "gweights_per_s", gw_per_s(r));
        json_field(stdout, "speedup_vs_fp32", speedup(r, f32));
        json_field(stdout, "speedup_vs_bf16", speedup(r, bf16));
        printf(", \"shortened\": %s", r->shortened ? "true" : "false");
        if (mem) {
            double gbps1 = (double)r->bytes / r->sec1 / 1e9;
            json_field(stdout, "fraction_of_read", gbps / rd->gbps);
            json_field(stdout, "gbps_1t", gbps1);
            json_field(stdout, "fraction_of_read_1t", gbps1 / rd->gbps1);
        }
        printf("}");
    }
    printf("]");
}

static void print_json(const opts *o, const results *r)
{
    unsigned ex = lb__cpu_extras();
    printf("{\"machine\": {\"cpu\": ");
    json_string(stdout, r->cpu);
    printf(", \"isa\": ");
    json_string(stdout, lb_isa_name(lb_isa_active()));
    printf(", \"avx512_vnni\": %s, \"avx512_bf16\": %s, \"cpus\": %d, \"threads\": %d, \"l3_bytes\": %llu}",
           ex & LB__CPU_AVX512_VNNI ? "true" : "false", ex & LB__CPU_AVX512_BF16 ? "true" : "false", lb__thread_count(0),
           o->threads, r->l3);
    printf(", \"read\": {\"method\": ");
    json_string(stdout, r->read.method);
    printf(", \"bytes\": %llu, \"passes\": %d", (unsigned long long)r->read.bytes, o->reps_mem);
    json_field(stdout, "gbps_1t", r->read.gbps1);
    json_field(stdout, "gbps", r->read.gbps);
    printf("}, \"matvec\": {\"cols\": %d, \"passes\": %d, \"target_bytes\": %.0f", COLS, o->reps_mem, o->gib * (double)(1u << 30));
    print_mv_json("rows", r->mem, r->n_mem, &r->read, 1);
    printf("}, \"matvec_l3\": {\"note\": \"cache-resident: measures cache, not memory\", \"passes\": %d, \"target_bytes\": %.0f",
           o->reps_l3, o->l3_target);
    print_mv_json("rows", r->l3rows, r->n_l3, &r->read, 0);
    printf("}, \"model\": {\"path\": ");
    json_string(stdout, o->model);
    printf(", \"skipped\": ");
    if (r->model_note) json_string(stdout, r->model_note);
    else printf("null");
    printf(", \"tokens\": \"fixed pseudo-random ids in [0, vocab)\", \"vocab\": %u, \"runs\": %d, \"prompt_tokens\": %d, "
           "\"decode_tokens\": %zu, \"prefill_tokens\": %zu, \"decode\": [",
           r->vocab, o->runs, PROMPT_TOKENS, o->decode_tokens, o->prefill_tokens);
    const model_row *bf = model_bf16(o, r);
    for (size_t i = 0; i < r->n_dec; i++) {
        const model_row *d = &r->dec[i];
        double byte_ratio = (double)bf->weights / (double)d->weights, sp = d->decode_tps / bf->decode_tps;
        printf("%s{\"spec\": ", i ? ", " : "");
        json_string(stdout, d->name);
        printf(", \"weights_bytes\": %llu, \"decode_tokens_timed\": %zu", (unsigned long long)d->weights, d->decode_timed);
        json_field(stdout, "decode_tokens_per_s", d->decode_tps);
        json_field(stdout, "decode_speedup_vs_bf16", sp);
        json_field(stdout, "byte_ratio_bf16", byte_ratio);
        json_field(stdout, "goal_speedup", 0.8 * byte_ratio);
        printf(", \"meets_goal\": %s", sp >= 0.8 * byte_ratio ? "true" : "false");
        json_field(stdout, "prefill_tokens_per_s", d->prefill_tps);
        json_field(stdout, "prefill_speedup_vs_bf16", d->prefill_tps / bf->prefill_tps);
        printf("}");
    }
    printf("], \"kv\": {\"spec\": ");
    json_string(stdout, o->kv_spec.name);
    printf(", \"prefill_tokens\": %zu, \"decode_tokens\": %zu, \"rows\": [", o->kv_prefill, o->kv_decode);
    for (size_t i = 0; i < r->n_kv; i++) {
        const kv_row *k = &r->kv[i], *base = kv_base(r);
        printf("%s{\"kv\": ", i ? ", " : "");
        json_string(stdout, lb_format_get(k->kv)->name);
        if (k->refused[0]) {
            printf(", \"refused\": ");
            json_string(stdout, k->refused);
            printf("}");
            continue;
        }
        printf(", \"refused\": null, \"cache_bytes\": %llu, \"decode_tokens_timed\": %zu",
               (unsigned long long)k->cache_bytes, k->timed);
        json_field(stdout, "decode_tokens_per_s", k->tps);
        json_field(stdout, "speedup_vs_first", k->tps / base->tps);
        json_field(stdout, "prefill_tokens_per_s", k->prefill_tps);
        json_field(stdout, "prefill_vs_first", k->prefill_tps / base->prefill_tps);
        printf("}");
    }
    printf("]}}}\n");
}

static void print_machine_text(const opts *o, const results *r)
{
    unsigned ex = lb__cpu_extras();
    printf("lowbit bench: best of several passes each; the machine may be shared, so figures are noisy\n"
           "and each is also given as a ratio to a baseline measured in this same run.\n\n");
    printf("machine: %s, %d CPUs, L3 ", r->cpu, lb__thread_count(0));
    if (r->l3) printf("%.0f MiB", (double)r->l3 / (1 << 20));
    else printf("unknown");
    printf("; kernels %s (AVX512-VNNI %s, AVX512-BF16 %s); %d thread%s\n\n", lb_isa_name(lb_isa_active()),
           ex & LB__CPU_AVX512_VNNI ? "yes" : "no", ex & LB__CPU_AVX512_BF16 ? "yes" : "no", o->threads,
           o->threads == 1 ? "" : "s");
    printf("1. Read bandwidth: %s,\n   over %.2f GiB (pages touched first), split over the threads as the matvec is, best of %d:\n"
           "   1 thread %.2f GB/s",
           r->read.method, (double)r->read.bytes / (1u << 30), o->reps_mem, r->read.gbps1);
    if (o->threads > 1) printf(", %d threads %.2f GB/s", o->threads, r->read.gbps);
    printf("\n\n");
}

static void print_mv_text(const mv_row *rows, size_t n, const read_result *rd, int mem)
{
    const mv_row *f32 = baseline(rows, n, LB_FMT_FP32), *bf16 = baseline(rows, n, LB_FMT_BF16);
    int cut = 0;
    for (size_t i = 0; i < n; i++) cut |= rows[i].shortened;
    printf("%-30s %6s %7s %7s %s%7s %7s %7s%s\n", "spec", "bits/w", "MiB", "GB/s", mem ? "of read " : "", "Gw/s",
           "vs fp32", "vs bf16", mem ? " | 1T GB/s of read" : "");
    for (size_t i = 0; i < n; i++) {
        const mv_row *r = &rows[i];
        double gbps = (double)r->bytes / r->sec / 1e9;
        printf("%-30s%c%6.2f %7.1f %7.2f ", r->name, r->shortened ? '*' : ' ', 8.0 * (double)r->bytes / ((double)r->rows * (double)r->cols),
               (double)r->bytes / (1 << 20), gbps);
        if (mem) printf("%7.2f ", gbps / rd->gbps);
        printf("%7.2f %7.2f %7.2f", gw_per_s(r), speedup(r, f32), speedup(r, bf16));
        if (mem) printf(" | %7.2f %7.2f", (double)r->bytes / r->sec1 / 1e9, (double)r->bytes / r->sec1 / 1e9 / rd->gbps1);
        printf("\n");
    }
    if (cut)
        printf("* a slow kernel (a full pass would take minutes): timed on its first rows only, the MiB shown.\n");
}

static void print_matvec_text(const opts *o, const results *r)
{
    printf("2a. Matrix-vector product, one token (lb__qmat_matmul, n = 1), %d columns: the rows of a %d x %d\n"
           "    random matrix packed once and tiled to >= %.2f GiB of packed bytes (%.0f x the L3: memory, not\n"
           "    cache); best of %d passes after an untimed one. \"of read\" = GB/s / read GB/s above; Gw/s = G\n"
           "    weights/s; vs fp32/bf16 = ratio of Gw/s. W8A8 rows: activations quantized per token in the call.\n",
           COLS, SMALL_ROWS, COLS, o->gib, r->l3 ? o->gib * (double)(1u << 30) / (double)r->l3 : 0.0, o->reps_mem);
    print_mv_text(r->mem, r->n_mem, &r->read, 1);
    printf("\n2b. The same on ~%.0f MiB of packed weights, which stay in the L3: this measures the cache, not\n"
           "    memory; best of %d passes.\n", o->l3_target / (1 << 20), o->reps_l3);
    print_mv_text(r->l3rows, r->n_l3, &r->read, 0);
    printf("\n");
}

static void print_model_text(const opts *o, const results *r)
{
    if (r->model_note) {
        printf("3. Model: %s\n", r->model_note);
        return;
    }
    const model_row *bf = model_bf16(o, r);
    printf("3. Model %s: each spec on attention, MLP and embedding (which also serves a tied head);\n"
           "   prompts are a fixed pseudo-random sequence of token ids in [0, %u), not text; best of %d runs.\n"
           "   decode: a %d-token prompt, then %zu single-token steps timed; prefill: one forward of %zu tokens\n"
           "   (logits of the last only). B ratio = bf16 weight bytes read per token / the spec's; the goal is\n"
           "   a decode speedup over bf16 >= 0.8 x B ratio.\n",
           o->model, r->vocab, o->runs, PROMPT_TOKENS, o->decode_tokens, o->prefill_tokens);
    printf("%-36s %11s %12s %7s %10s %9s %4s %13s %7s\n", "spec", "weights MiB", "decode tok/s", "vs bf16",
           "B ratio", "0.8x that", "met", "prefill tok/s", "vs bf16");
    for (size_t i = 0; i < r->n_dec; i++) {
        const model_row *d = &r->dec[i];
        double ratio = (double)bf->weights / (double)d->weights, sp = d->decode_tps / bf->decode_tps;
        printf("%-36s %11.1f %12.1f %7.2f %10.2f %9.2f %4s %13.1f %7.2f", d->name, (double)d->weights / (1 << 20),
               d->decode_tps, sp, ratio, 0.8 * ratio, sp >= 0.8 * ratio ? "yes" : "no", d->prefill_tps,
               d->prefill_tps / bf->prefill_tps);
        if (d->decode_timed < o->decode_tokens) printf("  (slow: %zu decode steps timed)", d->decode_timed);
        printf("\n");
    }
    printf("\n   KV cache formats, weights %s: prefill %zu tokens, then %zu decode steps; both timed, best of %d runs.\n",
           o->kv_spec.name, o->kv_prefill, o->kv_decode, o->runs);
    printf("%-12s %10s %12s %8s %13s %8s\n", "kv", "cache MiB", "decode tok/s", "vs first", "prefill tok/s", "vs first");
    const kv_row *base = kv_base(r);
    int same_size = 1, other_format = 0; /* a check that the runner honoured the format */
    for (size_t i = 0; i < r->n_kv; i++) {
        const kv_row *k = &r->kv[i];
        if (k->refused[0]) {
            printf("%-12s refused by the runner: %s\n", lb_format_get(k->kv)->name, k->refused);
            continue;
        }
        printf("%-12s %10.2f %12.1f %8.2f %13.1f %8.2f", lb_format_get(k->kv)->name, (double)k->cache_bytes / (1 << 20),
               k->tps, k->tps / base->tps, k->prefill_tps, k->prefill_tps / base->prefill_tps);
        if (k->timed < o->kv_decode) printf("  (slow: %zu decode steps timed)", k->timed);
        printf("\n");
        same_size &= k->cache_bytes == base->cache_bytes;
        other_format |= k->kv != base->kv;
    }
    if (same_size && other_format)
        printf("   note: every format gives the KV cache the same size: this build's runner does not store it as asked.\n");
}

static int run(int argc, char **argv)
{
    opts *o = calloc(1, sizeof *o);
    results *r = calloc(1, sizeof *r);
    int rc = o && r ? parse_options(argc, argv, o) : cli_fail("bench", 0, EXIT_RUNTIME, "out_of_memory", "out of memory");
    if (rc == EXIT_OK) {
        machine_info(r);
        double big = o->gib * (double)(1u << 30), four_l3 = 4.0 * (double)r->l3;
        if (!o->quick && four_l3 > o->min_bytes) o->min_bytes = four_l3 < big ? four_l3 : big;
        rc = measure_read(o, r);
    }
    if (rc == EXIT_OK && !o->json) print_machine_text(o, r), fflush(stdout);
    if (rc == EXIT_OK) rc = measure_matvec(o, r);
    if (rc == EXIT_OK && !o->json) print_matvec_text(o, r), fflush(stdout);
    if (rc == EXIT_OK) rc = measure_model(o, r);
    if (rc == EXIT_OK && !o->json) print_model_text(o, r);
    if (rc == EXIT_OK && o->json) print_json(o, r);
    free(o), free(r);
    return rc;
}

const cli_command cmd_bench = {"bench", "read bandwidth, packed matvec and model decode/prefill speed on this machine",
                               usage, run};
