/* lb_imatrix_compute on stories260K (llama2.c: 5 layers, dim 64, hidden
 * 172, a head tied to the embedding), checked without a forward pass where
 * one is not needed: the first layer's q/k/v input is the RMS-normed token
 * embedding, so its column sums follow from the model's tensors alone,
 * which checks the windowing (n / ctx whole windows, the rest dropped), the
 * BOS substitution, the order of accumulation and the counts. Also: every
 * projection of every block has an entry under llama.cpp's name, a tied
 * head is never recorded (not output.weight), too few tokens are refused,
 * and what is saved reads back equal. Run from the repository root. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "lowbit.h"

#define MODEL "models/stories260K.bin"
#define CTX 16
#define N_TOKENS 75 /* 4 whole windows of 16 and 11 tokens dropped */
#define BOS 1

/* the runner's RMSNorm: mean of squares in double, then w * (x * s) in fp32 */
static void rmsnorm(const float *x, const float *w, size_t n, double eps, float *out)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (size_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * s);
}

static float *tensor_f32(const lb_model *m, const char *name)
{
    const lb_tensor *t = lb_model_find(m, name);
    if (!t) return NULL;
    float *v = malloc(t->n_elements * sizeof *v);
    if (v && lb_tensor_to_f32(t, v) != LB_OK) free(v), v = NULL;
    return v;
}

static void test_first_layer(const lb_model *m, const lb_imatrix *im, const int32_t *tokens, size_t chunks)
{
    const lb_arch *a = lb_model_arch(m);
    size_t dim = a->dim;
    float *embed = tensor_f32(m, "model.embed_tokens.weight"), *norm = tensor_f32(m, "model.layers.0.input_layernorm.weight");
    float *want = calloc(dim, sizeof *want), *x = malloc(dim * sizeof *x);
    CHECK(embed && norm && want && x, "tensors of %s", MODEL);
    if (!embed || !norm || !want || !x) goto done;
    for (size_t w = 0; w < chunks; w++)
        for (size_t t = 0; t < CTX; t++) {
            int32_t id = t == 0 ? BOS : tokens[w * CTX + t];
            rmsnorm(embed + (size_t)id * dim, norm, dim, a->norm_eps, x);
            for (size_t j = 0; j < dim; j++) want[j] += x[j] * x[j];
        }
    const char *names[3] = {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "model.layers.0.self_attn.v_proj.weight"};
    for (int k = 0; k < 3; k++) {
        lb_imatrix_entry e;
        CHECK(lb_imatrix_find(im, names[k], &e), "%s found", names[k]);
        if (!lb_imatrix_find(im, names[k], &e)) continue;
        CHECK(e.cols == dim && e.n_mat == 1 && e.counts[0] == (int64_t)(chunks * CTX), "%s: %zu cols, count %lld",
              names[k], e.cols, (long long)e.counts[0]);
        size_t bad = 0;
        for (size_t j = 0; j < dim; j++) {
            bad += memcmp(&e.sums[j], &want[j], sizeof want[j]) != 0;
            bad += e.values[j] != e.sums[j] / (float)(chunks * CTX);
        }
        CHECK(bad == 0, "%s: %zu sums or values differ from the model's normed embeddings", names[k], bad);
    }
done:
    free(embed), free(norm), free(want), free(x);
}

static void test_entries(const lb_model *m, const lb_imatrix *im, size_t chunks)
{
    const lb_arch *a = lb_model_arch(m);
    static const char *kinds[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    CHECK(lb_imatrix_count(im) == 7 * (size_t)a->n_layers, "%zu entries", lb_imatrix_count(im));
    for (uint32_t l = 0; l < a->n_layers; l++)
        for (int k = 0; k < 7; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%u.%s.weight", l, kinds[k]);
            lb_imatrix_entry e;
            int found = lb_imatrix_find(im, name, &e);
            CHECK(found, "%s", name);
            if (!found) continue;
            size_t cols = k == 6 ? a->hidden_dim : k == 3 ? (size_t)a->n_heads * a->head_dim : a->dim;
            CHECK(e.cols == cols && e.counts[0] == (int64_t)(chunks * CTX), "%s: %zu cols", name, e.cols);
            int positive = 1;
            for (size_t j = 0; j < e.cols; j++) positive &= e.sums[j] > 0 && isfinite(e.sums[j]);
            CHECK(positive, "%s: every column saw some activation", name);
        }
    CHECK(!lb_imatrix_find(im, "output.weight", NULL) && !lb_imatrix_find(im, "token_embd.weight", NULL),
          "a tied head is not recorded");
    lb_imatrix_info info;
    lb_imatrix_get_info(im, &info);
    CHECK(info.chunk_count == chunks && info.chunk_size == CTX && !info.legacy, "info %u x %u", info.chunk_count,
          info.chunk_size);
    CHECK(info.n_datasets == 1 && strcmp(lb_imatrix_dataset(im, 0), "tokens.txt") == 0, "dataset");
    CHECK(info.has_metadata, "a computed imatrix has what a saved one records");
}

static void test_save_load(const lb_imatrix *im)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/test_imatrix.%ld.gguf", (long)getpid());
    unlink(path);
    CHECK(lb_imatrix_save(im, path) == LB_OK, "save: %s", lb_last_error());
    lb_imatrix *back = NULL;
    CHECK(lb_imatrix_load(path, &back) == LB_OK, "load: %s", lb_last_error());
    if (back) {
        size_t same = lb_imatrix_count(back) == lb_imatrix_count(im);
        for (size_t i = 0; same && i < lb_imatrix_count(im); i++) {
            lb_imatrix_entry x, y;
            lb_imatrix_entry_at(im, i, &x), lb_imatrix_entry_at(back, i, &y);
            same = strcmp(x.name, y.name) == 0 && x.cols == y.cols && x.counts[0] == y.counts[0] &&
                   memcmp(x.sums, y.sums, x.cols * sizeof *x.sums) == 0 &&
                   memcmp(x.values, y.values, x.cols * sizeof *x.values) == 0;
        }
        CHECK(same, "the saved imatrix reads back equal");
        lb_imatrix_info info;
        lb_imatrix_get_info(back, &info);
        CHECK(info.has_metadata && !info.legacy, "the saved file has imatrix.datasets, chunk_count, chunk_size");
    }
    lb_imatrix_free(back);
    unlink(path);
}

int main(void)
{
    lb_model *m = NULL;
    if (lb_model_open(MODEL, &m) != LB_OK) {
        CHECK(0, "open %s (run from the repository root): %s", MODEL, lb_last_error());
        return check_summary();
    }
    int32_t tokens[N_TOKENS];
    uint32_t seed = 14;
    for (int i = 0; i < N_TOKENS; i++) seed = seed * 1664525u + 1013904223u, tokens[i] = (int32_t)(seed >> 8) % 512;
    tokens[0] = 77; /* not BOS: the substitution must happen */

    lb_imatrix_options o = {.ctx = CTX, .bos = BOS, .threads = 1, .process_output = 1, .dataset = "tokens.txt"};
    lb_imatrix *im = NULL;
    CHECK(lb_imatrix_compute(m, tokens, N_TOKENS, &o, &im) == LB_OK, "compute: %s", lb_last_error());
    if (im) {
        test_first_layer(m, im, tokens, N_TOKENS / CTX);
        test_entries(m, im, N_TOKENS / CTX);
        test_save_load(im);
        lb_imatrix_free(im);
    }
    /* --chunks */
    o.max_chunks = 2, o.process_output = 0;
    CHECK(lb_imatrix_compute(m, tokens, N_TOKENS, &o, &im) == LB_OK, "compute, 2 chunks: %s", lb_last_error());
    if (im) {
        test_first_layer(m, im, tokens, 2);
        lb_imatrix_free(im);
    }
    /* fewer than two windows' tokens: refused as llama-imatrix refuses */
    im = NULL;
    CHECK(lb_imatrix_compute(m, tokens, 2 * CTX - 1, &o, &im) == LB_ERR_ARG && !im &&
              strstr(lb_last_error(), "at least 32"),
          "too few tokens: %s", lb_last_error());
    lb_model_close(m);
    return check_summary();
}
