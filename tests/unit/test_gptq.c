/* GPTQ's solver and its linear algebra (src/algo/gptq.h, gptq_linalg.h):
 * the fast paths against their scalar twins, determinism across thread
 * counts, identity H == plain rounding bit for bit, a non-positive-definite
 * H raising the dampening, and the argument checks. The comparison with
 * the numpy oracle is tests/algo/test_gptq_core.py. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/gptq.h"
#include "algo/gptq_linalg.h"
#include "check.h"
#include "lowbit.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;
static double urand(void) /* in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

/* an SPD n x n: X^T X / s over s = n + 3 random samples, plus 0.01 I */
static double *spd(size_t n)
{
    size_t s = n + 3;
    double *x = malloc(s * n * sizeof *x), *a = calloc(n * n, sizeof *a);
    for (size_t i = 0; i < s * n; i++) x[i] = urand();
    for (size_t k = 0; k < s; k++)
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++) a[i * n + j] += x[k * n + i] * x[k * n + j] / (double)s;
    for (size_t i = 0; i < n; i++) a[i * n + i] += 0.01;
    free(x);
    return a;
}

static double max_rel_lower(const double *a, const double *b, size_t n)
{
    double m = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= i; j++) scale = fmax(scale, fabs(b[i * n + j]));
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= i; j++) m = fmax(m, fabs(a[i * n + j] - b[i * n + j]));
    return m / scale;
}

static void test_cholesky(void)
{
    static const size_t ns[] = {1, 2, 7, 63, 64, 65, 130, 257};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        size_t n = ns[t];
        double *a = spd(n), *r = malloc(n * n * sizeof *r), *f1 = malloc(n * n * sizeof *f1),
               *f2 = malloc(n * n * sizeof *f2), *x1 = malloc(n * n * sizeof *x1), *x2 = malloc(n * n * sizeof *x2),
               *xr = malloc(n * n * sizeof *xr);
        memcpy(r, a, n * n * sizeof *a), memcpy(f1, a, n * n * sizeof *a), memcpy(f2, a, n * n * sizeof *a);
        int ok_r, ok1, ok2;
        lb__gptq_chol_ref(r, n, &ok_r);
        CHECK(lb__gptq_chol(f1, n, 1, lb_isa_active(), &ok1) == LB_OK, "n=%zu", n);
        CHECK(lb__gptq_chol(f2, n, 2, lb_isa_active(), &ok2) == LB_OK, "n=%zu", n);
        CHECK(ok_r && ok1 && ok2, "n=%zu: SPD matrix reported not positive definite", n);
        double e = max_rel_lower(f1, r, n);
        CHECK(e < 1e-12, "n=%zu: blocked Cholesky %g from the scalar one", n, e);
        int same = 1;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j <= i; j++) same &= f1[i * n + j] == f2[i * n + j];
        CHECK(same, "n=%zu: Cholesky differs between 1 and 2 threads", n);
        lb__gptq_trinv_ref(r, n, xr);
        CHECK(lb__gptq_trinv(r, n, x1, 1, lb_isa_active()) == LB_OK, "n=%zu", n);
        CHECK(lb__gptq_trinv(r, n, x2, 2, lb_isa_active()) == LB_OK, "n=%zu", n);
        e = max_rel_lower(x1, xr, n);
        CHECK(e < 1e-10, "n=%zu: blocked inverse %g from the scalar one", n, e);
        CHECK(memcmp(x1, x2, n * n * sizeof *x1) == 0, "n=%zu: inverse differs between 1 and 2 threads", n);
        /* L X = I */
        double worst = 0.0;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++) {
                double s = 0.0;
                for (size_t k = 0; k <= i; k++) s += r[i * n + k] * x1[k * n + j];
                worst = fmax(worst, fabs(s - (i == j)));
            }
        CHECK(worst < 1e-9, "n=%zu: L L^-1 is %g from I", n, worst);
        free(a), free(r), free(f1), free(f2), free(x1), free(x2), free(xr);
    }
    /* indefinite and NaN: reported, not factored */
    double bad[4] = {1, 2, 2, 1}, nan2[4] = {1, 0, NAN, 1};
    int ok = 1;
    CHECK(lb__gptq_chol(bad, 2, 1, lb_isa_active(), &ok) == LB_OK && !ok, "indefinite accepted");
    ok = 1;
    lb__gptq_chol_ref(nan2, 2, &ok);
    CHECK(!ok, "NaN accepted");
}

static void test_gemm(void)
{
    static const size_t ms[] = {1, 5, 6, 7, 13, 48}, ns[] = {1, 7, 8, 15, 16, 17, 33, 100}, ks[] = {1, 3, 128};
    int worst_ok32 = 1, worst_ok64 = 1, det = 1;
    for (size_t a_ = 0; a_ < 6; a_++)
        for (size_t b_ = 0; b_ < 8; b_++)
            for (size_t c_ = 0; c_ < 3; c_++) {
                size_t m = ms[a_], n = ns[b_], k = ks[c_], lda = k + 2, ldb = n + 3, ldc = n + 1;
                float *a = malloc(m * lda * 4), *b = malloc(k * ldb * 4), *c0 = malloc(m * ldc * 4),
                      *c1 = malloc(m * ldc * 4), *c2 = malloc(m * ldc * 4);
                double *ad = malloc(m * lda * 8), *bd = malloc(k * ldb * 8), *d0 = malloc(m * ldc * 8),
                       *d1 = malloc(m * ldc * 8);
                for (size_t i = 0; i < m * lda; i++) ad[i] = urand(), a[i] = (float)ad[i];
                for (size_t i = 0; i < k * ldb; i++) bd[i] = urand(), b[i] = (float)bd[i];
                for (size_t i = 0; i < m * ldc; i++) d0[i] = d1[i] = urand(), c0[i] = c1[i] = c2[i] = (float)d0[i];
                lb__gptq_gemm_f32_ref(m, n, k, a, lda, b, ldb, c0, ldc);
                lb__gptq_gemm_f32(m, n, k, a, lda, b, ldb, c1, ldc, 1, lb_isa_active());
                lb__gptq_gemm_f32(m, n, k, a, lda, b, ldb, c2, ldc, 2, lb_isa_active());
                lb__gptq_gemm_f64_ref(m, n, k, ad, lda, bd, ldb, d0, ldc);
                lb__gptq_gemm_f64(m, n, k, ad, lda, bd, ldb, d1, ldc, 2, lb_isa_active());
                /* |a b| <= 1: the sums differ by at most k 2^-p k (two roundings each) */
                for (size_t i = 0; i < m * ldc; i++) {
                    worst_ok32 &= fabsf(c0[i] - c1[i]) <= 2.0f * (float)(k + 1) * 0x1p-23f;
                    worst_ok64 &= fabs(d0[i] - d1[i]) <= 2.0 * (double)(k + 1) * 0x1p-52;
                    det &= c1[i] == c2[i];
                }
                free(a), free(b), free(c0), free(c1), free(c2), free(ad), free(bd), free(d0), free(d1);
            }
    CHECK(worst_ok32, "fp32 update kernel beyond its bound from the scalar twin");
    CHECK(worst_ok64, "fp64 kernel beyond its bound from the scalar twin");
    CHECK(det, "fp32 update differs between 1 and 2 threads");
}

static void random_w(float *w, size_t n)
{
    for (size_t i = 0; i < n; i++) w[i] = (float)(urand() * (1.0 + 3.0 * (i % 7 == 0)));
}

/* identity H (any positive diagonal works): no error is passed on, so
 * GPTQ is plain rounding, bit for bit */
static void test_identity_is_rtn(void)
{
    size_t rows = 16, cols = 100;
    static const size_t groups[] = {0, 32, 7}, blocks[] = {1, 7, 128};
    double *h = calloc(cols * cols, sizeof *h);
    for (size_t i = 0; i < cols; i++) h[i * cols + i] = 1.0 + (double)(i % 5);
    float *w = malloc(rows * cols * 4), *q = malloc(rows * cols * 4), *rtn = malloc(rows * cols * 4);
    random_w(w, rows * cols);
    for (int actorder = 0; actorder < 2; actorder++)
        for (size_t gi = 0; gi < 3; gi++)
            for (size_t bi = 0; bi < 3; bi++) {
                memcpy(q, w, rows * cols * 4), memcpy(rtn, w, rows * cols * 4);
                CHECK(lb__gptq_int_sym_test(rtn, rows, cols, NULL, 4, groups[gi], 0, 0, 0, 0, 1, NULL) == LB_OK, "rtn");
                double rep[5];
                lb_status st = lb__gptq_int_sym_test(q, rows, cols, h, 4, groups[gi], blocks[bi], 0.01, actorder,
                                                     actorder, 2, rep);
                CHECK(st == LB_OK, "%s", lb_last_error());
                size_t diff = 0;
                for (size_t i = 0; i < rows * cols; i++) diff += q[i] != rtn[i];
                CHECK(diff == 0, "identity H, group %zu, block %zu, actorder %d: %zu values differ from RTN",
                      groups[gi], blocks[bi], actorder, diff);
                CHECK(rep[2] == 0 && rep[3] == 0, "retries %g dead %g", rep[2], rep[3]);
            }
    free(h), free(w), free(q), free(rtn);
}

static int all_finite(const float *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(w[i])) return 0;
    return 1;
}

static void test_damping(void)
{
    size_t rows = 8, cols = 40;
    float *w = malloc(rows * cols * 4);
    double *h = spd(cols), rep[5];
    /* make it indefinite: a large negative eigen-direction */
    for (size_t i = 0; i < cols; i++)
        for (size_t j = 0; j < cols; j++) h[i * cols + j] -= 3.0 * (double)((i + j) % 3 == 0);
    random_w(w, rows * cols);
    lb_status st = lb__gptq_int_sym_test(w, rows, cols, h, 4, 0, 16, 0.01, 0, 0, 2, rep);
    CHECK(st == LB_OK, "%s", lb_last_error());
    CHECK(rep[2] > 0 && rep[0] > 0.01, "indefinite H: %g retries, damp %g", rep[2], rep[0]);
    CHECK(all_finite(w, rows * cols), "indefinite H gave non-finite weights");
    /* damp 0 on a singular H (rank 1): raised from 0 to 0.01 and on */
    for (size_t i = 0; i < cols; i++)
        for (size_t j = 0; j < cols; j++) h[i * cols + j] = 1.0;
    random_w(w, rows * cols);
    st = lb__gptq_int_sym_test(w, rows, cols, h, 4, 0, 16, 0.0, 0, 0, 1, rep);
    CHECK(st == LB_OK && rep[2] >= 1 && all_finite(w, rows * cols), "singular H, damp 0: %g retries", rep[2]);
    /* all zero: every column dead, W all 0 */
    memset(h, 0, cols * cols * sizeof *h);
    random_w(w, rows * cols);
    st = lb__gptq_int_sym_test(w, rows, cols, h, 4, 0, 16, 0.01, 1, 0, 1, rep);
    int zero = 1;
    for (size_t i = 0; i < rows * cols; i++) zero &= w[i] == 0.0f;
    CHECK(st == LB_OK && rep[3] == (double)cols && zero, "all-dead H: dead %g", rep[3]);
    free(w), free(h);
}

static void test_arguments(void)
{
    size_t rows = 4, cols = 64;
    float *w = malloc(rows * cols * 4);
    double *h = spd(cols);
    random_w(w, rows * cols);
    float before = w[0];
    CHECK(lb__gptq_int_sym_test(w, rows, cols, h, 4, 32, 0, 0.01, 1, 0, 1, NULL) == LB_ERR_ARG,
          "act-order with dynamic groups accepted");
    CHECK(strstr(lb_last_error(), "static groups") != NULL, "message: %s", lb_last_error());
    CHECK(w[0] == before, "W changed by a refused call");
    CHECK(lb__gptq_int_sym_test(w, rows, cols, h, 4, 32, 0, -1.0, 0, 0, 1, NULL) == LB_ERR_ARG, "negative damp");
    h[5] = NAN;
    CHECK(lb__gptq_int_sym_test(w, rows, cols, h, 4, 32, 0, 0.01, 0, 0, 1, NULL) == LB_ERR_NAN, "NaN in H");
    free(w), free(h);
}

int main(void)
{
    test_cholesky();
    test_gemm();
    test_identity_is_rtn();
    test_damping();
    test_arguments();
    return check_summary();
}
