#include "util/parallel.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "util/error.h"

/* More threads than this buys nothing for bandwidth-bound loops and keeps
 * the slice table on the stack. */
#define LB_MAX_THREADS 64

typedef struct slice {
    lb__range_fn fn;
    void *ctx;
    size_t begin, end;
    lb_status status;
    char error[1024]; /* the worker's lb_last_error(), carried home */
} slice;

static void *run_slice(void *arg)
{
    slice *s = arg;
    s->status = s->fn(s->ctx, s->begin, s->end);
    if (s->status != LB_OK) {
        strncpy(s->error, lb_last_error(), sizeof s->error - 1);
        s->error[sizeof s->error - 1] = '\0';
    }
    return NULL;
}

int lb__thread_count(int threads)
{
    if (threads > 0) return threads > LB_MAX_THREADS ? LB_MAX_THREADS : threads;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1) return 1;
    return cpus > LB_MAX_THREADS ? LB_MAX_THREADS : (int)cpus;
}

lb_status lb__parallel_for(size_t n, size_t grain, int threads, lb__range_fn fn, void *ctx)
{
    int t = lb__thread_count(threads);
    if (grain == 0) grain = 1;
    size_t units = (n + grain - 1) / grain;
    if ((size_t)t > units) t = units ? (int)units : 1;
    if (t <= 1) return fn(ctx, 0, n);

    slice s[LB_MAX_THREADS];
    pthread_t tid[LB_MAX_THREADS];
    int started[LB_MAX_THREADS] = {0};
    for (int i = 0; i < t; i++) {
        size_t b = units * (size_t)i / (size_t)t * grain;
        size_t e = units * (size_t)(i + 1) / (size_t)t * grain;
        s[i] = (slice){.fn = fn, .ctx = ctx, .begin = b, .end = e < n ? e : n};
    }
    /* Slice 0 runs on the calling thread; a worker that cannot start has
     * its slice run here too, so the work is done either way. */
    for (int i = 1; i < t; i++) started[i] = pthread_create(&tid[i], NULL, run_slice, &s[i]) == 0;
    run_slice(&s[0]);
    for (int i = 1; i < t; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
        else run_slice(&s[i]);
    }
    for (int i = 0; i < t; i++)
        if (s[i].status != LB_OK) return lb__fail(s[i].status, "%s", s[i].error);
    return LB_OK;
}
