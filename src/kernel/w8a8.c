/* W8A8 products (w8a8.h): checking the weights, quantizing activations
 * per token, choosing a kernel set and splitting rows over threads. The
 * kernels live in w8a8_scalar.c (the reference) and the ISA files. */
#include "kernel/w8a8.h"

#include <pthread.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/convert.h"
#include "kernel/qmat.h"
#include "kernel/w8a8_kernels.h"
#include "util/cpu.h"
#include "util/error.h"
#include "util/parallel.h"

/* Row sums live in int32: |sum| <= 128 * cols must stay below 2^31. */
#define MAX_COLS ((size_t)1 << 24)

/* ---- the e4m3 decode table ---- */

static float e4m3_table[256];
static pthread_once_t e4m3_once = PTHREAD_ONCE_INIT;

static void e4m3_fill(void)
{
    for (uint32_t c = 0; c < 256; c++) lb_decode_value(LB_FMT_FP8_E4M3, c, &e4m3_table[c]);
}

const float *lb__w8a8_e4m3_table(void)
{
    pthread_once(&e4m3_once, e4m3_fill);
    return e4m3_table;
}

/* ---- weights ---- */

static lb_status refuse(const lb__qmat *m, lb_format act, const char *why)
{
    char spec[128] = "plain";
    if (!m->plain) lb_qspec_format(&m->spec, spec, sizeof spec);
    const char *an = act == LB_FMT_INT8 ? "int8" : "fp8_e4m3";
    const char *need = act == LB_FMT_INT8 ? "int8 symmetric" : "fp8_e4m3";
    return lb__fail(LB_ERR_UNSUPPORTED, "W8A8 with %s activations needs %s weights with a channel or tensor scale; "
                                        "the weights are %s (%s)", an, need, spec, why);
}

static lb_status check_weights(const lb__qmat *m, lb_format act)
{
    if (act != LB_FMT_INT8 && act != LB_FMT_FP8_E4M3) {
        const lb_format_info *f = lb_format_get(act);
        return lb__fail(LB_ERR_UNSUPPORTED, "W8A8 activations are int8 or fp8_e4m3, not %s", f ? f->name : "unknown");
    }
    if (m->ggml_block) {
        const lb_dtype_info *d = lb_dtype_get(m->ggml);
        return lb__fail(LB_ERR_UNSUPPORTED, "W8A8 with %s activations needs lowbit's own packed weights, not ggml %s "
                        "blocks", act == LB_FMT_INT8 ? "int8" : "fp8_e4m3", d ? d->name : "unknown");
    }
    if (m->plain) return refuse(m, act, "unquantized");
    if (m->element != act) return refuse(m, act, "another element format");
    if (m->spec.affine || m->zero_points) return refuse(m, act, "affine: zero points");
    if (m->spec.granularity == LB_GRAN_GROUP || (m->cols && m->blocks != 1))
        return refuse(m, act, "one scale per group, not per row");
    if (m->cols >= MAX_COLS)
        return lb__fail(LB_ERR_UNSUPPORTED, "W8A8 takes rows of fewer than %zu columns, not %zu", MAX_COLS, m->cols);
    return LB_OK;
}

/* Row r's s_w: its scale code decoded, times scale_mul (qmat.h). */
static float row_scale(const lb__qmat *m, size_t r)
{
    const lb_format_info *sf = lb_format_get(m->scale_format);
    uint32_t code = lb__load_code(sf, m->scales, m->one_scale ? 0 : r);
    uint32_t bits = sf->decode(sf, code);
    float v;
    memcpy(&v, &bits, sizeof v);
    return v * m->scale_mul;
}

lb_status lb__w8a8_init(const lb__qmat *m, lb_format act, lb__w8a8 *out)
{
    if (!m || !out) return lb__fail(LB_ERR_ARG, "lb__w8a8_init: NULL argument");
    memset(out, 0, sizeof *out);
    lb_status st = check_weights(m, act);
    if (st != LB_OK) return st;
    if (!lb_format_get(m->scale_format)) return lb__fail(LB_ERR_ARG, "W8A8: bad scale format %d", (int)m->scale_format);
    /* 4 spare zero entries: the kernels load a row block's 4 at a time */
    out->row_scale = calloc(m->rows + 4, sizeof *out->row_scale);
    out->row_sum = calloc(m->rows + 4, sizeof *out->row_sum);
    if (!out->row_scale || !out->row_sum) {
        lb__w8a8_free(out);
        return lb__fail(LB_ERR_NOMEM, "W8A8: cannot allocate the scales of %zu rows", m->rows);
    }
    for (size_t r = 0; r < m->rows; r++) {
        out->row_scale[r] = row_scale(m, r);
        if (act == LB_FMT_INT8) {
            const int8_t *w = (const int8_t *)(m->data + r * m->row_bytes);
            int32_t s = 0; /* |s| <= 128 * cols < 2^31 (MAX_COLS) */
            for (size_t k = 0; k < m->cols; k++) s += w[k];
            out->row_sum[r] = s;
        }
    }
    out->m = m;
    out->act = act;
    if (act == LB_FMT_FP8_E4M3) lb__w8a8_e4m3_table();
    return LB_OK;
}

void lb__w8a8_free(lb__w8a8 *w)
{
    if (!w) return;
    free(w->row_scale);
    free(w->row_sum);
    free(w->aux);
    memset(w, 0, sizeof *w);
}

/* ---- kernel sets ---- */

static const lb__w8a8_ops *ops_of(lb__w8a8_kind k)
{
    switch (k) {
    case LB__W8A8_AVX2: return &lb__w8a8_avx2_ops;
    case LB__W8A8_AVX512: return &lb__w8a8_avx512_ops;
    case LB__W8A8_VNNI: return &lb__w8a8_vnni_ops;
    case LB__W8A8_NEON: return &lb__w8a8_neon_ops;
    case LB__W8A8_SCALAR:
    case LB__W8A8_KINDS: break;
    }
    return &lb__w8a8_scalar_ops;
}

int lb__w8a8_kind_available(lb__w8a8_kind kind)
{
    if (kind < 0 || kind >= LB__W8A8_KINDS || !ops_of(kind)->gemm_i8) return 0;
    switch (kind) {
    case LB__W8A8_AVX2: return lb__isa_supported(LB_ISA_AVX2);
    case LB__W8A8_AVX512: return lb__isa_supported(LB_ISA_AVX512);
    case LB__W8A8_VNNI: return lb__isa_supported(LB_ISA_AVX512) && (lb__cpu_extras() & LB__CPU_AVX512_VNNI);
    case LB__W8A8_NEON: return lb__isa_supported(LB_ISA_NEON);
    case LB__W8A8_SCALAR: return 1;
    case LB__W8A8_KINDS: return 0; /* not a kind (refused above) */
    }
    return 0;
}

lb__w8a8_kind lb__w8a8_kind_for(lb_isa isa)
{
    if (isa == LB_ISA_NEON) return lb__w8a8_kind_available(LB__W8A8_NEON) ? LB__W8A8_NEON : LB__W8A8_SCALAR;
    /* the x86 sets, best first (NEON's 3 is no x86 level: handled above) */
    static const lb__w8a8_kind down[] = {LB__W8A8_VNNI, LB__W8A8_AVX512, LB__W8A8_AVX2, LB__W8A8_SCALAR};
    lb__w8a8_kind top = isa == LB_ISA_AVX512 ? LB__W8A8_VNNI : isa == LB_ISA_AVX2 ? LB__W8A8_AVX2 : LB__W8A8_SCALAR;
    for (size_t i = 0; i < sizeof down / sizeof down[0]; i++)
        if (down[i] <= top && lb__w8a8_kind_available(down[i])) return down[i];
    return LB__W8A8_SCALAR;
}

/* ---- activations ---- */

/* The fp8 code values of one token row: s_t = absmax / 448 (or static),
 * v = x / s encoded to e4m3 (nearest even, saturating; the bulk encoder,
 * whose every set equals the scalar codec) and decoded again. The same
 * code serves every kernel set, so they all see the same values. */
static float quant_f8_row(const float *x, size_t cols, float static_scale, float *v, uint8_t *codes,
                          lb__encode_fn encode, const float *table)
{
    float s = static_scale;
    if (!(s > 0)) {
        float m = 0;
        for (size_t k = 0; k < cols; k++) {
            float a = x[k] < 0 ? -x[k] : x[k];
            m = a > m ? a : m;
        }
        s = m / 448.0f;
        if (s == 0) s = 1.0f; /* a row of zeros (or one that underflows) */
    }
    for (size_t k = 0; k < cols; k++) v[k] = x[k] / s;
    encode(lb_format_get(LB_FMT_FP8_E4M3), LB_SATURATE, v, cols, codes);
    for (size_t k = 0; k < cols; k++) v[k] = table[codes[k]];
    return s;
}

typedef struct job {
    const lb__w8a8 *w;
    const lb__w8a8_ops *ops;
    lb_isa isa;
    const float *x;
    float static_scale;
    lb__w8a8_acts a;
    float *y;
} job;

static lb_status quant_range(void *ctx, size_t t0, size_t t1)
{
    job *j = ctx;
    size_t cols = j->w->m->cols;
    lb__fenv_guard g;
    lb__fenv_begin(&g);
    if (j->w->act == LB_FMT_INT8) {
        for (size_t t = t0; t < t1; t++)
            j->a.scale[t] = j->ops->quant_i8(j->x + t * cols, cols, j->static_scale, j->a.q + t * j->a.ld);
    } else {
        uint8_t *codes = malloc(cols ? cols : 1);
        if (!codes) {
            lb__fenv_end(&g);
            return lb__fail(LB_ERR_NOMEM, "W8A8: cannot allocate %zu bytes", cols);
        }
        lb__encode_fn encode = lb__encode_kernel(j->isa);
        const float *table = lb__w8a8_e4m3_table();
        for (size_t t = t0; t < t1; t++)
            j->a.scale[t] = quant_f8_row(j->x + t * cols, cols, j->static_scale, j->a.v + t * j->a.ld, codes, encode, table);
        free(codes);
    }
    lb__fenv_end(&g);
    return LB_OK;
}

static lb_status gemm_range(void *ctx, size_t r0, size_t r1)
{
    job *j = ctx;
    lb__fenv_guard g;
    lb__fenv_begin(&g);
    lb_status st = LB_OK;
    if (j->w->act == LB_FMT_INT8) {
        j->ops->gemm_i8(j->w, &j->a, r0, r1, j->y);
    } else {
        float *wbuf = aligned_alloc(64, 4 * j->a.ld * sizeof(float));
        if (wbuf) j->ops->gemm_f8(j->w, &j->a, r0, r1, j->y, wbuf);
        else st = lb__fail(LB_ERR_NOMEM, "W8A8: cannot allocate %zu bytes", 4 * j->a.ld * sizeof(float));
        free(wbuf);
    }
    lb__fenv_end(&g);
    return st;
}

/* fp8 decode (one token): the weight-only decode kernels (qdot.h) on a
 * view of the weights whose every scale is 1 compute this dot exactly:
 * w = v * 1 = v, the same 16 fused partial sums in the same order and the
 * same tree. They stream the rows with their prefetch instead of decoding
 * each row into a buffer and reading it back (0.31 of the read bandwidth
 * against 0.7 for the weight-only product). Then y = dot * (s_t * s_w). */
static lb_status f8_decode(const job *j, int threads)
{
    static const float one = 1.0f;
    lb__qmat v = *j->w->m;
    v.scale_format = LB_FMT_FP32, v.scales = (const uint8_t *)&one, v.one_scale = 1, v.scale_mul = 1.0f;
    v.block = v.cols, v.blocks = 1, v.block_rows = 1, v.zero_points = NULL, v.zp_row_bytes = 0;
    v.owned_q = NULL, v.owned_buf = NULL;
    lb__fenv_guard g;
    lb__fenv_begin(&g);
    lb_status st = lb__qmat_matmul_isa(&v, j->a.v, 1, j->y, threads, j->isa);
    const float s = j->a.scale[0];
    for (size_t r = 0; st == LB_OK && r < v.rows; r++) j->y[r] = j->y[r] * (s * j->w->row_scale[r]);
    lb__fenv_end(&g);
    return st;
}

/* Rows per thread slice: a multiple of the 4-row blocks of every kernel. */
#define ROW_GRAIN 16
/* A token with a NaN among its activations gets NaN outputs: quantizing
 * skips NaN in the absmax and clamps it to a code, which would turn a
 * diverged model's activations into ordinary numbers (the weight-only
 * products keep the NaN; so does this, after the fact). */
static void poison_nan_tokens(const float *x, size_t n, size_t cols, float *y, size_t rows)
{
    for (size_t t = 0; t < n; t++) {
        int nan = 0;
        for (size_t k = 0; k < cols; k++) nan |= x[t * cols + k] != x[t * cols + k];
        if (nan)
            for (size_t r = 0; r < rows; r++) y[t * rows + r] = NAN;
    }
}

/* Below this many activation values one thread quantizes them all. */
#define QUANT_PARALLEL_MIN 65536

lb_status lb__w8a8_matmul_kind(const lb__w8a8 *w, const float *x, size_t n, float static_scale, float *y,
                               int threads, lb__w8a8_kind kind)
{
    if (!w || !w->m || (n && (!x || !y))) return lb__fail(LB_ERR_ARG, "lb__w8a8_matmul: NULL argument");
    if (n == 0 || w->m->rows == 0) return LB_OK;
    if (!lb__w8a8_kind_available(kind)) kind = LB__W8A8_SCALAR;
    size_t cols = w->m->cols;
    job j = {.w = w, .ops = ops_of(kind), .x = x, .static_scale = static_scale, .y = y};
    j.isa = kind == LB__W8A8_VNNI ? LB_ISA_AVX512 : kind == LB__W8A8_NEON ? LB_ISA_NEON : (lb_isa)kind;
    j.a.n = n;
    j.a.ld = (cols + LB__W8A8_PAD - 1) / LB__W8A8_PAD * LB__W8A8_PAD;
    if (j.a.ld == 0) j.a.ld = LB__W8A8_PAD;
    size_t esz = w->act == LB_FMT_INT8 ? 1 : sizeof(float);
    if (n > (SIZE_MAX / esz - 64) / j.a.ld) return lb__fail(LB_ERR_NOMEM, "W8A8: %zu tokens overflow", n);
    size_t bytes = (n * j.a.ld * esz + 63) / 64 * 64;
    void *buf = aligned_alloc(64, bytes);
    j.a.scale = calloc(n + 4, sizeof(float));
    if (!buf || !j.a.scale) {
        free(buf);
        free(j.a.scale);
        return lb__fail(LB_ERR_NOMEM, "W8A8: cannot allocate %zu bytes for %zu tokens", bytes, n);
    }
    /* the padding: code 0 (stored as 128 when biased) or +0 */
    if (w->act == LB_FMT_INT8) {
        j.a.q = buf;
        memset(buf, j.ops->biased ? 0x80 : 0, n * j.a.ld);
    } else {
        j.a.v = buf;
        memset(buf, 0, n * j.a.ld * sizeof(float));
    }
    int qthreads = n * cols >= QUANT_PARALLEL_MIN ? threads : 1;
    lb_status st = lb__parallel_for(n, 1, qthreads, quant_range, &j);
    if (st == LB_OK && w->act == LB_FMT_FP8_E4M3 && n == 1)
        st = f8_decode(&j, threads);
    else if (st == LB_OK)
        st = lb__parallel_for(w->m->rows, ROW_GRAIN, lb__threads_for(threads, w->m->bytes * n), gemm_range, &j);
    free(buf);
    free(j.a.scale);
    if (st == LB_OK) poison_nan_tokens(x, n, cols, y, w->m->rows);
    return st;
}

lb_status lb__w8a8_matmul_isa(const lb__w8a8 *w, const float *x, size_t n, float static_scale, float *y,
                              int threads, lb_isa isa)
{
    return lb__w8a8_matmul_kind(w, x, n, static_scale, y, threads, lb__w8a8_kind_for(lb__isa_clamp(isa)));
}

lb_status lb__w8a8_matmul(const lb__w8a8 *w, const float *x, size_t n, float static_scale, float *y, int threads)
{
    return lb__w8a8_matmul_isa(w, x, n, static_scale, y, threads, lb_isa_active());
}
