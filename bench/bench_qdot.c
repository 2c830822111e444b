/* Decode matvec throughput on packed weights far beyond the caches:
 *   bench_qdot [GiB] [spec...]
 * For each spec a 256 x 4096 random matrix is quantized and its rows,
 * scales and zero points tiled into a >= GiB view; y = W x (one token) runs
 * over row slices on 1 and 2 threads (lb__parallel_for's split). Prints GB/s of
 * packed bytes read (lb__qmat.bytes / time, best of 3) beside a pure-read
 * baseline (an AVX-512 sum over 2 GiB on the same threads). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kernel/qdot.h"
#include "kernel/qmat.h"
#include "lowbit.h"
#include "util/parallel.h"

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx512f"))) static float sum_avx512(const float *p, size_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i)), a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32)), a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}
#endif

/* lb__parallel_for's split (one contiguous slice per thread, boundaries on
 * multiples of grain) on threads made per call: the pool in
 * util/parallel.c deadlocked here while it was being reworked. */
typedef struct {
    lb__range_fn fn;
    void *ctx;
    size_t b, e;
} part;
static void *part_main(void *arg)
{
    part *p = arg;
    p->fn(p->ctx, p->b, p->e);
    return NULL;
}
static void par_for(size_t n, size_t grain, int threads, lb__range_fn fn, void *ctx)
{
    pthread_t tid[2];
    part parts[2];
    size_t units = (n + grain - 1) / grain;
    if (threads > 2) threads = 2;
    for (int i = 0; i < threads; i++) {
        size_t b = units * (size_t)i / (size_t)threads * grain, e = units * (size_t)(i + 1) / (size_t)threads * grain;
        parts[i] = (part){fn, ctx, b, e < n ? e : n};
    }
    for (int i = 1; i < threads; i++) pthread_create(&tid[i], NULL, part_main, &parts[i]);
    part_main(&parts[0]);
    for (int i = 1; i < threads; i++) pthread_join(tid[i], NULL);
}

typedef struct {
    const float *buf;
    size_t n;
    float out[16];
} read_job;

static lb_status read_slice(void *ctx, size_t b, size_t e)
{
    read_job *j = ctx;
    size_t per = j->n / 16;
#if defined(__x86_64__)
    for (size_t s = b; s < e; s++) j->out[s] = sum_avx512(j->buf + s * per, per);
#else
    (void)per;
#endif
    return LB_OK;
}

typedef struct {
    const lb__qmat *m;
    lb__qdot_fn fn;
    const float *x;
    float *y;
} mv_job;

static lb_status mv_slice(void *ctx, size_t b, size_t e)
{
    mv_job *j = ctx;
    size_t n = lb__qdot_scratch_bytes(j->m);
    void *scr = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!scr) return LB_ERR_NOMEM;
    j->fn(j->m, j->x, 1, j->m->cols, b, e, j->y, j->m->rows, scr);
    free(scr);
    return LB_OK;
}

static void *tile(const uint8_t *src, size_t bytes, size_t times)
{
    uint8_t *d = aligned_alloc(64, (bytes * times + 63) / 64 * 64 + 64);
    if (!d) return NULL;
    for (size_t i = 0; i < times; i++) memcpy(d + i * bytes, src, bytes);
    return d;
}

static void bench_spec(const char *text, double gib, const double base[3])
{
    const size_t R0 = 256, C = 4096;
    lb_qspec spec;
    int plain = !strcmp(text, "bf16") || !strcmp(text, "fp16") || !strcmp(text, "fp32");
    if (plain) {
        lb_format f;
        lb_format_by_name(text, &f);
        spec = (lb_qspec){.element = f, .granularity = LB_GRAN_TENSOR, .scale_format = LB_FMT_FP32};
    } else if (lb_qspec_parse(text, &spec) != LB_OK) {
        printf("%-22s bad spec\n", text);
        return;
    }
    float *w = malloc(R0 * C * sizeof(float));
    for (size_t i = 0; i < R0 * C; i++) w[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 1000.0f;
    lb__qmat small, big;
    if (lb__qmat_from_f32(w, R0, C, &spec, 0, &small) != LB_OK) {
        printf("%-22s %s\n", text, lb_last_error());
        free(w);
        return;
    }
    size_t times = (size_t)(gib * (1u << 30) / (double)(small.row_bytes * R0)) + 1;
    big = small;
    big.owned_q = NULL, big.owned_buf = NULL;
    big.rows = R0 * times;
    void *data = tile(small.data, R0 * small.row_bytes, times), *scales = NULL, *zps = NULL;
    big.data = data;
    if (!small.plain && !small.one_scale) {
        scales = tile(small.scales, lb_format_bytes(small.scale_format, R0 * small.blocks), times);
        big.scales = scales;
    }
    if (small.zero_points && !small.one_scale) {
        zps = tile(small.zero_points, R0 * small.zp_row_bytes, times);
        big.zero_points = zps;
    }
    size_t bytes = big.rows * big.row_bytes;
    if (!small.plain && !small.one_scale) bytes += lb_format_bytes(small.scale_format, big.rows * small.blocks);
    if (zps) bytes += big.rows * small.zp_row_bytes;
    float *x = malloc(C * sizeof(float)), *y = malloc(big.rows * sizeof(float));
    for (size_t k = 0; k < C; k++) x[k] = (float)(k % 7) - 3.0f;
    printf("%-22s %6.0f MiB", text, (double)bytes / (1 << 20));
    for (int threads = 1; threads <= 2; threads++) {
        mv_job j = {&big, lb__qdot_get(lb_isa_active()), x, y};
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = bench_now();
            par_for(big.rows, 4, threads, mv_slice, &j);
            double dt = bench_now() - t0;
            if (dt < best) best = dt;
        }
        double gbs = (double)bytes / best / 1e9;
        printf("   %dT %6.2f GB/s (%3.0f%% of read, %5.2f Gw/s/core)", threads, gbs, 100 * gbs / base[threads],
               (double)big.rows * C / best / 1e9 / threads);
    }
    printf("\n");
    fflush(stdout);
    free(x), free(y), free(data), free(scales), free(zps), free(w);
    lb__qmat_free(&small);
}

int main(int argc, char **argv)
{
    double gib = argc > 1 ? atof(argv[1]) : 1.0;
    static const char *all[] = {"fp32", "bf16", "fp16", "fp8_e4m3:channel", "fp8_e5m2:channel",
                                "fp8_e4m3fnuz:channel", "fp16:g64", "int8:channel", "int8:g32:affine",
                                "uint8:g64:affine", "int4:g32", "int4:g32:affine", "uint4:g128:affine",
                                "int4:channel", "fp6_e2m3:g32", "fp6_e3m2:channel", "fp4_e2m1:g32:scale=fp16",
                                "int4:g64:scale=bf16", "int4:g48", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3",
                                "mxfp6_e3m2", "mxfp4", "mxint8", "nvfp4"};
    size_t n = sizeof all / sizeof all[0];
    const char **list = argc > 2 ? (const char **)(argv + 2) : all;
    if (argc > 2) n = (size_t)(argc - 2);
    /* the read baseline: 2 GiB summed, 16 slices over the threads */
    size_t nf = (size_t)2 << 28;
    float *buf = aligned_alloc(64, nf * sizeof(float));
    if (!buf) return 1;
    for (size_t i = 0; i < nf; i++) buf[i] = 1.0f;
    double base[3] = {0};
    for (int threads = 1; threads <= 2; threads++) {
        read_job j = {buf, nf, {0}};
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = bench_now();
            par_for(16, 1, threads, read_slice, &j);
            double dt = bench_now() - t0;
            if (dt < best) best = dt;
        }
        base[threads] = (double)nf * sizeof(float) / best / 1e9;
    }
    free(buf);
    printf("kernel %s; pure read (AVX-512 sum of 2 GiB): 1T %.2f GB/s, 2T %.2f GB/s\n", lb_isa_name(lb_isa_active()),
           base[1], base[2]);
    for (size_t i = 0; i < n; i++) bench_spec(list[i], gib, base);
    return 0;
}
