/* Speed of the three builds of ggml's classic quantizers (Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0, MXFP4, NVFP4: io/ggml_blocks*.c) on one thread, each on the
 * same gaussian data with an outlier every 97 values, and whether their
 * bytes agree with the scalar build's.
 *
 *   build/bench/bench_ggml_blocks [KiB of fp32, default 256: in L2] [reps, default 15]
 *
 * Prints GB/s of fp32 input (best of reps, the builds alternated). A
 * build this CPU lacks runs the next one down (the same numbers twice). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "io/ggml_blocks.h"
#include "util/cpu.h"
#include "lowbit.h"

typedef void (*quantizer)(const float *restrict, size_t, void *restrict);

int main(int argc, char **argv)
{
    size_t kib = argc > 1 ? (size_t)atol(argv[1]) : 256;
    int reps = argc > 2 ? atoi(argv[2]) : 15;
    size_t n = kib * 1024 / 4 / 64 * 64;
    if (n == 0 || reps < 1) return fprintf(stderr, "usage: bench_ggml_blocks [KiB] [reps]\n"), 2;
    float *x = malloc(n * sizeof *x);
    uint8_t *out[3] = {malloc(n * 2), malloc(n * 2), malloc(n * 2)}; /* Q8_0, the largest: 34 bytes per 32 */
    if (!x || !out[0] || !out[1] || !out[2]) return fprintf(stderr, "out of memory\n"), 1;
    uint64_t s = 0x9E3779B97F4A7C15u;
    for (size_t i = 0; i < n; i++) { /* a sum of uniforms: near-gaussian, and an outlier every 97 */
        float acc = 0;
        for (int k = 0; k < 4; k++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            acc += (float)(int32_t)(s >> 32) / 2147483648.0f;
        }
        x[i] = i % 97 == 0 ? 12.0f * acc : acc;
    }
    static const struct { const char *name; lb_dtype t; quantizer build[3]; } q[] = {
#define ROW(type, dt) \
    {#type, dt, {lb__quantize_##type##_scalar, lb__quantize_##type##_avx2, lb__quantize_##type##_avx512}},
        ROW(q4_0, LB_DT_Q4_0) ROW(q4_1, LB_DT_Q4_1) ROW(q5_0, LB_DT_Q5_0) ROW(q5_1, LB_DT_Q5_1)
        ROW(q8_0, LB_DT_Q8_0) ROW(mxfp4, LB_DT_MXFP4) ROW(nvfp4, LB_DT_NVFP4)
#undef ROW
    };
    const int have[3] = {1, lb__ggml_blocks_avx2_built() && lb__isa_x86(lb_isa_detected()) >= LB_ISA_AVX2,
                         lb__ggml_blocks_avx512_built() && lb__isa_x86(lb_isa_detected()) >= LB_ISA_AVX512};
    printf("%zu fp32 values (%.0f KiB), best of %d, one thread; GB/s of fp32 input\n\n", n, (double)n * 4 / 1024,
           reps);
    printf("| type | scalar | AVX2 | AVX-512 | AVX-512 / AVX2 | bytes |\n|---|---:|---:|---:|---:|---|\n");
    for (size_t t = 0; t < sizeof q / sizeof q[0]; t++) {
        const lb_dtype_info *d = lb_dtype_get(q[t].t);
        size_t nb = n / d->block, bytes = nb * d->block_bytes;
        double best[3] = {1e30, 1e30, 1e30};
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < 3; k++) {
                quantizer f = q[t].build[have[k] ? k : k == 2 && have[1] ? 1 : 0];
                double t0 = bench_now();
                f(x, nb, out[k]);
                double dt = bench_now() - t0;
                if (dt < best[k]) best[k] = dt;
            }
        int same = memcmp(out[0], out[1], bytes) == 0 && memcmp(out[0], out[2], bytes) == 0;
        printf("| %s | %.2f | %.2f | %.2f | %.2f | %s |\n", q[t].name, (double)n * 4 / best[0] / 1e9,
               (double)n * 4 / best[1] / 1e9, (double)n * 4 / best[2] / 1e9, best[1] / best[2],
               same ? "equal" : "DIFFER");
    }
    free(x);
    for (int k = 0; k < 3; k++) free(out[k]);
    return 0;
}
