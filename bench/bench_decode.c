/* Decode tokens/s of one model under several configurations, interleaved:
 *   bench_decode MODEL [-t THREADS] [-n TOKENS] [-r ROUNDS] [-p PROMPT] [-k KV] CONFIG...
 * CONFIG is "stored" (the weights as the file stores them; a GGUF's ggml
 * blocks read in place), fp32/bf16/fp16 (rounded, no scale), or a spec for attention, MLP and embedding (the
 * tied head too), either followed by "+int8" for the int8 decode mode
 * (lb_runner_options.decode_act). Each round runs every configuration in
 * turn: reset, a PROMPT-token prompt (default 16, untimed; -p 1024 measures
 * decode at a long context, where attention reads the KV cache), then TOKENS
 * single-token steps timed (-k KV: the KV cache format of every configuration,
 * fp32 by default), so a shared machine's noise falls on all of them alike. Prints
 * per configuration the best and the median round in tokens/s and the
 * ratio of the medians to the first configuration. Token ids are a fixed
 * pseudo-random sequence, as lowbit bench's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "lowbit.h"

#define MAX_CFG 16

typedef struct cfg {
    const char *text;
    lb_qspec spec;
    int stored;
    lb_runner *r;
    double tps[64];
} cfg;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_decode MODEL [-t THREADS] [-n TOKENS] [-r ROUNDS] [-p PROMPT] [-k KV] CONFIG...\n");
        return 2;
    }
    int threads = 0, rounds = 7;
    size_t tokens = 64, prompt = 16, ncfg = 0;
    const char *kv_name = NULL;
    static cfg c[MAX_CFG];
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) tokens = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "-p") == 0 && i + 1 < argc) prompt = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "-k") == 0 && i + 1 < argc) kv_name = argv[++i];
        else if (ncfg < MAX_CFG) c[ncfg++].text = argv[i];
    }
    if (rounds < 1 || rounds > 64 || tokens < 1 || prompt < 1 || prompt + tokens > 1u << 20 || ncfg == 0) {
        fprintf(stderr, "bench_decode: 1..64 rounds, a prompt of 1 or more tokens, at least one token and one "
                        "configuration\n");
        return 2;
    }
    lb_format kv = LB_FMT_FP32;
    if (kv_name && lb_format_by_name(kv_name, &kv) != LB_OK) {
        fprintf(stderr, "bench_decode: -k %s: %s\n", kv_name, lb_last_error());
        return 2;
    }
    lb_model *m;
    if (lb_model_open(argv[1], &m) != LB_OK) {
        fprintf(stderr, "bench_decode: %s\n", lb_last_error());
        return 1;
    }
    uint32_t vocab = lb_model_arch(m)->vocab_size;
    int32_t *ids = malloc((prompt + tokens) * sizeof *ids);
    float *logits = malloc(vocab * sizeof *logits);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < prompt + tokens; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((s >> 33) % vocab);
    }
    for (size_t k = 0; k < ncfg; k++) {
        char base[128];
        snprintf(base, sizeof base, "%s", c[k].text);
        char *plus = strstr(base, "+int8");
        if (plus) *plus = '\0';
        lb_runner_options o = {.threads = threads, .max_ctx = (uint32_t)(prompt + tokens),
                               .decode_act = plus ? LB_FMT_INT8 : LB_FMT_FP32, .kv = kv};
        c[k].stored = strcmp(base, "stored") == 0;
        lb_format plain;
        if (!c[k].stored && lb_format_by_name(base, &plain) == LB_OK &&
            (plain == LB_FMT_BF16 || plain == LB_FMT_FP16 || plain == LB_FMT_FP32)) {
            lb_qspec_parse("int8", &c[k].spec); /* a plain float: the defaults (tensor), then the element */
            c[k].spec.element = plain;
            o.attn = o.mlp = o.embed = &c[k].spec;
        } else if (!c[k].stored) {
            if (lb_qspec_parse(base, &c[k].spec) != LB_OK) {
                fprintf(stderr, "bench_decode: %s: %s\n", c[k].text, lb_last_error());
                return 1;
            }
            o.attn = o.mlp = o.embed = &c[k].spec;
        }
        if (lb_runner_new(m, &o, &c[k].r) != LB_OK) {
            fprintf(stderr, "bench_decode: %s: %s\n", c[k].text, lb_last_error());
            return 1;
        }
    }
    for (int round = 0; round < rounds; round++)
        for (size_t k = 0; k < ncfg; k++) {
            lb_runner_reset(c[k].r);
            lb_runner_forward(c[k].r, ids, prompt, logits, 1);
            double t0 = bench_now();
            for (size_t i = 0; i < tokens; i++) lb_runner_forward(c[k].r, ids + prompt + i, 1, logits, 1);
            c[k].tps[round] = (double)tokens / (bench_now() - t0);
        }
    double first_median = 0;
    printf("%-28s %10s %10s %8s\n", "config", "best t/s", "median", "vs first");
    for (size_t k = 0; k < ncfg; k++) {
        qsort(c[k].tps, (size_t)rounds, sizeof(double), cmp_double);
        double median = c[k].tps[rounds / 2];
        if (k == 0) first_median = median;
        printf("%-28s %10.1f %10.1f %8.2f\n", c[k].text, c[k].tps[rounds - 1], median, median / first_median);
        lb_runner_free(c[k].r);
    }
    free(ids), free(logits);
    lb_model_close(m);
    return 0;
}
