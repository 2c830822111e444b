/* The quantized model's slots (one per model tensor) and the object
 * itself: private to src/weights/ (qmodel.c owns them; qmodel_ggml.c and
 * qmodel_outliers.c set their GGUF and outlier parts; qmodel_borrow.c
 * lends slots between two qmodels of one model). */
#ifndef LB_WEIGHTS_QMODEL_SLOT_H
#define LB_WEIGHTS_QMODEL_SLOT_H

#include <pthread.h>
#include <stddef.h>

#include "lowbit.h"
#include "weights/qmodel_internal.h"

typedef struct qslot {
    lb_qentry e;
    float *replacement;   /* n_elements floats, or NULL */
    lb_qtensor *qt;       /* set by an algorithm (owned), or NULL */
    int group_known;      /* e.group_amax is current */
    int has_plain;        /* lb__qmodel_keep_plain */
    lb_qspec plain;
    float *imatrix;       /* lb_qmodel_set_imatrix, or NULL */
    size_t n_imatrix;
    uint32_t *outliers;   /* lb_qmodel_set_outliers: input columns kept 16-bit, ascending; or NULL */
    size_t n_outliers;
    unsigned char *ggml_bytes; /* lb__qmodel_set_ggml_bytes (owned), or NULL */
    size_t n_ggml_bytes;
    float ggml_scale;     /* NVFP4's tensor scale of ggml_bytes */
    int borrowed;         /* lb__qmodel_borrow: the pointers are another qmodel's (never freed here) */
} qslot;

struct lb_qmodel {
    const lb_model *m;
    size_t n;
    qslot *s;
    lb_dtype dtype;
    lb_format kv;
    uint32_t n_layers;
    float *kv_amax;       /* [layer][k, v] once a KV format is set */
    pthread_mutex_t lock; /* the lazily cached group ranges */
    int kv_borrowed;      /* lb__qmodel_borrow_kv: kv_amax is another qmodel's */
};

/* Slot s as lb_qmodel_new makes it: tensor t STORED, nothing set. */
static inline void lb__qslot_fresh(qslot *s, const lb_tensor *t)
{
    *s = (qslot){0};
    s->e.tensor = t;
    s->e.state = LB_QSTATE_STORED;
    s->e.ggml = LB_DT_COUNT;
    s->e.act.mode = LB_ACT_NONE;
    s->e.fused_group = t->n_dims == 2 ? (int)lb__fused_group_of(t->name) : -1;
}

/* Shared by the files of the quantized model (defined in qmodel.c unless
 * said): index i checked (an error naming fn); a member changed, so its
 * fused group's cached range is dropped; what an algorithm set (a quantized
 * tensor, ggml bytes) dropped; the outlier columns dropped; n values rounded
 * to the output's 16-bit dtype and back, as a writer stores them. */
lb_status lb__qmodel_check_index(const lb_qmodel *q, size_t i, const char *fn);
void lb__qmodel_group_changed(lb_qmodel *q, size_t i);
void lb__qslot_drop_qtensor(qslot *s);
void lb__qslot_drop_outliers(qslot *s);
lb_status lb__qmodel_round_to_dtype(lb_dtype dt, float *x, uint64_t n, const char *name);
/* qmodel_ggml.c: the values an entry stored as a ggml type computes with
 * (the source through that type and back, or an algorithm's bytes). */
lb_status lb__qmodel_ggml_values(const lb_qmodel *q, size_t i, float *dst, int threads);
/* qmodel_outliers.c: the outlier columns' 16-bit values written over dst
 * (the dequantized rest, rows x cols). */
lb_status lb__qmodel_put_outliers(const lb_qmodel *q, size_t i, float *dst);

#endif
