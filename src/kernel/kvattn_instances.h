/* The kernel table of one vector set of kvattn.h, included by
 * kvattn_avx512.c and kvattn_avx2.c after they define
 *   AI void scores_f(lb_format f, const lb__kv_view *k, const float *q, size_t ldq, size_t mr, size_t len,
 *                    float *s, size_t lds);
 *   AI void mix_f(lb_format f, const lb__kv_view *v, const float *p, size_t ldp, size_t mr, size_t len,
 *                 float *o, size_t ldo);
 * and LB__KV_SET, the table's name: one instance of each per cache format
 * (its conversion inlined, f a constant), and the table calling the one of
 * a view's format (lb__kv_scores and lb__kv_mix send only those seven). */
#ifndef LB_KERNEL_KVATTN_INSTANCES_H
#define LB_KERNEL_KVATTN_INSTANCES_H

#define LB__KV_FORMATS(X) X(LB_FMT_FP32, f32) X(LB_FMT_BF16, bf16) X(LB_FMT_FP16, fp16) X(LB_FMT_FP8_E4M3, e4m3) \
    X(LB_FMT_FP8_E5M2, e5m2) X(LB_FMT_INT8, int8) X(LB_FMT_INT4, int4)
#define LB__KV_INSTANCE(F, name)                                                                                  \
    static void scores_##name(const lb__kv_view *k, const float *q, size_t ldq, size_t mr, size_t len, float *s,   \
                              size_t lds)                                                                         \
    {                                                                                                             \
        scores_f(F, k, q, ldq, mr, len, s, lds);                                                                  \
    }                                                                                                             \
    static void mix_##name(const lb__kv_view *v, const float *p, size_t ldp, size_t mr, size_t len, float *o,      \
                           size_t ldo)                                                                            \
    {                                                                                                             \
        mix_f(F, v, p, ldp, mr, len, o, ldo);                                                                     \
    }
LB__KV_FORMATS(LB__KV_INSTANCE)

static void scores(const lb__kv_view *k, const float *q, size_t ldq, size_t mr, size_t len, float *s, size_t lds)
{
#define LB__KV_CALL_SCORES(F, name) if (k->format == F) scores_##name(k, q, ldq, mr, len, s, lds);
    LB__KV_FORMATS(LB__KV_CALL_SCORES)
}

static void mix(const lb__kv_view *v, const float *p, size_t ldp, size_t mr, size_t len, float *o, size_t ldo)
{
#define LB__KV_CALL_MIX(F, name) if (v->format == F) mix_##name(v, p, ldp, mr, len, o, ldo);
    LB__KV_FORMATS(LB__KV_CALL_MIX)
}

const lb__kv_kernels LB__KV_SET = {scores, mix};

#endif
