/* Checking a planned tensor of a quantized Hugging Face checkpoint
 * (hf_quantized.h, lb__hfq_check): that every component the plan names --
 * codes, scales, global scale, zero points -- has the dtype and the shape
 * its format and granularity imply, before a byte of it is read. */
#include <stdio.h>

#include "io/dtype.h"
#include "io/hf_quantized.h"
#include "util/error.h"

static lb_status want_dtype(const lb_tensor *t, lb_dtype d, const char *why)
{
    if (t->dtype == d) return LB_OK;
    return lb__fail(LB_ERR_PARSE, "tensor '%s': expected dtype %s (%s), found %s", t->name, lb__dtype_name(d), why,
                    lb__dtype_name(t->dtype));
}

static lb_status want_shape2(const lb_tensor *t, uint64_t a, uint64_t b, const char *why)
{
    if (t->n_dims == 2 && t->shape[0] == a && t->shape[1] == b) return LB_OK;
    char found[96] = "";
    for (int d = 0, k = 0; d < t->n_dims && k < 80; d++)
        k += snprintf(found + k, sizeof found - (size_t)k, "%s%llu", d ? ", " : "", (unsigned long long)t->shape[d]);
    return lb__fail(LB_ERR_PARSE, "tensor '%s': expected shape [%llu, %llu] (%s), found [%s]", t->name,
                    (unsigned long long)a, (unsigned long long)b, why, found);
}

static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

lb_status lb__hfq_check(const lb__hfq_tensor *q, const char *module)
{
    if (q->rows == 0 || q->cols == 0 || q->rows > (1ull << 32) || q->cols > (1ull << 32))
        return lb__fail(LB_ERR_PARSE, "module '%s': weight shape [%llu, %llu] is empty or too large", module,
                        (unsigned long long)q->rows, (unsigned long long)q->cols);
    if (q->brows == 0 || q->bcols == 0) return lb__fail(LB_ERR_PARSE, "module '%s': scale block of size 0", module);
    lb_status st = LB_OK;
    switch (q->elem) {
    case LB__HFQ_E_FP8:
        if ((st = want_dtype(&q->codes, LB_DT_F8_E4M3, "fp8 codes")) == LB_OK)
            st = want_shape2(&q->codes, q->rows, q->cols, "the weight");
        break;
    case LB__HFQ_E_INT8:
        if ((st = want_dtype(&q->codes, LB_DT_I8, "int8 codes")) == LB_OK)
            st = want_shape2(&q->codes, q->rows, q->cols, "the weight");
        break;
    case LB__HFQ_E_PACKED:
        if (q->bits < 1 || q->bits > 8) return lb__fail(LB_ERR_PARSE, "module '%s': %d-bit codes", module, q->bits);
        if ((st = want_dtype(&q->codes, LB_DT_I32, "int32 words of packed codes")) == LB_OK)
            st = want_shape2(&q->codes, q->rows, cdiv(q->cols * (uint64_t)q->bits, 32), "ceil(in * bits / 32) words per row");
        break;
    case LB__HFQ_E_FP4:
        if (q->cols % 2) return lb__fail(LB_ERR_PARSE, "module '%s': fp4 rows of odd length %llu", module,
                                         (unsigned long long)q->cols);
        if ((st = want_dtype(&q->codes, LB_DT_U8, "two fp4 codes per byte")) == LB_OK)
            st = want_shape2(&q->codes, q->rows, q->cols / 2, "in / 2 bytes per row");
        break;
    }
    if (st != LB_OK) return st;
    uint64_t sr = cdiv(q->rows, q->brows), sc = cdiv(q->cols, q->bcols);
    const lb_tensor *s = &q->scale;
    if (q->e8m0) st = want_dtype(s, LB_DT_U8, "E8M0 exponents");
    else if (s->dtype != LB_DT_F32 && s->dtype != LB_DT_F16 && s->dtype != LB_DT_BF16 && s->dtype != LB_DT_F8_E4M3)
        return lb__fail(LB_ERR_PARSE, "tensor '%s': scales must be f32, f16, bf16 or f8_e4m3, found %s", s->name,
                        lb__dtype_name(s->dtype));
    if (st != LB_OK) return st;
    if (s->n_elements != sr * sc)
        return lb__fail(LB_ERR_PARSE, "tensor '%s': %llu scales, expected %llu x %llu (one per %llu x %llu weights)",
                        s->name, (unsigned long long)s->n_elements, (unsigned long long)sr, (unsigned long long)sc,
                        (unsigned long long)q->brows, (unsigned long long)q->bcols);
    /* 2-D blocks (strategy "block", ModelOpt's 128x128 FP8): only [ceil(rows / R), ceil(cols / C)] says which
     * block a scale is, so a 1-D or 3-D list of the right count is refused too */
    int blocks2d = q->brows > 1 && sr * sc > 1;
    if ((s->n_dims == 2 || blocks2d) && (st = want_shape2(s, sr, sc, blocks2d ? "one scale per block of rows x cols"
                                                                                : "one scale per block of weights")) != LB_OK)
        return st;
    if (q->math == LB__HFQ_M_CT && q->scale_dtype != LB_DT_F32 && q->scale_dtype != LB_DT_F16 &&
        q->scale_dtype != LB_DT_BF16)
        return lb__fail(LB_ERR_PARSE, "tensor '%s': compressed-tensors computes in the scale's dtype, which must be "
                                      "f32, f16 or bf16 here (found %s)", s->name, lb__dtype_name(q->scale_dtype));
    if (q->has_global) {
        const lb_tensor *g = &q->global;
        if (g->n_elements != 1 || (g->dtype != LB_DT_F32 && g->dtype != LB_DT_BF16 && g->dtype != LB_DT_F16))
            return lb__fail(LB_ERR_PARSE, "tensor '%s': a global scale is one f32 value (found %llu %s)", g->name,
                            (unsigned long long)g->n_elements, lb__dtype_name(g->dtype));
    }
    if (q->has_zp) {
        const lb_tensor *z = &q->zero_point;
        if (q->zp_packed) {
            if ((st = want_dtype(z, LB_DT_I32, "zero points packed into int32 words")) == LB_OK)
                st = want_shape2(z, cdiv(sr * (uint64_t)q->bits, 32), sc, "zero points packed along the output rows");
            return st;
        }
        if (z->dtype == LB_DT_BOOL || z->dtype == LB_DT_QUANTIZED || lb_dtype_get(z->dtype)->block > 1 ||
            z->n_elements != sr * sc)
            return lb__fail(LB_ERR_PARSE, "tensor '%s': expected %llu zero points (one per scale), found %llu %s",
                            z->name, (unsigned long long)(sr * sc), (unsigned long long)z->n_elements, lb__dtype_name(z->dtype));
    }
    return LB_OK;
}
