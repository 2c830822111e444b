#include "util/parallel.h"

#include <fenv.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/error.h"

/* A waiting thread polls (each poll a CPU pause) for this long before it
 * sleeps: decode runs a few hundred short parallel loops per token with
 * sequential work between them (attention, norms, staging), and waking a
 * sleeping thread costs tens of microseconds, more than many of those
 * loops take. Bounded by time, not by a count: a pause takes 9 ns on one
 * x86 core and 40 on another, and 4096 polls (38 us here) let the worker
 * fall asleep between loops (SmolLM2's Q4_0 decode 150 tokens/s; with
 * 0.2 ms of polling 188). The clock is read every SPIN_CHECK polls. */
#define SPIN_SECONDS 2e-4
#define SPIN_CHECK 64

typedef struct slice {
    lb__range_fn fn;
    void *ctx;
    size_t begin, end;
    lb_status status;
    char error[1024]; /* the worker's lb_last_error(), carried home */
} slice;

static void run_slice(slice *s)
{
    s->status = s->fn(s->ctx, s->begin, s->end);
    if (s->status != LB_OK) {
        strncpy(s->error, lb_last_error(), sizeof s->error - 1);
        s->error[sizeof s->error - 1] = '\0';
    }
}

static void *run_slice_thread(void *arg)
{
    run_slice(arg);
    return NULL;
}

static void cpu_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* Poll i (from 0) of a wait that began at *start (set at poll 0): 1 to
 * pause and poll again, 0 once the wait has polled SPIN_SECONDS. */
static int keep_spinning(int i, double *start)
{
    if (i == 0) *start = lb__now();
    else if (i % SPIN_CHECK == 0 && lb__now() - *start > SPIN_SECONDS) return 0;
    cpu_pause();
    return 1;
}

/* ---- the caller's floating-point controls, carried to the workers ----
 *
 * A thread inherits its creator's floating-point environment when it is
 * made, and the pool's workers live for the process: a caller that later
 * changed its rounding mode, or set flush-to-zero (a library built with
 * -ffast-math does at load), would have its slice computed one way and the
 * workers' another, so a result would depend on the thread count. Each job
 * carries the caller's controls; a worker takes them before its slice. On
 * x86 those are MXCSR's control bits (rounding, flush-to-zero,
 * denormals-are-zero, exception masks), which the SSE/AVX arithmetic
 * obeys, and the x87 control word (which fegetround reads), each read and
 * compared in a few cycles. Elsewhere the whole environment (on AArch64
 * FPCR and FPSR). */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__SSE__) /* MXCSR exists */
typedef struct fp_controls {
    unsigned csr;    /* MXCSR without its exception flags */
    unsigned short cw; /* the x87 control word, which fegetround reads */
} fp_controls;
#define MXCSR_FLAGS 0x3Fu /* the exception flags: state, not controls */
static fp_controls fp_controls_get(void)
{
    fp_controls c = {__builtin_ia32_stmxcsr() & ~MXCSR_FLAGS, 0};
    __asm__ volatile("fnstcw %0" : "=m"(c.cw));
    return c;
}
static void fp_controls_take(const fp_controls *c)
{
    unsigned now = __builtin_ia32_stmxcsr();
    unsigned short cw;
    if ((now & ~MXCSR_FLAGS) != c->csr) __builtin_ia32_ldmxcsr((now & MXCSR_FLAGS) | c->csr);
    __asm__ volatile("fnstcw %0" : "=m"(cw));
    if (cw != c->cw) __asm__ volatile("fldcw %0" : : "m"(c->cw));
}
#else
typedef fenv_t fp_controls;
static fp_controls fp_controls_get(void)
{
    fenv_t e;
    fegetenv(&e);
    return e;
}
static void fp_controls_take(const fp_controls *c) { fesetenv(c); }
#endif

int lb__thread_count(int threads)
{
    if (threads > 0) return threads > LB_MAX_THREADS ? LB_MAX_THREADS : threads;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1) return 1;
    return cpus > LB_MAX_THREADS ? LB_MAX_THREADS : (int)cpus;
}

int lb__threads_for(int threads, size_t work)
{
    int t = lb__thread_count(threads);
    size_t useful = work / LB__PARALLEL_MIN_WORK;
    if (useful < 1) useful = 1;
    return (size_t)t > useful ? (int)useful : t;
}

/* ---- the pool: workers that live for the process and wait for jobs ----
 *
 * One job at a time: the caller that holds `busy` publishes its slices
 * and bumps `generation`; worker i (1-based) runs slice i when the job has
 * one, every worker then counts itself done, and the last wakes the
 * caller, who runs slice 0 itself meanwhile.
 * A second caller meanwhile (another application thread), or a call made
 * from inside a job, does not wait for the pool: it starts threads of its
 * own or runs its slices in order. */
/* The two words that threads poll each have a cache line of their own:
 * polled on a line the caller also writes while publishing (the table,
 * the lock), every write made the worker's copy bounce, and publishing a
 * job took 0.38 us of a 6 us section; now only the generation's own
 * increment moves a line. A sleep is announced (sleepers, caller_sleeps)
 * and the word it waits for re-read under the lock, and the other side
 * changes that word and then reads the announcement, all sequentially
 * consistent: whichever comes first in that order, the sleeper sees the
 * change or the other side sees the sleeper and takes the lock to wake
 * it, so neither side takes the lock when nobody sleeps. */
static struct {
    _Alignas(64) atomic_ulong generation; /* jobs published so far: the workers poll it */
    _Alignas(64) atomic_int pending;      /* workers yet to answer the current job: the caller polls it */
    _Alignas(64) pthread_mutex_t busy;    /* held by the caller whose job runs */
    pthread_mutex_t lock;                 /* guards the sleeps below */
    pthread_cond_t wake, done;
    atomic_int sleepers;                  /* workers blocked on wake */
    atomic_int caller_sleeps;             /* the caller blocked on done */
    int workers;                          /* started so far */
    slice *slices;
    int nslices;
    fp_controls controls;                 /* the caller's, for the current job */
    unsigned long born_at[LB_MAX_THREADS];
} pool = {.busy = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static _Thread_local int inside_job;

static void *worker_main(void *arg)
{
    int index = (int)(size_t)arg;
    /* the job count when this worker was made (under busy, before the job
     * that wanted it was published): a worker that starts late must still
     * see that job as new */
    unsigned long seen = pool.born_at[index];
    inside_job = 1;
    for (;;) {
        unsigned long g;
        double start = 0;
        for (int i = 0; (g = atomic_load_explicit(&pool.generation, memory_order_acquire)) == seen; i++) {
            if (keep_spinning(i, &start)) continue;
            pthread_mutex_lock(&pool.lock);
            atomic_fetch_add(&pool.sleepers, 1);
            while (atomic_load(&pool.generation) == seen) pthread_cond_wait(&pool.wake, &pool.lock);
            atomic_fetch_sub(&pool.sleepers, 1);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = g;
        /* every worker answers every job, even one too small to give it a
         * slice: the next job is published only after all have, so none
         * can read one job's table believing it another's */
        if (index < pool.nslices) {
            fp_controls_take(&pool.controls);
            run_slice(&pool.slices[index]);
        }
        if (atomic_fetch_sub(&pool.pending, 1) == 1 && atomic_load(&pool.caller_sleeps)) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
    }
    return NULL;
}

/* A child of fork() has none of the workers but inherits their count:
 * its first parallel loop would wait for them forever. It starts afresh. */
static void reset_in_child(void)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    pool.busy = m, pool.lock = m;
    pool.wake = c, pool.done = c;
    pool.workers = 0;
    atomic_store(&pool.sleepers, 0);
    atomic_store(&pool.caller_sleeps, 0);
    atomic_store(&pool.pending, 0);
}

static void watch_forks(void) { pthread_atfork(NULL, NULL, reset_in_child); }

/* Starts workers up to `want` (slices 1 .. want). Returns how many exist. */
static int grow_pool(int want)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, watch_forks);
    while (pool.workers < want) {
        pthread_t t;
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) != 0) break;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pool.born_at[pool.workers + 1] = atomic_load(&pool.generation);
        int ok = pthread_create(&t, &attr, worker_main, (void *)(size_t)(pool.workers + 1)) == 0;
        pthread_attr_destroy(&attr);
        if (!ok) break;
        pool.workers++;
    }
    return pool.workers;
}

static void run_on_pool(slice *s, int t)
{
    pool.slices = s;
    pool.nslices = t;
    pool.controls = fp_controls_get(); /* published by the generation's increment, as the table is */
    atomic_store(&pool.pending, pool.workers);
    atomic_fetch_add(&pool.generation, 1);
    if (atomic_load(&pool.sleepers)) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    inside_job = 1;
    run_slice(&s[0]);
    inside_job = 0;
    double start = 0;
    for (int i = 0; atomic_load_explicit(&pool.pending, memory_order_acquire) != 0; i++) {
        if (keep_spinning(i, &start)) continue;
        pthread_mutex_lock(&pool.lock);
        atomic_store(&pool.caller_sleeps, 1);
        while (atomic_load(&pool.pending) != 0) pthread_cond_wait(&pool.done, &pool.lock);
        atomic_store(&pool.caller_sleeps, 0);
        pthread_mutex_unlock(&pool.lock);
    }
}

/* Threads of this call's own, for a caller that finds the pool taken. */
static void run_on_own_threads(slice *s, int t)
{
    pthread_t tid[LB_MAX_THREADS];
    int started[LB_MAX_THREADS] = {0};
    /* a worker that cannot start has its slice run here, so the work is done either way */
    for (int i = 1; i < t; i++) started[i] = pthread_create(&tid[i], NULL, run_slice_thread, &s[i]) == 0;
    run_slice(&s[0]);
    for (int i = 1; i < t; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
        else run_slice(&s[i]);
    }
}

lb_status lb__parallel_for(size_t n, size_t grain, int threads, lb__range_fn fn, void *ctx)
{
    int t = lb__thread_count(threads);
    if (grain == 0) grain = 1;
    size_t units = (n + grain - 1) / grain;
    if ((size_t)t > units) t = units ? (int)units : 1;
    if (t <= 1) return fn(ctx, 0, n);

    slice s[LB_MAX_THREADS];
    for (int i = 0; i < t; i++) {
        size_t b = units * (size_t)i / (size_t)t * grain;
        size_t e = units * (size_t)(i + 1) / (size_t)t * grain;
        s[i] = (slice){.fn = fn, .ctx = ctx, .begin = b, .end = e < n ? e : n};
    }
    if (inside_job) {
        for (int i = 0; i < t; i++) run_slice(&s[i]); /* nested: the pool is ours already */
    } else if (pthread_mutex_trylock(&pool.busy) == 0) {
        if (grow_pool(t - 1) >= t - 1) run_on_pool(s, t);
        else run_on_own_threads(s, t);
        pthread_mutex_unlock(&pool.busy);
    } else {
        run_on_own_threads(s, t);
    }
    /* the lowest failing slice: the error a single thread would meet first */
    for (int i = 0; i < t; i++)
        if (s[i].status != LB_OK) return lb__fail(s[i].status, "%s", s[i].error);
    return LB_OK;
}
