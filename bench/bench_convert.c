/* Bulk conversion throughput: fp32 -> format -> fp32 on a large array,
 * against memcpy measured in the same run.
 *
 * usage: bench_convert DATA.f32 [REPS]
 *   DATA.f32  raw little-endian fp32 values (bench/run_convert.py writes
 *             it, so that ml_dtypes is timed on the very same numbers)
 * Prints one JSON object per line: {"op", "format", "threads", "seconds",
 * "gbps"}; gbps counts the fp32 side's bytes (read for encode, written for
 * decode), and for memcpy the bytes copied. Best of REPS (default 3). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "lowbit.h"

static void report(const char *op, const char *fmt, int threads, double secs, double bytes)
{
    printf("{\"op\": \"%s\", \"format\": \"%s\", \"threads\": %d, \"isa\": \"%s\", \"seconds\": %.6f, \"gbps\": %.3f}\n",
           op, fmt, threads, lb_isa_name(lb_isa_active()), secs, bytes / secs / 1e9);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_convert DATA.f32 [REPS]\n");
        return 2;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    FILE *fp = fopen(argv[1], "rb");
    if (!fp) {
        perror(argv[1]);
        return 1;
    }
    fseek(fp, 0, SEEK_END);
    size_t bytes = (size_t)ftell(fp), n = bytes / 4;
    fseek(fp, 0, SEEK_SET);
    float *src = malloc(n * 4), *back = malloc(n * 4);
    uint8_t *codes = malloc(n * 2);
    if (!src || !back || !codes || fread(src, 4, n, fp) != n) {
        fprintf(stderr, "cannot load %zu floats\n", n);
        return 1;
    }
    fclose(fp);
    memset(back, 0, n * 4); /* fault every page in before timing */
    memset(codes, 0, n * 2);

    const int thread_counts[] = {1, 2};
    for (int ti = 0; ti < 2; ti++) {
        int t = thread_counts[ti];
        report("memcpy", "fp32", t, bench_memcpy_seconds(back, src, n * 4, t, reps), (double)n * 4);
    }
    const lb_format formats[] = {LB_FMT_BF16, LB_FMT_FP16, LB_FMT_FP8_E4M3, LB_FMT_FP8_E5M2, LB_FMT_FP4_E2M1};
    for (size_t fi = 0; fi < sizeof formats / sizeof formats[0]; fi++) {
        const char *name = lb_format_get(formats[fi])->name;
        for (int ti = 0; ti < 2; ti++) {
            int t = thread_counts[ti];
            double best_enc = 1e30, best_dec = 1e30;
            for (int r = 0; r < reps; r++) {
                double t0 = bench_now();
                if (lb_encode_f32(formats[fi], LB_SATURATE, src, n, codes, t) != LB_OK) {
                    fprintf(stderr, "%s\n", lb_last_error());
                    return 1;
                }
                double t1 = bench_now();
                lb_decode_f32(formats[fi], codes, n, back, t);
                double t2 = bench_now();
                if (t1 - t0 < best_enc) best_enc = t1 - t0;
                if (t2 - t1 < best_dec) best_dec = t2 - t1;
            }
            report("encode", name, t, best_enc, (double)n * 4);
            report("decode", name, t, best_dec, (double)n * 4);
        }
    }
    free(src), free(back), free(codes);
    return 0;
}
