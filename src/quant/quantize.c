/* Tensor quantization: x [rows, cols] -> packed element codes + scales,
 * and back.
 *
 * Rows are independent once the tensor-wide numbers (largest magnitude and
 * range, for per-tensor and two-level scales) are known, so rows are split
 * over threads. Within a row: each block gets its scale (scale.c), the row
 * is divided by its blocks' divisors and clamped to the element range
 * (qkernels), then encoded by one call of the format layer's bulk kernel:
 * round to nearest even, saturating. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/convert.h"
#include "quant/qkernels.h"
#include "quant/quant_internal.h"
#include "util/alloc.h"
#include "util/error.h"
#include "util/parallel.h"

/* The MSE clipping search tries ratio = (20 - k) / 20 for k = 0..10. */
#define LB_CLIP_STEPS 11

static float clip_ratio(int step) { return (float)(20 - step) / 20.0f; }

typedef struct qjob {
    const lb_qspec *spec;
    lb__scale_rules rules;
    const float *x;
    lb_qtensor *q;
    lb_isa isa;
    float *row_stats;       /* pass 1: per row amax, lo, hi */
    double *row_err;        /* per-tensor MSE search: per-row squared error */
    float *out;             /* dequantization output */
    float tensor_amax, tensor_lo, tensor_hi;
    lb__block_scale fixed;  /* tensor granularity: the one scale */
    lb__block_scale *band;  /* 2-D blocks: every block's scale, scale_rows x scales_per_row */
    float *bstats;          /* 2-D blocks, pass 1: per row and block amax, lo, hi (3 arrays of rows x blocks) */
    int final;              /* 0 while searching (errors only), 1 to store */
    /* While a row is encoded, the next four are prefetched into L2, a
     * quarter of each (lb__prescale.ahead: the row stride), so that their
     * stats pass does not wait on memory: where the encoding's arithmetic
     * per value is long enough to hide the fetch (one thread, 1 GiB tensor,
     * AMD EPYC, the next row alone: fp8 +18%, fp4 and int4 +6-8%; Intel
     * Xeon, four rows instead of one: nvfp4 +10%, mxfp4 +8%, int4 +5-8%);
     * int8's encoding is short and its rows stream as fast without
     * (int8:channel -7% with it): 0 there. */
    size_t ahead;
} qjob;

typedef struct scratch {
    float *scaled, *decoded;
    uint8_t *codes;
    lb__block_scale *chosen, *best;
    float *amax, *lo, *hi;  /* per block of the row */
    float *div, *add;       /* what block_div_clamp divides by and adds */
    float *stmp;            /* scale rules' scratch: a float and 4 code bytes per block */
    uint8_t *scodes;
    float *mul;             /* each block's true divisor (0 for an all-zero block) */
    float *serr;            /* per block: squared error in units of the scale */
    double *err, *best_err; /* per block: squared error */
} scratch;

static void scratch_free(scratch *w)
{
    free(w->scaled), free(w->decoded), free(w->codes), free(w->chosen), free(w->best);
    free(w->amax), free(w->lo), free(w->hi), free(w->div), free(w->add), free(w->mul);
    free(w->stmp), free(w->scodes);
    free(w->err), free(w->best_err), free(w->serr);
}

static lb_status scratch_alloc(scratch *w, size_t cols, size_t nb)
{
    memset(w, 0, sizeof *w);
    w->scaled = malloc(cols * sizeof(float));
    w->decoded = malloc(cols * sizeof(float));
    w->codes = calloc(cols * 4, 1); /* zeroed: a 4-bit row's spare high nibble stays 0 */
    w->chosen = malloc(nb * sizeof *w->chosen);
    w->best = malloc(nb * sizeof *w->best);
    w->amax = malloc(nb * sizeof(float)), w->lo = malloc(nb * sizeof(float)), w->hi = malloc(nb * sizeof(float));
    w->div = malloc(nb * sizeof(float)), w->add = malloc(nb * sizeof(float));
    w->mul = malloc(nb * sizeof(float));
    w->stmp = malloc(nb * sizeof(float)), w->scodes = malloc(nb * 4);
    w->err = malloc(nb * sizeof(double)), w->best_err = malloc(nb * sizeof(double));
    w->serr = malloc(nb * sizeof(float));
    if (w->scaled && w->decoded && w->codes && w->chosen && w->best && w->amax && w->lo && w->hi && w->div &&
        w->add && w->mul && w->err && w->best_err && w->stmp && w->scodes && w->serr)
        return LB_OK;
    scratch_free(w);
    return lb__fail(LB_ERR_NOMEM, "out of memory for a row of %zu values", cols);
}

static size_t blocks_per_row(const lb_qtensor *q) { return (q->cols + q->block - 1) / q->block; }

static lb_status nonfinite_error(const qjob *j, size_t r, size_t c)
{
    float v = j->x[r * j->q->cols + c];
    return lb__fail(LB_ERR_NAN, "element %zu (row %zu, column %zu) is %s; quantization needs finite values",
                    r * j->q->cols + c, r, c, isnan(v) ? "NaN" : "infinite");
}

/* The tensor-wide scale at a clipping ratio. */
static void tensor_scale_at(const qjob *j, float ratio, lb__block_scale *s)
{
    float tmp;
    uint8_t codes[8];
    lb__scales_for_blocks(&j->rules, j->isa, 1, &j->tensor_amax, &j->tensor_lo, &j->tensor_hi, ratio, s, &tmp, codes);
}

/* Per block of row x: the largest magnitude, or the range (affine).
 * Returns 1 if the row holds NaN or infinity. */
static int row_block_stats(const qjob *j, const lb__qkernels *k, const float *x, scratch *w)
{
    const lb_qtensor *q = j->q;
    if (j->spec->granularity == LB_GRAN_TENSOR || j->band) return 0; /* pass 1 checked every row */
    if (j->spec->affine) return k->block_minmax(x, q->cols, q->block, w->lo, w->hi);
    if (j->rules.full_range) { /* the signed extremes, and amax from them (the same value absmax gives) */
        int bad = k->block_minmax(x, q->cols, q->block, w->lo, w->hi);
        for (size_t b = 0, nb = blocks_per_row(q); b < nb; b++) w->amax[b] = -w->lo[b] > w->hi[b] ? -w->lo[b] : w->hi[b];
        return bad;
    }
    return k->block_absmax(x, q->cols, q->block, w->amax);
}

/* Every block's scale at a clipping ratio, and what the vector loops need. */
static void row_scales(const qjob *j, size_t r, float ratio, scratch *w)
{
    if (j->spec->granularity == LB_GRAN_TENSOR) w->chosen[0] = j->fixed;
    else if (j->band) memcpy(w->chosen, j->band + (r / j->q->block_rows) * j->q->scales_per_row,
                             j->q->scales_per_row * sizeof *w->chosen);
    else lb__scales_for_blocks(&j->rules, j->isa, blocks_per_row(j->q), w->amax, w->lo, w->hi, ratio, w->chosen,
                               w->stmp, w->scodes);
}

/* Loads the per-block arrays from w->chosen. A zero divisor (an all-zero
 * block) divides by 1: its values are all +-0 already. Symmetric specs keep
 * add[] at -0 from symmetric_adds. */
static void load_block_arrays(const qjob *j, scratch *w)
{
    const lb__block_scale *c = w->chosen;
    float *div = w->div, *add = w->add, *mul = w->mul; /* locals: the stores cannot alias them */
    size_t nb = blocks_per_row(j->q);
    for (size_t b = 0; b < nb; b++) {
        div[b] = c[b].divisor != 0 ? c[b].divisor : 1.0f;
        mul[b] = c[b].divisor;
    }
    if (j->spec->affine)
        for (size_t b = 0; b < nb; b++) add[b] = (float)c[b].zero_point;
}

/* Symmetric specs add -0, not +0, after the division: x + (-0) is x for
 * every x, while -0 + (+0) would turn a negative zero (or a negative value
 * that underflowed to -0) into +0. Set once per call of quantize_rows. */
static void symmetric_adds(const qjob *j, scratch *w)
{
    if (j->spec->affine) return;
    for (size_t b = 0, nb = blocks_per_row(j->q); b < nb; b++) w->add[b] = -0.0f;
}

/* w->err[b] = w->serr[b] * divisor^2: errors in the scale's units back in
 * the data's (an all-zero block has divisor 0 and no error). */
static void scale_errors(const lb_qtensor *q, scratch *w)
{
    for (size_t b = 0, nb = blocks_per_row(q); b < nb; b++)
        w->err[b] = (double)w->serr[b] * (double)w->mul[b] * (double)w->mul[b];
}

/* Scales and encodes row x with the divisors (and offsets) in w->div and
 * w->add into dst (bulk layout); the fused kernel prefetches the next four
 * rows meanwhile when `ahead` (the row stride) is not 0 (lb__prescale.ahead,
 * qjob.ahead). */
static void encode_loaded(const qjob *j, const lb__qkernels *k, const float *x, size_t ahead, scratch *w, uint8_t *dst)
{
    const lb_qtensor *q = j->q;
    const lb_format_info *e = lb_format_get(j->spec->element);
    size_t width;
    lb__encode_prescaled_fn fused = lb__encode_prescaled_kernel(j->isa, &width);
    if (fused && (q->block % width == 0 || q->block >= q->cols)) { /* one pass, the same bytes */
        lb__prescale ps = {w->div, j->spec->affine ? w->add : NULL, q->block, j->rules.clamp_lo, j->rules.clamp_hi,
                           ahead}; /* symmetric: add[] is all -0 */
        fused(e, x, q->cols, &ps, dst);
        return;
    }
    k->block_div_clamp(x, q->cols, q->block, w->div, w->add, j->rules.clamp_lo, j->rules.clamp_hi, w->scaled);
    lb__encode_kernel(j->isa)(e, LB_SATURATE, w->scaled, q->cols, dst);
}

/* The same with w->chosen. */
static void encode_row(const qjob *j, const lb__qkernels *k, const float *x, size_t ahead, scratch *w, uint8_t *dst)
{
    load_block_arrays(j, w);
    encode_loaded(j, k, x, ahead, w, dst);
}

/* Each block's squared error, in the data's units, for the row just
 * encoded in w->codes: the kernels measure it in units of the scale (which
 * keeps fp32 squares in range), then it is scaled back in double. */
static void row_errors(const qjob *j, const lb__qkernels *k, const float *x, scratch *w)
{
    const lb_qtensor *q = j->q;
    lb__decode_kernel(j->isa)(lb_format_get(j->spec->element), w->codes, q->cols, w->decoded);
    k->block_scaled_err(x, w->decoded, q->cols, q->block, w->div, w->add, w->serr);
    scale_errors(q, w);
}

/* Where a row's final codes go: straight into the tensor, except 6-bit
 * codes, which are encoded a byte each and packed by store_row. */
static uint8_t *final_codes(const qjob *j, size_t r, scratch *w)
{
    if (lb_format_get(j->spec->element)->bits == 6) return w->codes;
    return j->q->data + r * j->q->row_bytes;
}

static void pack_row(const qjob *j, size_t r, scratch *w)
{
    if (lb_format_get(j->spec->element)->bits == 6) lb__pack6(w->codes, j->q->cols, j->q->data + r * j->q->row_bytes);
}

static void store_row(const qjob *j, size_t r, scratch *w)
{
    lb_qtensor *q = j->q;
    const lb_format_info *sf = lb_format_get(j->spec->scale_format);
    pack_row(j, r, w);
    if (j->spec->granularity == LB_GRAN_TENSOR || j->band) return; /* stored once, by lb__quantize_ex */
    size_t nb = blocks_per_row(q);
    if (sf->bits == 8) /* e8m0 and ue4m3: a byte per block, without the width's switch per block */
        for (size_t b = 0; b < nb; b++) q->scales[r * nb + b] = (uint8_t)w->chosen[b].code;
    else
        for (size_t b = 0; b < nb; b++) lb__store_code(sf, q->scales, r * nb + b, w->chosen[b].code);
    if (q->zero_points)
        for (size_t b = 0; b < nb; b++) lb__store_zero_point(q, r, b, w->chosen[b].zero_point);
}

static lb_status quantize_rows(void *ctx, size_t begin, size_t end)
{
    const qjob *j = ctx;
    const lb_qtensor *q = j->q;
    const lb__qkernels *k = lb__qkernels_get(j->isa);
    size_t nb = blocks_per_row(q);
    scratch w;
    lb_status st = scratch_alloc(&w, q->cols, nb);
    if (st != LB_OK) return st;
    symmetric_adds(j, &w);
    int search = j->spec->search == LB_SEARCH_MSE && j->spec->granularity != LB_GRAN_TENSOR;
    /* NVFP4 and its kin: scale codes and divisors straight from the blocks'
     * maxima, without the per-block structs (nvfp4 +12% on one thread) */
    int direct = j->final && !search && !j->band && j->spec->granularity == LB_GRAN_GROUP &&
                 lb__two_level_direct(&j->rules);
    lb__fenv_guard g;
    lb__fenv_begin(&g);
    for (size_t r = begin; r < end; r++) {
        const float *x = j->x + r * q->cols;
        if (row_block_stats(j, k, x, &w)) {
            st = nonfinite_error(j, r, k->first_nonfinite(x, q->cols));
            break;
        }
        size_t ahead = r + 4 < end ? j->ahead : 0; /* the last four rows of a slice have no four after them */
        if (direct) {
            lb__two_level_scales(&j->rules, j->isa, nb, w.amax, q->scales + r * nb, w.stmp, w.div);
            encode_loaded(j, k, x, ahead, &w, final_codes(j, r, &w));
            pack_row(j, r, &w);
            continue;
        }
        if (search) { /* every ratio on the whole row; each block keeps its best (ties: larger ratio) */
            int fused = lb_format_get(j->spec->element)->kind == LB_KIND_INT;
            for (int step = 0; step < LB_CLIP_STEPS; step++) {
                row_scales(j, r, clip_ratio(step), &w);
                if (fused) { /* integers: one pass, no codes */
                    load_block_arrays(j, &w);
                    k->block_trial_err_int(x, q->cols, q->block, w.div, w.add, j->rules.clamp_lo, j->rules.clamp_hi,
                                           w.serr);
                    scale_errors(q, &w);
                } else {
                    encode_row(j, k, x, 0, &w, w.codes);
                    row_errors(j, k, x, &w);
                }
                for (size_t b = 0; b < nb; b++)
                    if (step == 0 || w.err[b] < w.best_err[b]) w.best_err[b] = w.err[b], w.best[b] = w.chosen[b];
            }
            memcpy(w.chosen, w.best, nb * sizeof *w.best);
        } else {
            row_scales(j, r, 1.0f, &w);
        }
        if (j->final) {
            encode_row(j, k, x, ahead, &w, final_codes(j, r, &w));
            store_row(j, r, &w);
        } else { /* per-tensor search: this row's error at the trial scale */
            encode_row(j, k, x, 0, &w, w.codes);
            row_errors(j, k, x, &w);
            j->row_err[r] = w.err[0];
        }
    }
    lb__fenv_end(&g);
    scratch_free(&w);
    return st;
}

/* The first row of [begin, end) with a NaN or infinity, as an error (the
 * four-row pass found one somewhere). */
static lb_status first_nonfinite_row(const qjob *j, const lb__qkernels *k, size_t begin, size_t end)
{
    size_t cols = j->q->cols;
    for (size_t r = begin; r < end; r++) {
        size_t c = k->first_nonfinite(j->x + r * cols, cols);
        if (c < cols) return nonfinite_error(j, r, c);
    }
    return lb__fail(LB_ERR_NAN, "a non-finite value was flagged in rows %zu..%zu but not found again", begin, end - 1);
}

/* Pass 1 for tensor-wide numbers: per row largest magnitude and range.
 * Magnitudes only (NVFP4's tensor scale): four rows at a time, one from
 * each quarter of the slice (rows4_absmax), then the rows left over. */
static lb_status row_stats(void *ctx, size_t begin, size_t end)
{
    const qjob *j = ctx;
    const lb__qkernels *k = lb__qkernels_get(j->isa);
    size_t cols = j->q->cols, first = begin;
    if (!lb__rules_need_range(&j->rules)) {
        size_t quarter = (end - begin) / 4;
        for (size_t i = 0; i < quarter; i++) {
            const float *rows[4];
            float amax[4];
            for (size_t s = 0; s < 4; s++) rows[s] = j->x + (begin + s * quarter + i) * cols;
            if (k->rows4_absmax(rows, cols, amax)) return first_nonfinite_row(j, k, first, end);
            for (size_t s = 0; s < 4; s++) {
                float *st = &j->row_stats[3 * (begin + s * quarter + i)];
                st[0] = amax[s], st[1] = st[2] = 0;
            }
        }
        begin += 4 * quarter;
    }
    for (size_t r = begin; r < end; r++) {
        const float *x = j->x + r * cols;
        if (k->block_absmax(x, cols, cols, &j->row_stats[3 * r]))
            return nonfinite_error(j, r, k->first_nonfinite(x, cols));
        if (lb__rules_need_range(&j->rules))
            k->block_minmax(x, cols, cols, &j->row_stats[3 * r + 1], &j->row_stats[3 * r + 2]);
        else j->row_stats[3 * r + 1] = j->row_stats[3 * r + 2] = 0;
    }
    return LB_OK;
}

/* 2-D blocks, pass 1: each row's per-block largest magnitude (and range,
 * for full-range integers), reduced over each band of block_rows rows by
 * block2d_scales. */
static lb_status block2d_stats(void *ctx, size_t begin, size_t end)
{
    const qjob *j = ctx;
    const lb__qkernels *k = lb__qkernels_get(j->isa);
    const lb_qtensor *q = j->q;
    size_t nb = q->scales_per_row, n = q->rows * nb;
    for (size_t r = begin; r < end; r++) {
        const float *x = j->x + r * q->cols;
        float *amax = j->bstats + r * nb, *lo = amax + n, *hi = lo + n;
        if (k->block_absmax(x, q->cols, q->block, amax))
            return nonfinite_error(j, r, k->first_nonfinite(x, q->cols));
        if (lb__rules_need_range(&j->rules)) k->block_minmax(x, q->cols, q->block, lo, hi);
    }
    return LB_OK;
}

/* 2-D blocks: the largest magnitude (and range) over all rows x cols of each
 * block, from pass 1's rows (max and min are exact: the order of rows does
 * not matter), then every block's scale once; the codes are stored here. */
static lb_status block2d_scales(qjob *j, int threads)
{
    lb_qtensor *q = j->q;
    size_t nb = q->scales_per_row, n = q->rows * nb, ns = q->scale_count;
    j->bstats = malloc(3 * n * sizeof(float));
    float *band = malloc(3 * ns * sizeof(float) + ns * sizeof(float) + 4 * ns);
    j->band = malloc(ns * sizeof *j->band);
    lb_status st = j->bstats && band && j->band ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory for %zu blocks", ns);
    if (st == LB_OK) st = lb__parallel_for(q->rows, 1, threads, block2d_stats, j);
    if (st == LB_OK) {
        int range = lb__rules_need_range(&j->rules);
        float *amax = band, *lo = band + ns, *hi = lo + ns, *tmp = hi + ns;
        for (size_t i = 0; i < 3 * ns; i++) band[i] = 0.0f; /* block_minmax's lo/hi include 0 as well */
        for (size_t r = 0; r < q->rows; r++) {
            const float *ra = j->bstats + r * nb, *rl = ra + n, *rh = rl + n;
            size_t o = (r / q->block_rows) * nb;
            for (size_t b = 0; b < nb; b++) {
                if (ra[b] > amax[o + b]) amax[o + b] = ra[b];
                if (range && rl[b] < lo[o + b]) lo[o + b] = rl[b];
                if (range && rh[b] > hi[o + b]) hi[o + b] = rh[b];
            }
        }
        lb__fenv_guard g;
        lb__fenv_begin(&g);
        lb__scales_for_blocks(&j->rules, j->isa, ns, amax, lo, hi, 1.0f, j->band, tmp, (uint8_t *)(tmp + ns));
        lb__fenv_end(&g);
        const lb_format_info *sf = lb_format_get(q->spec.scale_format);
        for (size_t i = 0; i < ns; i++) lb__store_code(sf, q->scales, i, j->band[i].code);
    }
    free(j->bstats), free(band);
    j->bstats = NULL;
    return st;
}

/* Rows of zero points: one row for a tensor scale, else one per row. */
static size_t zero_point_bytes(const lb_qtensor *q)
{
    return (q->spec.granularity == LB_GRAN_TENSOR ? 1 : q->rows) * q->zp_row_bytes;
}

void lb_qtensor_free(lb_qtensor *q)
{
    if (!q) return;
    lb__free_large(q->data, q->rows * q->row_bytes);
    lb__free_large(q->scales, lb_format_bytes(q->spec.scale_format, q->scale_count));
    lb__free_large(q->zero_points, zero_point_bytes(q));
    free(q);
}

/* The sizes of a quantized tensor: alloc_qtensor takes them from here, and
 * lb_qtensor_view_get reports the allocated tensor's. */
void lb__qtensor_layout(const lb_qspec *spec, size_t rows, size_t cols, lb_qtensor_view *v)
{
    memset(v, 0, sizeof *v);
    v->spec = *spec;
    v->rows = rows, v->cols = cols;
    size_t block = spec->granularity == LB_GRAN_GROUP ? spec->group : cols;
    v->scales_per_row = spec->granularity == LB_GRAN_TENSOR ? 1 : (cols + block - 1) / block;
    size_t block_rows = lb__block_rows(spec); /* 2-D blocks: one row of scales per band of block_rows rows */
    v->scale_rows = spec->granularity == LB_GRAN_TENSOR ? 1 : (rows + block_rows - 1) / block_rows;
    v->scale_count = v->scale_rows * v->scales_per_row;
    v->row_bytes = lb__packed_row_bytes(spec->element, cols);
    v->data_bytes = rows * v->row_bytes;
    v->scale_bytes = lb_format_bytes(spec->scale_format, v->scale_count);
    if (spec->affine) {
        v->zero_point_row_bytes = lb_format_bytes(spec->element, v->scales_per_row);
        v->zero_point_bytes = (spec->granularity == LB_GRAN_TENSOR ? 1 : rows) * v->zero_point_row_bytes;
    }
    v->tensor_scale = 1.0f;
}

static lb_status alloc_qtensor(const lb_qspec *spec, size_t rows, size_t cols, lb_qtensor **out)
{
    lb_qtensor *q = calloc(1, sizeof *q);
    if (!q) return lb__fail(LB_ERR_NOMEM, "out of memory");
    q->spec = *spec;
    q->rows = rows, q->cols = cols;
    lb_qtensor_view v; /* the sizes, from the one place that computes them */
    lb__qtensor_layout(spec, rows, cols, &v);
    q->block = spec->granularity == LB_GRAN_GROUP ? spec->group : cols;
    q->block_rows = lb__block_rows(spec);
    q->scales_per_row = v.scales_per_row, q->scale_rows = v.scale_rows, q->scale_count = v.scale_count;
    q->row_bytes = v.row_bytes;
    q->tensor_scale = 1.0f;
    size_t scale_bytes = v.scale_bytes;
    q->data = lb__alloc_large(rows * q->row_bytes);
    q->scales = lb__alloc_large(scale_bytes);
    q->zp_row_bytes = lb_format_bytes(spec->element, q->scales_per_row);
    if (spec->affine) q->zero_points = lb__alloc_large(zero_point_bytes(q));
    if (!q->data || !q->scales || (spec->affine && !q->zero_points)) {
        lb_qtensor_free(q);
        return lb__fail(LB_ERR_NOMEM, "out of memory for a %zu x %zu quantized tensor", rows, cols);
    }
    *out = q;
    return LB_OK;
}

lb_status lb__qtensor_alloc(const lb_qspec *spec, size_t rows, size_t cols, lb_qtensor **out)
{
    if (!spec || !out || rows == 0 || cols == 0) return lb__fail(LB_ERR_ARG, "lb__qtensor_alloc: bad argument");
    lb_status st = lb_qspec_validate(spec);
    return st == LB_OK ? alloc_qtensor(spec, rows, cols, out) : st;
}

lb_status lb_quantize(const lb_qspec *spec, const float *x, size_t rows, size_t cols, int threads, lb_qtensor **out)
{
    return lb__quantize_ex(spec, x, rows, cols, threads, 0.0f, out);
}

static lb_status quantize_tensor(const lb_qspec *spec, const float *x, size_t rows, size_t cols, int threads,
                                 float tensor_amax, float fixed_ts, lb_qtensor **out);

lb_status lb__quantize_ex(const lb_qspec *spec, const float *x, size_t rows, size_t cols, int threads,
                          float tensor_amax, lb_qtensor **out)
{
    return quantize_tensor(spec, x, rows, cols, threads, tensor_amax, 0.0f, out);
}

lb_status lb__quantize_ts(const lb_qspec *spec, const float *x, size_t rows, size_t cols, int threads,
                          float tensor_scale, lb_qtensor **out)
{
    if (!(tensor_scale > 0) || isinf(tensor_scale))
        return lb__fail(LB_ERR_ARG, "lb__quantize_ts: tensor scale %g is not a finite positive number",
                        (double)tensor_scale);
    return quantize_tensor(spec, x, rows, cols, threads, 0.0f, tensor_scale, out);
}

/* lb__quantize_ex, or with fixed_ts > 0 that two-level tensor scale. */
static lb_status quantize_tensor(const lb_qspec *spec, const float *x, size_t rows, size_t cols, int threads,
                                 float tensor_amax, float fixed_ts, lb_qtensor **out)
{
    if (!spec || !x || !out) return lb__fail(LB_ERR_ARG, "lb_quantize: NULL argument");
    if (!(tensor_amax >= 0) || isinf(tensor_amax))
        return lb__fail(LB_ERR_ARG, "lb_quantize: tensor amax %g is not a finite magnitude", (double)tensor_amax);
    *out = NULL;
    if (rows == 0 || cols == 0) return lb__fail(LB_ERR_ARG, "cannot quantize an empty tensor (%zu x %zu)", rows, cols);
    if (rows > SIZE_MAX / 4 / cols) return lb__fail(LB_ERR_ARG, "%zu x %zu values overflow the address space", rows, cols);
    lb_status st = lb_qspec_validate(spec);
    if (st != LB_OK) return st;

    lb_qtensor *q = NULL;
    if ((st = alloc_qtensor(spec, rows, cols, &q)) != LB_OK) return st;
    qjob j = {.spec = &q->spec, .x = x, .q = q, .isa = lb_isa_active(), .final = 1};
    const lb_format_info *elem = lb_format_get(spec->element);
    j.ahead = elem->kind == LB_KIND_INT && elem->bits >= 8 ? 0 : cols;
    lb__scale_rules_init(spec, &j.rules);
    int tensor_wide = spec->granularity == LB_GRAN_TENSOR || spec->two_level;
    if (tensor_wide) {
        j.row_stats = malloc(rows * 3 * sizeof(float));
        if (!j.row_stats) st = lb__fail(LB_ERR_NOMEM, "out of memory");
        if (st == LB_OK) st = lb__parallel_for(rows, 1, threads, row_stats, &j);
        if (st == LB_OK) {
            for (size_t r = 0; r < rows; r++) {
                float a = j.row_stats[3 * r], lo = j.row_stats[3 * r + 1], hi = j.row_stats[3 * r + 2];
                if (a > j.tensor_amax) j.tensor_amax = a;
                if (lo < j.tensor_lo) j.tensor_lo = lo;
                if (hi > j.tensor_hi) j.tensor_hi = hi;
            }
            lb__fenv_guard g;
            lb__fenv_begin(&g);
            /* a fused group's shared amax (>= this tensor's) sets the tensor scale only */
            float ts_amax = spec->two_level && tensor_amax > j.tensor_amax ? tensor_amax : j.tensor_amax;
            q->tensor_scale = j.rules.tensor_scale =
                spec->two_level && fixed_ts > 0 ? fixed_ts : lb__tensor_scale(&j.rules, ts_amax, j.tensor_lo, j.tensor_hi);
            lb__fenv_end(&g);
        }
        free(j.row_stats);
    }
    if (st == LB_OK && spec->granularity == LB_GRAN_TENSOR) {
        lb__fenv_guard g;
        lb__fenv_begin(&g);
        tensor_scale_at(&j, 1.0f, &j.fixed);
        lb__fenv_end(&g);
        if (spec->search == LB_SEARCH_MSE) { /* every ratio over the whole tensor */
            j.row_err = malloc(rows * sizeof(double));
            if (!j.row_err) st = lb__fail(LB_ERR_NOMEM, "out of memory");
            double best = INFINITY;
            lb__block_scale best_scale = j.fixed;
            for (int step = 0; st == LB_OK && step < LB_CLIP_STEPS; step++) {
                lb__fenv_begin(&g);
                tensor_scale_at(&j, clip_ratio(step), &j.fixed);
                lb__fenv_end(&g);
                j.final = 0;
                st = lb__parallel_for(rows, 1, threads, quantize_rows, &j);
                if (st != LB_OK) break;
                lb__fenv_begin(&g);
                double e = 0;
                for (size_t r = 0; r < rows; r++) e += j.row_err[r]; /* row order: thread-count independent */
                lb__fenv_end(&g);
                if (step == 0 || e < best) best = e, best_scale = j.fixed;
            }
            j.fixed = best_scale;
            j.final = 1;
            free(j.row_err);
        }
        lb__store_code(lb_format_get(spec->scale_format), q->scales, 0, j.fixed.code);
        if (q->zero_points) lb__store_zero_point(q, 0, 0, j.fixed.zero_point);
    }
    if (st == LB_OK && q->block_rows > 1) st = block2d_scales(&j, threads);
    if (st == LB_OK) st = lb__parallel_for(rows, 1, threads, quantize_rows, &j);
    free(j.band);
    if (st != LB_OK) {
        lb_qtensor_free(q);
        return st;
    }
    *out = q;
    return LB_OK;
}

/* ----- dequantization ----- */

static lb_status dequantize_rows(void *ctx, size_t begin, size_t end)
{
    const qjob *j = ctx;
    const lb_qtensor *q = j->q;
    const lb__qkernels *k = lb__qkernels_get(j->isa);
    const lb_format_info *e = lb_format_get(q->spec.element);
    size_t nb = blocks_per_row(q);
    uint8_t *codes = e->bits == 6 ? malloc(q->cols) : NULL;
    float *sub = malloc(nb * sizeof(float)), *mul = malloc(nb * sizeof(float));
    lb_status st = LB_OK;
    if ((e->bits == 6 && !codes) || !sub || !mul) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    lb__fenv_guard g;
    lb__fenv_begin(&g);
    for (size_t r = begin; r < end && st == LB_OK; r++) {
        const uint8_t *src = q->data + r * q->row_bytes;
        if (codes) lb__unpack6(src, q->cols, codes), src = codes;
        float *o = j->out + r * q->cols;
        lb__decode_kernel(j->isa)(e, src, q->cols, o);
        lb__row_scales(q, &j->rules, j->isa, r, mul, sub);
        k->block_sub_mul(o, q->cols, q->block, sub, mul, o);
    }
    lb__fenv_end(&g);
    free(codes), free(sub), free(mul);
    return st;
}

lb_status lb_dequantize(const lb_qtensor *q, float *out, int threads)
{
    if (!q || !out) return lb__fail(LB_ERR_ARG, "lb_dequantize: NULL argument");
    qjob j = {.spec = &q->spec, .q = (lb_qtensor *)q, .isa = lb_isa_active(), .out = out};
    lb__scale_rules_init(&q->spec, &j.rules);
    j.rules.tensor_scale = q->tensor_scale;
    return lb__parallel_for(q->rows, 1, threads, dequantize_rows, &j);
}

lb_status lb_qtensor_view_get(const lb_qtensor *q, lb_qtensor_view *v)
{
    if (!q || !v) return lb__fail(LB_ERR_ARG, "lb_qtensor_view_get: NULL argument");
    v->spec = q->spec;
    v->rows = q->rows, v->cols = q->cols;
    v->data = q->data;
    v->row_bytes = q->row_bytes;
    v->data_bytes = q->rows * q->row_bytes;
    v->scales = q->scales;
    v->scales_per_row = q->scales_per_row;
    v->scale_count = q->scale_count;
    v->scale_bytes = lb_format_bytes(q->spec.scale_format, q->scale_count);
    v->zero_points = q->zero_points;
    v->zero_point_row_bytes = q->zero_points ? q->zp_row_bytes : 0;
    v->zero_point_bytes = q->zero_points ? zero_point_bytes(q) : 0;
    v->tensor_scale = q->tensor_scale;
    v->scale_rows = q->scale_rows;
    return LB_OK;
}

int lb__zero_point(const lb_qtensor *q, size_t r, size_t b)
{
    const lb_format_info *e = lb_format_get(q->spec.element);
    uint32_t c = lb__load_code(e, q->zero_points + r * q->zp_row_bytes, b);
    if (e->sign_bits && (c >> (e->bits - 1))) return (int)c - (1 << e->bits);
    return (int)c;
}

void lb__store_zero_point(lb_qtensor *q, size_t r, size_t b, int zp)
{
    const lb_format_info *e = lb_format_get(q->spec.element);
    lb__store_code(e, q->zero_points + r * q->zp_row_bytes, b, (uint32_t)zp & ((1u << e->bits) - 1));
}

void lb__row_scales(const lb_qtensor *q, const lb__scale_rules *rules, lb_isa isa, size_t r, float *mul, float *sub)
{
    /* tensor granularity: one block per row, the one stored scale */
    int tensor = q->spec.granularity == LB_GRAN_TENSOR;
    size_t nb = tensor ? 1 : q->scales_per_row, first = tensor ? 0 : (r / q->block_rows) * nb;
    lb__scale_divisors(rules, isa, q->scales + lb_format_bytes(q->spec.scale_format, first), nb, mul);
    for (size_t b = 0; b < nb; b++) sub[b] = q->zero_points ? (float)lb__zero_point(q, tensor ? 0 : r, b) : 0.0f;
}
