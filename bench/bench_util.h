/* What the benchmark programs share: a monotonic clock and memcpy split
 * over threads (the baseline every figure is a ratio to). */
#ifndef LB_BENCH_UTIL_H
#define LB_BENCH_UTIL_H

#include <pthread.h>
#include <string.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct bench_copy {
    void *dst;
    const void *src;
    size_t n;
} bench_copy;

static inline void *bench_copy_part(void *arg)
{
    bench_copy *j = arg;
    memcpy(j->dst, j->src, j->n);
    return NULL;
}

/* memcpy split the way lowbit splits work: one contiguous slice per thread
 * (at most 16), the first on the calling thread. */
static void bench_parallel_memcpy(void *dst, const void *src, size_t n, int threads)
{
    pthread_t tid[16];
    bench_copy jobs[16];
    if (threads > 16) threads = 16;
    for (int i = 0; i < threads; i++) {
        size_t b = n * (size_t)i / (size_t)threads, e = n * (size_t)(i + 1) / (size_t)threads;
        jobs[i] = (bench_copy){(char *)dst + b, (const char *)src + b, e - b};
    }
    for (int i = 1; i < threads; i++) pthread_create(&tid[i], NULL, bench_copy_part, &jobs[i]);
    bench_copy_part(&jobs[0]);
    for (int i = 1; i < threads; i++) pthread_join(tid[i], NULL);
}

/* Best of reps: the least disturbed run on a shared machine. */
static inline double bench_memcpy_seconds(void *dst, const void *src, size_t n, int threads, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        bench_parallel_memcpy(dst, src, n, threads);
        double dt = bench_now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

#endif
