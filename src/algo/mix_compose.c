/* A chosen mix as one qmodel (lowbit.h, lb_qmodel_compose): each unit's
 * entries lent from the candidate chosen for it, the rest from the base
 * candidate, nothing copied. */
#include <stdlib.h>

#include "algo/units.h"
#include "util/error.h"
#include "weights/qmodel_internal.h"

lb_status lb_qmodel_compose(const lb_qmodel *const *cands, size_t n_cands, size_t base, const lb_units *units,
                            const size_t *choice, lb_qmodel **out)
{
    if (!cands || !units || !choice || !out || base >= n_cands)
        return lb__fail(LB_ERR_ARG, "lb_qmodel_compose: NULL argument or base %zu of %zu candidates", base, n_cands);
    *out = NULL;
    for (size_t u = 0; u < units->n; u++)
        if (choice[u] >= n_cands)
            return lb__fail(LB_ERR_ARG, "lb_qmodel_compose: unit %zu chooses candidate %zu of %zu", u, choice[u], n_cands);
    lb_qmodel *q;
    lb_status st = lb_qmodel_new(lb_qmodel_model(cands[base]), &q);
    if (st == LB_OK) st = lb_qmodel_set_dtype(q, lb_qmodel_dtype(cands[base]));
    /* which candidate each entry comes from: its unit's choice, else the base */
    size_t *from = st == LB_OK ? malloc((lb_qmodel_count(q) + 1) * sizeof *from) : NULL;
    if (st == LB_OK && !from) st = lb__fail(LB_ERR_NOMEM, "lb_qmodel_compose: out of memory");
    for (size_t i = 0; st == LB_OK && i < lb_qmodel_count(q); i++) from[i] = base;
    const lb_qmodel *kv = cands[base];
    for (size_t u = 0; st == LB_OK && u < units->n; u++) {
        const lb__unit *x = &units->u[u];
        if (x->act_only) continue; /* the weights' candidate decides; a unit of activations alone is no weight's */
        for (size_t k = 0; k < x->n; k++) from[x->entries[k]] = choice[u];
        if (x->kv) kv = cands[choice[u]];
    }
    for (size_t i = 0; st == LB_OK && i < lb_qmodel_count(q); i++) st = lb__qmodel_borrow(q, cands[from[i]], i, 0);
    if (st == LB_OK && lb_qmodel_kv(kv) != LB_FMT_FP32) st = lb__qmodel_borrow_kv(q, kv);
    free(from);
    if (st != LB_OK) {
        lb_qmodel_free(q);
        return st;
    }
    *out = q;
    return LB_OK;
}
