/* Tensor quantization throughput: quantize and dequantize a large fp32
 * tensor with each spec, against memcpy of the same bytes in the same run.
 *
 * usage: bench_quant [GIB] [REPS] [SPEC,SPEC,...]   (default 1 GiB, best of 3, the specs below)
 * Prints a markdown table; GB/s counts the fp32 side (read when
 * quantizing, written when dequantizing). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "lowbit.h"

/* xorshift normal-ish values: the sum of four uniforms, deterministic */
static void fill(float *x, size_t n)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        float acc = 0;
        for (int k = 0; k < 4; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            acc += (float)(s >> 40) / (float)(1 << 24) - 0.5f;
        }
        x[i] = acc;
    }
}

int main(int argc, char **argv)
{
    double gib = argc > 1 ? atof(argv[1]) : 1.0;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    size_t cols = 16384, rows = (size_t)(gib * (double)(1u << 30)) / 4 / cols, n = rows * cols;
    float *x = malloc(n * 4), *back = malloc(n * 4);
    if (!x || !back) return fprintf(stderr, "cannot allocate %zu floats\n", n), 1;
    fill(x, n);
    memset(back, 0, n * 4);
    double mc[3] = {0, bench_memcpy_seconds(back, x, n * 4, 1, reps), bench_memcpy_seconds(back, x, n * 4, 2, reps)};
    printf("Tensor %zu x %zu fp32 (%.2f GiB), best of %d, kernels: %s.\n\n", rows, cols, (double)n * 4 / (1u << 30),
           reps, lb_isa_name(lb_isa_active()));
    printf("memcpy: %.2f GB/s (1 thread), %.2f GB/s (2 threads)\n\n", (double)n * 4 / mc[1] / 1e9,
           (double)n * 4 / mc[2] / 1e9);
    printf("| spec | threads | quantize GB/s | × memcpy | dequantize GB/s | × memcpy | bits/value | SQNR dB |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    const char *specs[] = {"int8:channel", "int8:g32", "int4:g32", "int4:g128:affine", "fp8_e4m3:channel",
                           "mxfp8_e4m3", "mxfp4", "nvfp4", "int8:channel:clip=mse", "int4:g32:clip=mse",
                           "int4:g128:affine:clip=mse"};
    size_t nspecs = sizeof specs / sizeof specs[0];
    char *list = argc > 3 ? argv[3] : NULL; /* specs named on the command line instead */
    if (list) {
        nspecs = 0;
        for (char *tok = strtok(list, ","); tok && nspecs < sizeof specs / sizeof specs[0]; tok = strtok(NULL, ","))
            specs[nspecs++] = tok;
    }
    for (size_t si = 0; si < nspecs; si++) {
        lb_qspec spec;
        if (lb_qspec_parse(specs[si], &spec) != LB_OK) return fprintf(stderr, "%s\n", lb_last_error()), 1;
        for (int t = 1; t <= 2; t++) {
            double bq = 1e30, bd = 1e30;
            lb_qstats st = {0};
            for (int r = 0; r < reps; r++) {
                lb_qtensor *q;
                double t0 = bench_now();
                if (lb_quantize(&spec, x, rows, cols, t, &q) != LB_OK) return fprintf(stderr, "%s\n", lb_last_error()), 1;
                double t1 = bench_now();
                lb_dequantize(q, back, t);
                double t2 = bench_now();
                if (t1 - t0 < bq) bq = t1 - t0;
                if (t2 - t1 < bd) bd = t2 - t1;
                if (r == 0 && t == 1) lb_qstats_compute(x, back, q, &st);
                lb_qtensor_free(q);
            }
            double gq = (double)n * 4 / bq / 1e9, gd = (double)n * 4 / bd / 1e9, m = (double)n * 4 / mc[t] / 1e9;
            if (t == 1)
                printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.3f | %.2f |\n", specs[si], t, gq, gq / m, gd, gd / m,
                       st.bits_per_value, st.sqnr_db);
            else
                printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | | |\n", specs[si], t, gq, gq / m, gd, gd / m);
            fflush(stdout);
        }
    }
    free(x), free(back);
    return 0;
}
