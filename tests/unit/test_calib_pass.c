/* The calibration pass (src/algo/calib_pass.h) on stories260K, every path
 * once, so that the sanitizers (make asan) see each one's allocations
 * freed: SOURCE and QUANTIZED mode, with and without a callback, with
 * Hessians, a callback's error, a non-finite activation, bad arguments.
 * Checked without a forward pass where none is needed: layer 0's q/k/v
 * input is the RMS-normed token embedding, so its statistics, its row
 * samples and its Hessian follow from the model's tensors alone (the
 * Python tests, tests/model/test_calib_pass.py, check every layer against
 * the forward pass's hook). Run from the repository root. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algo/calib_pass.h"
#include "check.h"
#include "lowbit.h"

#define MODEL "models/stories260K.bin"
#define DIM 64
#define LAYERS 5
#define WINDOW 24
#define N_WINDOWS 3
#define N_SAMPLE 7

static void rmsnorm(const float *x, const float *w, size_t n, double eps, float *out)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (size_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * s);
}

typedef struct seen {
    int calls, fail_at;
    float x0[N_WINDOWS * WINDOW][DIM];  /* layer 0's q/k/v input, from the model's tensors */
    int checked;
} seen;

static lb_status on_layer(void *ctx, lb_qmodel *q, const lb__layer_stats *s)
{
    (void)q;
    seen *c = ctx;
    CHECK(s->layer == (size_t)c->calls, "layer %zu at call %d", s->layer, c->calls);
    c->calls++;
    if (s->layer == 0) {
        const lb__site_stats *a = &s->site[LB__SITE_ATTN_IN];
        size_t rows = N_WINDOWS * WINDOW;
        int ok = a->cols == DIM && a->rows == rows && a->n_sample == N_SAMPLE && a->n_weights == 3;
        for (size_t j = 0; ok && j < DIM; j++) {
            double amax = 0, sa = 0, sq = 0;
            for (size_t t = 0; t < rows; t++) {
                double v = c->x0[t][j];
                amax = fabs(v) > amax ? fabs(v) : amax, sa += fabs(v), sq += v * v;
            }
            ok = a->absmax[j] == (float)amax && fabs(a->mean_abs[j] - sa / rows) <= 1e-6 * sa / rows &&
                 fabs(a->mean_sq[j] - sq / rows) <= 1e-6 * sq / rows;
            for (size_t i = 0; ok && a->hessian && i < DIM; i++) {
                double h = 0, bound = 0;
                for (size_t t = 0; t < rows; t++)
                    h += (double)c->x0[t][i] * c->x0[t][j], bound += fabs((double)c->x0[t][i] * c->x0[t][j]);
                ok = fabs(a->hessian[i * DIM + j] - h) <= WINDOW * 0x1p-24 * bound + 1e-30;
            }
        }
        uint64_t pos[N_SAMPLE];
        lb__calib_sample_positions(pos, N_SAMPLE, rows);
        for (size_t k = 0; ok && k < N_SAMPLE; k++) /* one row in each slice [k T / n, (k + 1) T / n) */
            ok = pos[k] >= k * rows / N_SAMPLE && pos[k] < (k + 1) * rows / N_SAMPLE &&
                 memcmp(a->sample + k * DIM, c->x0[pos[k]], sizeof c->x0[pos[k]]) == 0;
        CHECK(ok, "layer 0's q/k/v input statistics are those of the normed embeddings");
        c->checked = ok;
    }
    return c->calls - 1 == c->fail_at ? LB_ERR_ARG : LB_OK;
}

static int32_t windows[N_WINDOWS][WINDOW];

static lb_status run(lb_qmodel *q, lb__calib_mode mode, int hessian, int with_fn, int fail_at, seen *c)
{
    lb__calib_pass_options o = {.mode = mode, .sample_rows = N_SAMPLE, .hessian = hessian, .threads = 2};
    c->calls = 0, c->fail_at = fail_at, c->checked = 0;
    return lb__calib_pass(q, &windows[0][0], N_WINDOWS, WINDOW, &o, with_fn ? on_layer : NULL, c);
}

int main(void)
{
    lb_model *m = NULL;
    lb_qmodel *q = NULL;
    if (lb_model_open(MODEL, &m) != LB_OK || lb_qmodel_new(m, &q) != LB_OK) {
        fprintf(stderr, "cannot open %s (run from the repository root): %s\n", MODEL, lb_last_error());
        return 1;
    }
    /* windows: lb__calib_windows over a made-up stream, ids 1 .. 511 */
    int32_t stream[400];
    for (size_t i = 0; i < 400; i++) stream[i] = (int32_t)(1 + (i * 37) % 511);
    int32_t *w = NULL;
    size_t n_w = 0;
    CHECK(lb__calib_windows(stream, 400, N_WINDOWS, WINDOW, 1, &w, &n_w) == LB_OK && n_w == N_WINDOWS, "windows");
    if (w) memcpy(windows, w, sizeof windows);
    free(w);
    CHECK(lb__calib_windows(stream, 10, 1, WINDOW, -1, &w, &n_w) == LB_ERR_ARG, "too short a text");

    seen *c = calloc(1, sizeof *c);
    size_t ei, ni;
    float *embed = malloc(512 * DIM * sizeof *embed), norm[DIM];
    lb_qmodel_find(q, "model.embed_tokens.weight", &ei);
    lb_qmodel_find(q, "model.layers.0.input_layernorm.weight", &ni);
    lb_qmodel_source_f32(q, ei, embed);
    lb_qmodel_source_f32(q, ni, norm);
    for (size_t t = 0; t < N_WINDOWS * WINDOW; t++)
        rmsnorm(embed + (size_t)windows[t / WINDOW][t % WINDOW] * DIM, norm, DIM, lb_model_arch(m)->norm_eps, c->x0[t]);
    free(embed);

    for (int mode = 0; mode < 2; mode++) {
        CHECK(run(q, (lb__calib_mode)mode, 1, 1, -1, c) == LB_OK && c->calls == LAYERS && c->checked,
              "mode %d, Hessians: %s", mode, lb_last_error());
        CHECK(run(q, (lb__calib_mode)mode, 0, 0, -1, c) == LB_OK && c->calls == 0, "mode %d, no callback", mode);
        CHECK(run(q, (lb__calib_mode)mode, 1, 1, 2, c) == LB_ERR_ARG && c->calls == 3, "mode %d: fn's error", mode);
    }
    /* a spec set: QUANTIZED mode builds and reloads quantized layers */
    lb_qspec spec;
    size_t wi;
    CHECK(lb_qspec_parse("int4:channel", &spec) == LB_OK, "spec");
    for (int l = 0; l < LAYERS; l++) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%d.mlp.down_proj.weight", l);
        CHECK(lb_qmodel_find(q, name, &wi) == LB_OK && lb_qmodel_set_spec(q, wi, &spec) == LB_OK, "%s", name);
    }
    CHECK(run(q, LB__CALIB_QUANTIZED, 1, 1, -1, c) == LB_OK && c->calls == LAYERS, "quantized: %s", lb_last_error());
    /* a norm whose products overflow: LB_ERR_NAN naming layer 1 */
    float huge[DIM];
    for (size_t j = 0; j < DIM; j++) huge[j] = 3e38f;
    lb_qmodel_find(q, "model.layers.1.input_layernorm.weight", &ni);
    CHECK(lb_qmodel_replace(q, ni, huge) == LB_OK, "replace");
    for (int with_fn = 0; with_fn < 2; with_fn++) {
        lb_status st = run(q, LB__CALIB_SOURCE, 1, with_fn, -1, c);
        CHECK(st == LB_ERR_NAN && strstr(lb_last_error(), "layer 1") && strstr(lb_last_error(), "q_proj"),
              "non-finite: %d %s", (int)st, lb_last_error());
    }
    /* bad arguments */
    lb__calib_pass_options bad = {.mode = (lb__calib_mode)5};
    CHECK(lb__calib_pass(q, &windows[0][0], N_WINDOWS, WINDOW, &bad, NULL, NULL) == LB_ERR_ARG, "mode 5");
    CHECK(lb__calib_pass(q, &windows[0][0], 0, WINDOW, NULL, NULL, NULL) == LB_ERR_ARG, "no windows");
    windows[1][3] = 9999;
    CHECK(lb__calib_pass(q, &windows[0][0], N_WINDOWS, WINDOW, NULL, NULL, NULL) == LB_ERR_ARG, "a bad token id");
    free(c);
    lb_qmodel_free(q);
    lb_model_close(m);
    return check_summary();
}
