/* GPTQ's dense linear algebra (gptq_linalg.h): threaded products, the
 * blocked Cholesky and the blocked inverse of a triangular factor, with
 * their scalar references. */
#include "algo/gptq_linalg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/cpu.h"
#include "util/error.h"
#include "util/parallel.h"

#define NB LB__GPTQ_CHOL_NB

/* ===== the products ===== */

void lb__gptq_gemm_f32_ref(size_t m, size_t n, size_t k, const float *a, size_t lda, const float *b, size_t ldb,
                           float *c, size_t ldc)
{
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (size_t kk = 0; kk < k; kk++) acc += a[i * lda + kk] * b[kk * ldb + j];
            c[i * ldc + j] -= acc;
        }
}

void lb__gptq_gemm_f64_ref(size_t m, size_t n, size_t k, const double *a, size_t lda, const double *b, size_t ldb,
                           double *c, size_t ldc)
{
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double acc = 0.0;
            for (size_t kk = 0; kk < k; kk++) acc += a[i * lda + kk] * b[kk * ldb + j];
            c[i * ldc + j] -= acc;
        }
}

static lb__gptq_gemm_f32_fn pick_f32(lb_isa isa)
{
    if (lb__isa_x86(lb__isa_clamp(isa)) >= LB_ISA_AVX2 && lb__gptq_kernels_avx2.gemm_f32)
        return lb__gptq_kernels_avx2.gemm_f32;
    return lb__gptq_gemm_f32_ref;
}

static lb__gptq_gemm_f64_fn pick_f64(lb_isa isa)
{
    if (lb__isa_x86(lb__isa_clamp(isa)) >= LB_ISA_AVX2 && lb__gptq_kernels_avx2.gemm_f64)
        return lb__gptq_kernels_avx2.gemm_f64;
    return lb__gptq_gemm_f64_ref;
}

/* One product split over threads: slices of rows (by_rows) or of columns
 * of C; each element is computed whole by one slice, in the one order. */
typedef struct gemm_job {
    size_t m, n, k, lda, ldb, ldc;
    const void *a, *b;
    void *c;
    int by_rows, f64;
    lb__gptq_gemm_f32_fn f32fn;
    lb__gptq_gemm_f64_fn f64fn;
} gemm_job;

static lb_status gemm_slice(void *ctx, size_t s0, size_t s1)
{
    const gemm_job *j = ctx;
    size_t i0 = j->by_rows ? s0 : 0, m = j->by_rows ? s1 - s0 : j->m;
    size_t c0 = j->by_rows ? 0 : s0, n = j->by_rows ? j->n : s1 - s0;
    if (j->f64) {
        const double *a = j->a, *b = j->b;
        double *c = j->c;
        j->f64fn(m, n, j->k, a + i0 * j->lda, j->lda, b + c0, j->ldb, c + i0 * j->ldc + c0, j->ldc);
    } else {
        const float *a = j->a, *b = j->b;
        float *c = j->c;
        j->f32fn(m, n, j->k, a + i0 * j->lda, j->lda, b + c0, j->ldb, c + i0 * j->ldc + c0, j->ldc);
    }
    return LB_OK;
}

static lb_status gemm_run(gemm_job *j, int threads)
{
    if (j->m == 0 || j->n == 0 || j->k == 0) return LB_OK;
    j->by_rows = j->m >= j->n;
    threads = lb__threads_for(threads, j->m * j->n * j->k);
    /* slice boundaries on whole vector tiles (rows: the kernels' 6) */
    return lb__parallel_for(j->by_rows ? j->m : j->n, j->by_rows ? 6 : 16, threads, gemm_slice, j);
}

lb_status lb__gptq_gemm_f32(size_t m, size_t n, size_t k, const float *a, size_t lda, const float *b, size_t ldb,
                            float *c, size_t ldc, int threads, lb_isa isa)
{
    gemm_job j = {.m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc, .a = a, .b = b, .c = c,
                  .f32fn = pick_f32(isa)};
    return gemm_run(&j, threads);
}

lb_status lb__gptq_gemm_f64(size_t m, size_t n, size_t k, const double *a, size_t lda, const double *b, size_t ldb,
                            double *c, size_t ldc, int threads, lb_isa isa)
{
    gemm_job j = {.m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc, .a = a, .b = b, .c = c, .f64 = 1,
                  .f64fn = pick_f64(isa)};
    return gemm_run(&j, threads);
}

/* ===== Cholesky ===== */

/* Unblocked lower Cholesky of the n x n matrix at a (row stride lda), in
 * place. 0 when a pivot is not > 0 or not finite (NaN and infinity in A
 * reach some pivot through the sums, so checking pivots suffices). */
static int factor_unblocked(double *a, size_t n, size_t lda)
{
    for (size_t j = 0; j < n; j++) {
        double *rj = a + j * lda;
        double d = rj[j];
        for (size_t k = 0; k < j; k++) d -= rj[k] * rj[k];
        if (!(d > 0.0) || !isfinite(d)) return 0;
        double l = sqrt(d);
        rj[j] = l;
        for (size_t i = j + 1; i < n; i++) {
            double *ri = a + i * lda;
            double s = ri[j];
            for (size_t k = 0; k < j; k++) s -= ri[k] * rj[k];
            ri[j] = s / l;
        }
    }
    return 1;
}

void lb__gptq_chol_ref(double *a, size_t n, int *ok) { *ok = factor_unblocked(a, n, n); }

/* The panel's rows below its diagonal block: L21 = A21 L11^-T, row by row. */
static void panel_solve(double *a, size_t n, size_t p, size_t b)
{
    const double *l11 = a + p * n + p;
    for (size_t i = p + b; i < n; i++) {
        double *ri = a + i * n + p;
        for (size_t j = 0; j < b; j++) {
            double s = ri[j];
            for (size_t k = 0; k < j; k++) s -= ri[k] * l11[j * n + k];
            ri[j] = s / l11[j * n + j];
        }
    }
}

/* The trailing update A22 -= L21 L21^T, lower part, by row blocks of NB:
 * row block t (rows r0..r1 of the trailing matrix) needs columns up to r1,
 * so later blocks cost more; work unit u takes blocks u and last - u,
 * which makes the units about equal for the thread split. */
typedef struct chol_job {
    double *a;
    const double *pt; /* b x m: the panel transposed, pt[k * m + t] = L21[t][k] */
    size_t n, p, b, m, blocks;
    lb__gptq_gemm_f64_fn fn;
} chol_job;

static void trailing_block(const chol_job *j, size_t t)
{
    size_t c0 = j->p + j->b, r0 = c0 + t * NB, r1 = r0 + NB < j->n ? r0 + NB : j->n;
    j->fn(r1 - r0, r1 - c0, j->b, j->a + r0 * j->n + j->p, j->n, j->pt, j->m, j->a + r0 * j->n + c0, j->n);
}

static lb_status trailing_units(void *ctx, size_t u0, size_t u1)
{
    const chol_job *j = ctx;
    for (size_t u = u0; u < u1; u++) {
        trailing_block(j, u);
        if (j->blocks - 1 - u != u) trailing_block(j, j->blocks - 1 - u);
    }
    return LB_OK;
}

lb_status lb__gptq_chol(double *a, size_t n, int threads, lb_isa isa, int *ok)
{
    *ok = 1;
    if (n == 0) return LB_OK;
    double *pt = malloc((n < NB ? n : NB) * n * sizeof *pt);
    if (!pt) return lb__fail(LB_ERR_NOMEM, "GPTQ: cannot allocate a Cholesky panel of %zu x %d", n, NB);
    chol_job j = {.a = a, .pt = pt, .n = n, .fn = pick_f64(isa)};
    lb_status st = LB_OK;
    for (size_t p = 0; p < n && st == LB_OK; p += NB) {
        size_t b = n - p < NB ? n - p : NB, m = n - p - b;
        if (!factor_unblocked(a + p * n + p, b, n)) {
            *ok = 0;
            break;
        }
        if (m == 0) break;
        panel_solve(a, n, p, b);
        for (size_t k = 0; k < b; k++)
            for (size_t t = 0; t < m; t++) pt[k * m + t] = a[(p + b + t) * n + p + k];
        j.p = p, j.b = b, j.m = m, j.blocks = (m + NB - 1) / NB;
        int th = lb__threads_for(threads, m * m * b / 2);
        st = lb__parallel_for((j.blocks + 1) / 2, 1, th, trailing_units, &j);
    }
    free(pt);
    return st;
}

/* ===== inverse of the lower factor ===== */

void lb__gptq_trinv_ref(const double *l, size_t n, double *x)
{
    memset(x, 0, n * n * sizeof *x);
    for (size_t c = 0; c < n; c++) {
        x[c * n + c] = 1.0 / l[c * n + c];
        for (size_t r = c + 1; r < n; r++) {
            double s = 0.0;
            for (size_t k = c; k < r; k++) s += l[r * n + k] * x[k * n + c];
            x[r * n + c] = -s / l[r * n + r];
        }
    }
}

/* Forward substitution of the diagonal block rows r0..r1 on the rows of x
 * (which hold R = I - the earlier blocks' terms), columns up to each row's
 * diagonal (the rest of the row is 0 and stays 0). */
static void block_solve(const double *l, size_t n, double *x, size_t r0, size_t r1)
{
    for (size_t r = r0; r < r1; r++) {
        double *xr = x + r * n;
        for (size_t s = r0; s < r; s++) {
            double f = l[r * n + s];
            const double *xs = x + s * n;
            for (size_t c = 0; c <= s; c++) xr[c] -= f * xs[c];
        }
        double d = l[r * n + r];
        for (size_t c = 0; c <= r; c++) xr[c] /= d;
    }
}

lb_status lb__gptq_trinv(const double *l, size_t n, double *x, int threads, lb_isa isa)
{
    memset(x, 0, n * n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i * n + i] = 1.0;
    for (size_t r0 = 0; r0 < n; r0 += NB) {
        size_t r1 = r0 + NB < n ? r0 + NB : n;
        block_solve(l, n, x, r0, r1);
        /* later rows: R[r1:, :r1] -= L[r1:, r0:r1] X[r0:r1, :r1] */
        lb_status st = lb__gptq_gemm_f64(n - r1, r1, r1 - r0, l + r1 * n + r0, n, x + r0 * n, n, x + r1 * n, n,
                                         threads, isa);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}
