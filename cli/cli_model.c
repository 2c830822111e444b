#include "cli_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *cli_model_kind_name(lb_model_kind k)
{
    switch (k) {
    case LB_MODEL_GGUF: return "gguf";
    case LB_MODEL_SAFETENSORS: return "safetensors";
    case LB_MODEL_HF_DIR: return "hf-directory";
    case LB_MODEL_LLAMA2C: return "llama2.c";
    }
    return "?";
}

void cli_tensor_matrix(const lb_tensor *t, uint64_t *rows, uint64_t *cols)
{
    *rows = t->n_dims >= 2 ? t->shape[0] : 1;
    *cols = *rows ? t->n_elements / *rows : 0;
}

void cli_shape_string(const lb_tensor *t, char *buf, size_t size)
{
    size_t at = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < t->n_dims && at < size; d++)
        at += (size_t)snprintf(buf + at, size - at, "%s%llu", d ? ", " : "", (unsigned long long)t->shape[d]);
    if (at < size) snprintf(buf + at, size - at, "]");
}

lb_status cli_tensor_f32(const lb_tensor *t, float **buf, size_t *cap)
{
    size_t n = (size_t)t->n_elements;
    if (n > *cap || !*buf) {
        float *p = realloc(*buf, (n ? n : 1) * sizeof **buf);
        if (!p) return LB_ERR_NOMEM; /* the library's message would be stale: callers say it */
        *buf = p, *cap = n ? n : 1;
    }
    return n ? lb_tensor_to_f32(t, *buf) : LB_OK;
}

lb_status cli_quant_stats(const lb_qspec *spec, const float *x, uint64_t rows, uint64_t cols, int threads, float *xhat,
                          lb_qstats *qs)
{
    size_t n = (size_t)(rows * cols);
    memset(qs, 0, sizeof *qs);
    if (!cli_is_plain_float(spec)) {
        lb_qtensor *q = NULL;
        lb_status st = lb_quantize(spec, x, rows, cols, threads, &q);
        if (st == LB_OK) st = lb_dequantize(q, xhat, threads);
        if (st == LB_OK) st = lb_qstats_compute(x, xhat, q, qs);
        lb_qtensor_free(q);
        return st;
    }
    lb_status st = LB_OK;
    if (spec->element == LB_FMT_FP32) {
        memcpy(xhat, x, n * sizeof *x);
    } else {
        uint16_t *codes = malloc(n * sizeof *codes);
        if (!codes) return LB_ERR_NOMEM;
        st = lb_encode_f32(spec->element, LB_SATURATE, x, n, codes, threads);
        if (st == LB_OK) st = lb_decode_f32(spec->element, codes, n, xhat, threads);
        free(codes);
    }
    double se = 0, sig = 0;
    for (size_t i = 0; st == LB_OK && i < n; i++) {
        double d = (double)x[i] - xhat[i];
        se += d * d, sig += (double)x[i] * x[i];
    }
    qs->count = n;
    qs->mse = n ? se / (double)n : 0;
    qs->sqnr_db = se > 0 ? 10 * log10(sig / se) : INFINITY;
    qs->bits_per_value = lb_format_get(spec->element)->bits;
    return st;
}

void cli_arch_json(FILE *out, const lb_arch *a)
{
    fprintf(out, "\"name\": ");
    json_string(out, a->name);
    json_field(out, "layers", a->n_layers);
    json_field(out, "dim", a->dim);
    json_field(out, "hidden_dim", a->hidden_dim);
    json_field(out, "heads", a->n_heads);
    json_field(out, "kv_heads", a->n_kv_heads);
    json_field(out, "head_dim", a->head_dim);
    json_field(out, "vocab_size", a->vocab_size);
    json_field(out, "max_seq_len", a->max_seq_len);
    json_field(out, "rope_theta", a->rope_theta);
    json_field(out, "norm_eps", a->norm_eps);
    fprintf(out, ", \"tied_embeddings\": %s, \"qkv_bias\": %s, \"qk_norm\": %s, \"rope_layout\": \"%s\"",
            a->tied_embeddings ? "true" : "false", a->qkv_bias ? "true" : "false", a->qk_norm ? "true" : "false",
            a->rope_layout == LB_ROPE_ADJACENT ? "adjacent" : "half");
}
