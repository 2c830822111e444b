/* Lending entries between two qmodels of one model (qmodel_internal.h,
 * lb__qmodel_borrow): the sensitivity sweep measures a unit as a candidate
 * qmodel holds it by lending the unit's slots to a probe qmodel whose other
 * entries are as stored, so the runner reloads exactly the candidate's
 * entries (an algorithm's quantized tensor, its imatrix, its activation
 * scales) without a copy of any of them. */
#include <string.h>

#include "util/error.h"
#include "weights/qmodel_internal.h"
#include "weights/qmodel_slot.h"

static int fresh(const qslot *s)
{
    return s->e.state == LB_QSTATE_STORED && !s->borrowed && !s->replacement && !s->qt && !s->imatrix &&
           !s->outliers && !s->ggml_bytes && !s->has_plain && s->e.act.mode == LB_ACT_NONE && s->e.ggml == LB_DT_COUNT;
}

static lb_status check_pair(const lb_qmodel *dst, const lb_qmodel *src, const char *fn)
{
    if (!dst || !src) return lb__fail(LB_ERR_ARG, "%s: NULL qmodel", fn);
    if (dst->m != src->m) return lb__fail(LB_ERR_ARG, "%s: the qmodels are of different models", fn);
    if (dst->dtype != src->dtype)
        return lb__fail(LB_ERR_ARG, "%s: the qmodels keep 16-bit values in different dtypes", fn);
    return LB_OK;
}

lb_status lb__qmodel_borrow(lb_qmodel *dst, const lb_qmodel *src, size_t i, int act_only)
{
    lb_status st = check_pair(dst, src, "lb__qmodel_borrow");
    if (st != LB_OK) return st;
    if (i >= dst->n) return lb__fail(LB_ERR_ARG, "lb__qmodel_borrow: tensor index %zu of %zu", i, dst->n);
    if (!fresh(&dst->s[i]))
        return lb__fail(LB_ERR_ARG, "lb__qmodel_borrow: %s of the borrowing qmodel is not as stored",
                        dst->s[i].e.tensor->name);
    if (act_only) { /* the activation quantization alone: nothing of the lender's is pointed to */
        dst->s[i].e.act = src->s[i].e.act;
        dst->s[i].e.input_amax = src->s[i].e.input_amax;
        dst->s[i].borrowed = 1;
        return LB_OK;
    }
    /* the lender's fused-group range, computed now so that the slot carries
     * it: the probe's group holds only this member quantized */
    float amax;
    if ((st = lb__qmodel_group_amax(src, i, &amax)) != LB_OK) return st;
    dst->s[i] = src->s[i];
    dst->s[i].borrowed = 1;
    return LB_OK;
}

void lb__qmodel_return(lb_qmodel *dst, size_t i)
{
    if (dst && i < dst->n && dst->s[i].borrowed) lb__qslot_fresh(&dst->s[i], dst->s[i].e.tensor);
}

lb_status lb__qmodel_borrow_kv(lb_qmodel *dst, const lb_qmodel *src)
{
    lb_status st = check_pair(dst, src, "lb__qmodel_borrow_kv");
    if (st != LB_OK) return st;
    if (dst->kv != LB_FMT_FP32 || dst->kv_amax)
        return lb__fail(LB_ERR_ARG, "lb__qmodel_borrow_kv: the borrowing qmodel has a KV format of its own");
    dst->kv = src->kv;
    dst->kv_amax = src->kv_amax;
    dst->kv_borrowed = 1;
    return LB_OK;
}

void lb__qmodel_return_kv(lb_qmodel *dst)
{
    if (!dst || !dst->kv_borrowed) return;
    dst->kv = LB_FMT_FP32;
    dst->kv_amax = NULL;
    dst->kv_borrowed = 0;
}
