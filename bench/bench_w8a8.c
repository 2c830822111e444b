/* W8A8 against fp32, in one run:
 *   (1) prefill: Y = X . W^T on SmolLM2-135M's shapes (576x576 q/o,
 *       1536x576 gate/up, 576x1536 down, 49152x576 the head) at 64 and
 *       512 tokens: lowbit's fp32 GEMM (lb__matmul on lb__pack_weight)
 *       against the int8 W8A8 product (activations quantized per token
 *       inside the timed call) and the fp8 one, in GOP/s (2 * n * out * in
 *       per product);
 *   (2) decode: the int8 matvec (one token) over 1 GiB of int8 weights in
 *       GB/s of weight bytes, against a plain read of the same bytes.
 * Prints markdown. Timings: best of REPS.
 * usage: bench_w8a8 [threads] [reps]   (default 1 thread for (1), 1 and 2 for (2); 3 reps) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kernel/w8a8.h"
#include "lowbit.h"
#include "kernel/matmul.h"
#include "util/parallel.h"

static uint64_t rng = 88172645463325252ull;

static float rand_f(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) / 8388608.0f - 1.0f;
}

/* The weight view of a quantized tensor (channel or tensor scale). */
static void view_qmat(lb_qtensor *q, lb__qmat *m)
{
    lb_qtensor_view v;
    lb_qtensor_view_get(q, &v);
    memset(m, 0, sizeof *m);
    m->rows = v.rows, m->cols = v.cols, m->element = v.spec.element, m->spec = v.spec;
    m->block = v.cols, m->blocks = 1, m->data = v.data, m->row_bytes = v.row_bytes;
    m->scale_format = v.spec.scale_format, m->scales = v.scales;
    m->one_scale = v.spec.granularity == LB_GRAN_TENSOR, m->scale_mul = v.tensor_scale;
    m->bytes = v.data_bytes + v.scale_bytes;
}

typedef struct shape {
    const char *name;
    size_t out, in;
} shape;

static double best_w8a8(const lb__w8a8 *k, const float *x, size_t n, float *y, int threads, int reps)
{
    double best = 1e30;
    for (int r = 0; r <= reps; r++) { /* run 0 warms up */
        double t0 = bench_now();
        if (lb__w8a8_matmul(k, x, n, 0.0f, y, threads) != LB_OK) return fprintf(stderr, "%s\n", lb_last_error()), 1e30;
        double dt = bench_now() - t0;
        if (r && dt < best) best = dt;
    }
    return best;
}

static int prefill(int threads, int reps)
{
    static const shape shapes[] = {{"q/o 576x576", 576, 576}, {"gate/up 1536x576", 1536, 576},
                                   {"down 576x1536", 576, 1536}, {"head 49152x576", 49152, 576}};
    static const size_t tokens[] = {64, 512};
    printf("## Prefill, %d thread(s), ISA %s (GOP/s; speedup over fp32)\n\n", threads, lb_isa_name(lb_isa_active()));
    printf("| shape | tokens | fp32 lb__matmul | int8 W8A8 | int8 / fp32 | fp8 W8A8 | fp8 / fp32 |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        size_t out = shapes[s].out, in = shapes[s].in;
        float *w = malloc(out * in * sizeof *w);
        float *x = malloc(512 * in * sizeof *x), *y = malloc(512 * out * sizeof *y);
        if (!w || !x || !y) return fprintf(stderr, "out of memory\n"), 1;
        for (size_t i = 0; i < out * in; i++) w[i] = rand_f() * 0.05f;
        for (size_t i = 0; i < 512 * in; i++) x[i] = rand_f();
        lb__packed p;
        lb_qspec s8, s8f;
        lb_qtensor *q8, *qf;
        lb__qmat m8, mf;
        lb__w8a8 k8, kf;
        lb_qspec_parse("int8:channel", &s8);
        lb_qspec_parse("fp8_e4m3:channel", &s8f);
        if (lb__pack_weight(w, out, in, &p) != LB_OK || lb_quantize(&s8, w, out, in, 0, &q8) != LB_OK ||
            lb_quantize(&s8f, w, out, in, 0, &qf) != LB_OK)
            return fprintf(stderr, "%s\n", lb_last_error()), 1;
        view_qmat(q8, &m8), view_qmat(qf, &mf);
        if (lb__w8a8_init(&m8, LB_FMT_INT8, &k8) != LB_OK || lb__w8a8_init(&mf, LB_FMT_FP8_E4M3, &kf) != LB_OK)
            return fprintf(stderr, "%s\n", lb_last_error()), 1;
        for (size_t ti = 0; ti < sizeof tokens / sizeof *tokens; ti++) {
            size_t n = tokens[ti];
            double ops = 2.0 * (double)n * (double)out * (double)in;
            double tf = 1e30;
            for (int r = 0; r <= reps; r++) {
                double t0 = bench_now();
                lb__matmul(x, n, &p, y, threads);
                double dt = bench_now() - t0;
                if (r && dt < tf) tf = dt;
            }
            double t8 = best_w8a8(&k8, x, n, y, threads, reps);
            double t8f = best_w8a8(&kf, x, n, y, threads, reps);
            printf("| %s | %zu | %.1f | %.1f | %.2fx | %.1f | %.2fx |\n", shapes[s].name, n, ops / tf * 1e-9,
                   ops / t8 * 1e-9, tf / t8, ops / t8f * 1e-9, tf / t8f);
            fflush(stdout);
        }
        lb__w8a8_free(&k8), lb__w8a8_free(&kf);
        lb_qtensor_free(q8), lb_qtensor_free(qf);
        lb__packed_free(&p);
        free(w), free(x), free(y);
    }
    return 0;
}

/* ---- decode ---- */

typedef struct read_job {
    const uint64_t *p;
    uint64_t sums[64 * 8];
} read_job;

/* Reads words [b, e) with four independent sums: the read bandwidth
 * baseline (what a memory-bound matvec can hope for). */
static lb_status read_range(void *ctx, size_t b, size_t e)
{
    read_job *j = ctx;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = b;
    for (; i + 4 <= e; i += 4) s0 += j->p[i], s1 += j->p[i + 1], s2 += j->p[i + 2], s3 += j->p[i + 3];
    for (; i < e; i++) s0 += j->p[i];
    j->sums[(b * 64 / (e ? e : 1)) % 64 * 8] += s0 + s1 + s2 + s3; /* keeps the loads */
    return LB_OK;
}

static int decode(int reps)
{
    /* 1 GiB of int8 codes: 131072 rows of 8192, random codes and scales
     * built by hand (a 4 GiB fp32 original would not fit beside them) */
    size_t rows = 131072, cols = 8192, bytes = rows * cols;
    uint8_t *data = malloc(bytes);
    float *scales = malloc(rows * sizeof *scales), *x = malloc(cols * sizeof *x), *y = malloc(rows * sizeof *y);
    if (!data || !scales || !x || !y) return fprintf(stderr, "out of memory\n"), 1;
    for (size_t i = 0; i < bytes; i += 8) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        memcpy(data + i, &rng, 8);
    }
    for (size_t r = 0; r < rows; r++) scales[r] = 0.01f;
    for (size_t k = 0; k < cols; k++) x[k] = rand_f();
    lb__qmat m = {0};
    m.rows = rows, m.cols = cols, m.element = LB_FMT_INT8, m.block = cols, m.blocks = 1, m.data = data;
    m.row_bytes = cols, m.scale_format = LB_FMT_FP32, m.scales = (const uint8_t *)scales, m.scale_mul = 1.0f;
    lb_qspec_parse("int8:channel", &m.spec);
    lb__w8a8 k;
    if (lb__w8a8_init(&m, LB_FMT_INT8, &k) != LB_OK) return fprintf(stderr, "%s\n", lb_last_error()), 1;
    printf("\n## Decode: int8 matvec, 1 token, %zu x %zu int8 weights (%.2f GiB)\n\n", rows, cols,
           (double)bytes / (1 << 30));
    printf("| threads | plain read GB/s | int8 W8A8 matvec GB/s | matvec / read |\n|---:|---:|---:|---:|\n");
    read_job *rj = calloc(1, sizeof *rj);
    rj->p = (const uint64_t *)data;
    for (int threads = 1; threads <= 2; threads++) {
        double tr = 1e30, tm = 1e30;
        for (int r = 0; r <= reps; r++) {
            double t0 = bench_now();
            lb__parallel_for(bytes / 8, 4096, threads, read_range, rj);
            double t1 = bench_now();
            lb__w8a8_matmul(&k, x, 1, 0.0f, y, threads);
            double t2 = bench_now();
            if (r && t1 - t0 < tr) tr = t1 - t0;
            if (r && t2 - t1 < tm) tm = t2 - t1;
        }
        printf("| %d | %.1f | %.1f | %.0f%% |\n", threads, (double)bytes / tr * 1e-9, (double)bytes / tm * 1e-9,
               100.0 * tr / tm);
    }
    lb__w8a8_free(&k);
    free(rj), free(data), free(scales), free(x), free(y);
    return 0;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1, reps = argc > 2 ? atoi(argv[2]) : 3;
    if (threads < 1) threads = 1;
    if (reps < 1) reps = 1;
    if (prefill(threads, reps)) return 1;
    return decode(reps);
}
