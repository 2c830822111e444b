/* Single-thread decode throughput of the ggml-typed row kernels (gdot.h):
 *   bench_gdot [MiB] [type...]
 * For each ggml block type a 256 x 4096 fp32 matrix is quantized with
 * lb__ggml_quantize_rows and its rows tiled into a matrix of about MiB
 * (default 1024: far beyond this machine's caches, so the figure is the
 * memory-bound one; a few MiB measures the kernel from cache instead).
 * y = W x for one token runs over every row on each instruction set the
 * machine has (the scalar reference only up to 64 MiB), the sets interleaved in every repetition so that a shared
 * machine's noise falls on all of them alike; the best of the repetitions
 * is printed as G weights/s and GB/s of block bytes read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "io/ggml_quants.h"
#include "kernel/gdot.h"
#include "kernel/qmat.h"
#include "lowbit.h"
#include "util/cpu.h"

#define REPS 5

static const lb_dtype all[] = {LB_DT_Q4_0, LB_DT_Q4_1, LB_DT_Q5_0,   LB_DT_Q5_1,   LB_DT_Q8_0,  LB_DT_Q2_K,
                               LB_DT_Q3_K, LB_DT_Q4_K, LB_DT_Q5_K,   LB_DT_Q6_K,   LB_DT_IQ4_NL, LB_DT_IQ4_XS,
                               LB_DT_MXFP4, LB_DT_NVFP4};

static void bench_type(lb_dtype t, double mib, const lb_isa *isas, int nisa)
{
    const size_t R0 = 256, C = 4096;
    const lb_dtype_info *d = lb_dtype_get(t);
    size_t row_bytes = C / d->block * d->block_bytes;
    float *w = malloc(R0 * C * sizeof *w);
    uint8_t *small = malloc(R0 * row_bytes);
    for (size_t i = 0; i < R0 * C; i++) w[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 1000.0f;
    if (lb__ggml_quantize_rows(t, w, R0, C, NULL, small) != LB_OK) {
        printf("%-8s %s\n", d->name, lb_last_error());
        free(w), free(small);
        return;
    }
    size_t times = (size_t)(mib * (1 << 20) / (double)(R0 * row_bytes)) + 1, rows = R0 * times;
    uint8_t *data = aligned_alloc(64, (rows * row_bytes + 63) / 64 * 64);
    for (size_t i = 0; i < times; i++) memcpy(data + i * R0 * row_bytes, small, R0 * row_bytes);
    lb__qmat m;
    if (lb__qmat_from_ggml(t, data, rows, C, NULL, &m) != LB_OK) {
        printf("%-8s %s\n", d->name, lb_last_error());
        free(w), free(small), free(data);
        return;
    }
    float *x = malloc(C * sizeof *x), *y = malloc(rows * sizeof *y);
    for (size_t k = 0; k < C; k++) x[k] = (float)(k % 7) - 3.0f;
    void *scratch = aligned_alloc(64, (lb__gdot_scratch_bytes(&m) + 63) / 64 * 64);
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int rep = 0; rep < REPS; rep++)
        for (int i = 0; i < nisa; i++) {
            lb__qdot_fn fn = lb__gdot_get(isas[i]);
            double t0 = bench_now();
            fn(&m, x, 1, C, 0, rows, y, rows, scratch);
            double dt = bench_now() - t0;
            if (dt < best[i]) best[i] = dt;
        }
    printf("%-8s %6.0f MiB", d->name, (double)(rows * row_bytes) / (1 << 20));
    for (int i = 0; i < nisa; i++)
        printf("  %s %6.3f Gw/s %5.2f GB/s", lb_isa_name(isas[i]), (double)rows * C / best[i] / 1e9,
               (double)(rows * row_bytes) / best[i] / 1e9);
    printf("\n");
    fflush(stdout);
    free(scratch), free(x), free(y), free(w), free(small), free(data);
    lb__qmat_free(&m);
}

int main(int argc, char **argv)
{
    double mib = argc > 1 ? atof(argv[1]) : 1024.0;
    lb_isa isas[4];
    int nisa = 0;
    if (mib <= 64) isas[nisa++] = LB_ISA_SCALAR; /* ~0.5 Gw/s: minutes over a big matrix */
    if (lb__isa_supported(LB_ISA_AVX2)) isas[nisa++] = LB_ISA_AVX2;
    if (lb__isa_supported(LB_ISA_AVX512)) isas[nisa++] = LB_ISA_AVX512;
    if (lb__isa_supported(LB_ISA_NEON)) isas[nisa++] = LB_ISA_NEON;
    for (int a = 2; a < argc; a++) {
        lb_dtype t = LB_DT_COUNT;
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            if (!strcmp(argv[a], lb_dtype_get(all[i])->name)) t = all[i];
        if (t == LB_DT_COUNT) printf("%s: not a ggml block type\n", argv[a]);
        else bench_type(t, mib, isas, nisa);
    }
    if (argc <= 2)
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) bench_type(all[i], mib, isas, nisa);
    return 0;
}
