/* lb__parallel_for's thread pool: every index is visited exactly once for
 * any thread count and grain, errors come from the lowest failing slice,
 * nested calls and two application threads calling at once both finish.
 * Thousands of short jobs in a row exercise the pool's hand-offs (a lost
 * wake-up would hang this test). */
#include <fenv.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "util/error.h"
#include "util/parallel.h"

typedef struct job {
    atomic_int *hits;
    size_t fail_at; /* a slice containing this index fails (SIZE_MAX: none) */
    int nested;
} job;

static lb_status visit(void *ctx, size_t b, size_t e)
{
    job *j = ctx;
    for (size_t i = b; i < e; i++) atomic_fetch_add(&j->hits[i], 1);
    if (j->nested) {
        job inner = {j->hits, SIZE_MAX, 0};
        lb_status st = lb__parallel_for(e - b, 1, 2, visit, &inner); /* indices 0..e-b again */
        if (st != LB_OK) return st;
    }
    if (j->fail_at >= b && j->fail_at < e) return lb__fail(LB_ERR_IO, "slice at %zu", b);
    return LB_OK;
}

/* slices starting at 16 and 48 (of 4 over 64) both fail */
static lb_status visit_two_failures(void *ctx, size_t b, size_t e)
{
    (void)ctx, (void)e;
    if (b == 16 || b == 48) return lb__fail(LB_ERR_IO, "slice at %zu", b);
    return LB_OK;
}

static int run_many(int rounds, unsigned seed)
{
    int ok = 1;
    atomic_int hits[300];
    for (int r = 0; r < rounds; r++) {
        seed = seed * 1664525u + 1013904223u;
        size_t n = (seed >> 8) % 300, grain = 1 + (seed >> 20) % 5;
        int threads = 1 + (int)((seed >> 4) % 6);
        for (size_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
        job j = {hits, SIZE_MAX, 0};
        if (lb__parallel_for(n, grain, threads, visit, &j) != LB_OK) ok = 0;
        for (size_t i = 0; i < n; i++)
            if (atomic_load(&hits[i]) != 1) ok = 0;
    }
    return ok;
}

/* Each index records the rounding mode (and on x86 MXCSR's controls) of
 * the thread that visits it. */
typedef struct env_seen {
    int round[8];
    unsigned csr[8];
} env_seen;

static unsigned csr_controls(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__SSE__)
    return __builtin_ia32_stmxcsr() & ~0x3Fu;
#else
    return 0;
#endif
}

static lb_status record_env(void *ctx, size_t b, size_t e)
{
    env_seen *s = ctx;
    for (size_t i = b; i < e; i++) s->round[i] = fegetround(), s->csr[i] = csr_controls();
    return LB_OK;
}

/* The pool's workers, made while the caller ran in the default
 * environment, compute each job in the caller's current one: the rounding
 * mode and (x86) flush-to-zero / denormals-are-zero; and back to the
 * default once the caller is. */
static void check_env_carried(void)
{
    env_seen s;
    CHECK(lb__parallel_for(8, 1, 4, record_env, &s) == LB_OK, "pool made in the default environment");
    static const int modes[] = {FE_UPWARD, FE_TOWARDZERO, FE_DOWNWARD, FE_TONEAREST};
    for (int m = 0; m < 4; m++) {
        fesetround(modes[m]);
#if (defined(__x86_64__) || defined(__i386__)) && defined(__SSE__)
        unsigned saved = __builtin_ia32_stmxcsr();
        if (m == 1) __builtin_ia32_ldmxcsr(saved | 0x8040u); /* flush-to-zero and denormals-are-zero */
#endif
        memset(&s, 0, sizeof s);
        int want = fegetround();
        unsigned want_csr = csr_controls();
        CHECK(lb__parallel_for(8, 1, 4, record_env, &s) == LB_OK, "job");
        int same = 1;
        for (int i = 0; i < 8; i++) same &= s.round[i] == want && s.csr[i] == want_csr;
        CHECK(same, "mode %d: every slice runs in the caller's rounding mode %d (and controls %#x): %d %d %d %d / %#x %#x",
              m, want, want_csr, s.round[0], s.round[2], s.round[4], s.round[6], s.csr[0], s.csr[6]);
#if (defined(__x86_64__) || defined(__i386__)) && defined(__SSE__)
        __builtin_ia32_ldmxcsr(saved);
#endif
    }
    fesetround(FE_TONEAREST);
}

static void *caller(void *arg)
{
    int *ok = arg;
    *ok = run_many(2000, 99);
    return NULL;
}

int main(void)
{
    check_env_carried();
    CHECK(run_many(5000, 1), "5000 jobs of random sizes and thread counts: every index once");

    atomic_int hits[64];
    for (int i = 0; i < 64; i++) atomic_store(&hits[i], 0);
    job j = {hits, 40, 0};
    lb_status st = lb__parallel_for(64, 1, 4, visit, &j);
    CHECK(st == LB_ERR_IO && strstr(lb_last_error(), "slice at 32"), "the failing slice's error: %s", lb_last_error());
    /* two failing slices: the lower one's error comes back */
    job two = {hits, 40, 0};
    st = lb__parallel_for(64, 1, 4, visit_two_failures, &two);
    CHECK(st == LB_ERR_IO && strstr(lb_last_error(), "slice at 16"), "the lowest failing slice's error: %s",
          lb_last_error());
    for (int i = 0; i < 64; i++) atomic_store(&hits[i], 0);
    j.fail_at = 70; /* none fails */
    st = lb__parallel_for(64, 1, 4, visit, &j);
    CHECK(st == LB_OK, "no failure");

    /* nested: each slice runs an inner loop over 0..len; index i is then hit
     * once by the outer loop plus once per slice longer than i */
    for (int i = 0; i < 64; i++) atomic_store(&hits[i], 0);
    job nj = {hits, SIZE_MAX, 1};
    CHECK(lb__parallel_for(64, 1, 2, visit, &nj) == LB_OK, "nested");
    int nested_ok = 1;
    for (int i = 0; i < 64; i++) nested_ok &= atomic_load(&hits[i]) == 1 + (i < 32 ? 2 : 0);
    CHECK(nested_ok, "nested calls visit their ranges");

    /* two application threads at once: one gets the pool, the other its own threads */
    pthread_t t;
    int ok_a = 0, ok_b = 0;
    pthread_create(&t, NULL, caller, &ok_a);
    caller(&ok_b);
    pthread_join(t, NULL);
    CHECK(ok_a && ok_b, "concurrent callers");

    /* a child of fork() inherits the pool's bookkeeping but not its
     * threads: its loops must still finish (a hang here stops the test).
     * Not under qemu-user, whose emulation aborts on threads started in
     * such a child (make test-aarch64 sets LOWBIT_UNDER_QEMU). */
    if (getenv("LOWBIT_UNDER_QEMU")) {
        printf("fork check skipped: qemu-user\n");
        return check_summary();
    }
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        _exit(run_many(200, 5) ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "parallel loops in a forked child finish (status %d)", status);
    return check_summary();
}
