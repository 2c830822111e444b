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

#include "bench.h"
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
    "                  nvfp4,int8:channel+act=int8,fp8_e4m3:channel+act=fp8_e4m3, and int8:channel,\n"
    "                  int4:g32, mxfp4, nvfp4 +decode-act=int8); SPEC+act=FORMAT adds W8A8\n"
    "                  activations (int8 or fp8_e4m3); SPEC+decode-act=int8 the int8 decode mode\n"
    "                  (lowbit generate --decode-act int8). bf16 is added when absent.\n"
    "                  \"stored\": the model's weights as the file stores them (a GGUF's ggml\n"
    "                  blocks read in place); \"stored-fp32\": the same values as fp32 copies.\n"
    "--kv LIST         KV cache formats (default fp32,bf16,fp16,fp8_e4m3,fp8_e5m2,int8,int4)\n"
    "--kv-spec SPEC    the weights' spec for the KV runs (default int4:g32)\n"
    "--threads N       threads (default one per CPU); --decode-tokens N (default 64),\n"
    "                  --prefill-tokens N (default 256); --no-model skips section 3.\n"
    "--quick           small sizes for tests: 64 MiB, few passes, short prompts.\n"
    "--json            everything as one JSON object.\n";
static const char *const default_specs = "fp32,bf16,fp16,fp8_e4m3:channel,fp8_e5m2:channel,fp8_e4m3:g32,int8:channel,"
                                         "int8:g32,int4:channel,int4:g32,int4:g128:affine,mxfp8_e4m3,mxfp6_e2m3,mxfp4,nvfp4";
static const char *const default_decode = "fp32,bf16,fp8_e4m3:channel,int8:channel,int4:g32,mxfp4,nvfp4,"
                                          "int8:channel+act=int8,fp8_e4m3:channel+act=fp8_e4m3,int8:channel+decode-act=int8,"
                                          "int4:g32+decode-act=int8,mxfp4+decode-act=int8,nvfp4+decode-act=int8";
static const char *const default_kv = "fp32,bf16,fp16,fp8_e4m3,fp8_e5m2,int8,int4";
static const char *const default_model = ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/* ---- options ---- */

/* One spec: "f32" is an alias of fp32; fp32/bf16/fp16 alone are plain
 * (rounded, no scale); "+act=FORMAT" (only when allow_act) asks for W8A8. */
static int parse_item(const char *text, int allow_act, int json, item *it)
{
    char base[96];
    snprintf(it->name, sizeof it->name, "%s", text);
    snprintf(base, sizeof base, "%s", strcmp(text, "f32") == 0 ? "fp32" : text);
    it->act = it->decode_act = LB_FMT_FP32;
    it->stored = 0;
    char *dact = strstr(base, "+decode-act=");
    if (dact) {
        if (!allow_act || strcmp(dact + 12, "int8") != 0)
            return cli_fail("bench", json, EXIT_USAGE, "bad_argument", "'%s': +decode-act= takes int8%s", text,
                            allow_act ? " (at the end)" : ", and only in --decode-specs");
        it->decode_act = LB_FMT_INT8;
        *dact = '\0';
    }
    if (allow_act && (strcmp(base, "stored") == 0 || strcmp(base, "stored-fp32") == 0)) {
        it->stored = strcmp(base, "stored") == 0 ? 1 : 2;
        it->spec = (lb_qspec){.element = LB_FMT_FP32, .granularity = LB_GRAN_TENSOR, .scale_format = LB_FMT_FP32};
        return EXIT_OK;
    }
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

int bench_is_plain_of(const item *it, lb_format f)
{
    return !it->stored && it->act == LB_FMT_FP32 && it->decode_act == LB_FMT_FP32 && cli_is_plain_float(&it->spec) && it->spec.element == f;
}

/* The baselines every speedup divides by, put first (in the order given)
 * when the list lacks them. The list has room: parse_list keeps two free. */
static void ensure_baselines(item *list, size_t *n, const lb_format *f, const char *const *names, size_t nf)
{
    item add[2];
    size_t k = 0;
    for (size_t b = 0; b < nf && b < 2; b++) {
        size_t i = 0;
        while (i < *n && !bench_is_plain_of(&list[i], f[b])) i++;
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
        else if (strcmp(a, "--threads") == 0) {
            int t;
            if (cli_parse_threads("bench", o->json, v, &t) != EXIT_OK) return EXIT_USAGE;
            thr = t, i++;
        }
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
static int run(int argc, char **argv)
{
    opts *o = calloc(1, sizeof *o);
    results *r = calloc(1, sizeof *r);
    int rc = o && r ? parse_options(argc, argv, o) : cli_fail("bench", 0, EXIT_RUNTIME, "out_of_memory", "out of memory");
    if (rc == EXIT_OK) {
        bench_machine_info(r);
        double big = o->gib * (double)(1u << 30), four_l3 = 4.0 * (double)r->l3;
        if (!o->quick && four_l3 > o->min_bytes) o->min_bytes = four_l3 < big ? four_l3 : big;
        rc = bench_measure_read(o, r);
    }
    if (rc == EXIT_OK && !o->json) bench_print_machine_text(o, r), fflush(stdout);
    if (rc == EXIT_OK) rc = bench_measure_matvec(o, r);
    if (rc == EXIT_OK && !o->json) bench_print_matvec_text(o, r), fflush(stdout);
    if (rc == EXIT_OK) rc = bench_measure_model(o, r);
    if (rc == EXIT_OK && !o->json) bench_print_model_text(o, r);
    if (rc == EXIT_OK && o->json) bench_print_json(o, r);
    free(o), free(r);
    return rc;
}

const cli_command cmd_bench = {"bench", "read bandwidth, packed matvec and model decode/prefill speed on this machine",
                               usage, run};
