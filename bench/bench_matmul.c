/* The prefill matmul against this machine's peak: (1) the fp32 FMA rate
 * of a register-only loop (no memory traffic: the ceiling any kernel can
 * reach), one and two threads; (2) lowbit's Y = X . W^T on SmolLM2-135M's
 * shapes with 512 tokens, in GFLOP/s (2 * n * out * in per product) and
 * as a fraction of the peak. Prints markdown.
 * usage: bench_matmul [tokens] [threads] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "lowbit.h"
#include "kernel/matmul.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* 12 independent accumulators (more than FMA latency x throughput), named
 * variables so they stay in registers; the FMA does not reassociate, so
 * the compiler must keep every one of them. Returns the FLOPs done. */
#define FMA12(fma, a, b)                                                                                   \
    do {                                                                                                   \
        c0 = fma(c0, a, b), c1 = fma(c1, a, b), c2 = fma(c2, a, b), c3 = fma(c3, a, b);                     \
        c4 = fma(c4, a, b), c5 = fma(c5, a, b), c6 = fma(c6, a, b), c7 = fma(c7, a, b);                     \
        c8 = fma(c8, a, b), c9 = fma(c9, a, b), c10 = fma(c10, a, b), c11 = fma(c11, a, b);                 \
    } while (0)

__attribute__((target("avx512f"))) static double fma_loop_512(long iters, float *sink)
{
    __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    __m512 c0 = _mm512_set1_ps(0), c1 = _mm512_set1_ps(1), c2 = _mm512_set1_ps(2), c3 = _mm512_set1_ps(3);
    __m512 c4 = _mm512_set1_ps(4), c5 = _mm512_set1_ps(5), c6 = _mm512_set1_ps(6), c7 = _mm512_set1_ps(7);
    __m512 c8 = _mm512_set1_ps(8), c9 = _mm512_set1_ps(9), c10 = _mm512_set1_ps(10), c11 = _mm512_set1_ps(11);
    for (long it = 0; it < iters; it++) FMA12(_mm512_fmadd_ps, a, b);
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                             _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
    *sink = _mm512_reduce_add_ps(s);
    return (double)iters * 12 * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma_loop_256(long iters, float *sink)
{
    __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    __m256 c0 = _mm256_set1_ps(0), c1 = _mm256_set1_ps(1), c2 = _mm256_set1_ps(2), c3 = _mm256_set1_ps(3);
    __m256 c4 = _mm256_set1_ps(4), c5 = _mm256_set1_ps(5), c6 = _mm256_set1_ps(6), c7 = _mm256_set1_ps(7);
    __m256 c8 = _mm256_set1_ps(8), c9 = _mm256_set1_ps(9), c10 = _mm256_set1_ps(10), c11 = _mm256_set1_ps(11);
    for (long it = 0; it < iters; it++) FMA12(_mm256_fmadd_ps, a, b);
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                             _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
    float t[8];
    _mm256_storeu_ps(t, s);
    *sink = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    return (double)iters * 12 * 8 * 2;
}
#endif

typedef struct peak_job {
    long iters;
    double flops;
    float sink;
} peak_job;

static void *peak_thread(void *arg)
{
    peak_job *j = arg;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (lb_isa_detected() == LB_ISA_AVX512) j->flops = fma_loop_512(j->iters, &j->sink); /* == : NEON (3) is no x86 level */
    else if (lb_isa_detected() == LB_ISA_AVX2) j->flops = fma_loop_256(j->iters, &j->sink);
    else
#endif
    {
        volatile float a = 1.0f;
        for (long i = 0; i < j->iters; i++) a = a * 0.999999f + 1e-7f;
        j->sink = a;
        j->flops = (double)j->iters * 2;
    }
    return NULL;
}

/* FLOP/s of `threads` copies of the loop running at once, best of 10
 * (the machine is shared: the least disturbed run is the ceiling). */
static double peak_flops(int threads)
{
    double best = 0;
    for (int rep = 0; rep < 10; rep++) {
        peak_job jobs[2];
        pthread_t tid[2];
        for (int i = 0; i < threads; i++) jobs[i] = (peak_job){.iters = 20000000};
        double t0 = bench_now();
        for (int i = 1; i < threads; i++) pthread_create(&tid[i], NULL, peak_thread, &jobs[i]);
        peak_thread(&jobs[0]);
        for (int i = 1; i < threads; i++) pthread_join(tid[i], NULL);
        double dt = bench_now() - t0, flops = 0;
        for (int i = 0; i < threads; i++) flops += jobs[i].flops;
        if (flops / dt > best) best = flops / dt;
    }
    return best;
}

static float *random_floats(size_t n, unsigned seed)
{
    float *x = malloc(n * sizeof *x);
    if (!x) return NULL;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
    }
    return x;
}

int main(int argc, char **argv)
{
    size_t tokens = argc > 1 ? (size_t)atol(argv[1]) : 512;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    double peak1 = peak_flops(1), peak2 = peak_flops(2);
    double peak = threads >= 2 ? peak2 : peak1;
    printf("Peak fp32 FMA rate (register-only loop, %s): %.1f GFLOP/s on 1 thread, %.1f GFLOP/s on 2 threads.\n\n",
           lb_isa_name(lb_isa_detected()), peak1 / 1e9, peak2 / 1e9);
    printf("Prefill matmul Y[%zu][out] = X[%zu][in] . W[out][in]^T, %d threads, kernels: %s, best of 5.\n\n", tokens,
           tokens, threads, lb_isa_name(lb_isa_active()));
    printf("| out x in | GFLOP/s | fraction of peak |\n|---|---:|---:|\n");
    static const size_t shapes[][2] = {{576, 576}, {192, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
    double total_flops = 0, total_s = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t out = shapes[s][0], in = shapes[s][1];
        float *w = random_floats(out * in, 1), *x = random_floats(tokens * in, 2), *y = malloc(tokens * out * sizeof *y);
        lb__packed p;
        if (!w || !x || !y || lb__pack_weight(w, out, in, &p) != LB_OK) return fprintf(stderr, "out of memory\n"), 1;
        double best = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = bench_now();
            if (lb__matmul(x, tokens, &p, y, threads) != LB_OK) return fprintf(stderr, "%s\n", lb_last_error()), 1;
            double dt = bench_now() - t0;
            if (dt < best) best = dt;
        }
        double flops = 2.0 * (double)tokens * (double)out * (double)in;
        total_flops += flops;
        total_s += best;
        printf("| %zu x %zu | %.1f | %.2f |\n", out, in, flops / best / 1e9, flops / best / peak);
        lb__packed_free(&p);
        free(w);
        free(x);
        free(y);
    }
    printf("| all five (time-weighted) | %.1f | %.2f |\n", total_flops / total_s / 1e9, total_flops / total_s / peak);
    /* measured again after the matmuls: a peak disturbed by other load
     * would overstate the fractions above */
    double again = peak_flops(threads >= 2 ? 2 : 1);
    printf("\nPeak measured again after the matmuls: %.1f GFLOP/s (fractions above use %.1f).\n", again / 1e9,
           peak / 1e9);
    return 0;
}
