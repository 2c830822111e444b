/* W8A8 kernels (kernel/w8a8.h): the scalar kernel against this file's own
 * reading of the documented definitions, every kernel set against the
 * scalar one, thread counts, decode against prefill, and the weights
 * lb__w8a8_init refuses.
 *
 * No tolerance anywhere: the int8 dot is exact, so y = float(dot) * (s_t *
 * s_w) has exactly one right value; the fp8 dot has one documented order
 * (qdot.h), so it too has one right value. Every comparison is bit for
 * bit (and no input here makes a NaN, whose payload could differ). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernel/w8a8.h"
#include "kernel/w8a8_kernels.h"
#include "lowbit.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t next_u32(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* uniform in (-1, 1), a quarter of them small */
static float rand_f(void)
{
    float u = (float)(next_u32() & 0xFFFFFF) / 8388608.0f - 1.0f;
    return (next_u32() & 3) == 0 ? u * 0.01f : u;
}

/* ---- a weight view of lb_quantize's output (qmat.h's fields by hand) ---- */

typedef struct wmat {
    lb_qtensor *q;
    lb__qmat m;
} wmat;

static int make_weights(const char *spec_text, const float *w, size_t rows, size_t cols, wmat *out)
{
    lb_qspec spec;
    lb_qtensor_view v;
    memset(out, 0, sizeof *out);
    if (lb_qspec_parse(spec_text, &spec) != LB_OK) return 0;
    if (lb_quantize(&spec, w, rows, cols, 1, &out->q) != LB_OK) return 0;
    lb_qtensor_view_get(out->q, &v);
    lb__qmat *m = &out->m;
    m->rows = rows, m->cols = cols, m->element = spec.element, m->spec = spec;
    m->block = spec.granularity == LB_GRAN_GROUP ? spec.group : cols;
    if (m->block == 0) m->block = 1;
    m->blocks = cols ? (cols + m->block - 1) / m->block : 0;
    m->data = v.data, m->row_bytes = v.row_bytes;
    m->scale_format = spec.scale_format, m->scales = v.scales;
    m->one_scale = spec.granularity == LB_GRAN_TENSOR;
    m->zero_points = v.zero_points, m->zp_row_bytes = v.zero_point_row_bytes;
    m->scale_mul = v.tensor_scale;
    m->bytes = v.data_bytes + v.scale_bytes + v.zero_point_bytes;
    return 1;
}

/* s_w: the row's scale code decoded (lb_decode_value), times the multiplier */
static float weight_scale(const wmat *w, size_t r)
{
    lb_qtensor_view v;
    lb_qtensor_view_get(w->q, &v);
    size_t i = v.spec.granularity == LB_GRAN_TENSOR ? 0 : r;
    int bytes = lb_format_get(v.spec.scale_format)->bits / 8;
    uint32_t code = 0;
    for (int b = 0; b < bytes; b++) code |= (uint32_t)v.scales[i * (size_t)bytes + (size_t)b] << (8 * b);
    float s;
    lb_decode_value(v.spec.scale_format, code, &s);
    return s * v.tensor_scale;
}

/* ---- the documented definitions, written independently ---- */

static float absmax(const float *x, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* int8: s_t = absmax / 127 (1 for a row of zeros), q = rne(x / s) clamped
 * to [-127, 127], dot exact in int64, y = float(dot) * (s_t * s_w). */
static void ref_int8(const wmat *w, const float *x, size_t n, float static_scale, float *y)
{
    size_t rows = w->m.rows, cols = w->m.cols;
    int8_t *q = malloc(cols + 1);
    for (size_t t = 0; t < n; t++) {
        const float *xt = x + t * cols;
        float s = static_scale;
        if (!(s > 0)) {
            s = absmax(xt, cols) / 127.0f;
            if (s == 0) s = 1;
        }
        for (size_t k = 0; k < cols; k++) {
            float v = rintf(xt[k] / s);
            q[k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
        }
        for (size_t r = 0; r < rows; r++) {
            const int8_t *wr = (const int8_t *)(w->m.data + r * w->m.row_bytes);
            int64_t dot = 0;
            for (size_t k = 0; k < cols; k++) dot += (int64_t)q[k] * (int64_t)wr[k];
            y[t * rows + r] = (float)dot * (s * weight_scale(w, r));
        }
    }
    free(q);
}

static float e4m3(uint32_t code)
{
    float v;
    lb_decode_value(LB_FMT_FP8_E4M3, code, &v);
    return v;
}

/* fp8: s_t = absmax / 448, q = e4m3(x / s) (lb_encode_value, saturating);
 * 16 partial sums, chunk c adds fma(x[16c+l], w[16c+l]) to p[l], padding
 * with zeros; then the fixed tree of lb__sum16f; y = dot * (s_t * s_w). */
static void ref_fp8(const wmat *w, const float *x, size_t n, float static_scale, float *y)
{
    size_t rows = w->m.rows, cols = w->m.cols, padded = (cols + 15) / 16 * 16;
    float *xv = calloc(padded + 16, sizeof *xv), *wv = calloc(padded + 16, sizeof *wv);
    for (size_t t = 0; t < n; t++) {
        const float *xt = x + t * cols;
        float s = static_scale;
        if (!(s > 0)) {
            s = absmax(xt, cols) / 448.0f;
            if (s == 0) s = 1;
        }
        for (size_t k = 0; k < cols; k++) {
            uint32_t c;
            lb_encode_value(LB_FMT_FP8_E4M3, (double)(xt[k] / s), LB_SATURATE, &c);
            xv[k] = e4m3(c);
        }
        for (size_t r = 0; r < rows; r++) {
            const uint8_t *wr = w->m.data + r * w->m.row_bytes;
            for (size_t k = 0; k < cols; k++) wv[k] = e4m3(wr[k]);
            float p[16] = {0};
            for (size_t e = 0; e < padded; e += 16)
                for (int l = 0; l < 16; l++) p[l] = fmaf(xv[e + l], wv[e + l], p[l]);
            float a[8], b[4];
            for (int i = 0; i < 8; i++) a[i] = p[i] + p[i + 8];
            for (int i = 0; i < 4; i++) b[i] = a[i] + a[i + 4];
            float dot = (b[0] + b[2]) + (b[1] + b[3]);
            y[t * rows + r] = dot * (s * weight_scale(w, r));
        }
    }
    free(xv);
    free(wv);
}

/* the first index where two results differ in bits, or n */
static size_t first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
    return n;
}

static const char *kind_name[] = {"scalar", "avx2", "avx512", "vnni", "neon"};

/* One case: the reference, every set and thread count, and decode. */
/* int8 weight codes -128 that lb_quantize wrote in the cases run so far */
static size_t int8_min_codes;

static void run_case(const char *spec, lb_format act, const float *wf, size_t rows, size_t cols, const float *x,
                     size_t n, float static_scale, const char *what)
{
    wmat w;
    if (!make_weights(spec, wf, rows, cols, &w)) {
        CHECK(0, "%s: cannot quantize %s", what, spec);
        return;
    }
    if (act == LB_FMT_INT8) /* full-range grids (the default) store -128: count them (random_cases) */
        for (size_t i = 0; i < rows * w.m.row_bytes; i++) int8_min_codes += w.m.data[i] == 0x80;
    lb__w8a8 k;
    lb_status st = lb__w8a8_init(&w.m, act, &k);
    CHECK(st == LB_OK, "%s: init %s: %s", what, spec, lb_last_error());
    if (st != LB_OK) {
        lb_qtensor_free(w.q);
        return;
    }
    size_t ny = n * rows;
    float *ref = malloc(ny * sizeof(float) + 1), *scalar = malloc(ny * sizeof(float) + 1);
    float *got = malloc(ny * sizeof(float) + 1);
    if (act == LB_FMT_INT8) ref_int8(&w, x, n, static_scale, ref);
    else ref_fp8(&w, x, n, static_scale, ref);

    st = lb__w8a8_matmul_kind(&k, x, n, static_scale, scalar, 1, LB__W8A8_SCALAR);
    size_t d = first_diff(ref, scalar, ny);
    CHECK(st == LB_OK && d == ny, "%s %s rows=%zu cols=%zu n=%zu s=%g: scalar differs from the definition at %zu "
          "(%.9g vs %.9g)", what, spec, rows, cols, n, (double)static_scale, d, d < ny ? (double)scalar[d] : 0.0,
          d < ny ? (double)ref[d] : 0.0);

    for (int kind = LB__W8A8_SCALAR; kind < LB__W8A8_KINDS; kind++) {
        if (!lb__w8a8_kind_available((lb__w8a8_kind)kind)) continue;
        for (int threads = 1; threads <= 3; threads++) {
            memset(got, 0xFF, ny * sizeof(float));
            st = lb__w8a8_matmul_kind(&k, x, n, static_scale, got, threads, (lb__w8a8_kind)kind);
            d = first_diff(scalar, got, ny);
            CHECK(st == LB_OK && d == ny, "%s %s rows=%zu cols=%zu n=%zu: %s with %d threads differs at %zu "
                  "(%.9g vs %.9g)", what, spec, rows, cols, n, kind_name[kind], threads, d,
                  d < ny ? (double)got[d] : 0.0, d < ny ? (double)scalar[d] : 0.0);
        }
        /* decode: each token alone gives the bits it gets inside the prefill */
        int same = 1;
        for (size_t t = 0; t < n; t++) {
            st = lb__w8a8_matmul_kind(&k, x + t * cols, 1, static_scale, got, 2, (lb__w8a8_kind)kind);
            same &= st == LB_OK && first_diff(scalar + t * rows, got, rows) == rows;
        }
        CHECK(same, "%s %s rows=%zu cols=%zu n=%zu: %s decode differs from prefill", what, spec, rows, cols, n,
              kind_name[kind]);
    }
    /* the public entry (the active set) */
    st = lb__w8a8_matmul(&k, x, n, static_scale, got, 2);
    CHECK(st == LB_OK && first_diff(scalar, got, ny) == ny, "%s: lb__w8a8_matmul differs", what);

    free(ref);
    free(scalar);
    free(got);
    lb__w8a8_free(&k);
    lb_qtensor_free(w.q);
}

static void random_cases(void)
{
    static const size_t cols_list[] = {1, 3, 63, 64, 65, 255, 1000};
    static const size_t rows_list[] = {1, 3, 4, 5, 17, 40, 67};
    static const char *specs[] = {"int8:channel", "int8:tensor", "int8:channel:scale=fp16", "fp8_e4m3:channel",
                                  "fp8_e4m3:tensor", "fp8_e4m3:channel:scale=bf16", "int8:channel:range=signed",
                                  "int8:tensor:range=signed", "int8:channel:scale=fp16:range=signed"};
    for (size_t ci = 0; ci < sizeof cols_list / sizeof *cols_list; ci++) {
        for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
            size_t cols = cols_list[ci], rows = rows_list[(ci + si) % 7];
            size_t n = (ci * 3 + si) % 4 == 0 ? 64 : 1 + (next_u32() % 9);
            lb_format act = strncmp(specs[si], "int8", 4) == 0 ? LB_FMT_INT8 : LB_FMT_FP8_E4M3;
            float *w = malloc(rows * cols * sizeof(float)), *x = malloc(n * cols * sizeof(float));
            for (size_t i = 0; i < rows * cols; i++) w[i] = rand_f();
            for (size_t i = 0; i < n * cols; i++) x[i] = rand_f() * 3.0f;
            /* a weight row of zeros and an activation row of zeros */
            if (rows > 2) memset(w + cols, 0, cols * sizeof(float));
            if (n > 1) memset(x + (n - 1) * cols, 0, cols * sizeof(float));
            /* one token with a single outlier; another with huge values */
            if (n > 2) x[cols + (next_u32() % cols)] = 900.0f;
            if (n > 3)
                for (size_t k = 0; k < cols; k++) x[2 * cols + k] *= 1e30f;
            run_case(specs[si], act, w, rows, cols, x, n, 0.0f, "dynamic");
            /* a static scale that clips the larger activations */
            run_case(specs[si], act, w, rows, cols, x, n, act == LB_FMT_INT8 ? 0.01f : 0.002f, "static");
            free(w);
            free(x);
        }
    }
    /* every kernel above met code -128 from lb_quantize itself, not only long_rows' hand-made rows */
    CHECK(int8_min_codes > 0, "no int8 weight of code -128 in the random cases (range=full stores it)");
}

/* Huge weights (scales near fp32's top) and tiny ones. */
static void extreme_cases(void)
{
    size_t rows = 9, cols = 100, n = 5;
    float *w = malloc(rows * cols * sizeof(float)), *x = malloc(n * cols * sizeof(float));
    for (size_t i = 0; i < rows * cols; i++) w[i] = rand_f() * ((i / cols) % 2 ? 1e36f : 1e-30f);
    for (size_t i = 0; i < n * cols; i++) x[i] = rand_f() * ((i / cols) % 2 ? 1e-35f : 1e20f);
    run_case("int8:channel", LB_FMT_INT8, w, rows, cols, x, n, 0.0f, "extreme");
    run_case("fp8_e4m3:channel", LB_FMT_FP8_E4M3, w, rows, cols, x, n, 0.0f, "extreme");
    free(w);
    free(x);
}

/* Runs longer than an int32 accumulator may hold (LB__W8A8_RUN), with the
 * largest codes: weights of code -128 (built by hand, whole rows of it)
 * against activations of code +127 (stored as 255 by VNNI). */
static void long_rows(void)
{
    size_t cols_list[] = {LB__W8A8_RUN, LB__W8A8_RUN + 100, 2 * LB__W8A8_RUN + 7};
    for (size_t ci = 0; ci < 3; ci++) {
        size_t cols = cols_list[ci], rows = 21, n = 3; /* 21: a 16-row decode tile and a remainder */
        uint8_t *data = malloc(rows * cols);
        float scale = 0.5f;
        for (size_t r = 0; r < rows; r++)
            for (size_t k = 0; k < cols; k++) data[r * cols + k] = r == 0 ? 0x80 : r == 1 ? 0x7F : (uint8_t)next_u32();
        lb__qmat m = {0};
        m.rows = rows, m.cols = cols, m.element = LB_FMT_INT8, m.block = cols, m.blocks = 1;
        m.data = data, m.row_bytes = cols, m.scale_format = LB_FMT_FP32, m.scales = (const uint8_t *)&scale;
        m.one_scale = 1, m.scale_mul = 1.0f;
        lb_qspec_parse("int8:tensor", &m.spec);
        float *x = malloc(n * cols * sizeof(float)), *y = malloc(n * rows * sizeof(float));
        float *ref = malloc(n * rows * sizeof(float));
        for (size_t k = 0; k < cols; k++) x[k] = 1.0f, x[cols + k] = -1.0f, x[2 * cols + k] = rand_f();
        lb__w8a8 k8;
        CHECK(lb__w8a8_init(&m, LB_FMT_INT8, &k8) == LB_OK, "long rows: init: %s", lb_last_error());
        /* the reference, as ref_int8 (codes of +-1 rows are +-127 exactly) */
        for (size_t t = 0; t < n; t++) {
            float s = absmax(x + t * cols, cols) / 127.0f;
            for (size_t r = 0; r < rows; r++) {
                int64_t dot = 0;
                for (size_t k = 0; k < cols; k++) {
                    float v = rintf(x[t * cols + k] / s);
                    v = v > 127 ? 127 : v < -127 ? -127 : v;
                    dot += (int64_t)v * (int8_t)data[r * cols + k];
                }
                ref[t * rows + r] = (float)dot * (s * scale);
            }
        }
        for (int kind = LB__W8A8_SCALAR; kind < LB__W8A8_KINDS; kind++) {
            if (!lb__w8a8_kind_available((lb__w8a8_kind)kind)) continue;
            lb_status st = lb__w8a8_matmul_kind(&k8, x, n, 0.0f, y, 2, (lb__w8a8_kind)kind);
            size_t d = first_diff(ref, y, n * rows);
            CHECK(st == LB_OK && d == n * rows, "long rows cols=%zu: %s differs at %zu (%.9g vs %.9g)", cols,
                  kind_name[kind], d, d < n * rows ? (double)y[d] : 0.0, d < n * rows ? (double)ref[d] : 0.0);
            /* each token alone (the decode path) gives the same bits */
            int alone_ok = 1;
            for (size_t t = 0; t < n; t++) {
                st = lb__w8a8_matmul_kind(&k8, x + t * cols, 1, 0.0f, y, 2, (lb__w8a8_kind)kind);
                alone_ok &= st == LB_OK && first_diff(ref + t * rows, y, rows) == rows;
            }
            CHECK(alone_ok, "long rows cols=%zu: %s, one token at a time differs", cols, kind_name[kind]);
        }
        /* the sum really exceeds one int32 run: 127 * -128 * cols */
        CHECK(ref[0] == (float)(-16256.0 * (double)cols) * ((1.0f / 127.0f) * scale),
              "long rows: the reference itself is off (%.9g)", (double)ref[0]);
        lb__w8a8_free(&k8);
        free(data);
        free(x);
        free(y);
        free(ref);
    }
}

/* A NaN activation makes its token's outputs NaN, for every kernel set and
 * both activation formats; the other tokens are unchanged. */
static void nan_tokens(void)
{
    const size_t rows = 9, cols = 70, n = 3;
    float w[9 * 70], x[3 * 70], y[3 * 9], clean[3 * 9];
    for (size_t i = 0; i < rows * cols; i++) w[i] = (float)((int)(i * 37 % 23) - 11) / 7.0f;
    for (size_t i = 0; i < n * cols; i++) x[i] = (float)((int)(i * 13 % 17) - 8) / 5.0f;
    const char *specs[2] = {"int8:channel", "fp8_e4m3:channel"};
    const lb_format acts[2] = {LB_FMT_INT8, LB_FMT_FP8_E4M3};
    for (int a = 0; a < 2; a++) {
        lb_qspec spec;
        lb_qtensor *q;
        lb_qspec_parse(specs[a], &spec);
        lb_quantize(&spec, w, rows, cols, 1, &q);
        lb__qmat m;
        lb__qmat_from_qtensor(q, 1, &m);
        lb__w8a8 k;
        lb__w8a8_init(&m, acts[a], &k);
        for (int kind = 0; kind < LB__W8A8_KINDS; kind++) {
            if (!lb__w8a8_kind_available((lb__w8a8_kind)kind)) continue;
            float xn[3 * 70];
            memcpy(xn, x, sizeof xn);
            lb__w8a8_matmul_kind(&k, xn, n, 0, clean, 1, (lb__w8a8_kind)kind);
            xn[cols + 5] = NAN;
            lb__w8a8_matmul_kind(&k, xn, n, 0, y, 1, (lb__w8a8_kind)kind);
            int ok = 1;
            for (size_t r = 0; r < rows; r++)
                ok &= isnan(y[rows + r]) && y[r] == clean[r] && y[2 * rows + r] == clean[2 * rows + r];
            CHECK(ok, "%s, %s: a NaN activation gives its token NaN outputs, the others unchanged", specs[a],
                  kind_name[kind]);
        }
        lb__w8a8_free(&k);
        lb__qmat_free(&m);
    }
}

static void refusals(void)
{
    static const struct { const char *spec; lb_format act; } bad[] = {
        {"int4:channel", LB_FMT_INT8},       {"int8:channel:affine", LB_FMT_INT8}, {"int8:g32", LB_FMT_INT8},
        {"fp8_e4m3:channel", LB_FMT_INT8},   {"int8:channel", LB_FMT_FP8_E4M3},    {"fp8_e4m3:g32", LB_FMT_FP8_E4M3},
        {"fp8_e5m2:channel", LB_FMT_FP8_E4M3}, {"int8:channel", LB_FMT_INT4},
    };
    float w[4 * 64];
    for (size_t i = 0; i < 4 * 64; i++) w[i] = rand_f();
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        wmat m;
        if (!make_weights(bad[i].spec, w, 4, 64, &m)) {
            CHECK(0, "cannot quantize %s", bad[i].spec);
            continue;
        }
        lb__w8a8 k;
        lb_status st = lb__w8a8_init(&m.m, bad[i].act, &k);
        CHECK(st == LB_ERR_UNSUPPORTED, "%s with act %d: got %d", bad[i].spec, (int)bad[i].act, (int)st);
        CHECK(strstr(lb_last_error(), "W8A8") != NULL, "%s: the message does not say what W8A8 needs: %s", bad[i].spec,
              lb_last_error());
        lb_qtensor_free(m.q);
    }
    /* and the ones it takes */
    static const char *good[] = {"int8:channel", "int8:tensor"};
    for (size_t i = 0; i < 2; i++) {
        wmat m;
        lb__w8a8 k;
        if (!make_weights(good[i], w, 4, 64, &m)) continue;
        CHECK(lb__w8a8_init(&m.m, LB_FMT_INT8, &k) == LB_OK, "%s refused: %s", good[i], lb_last_error());
        lb__w8a8_free(&k);
        lb_qtensor_free(m.q);
    }
}

int main(void)
{
    for (int kind = 0; kind < LB__W8A8_KINDS; kind++)
        printf("w8a8 %s: %s\n", kind_name[kind], lb__w8a8_kind_available((lb__w8a8_kind)kind) ? "tested" : "skipped (CPU)");
    refusals();
    nan_tokens();
    random_cases();
    extreme_cases();
    long_rows();
    return check_summary();
}
