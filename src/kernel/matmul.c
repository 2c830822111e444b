/* Matrix products: weight packing, the scalar reference, and the split
 * over threads shared by every instruction set (see matmul.h). */
#include "kernel/matmul.h"

#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/cpu.h"
#include "util/error.h"
#include "util/parallel.h"

/* From here up lb__alloc_large's page mapping serves (its own threshold) */
#define LARGE ((size_t)4 << 20)

lb_status lb__pack_weight(const float *w, size_t out, size_t in, lb__packed *p)
{
    memset(p, 0, sizeof *p);
    p->out = out;
    p->in = in;
    p->panels = (out + LB__MM_NR - 1) / LB__MM_NR;
    if (in && p->panels > SIZE_MAX / sizeof(float) / LB__MM_NR / in)
        return lb__fail(LB_ERR_NOMEM, "packed weight of %zu x %zu floats overflows", out, in);
    p->bytes = p->panels * LB__MM_NR * in * sizeof(float);
    if (p->bytes == 0) return LB_OK;
    /* zero-filled (the padding columns of a last partial panel stay 0) and
     * 64-byte aligned, so every panel row is one cache line pair;
     * lb__alloc_large maps whole pages with huge pages advised */
    if (p->bytes >= LARGE) p->data = lb__alloc_large(p->bytes);
    else if ((p->data = aligned_alloc(64, p->bytes))) memset(p->data, 0, p->bytes);
    if (!p->data) return lb__fail(LB_ERR_NOMEM, "cannot allocate %zu bytes for a packed %zu x %zu weight", p->bytes, out, in);
    for (size_t o = 0; o < out; o++) {
        float *panel = p->data + (o / LB__MM_NR) * in * LB__MM_NR + o % LB__MM_NR;
        const float *row = w + o * in;
        for (size_t k = 0; k < in; k++) panel[k * LB__MM_NR] = row[k];
    }
    return LB_OK;
}

void lb__packed_free(lb__packed *p)
{
    if (p->bytes >= LARGE) lb__free_large(p->data, p->bytes);
    else free(p->data);
    memset(p, 0, sizeof *p);
}

void lb__packed_row(const lb__packed *p, size_t o, float *dst)
{
    const float *panel = p->data + (o / LB__MM_NR) * p->in * LB__MM_NR + o % LB__MM_NR;
    for (size_t k = 0; k < p->in; k++) dst[k] = panel[k * LB__MM_NR];
}

typedef struct mm_job {
    const float *x;  /* X rows (scalar path) */
    const float *xp; /* X packed in row blocks (vector paths) */
    size_t n, out, in;
    const lb__panel_source *src;
    float *y;
    const lb__mm_kernel *k;
} mm_job;

/* Per-thread room a panel source asks for, 64-byte aligned (NULL when it
 * needs none: panels are then read in place). */
static lb_status source_scratch(const mm_job *j, void **buf)
{
    *buf = NULL;
    size_t bytes = j->src->scratch_bytes;
    if (!bytes) return LB_OK;
    *buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
    return *buf ? LB_OK : lb__fail(LB_ERR_NOMEM, "cannot allocate %zu bytes of matmul scratch", bytes);
}

/* The reference: one sum per element over k in order, product then add. */
static lb_status scalar_panels(void *ctx, size_t p0, size_t p1)
{
    const mm_job *j = ctx;
    void *buf;
    lb_status st = source_scratch(j, &buf);
    for (size_t p = p0; p < p1 && st == LB_OK; p++) {
        const float *panel = j->src->panel(j->src->ctx, p, buf);
        size_t o0 = p * LB__MM_NR, ncols = j->out - o0 < LB__MM_NR ? j->out - o0 : LB__MM_NR;
        for (size_t t = 0; t < j->n; t++) {
            const float *xr = j->x + t * j->in;
            for (size_t c = 0; c < ncols; c++) {
                float s = 0.0f;
                for (size_t k = 0; k < j->in; k++) s += xr[k] * panel[k * LB__MM_NR + c];
                j->y[t * j->out + o0 + c] = s;
            }
        }
    }
    free(buf);
    return st;
}

/* Values of k a kernel call takes: a slice of a panel is KC x 32 floats
 * (32 KiB), which with an 8-row block of X (8 KiB) fits a 48 KiB L1; a
 * whole panel of SmolLM2's 576 or 1536 inputs does not (72, 192 KiB).
 * One thread, 512 rows: 576 x 1536 122-126 -> 125-143 GFLOP/s, 576 x 576
 * 147-155 -> 157-163 (alternated), same bits. */
#define KC 256

/* Rows of X a thread keeps hot in L2 while it walks its panels: about
 * 512 KiB of packed X (half of a 1 MiB L2), a whole number of row
 * blocks. Every group streams all the thread's panels once more, which
 * for a weight far beyond L2 (SmolLM2's 49152 x 576 head, 113 MB) is a
 * pass over memory per group: 512 KiB groups halve those passes against
 * 256 KiB (prefill of 512 tokens: the head 0.50 -> 0.57 of peak). */
static size_t rows_per_group(size_t in, size_t mr)
{
    size_t rows = (512u * 1024u) / (sizeof(float) * (in ? in : 1));
    rows -= rows % mr;
    return rows < mr ? mr : rows;
}

static void panel_rows(const mm_job *j, const float *panel, size_t p, size_t r0, size_t r1)
{
    size_t mr = j->k->mr, o0 = p * LB__MM_NR, ncols = j->out - o0 < LB__MM_NR ? j->out - o0 : LB__MM_NR;
    /* the panel in slices of KC values of k, each against every row block
     * while it sits in L1, the sums carried in Y between slices (the same
     * order of additions: matmul.h) */
    for (size_t k0 = 0; k0 < j->in; k0 += KC) {
        size_t kn = j->in - k0 < KC ? j->in - k0 : KC;
        for (size_t r = r0; r < r1; r += mr) {
            /* row block r starts at r * in in the packed X (blocks hold mr
             * rows each, the last one fewer), its slice k0 * rows later */
            size_t rows = r1 - r < mr ? r1 - r : mr;
            j->k->block(j->xp + r * j->in + k0 * rows, rows, kn, panel + k0 * LB__MM_NR, j->y + r * j->out + o0, j->out,
                        ncols, k0 > 0);
        }
    }
}

static lb_status vector_panels(void *ctx, size_t p0, size_t p1)
{
    const mm_job *j = ctx;
    void *buf;
    lb_status st = source_scratch(j, &buf);
    if (st != LB_OK) return st;
    if (buf) {
        /* panels made on the fly: each once, then every row of X against it */
        for (size_t p = p0; p < p1; p++) panel_rows(j, j->src->panel(j->src->ctx, p, buf), p, 0, j->n);
        free(buf);
        return LB_OK;
    }
    /* stored panels: X rows in groups that stay in L2 while the panels stream */
    size_t group = rows_per_group(j->in, j->k->mr);
    for (size_t g = 0; g < j->n; g += group) {
        size_t gend = g + group < j->n ? g + group : j->n;
        for (size_t p = p0; p < p1; p++) panel_rows(j, j->src->panel(j->src->ctx, p, NULL), p, g, gend);
    }
    return LB_OK;
}

/* One block of R rows (a constant after inlining for the kernels' full
 * blocks): for each k the R values side by side, written in order (one
 * store stream, R load streams). */
static inline __attribute__((always_inline)) void pack_rows(const float *x, size_t in, size_t R, float *dst)
{
    for (size_t k = 0; k < in; k++)
        for (size_t r = 0; r < R; r++) dst[k * R + r] = x[r * in + k];
}

/* X into blocks of mr rows, each k-major: block b holds, for each k, its
 * rows' X[r][k] side by side, so the kernel's broadcasts walk forward. */
static void pack_x(const float *x, size_t n, size_t in, size_t mr, float *xp)
{
    for (size_t b = 0; b < n; b += mr) {
        size_t rows = n - b < mr ? n - b : mr;
        /* the kernels' full blocks (AVX-512 8 rows, AVX2 6) with R a
         * constant: 10% faster than the general loop on a copy-bound
         * 512 x 32 x 576 product (one thread, 92-101 vs 82-89 GFLOP/s) */
        if (rows == 8) pack_rows(x + b * in, in, 8, xp + b * in);
        else if (rows == 6) pack_rows(x + b * in, in, 6, xp + b * in);
        else pack_rows(x + b * in, in, rows, xp + b * in);
    }
}

typedef struct pack_job {
    const float *x;
    size_t n, in, mr;
    float *xp;
} pack_job;

/* Row blocks [b0, b1) of X packed: pack_x on their rows, which start at
 * row b0 * mr in X and in the packed copy alike. */
static lb_status pack_blocks(void *ctx, size_t b0, size_t b1)
{
    const pack_job *p = ctx;
    size_t r0 = b0 * p->mr, r1 = b1 * p->mr < p->n ? b1 * p->mr : p->n;
    pack_x(p->x + r0 * p->in, r1 - r0, p->in, p->mr, p->xp + r0 * p->in);
    return LB_OK;
}

static const lb__mm_kernel *kernel_for(lb_isa isa)
{
    isa = lb__isa_x86(lb__isa_clamp(isa)); /* these kernels are x86 only: NEON runs the scalar panels */
    if (isa >= LB_ISA_AVX512 && lb__mm_avx512.block) return &lb__mm_avx512;
    if (isa >= LB_ISA_AVX2 && lb__mm_avx2.block) return &lb__mm_avx2;
    return NULL;
}

lb_status lb__matmul_source(const float *x, size_t n, size_t out, size_t in, const lb__panel_source *src, float *y,
                            int threads, lb_isa isa)
{
    if (n == 0 || out == 0) return LB_OK;
    if (in == 0) {
        for (size_t t = 0; t < n; t++) memset(y + t * out, 0, out * sizeof *y);
        return LB_OK;
    }
    size_t panels = (out + LB__MM_NR - 1) / LB__MM_NR;
    threads = lb__threads_for(threads, n * out * in);
    mm_job j = {.x = x, .n = n, .out = out, .in = in, .src = src, .y = y, .k = kernel_for(isa)};
    if (!j.k) return lb__parallel_for(panels, 1, threads, scalar_panels, &j);
    /* a single row is already k-major */
    float *xp = NULL;
    if (n == 1) j.xp = x;
    else {
        xp = malloc(n * in * sizeof *xp);
        if (!xp) return lb__fail(LB_ERR_NOMEM, "cannot allocate %zu x %zu floats for a matmul input", n, in);
        /* split over the threads too: copied by one thread while the
         * other waited, 512 rows x 576 x 576 on two threads ran at
         * 0.56-0.60 of peak, 0.65-0.68 with the copy split */
        pack_job pj = {x, n, in, j.k->mr, xp};
        lb_status st = lb__parallel_for((n + j.k->mr - 1) / j.k->mr, 1, lb__threads_for(threads, n * in * sizeof *xp),
                                        pack_blocks, &pj);
        if (st != LB_OK) {
            free(xp);
            return st;
        }
        j.xp = xp;
    }
    lb_status st = lb__parallel_for(panels, 1, threads, vector_panels, &j);
    free(xp);
    return st;
}

static const float *stored_panel(void *ctx, size_t p, void *scratch)
{
    (void)scratch;
    const lb__packed *w = ctx;
    return w->data + p * w->in * LB__MM_NR;
}

lb_status lb__matmul_isa(const float *x, size_t n, const lb__packed *w, float *y, int threads, lb_isa isa)
{
    lb__panel_source src = {.panel = stored_panel, .ctx = (void *)w, .scratch_bytes = 0};
    return lb__matmul_source(x, n, w->out, w->in, &src, y, threads, isa);
}

lb_status lb__matmul(const float *x, size_t n, const lb__packed *w, float *y, int threads)
{
    return lb__matmul_isa(x, n, w, y, threads, lb_isa_active());
}
