/* lowbit bench's measurements (bench.h): the machine, read bandwidth,
 * packed matrix-vector products beyond and inside L3, and a model's decode,
 * prefill and KV-cache speed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "kernel/qmat.h"
#include "kernel/readbw.h"
#include "kernel/qdot8.h"
#include "kernel/w8a8.h"
#include "util/clock.h"
#include "util/cpu.h"
#include "util/parallel.h"


/* On stderr only when it is a terminal: the full run takes minutes. */
static void progress(const char *fmt, const char *what)
{
    if (!isatty(STDERR_FILENO)) return;
    fprintf(stderr, "\r\033[K");
    fprintf(stderr, fmt, what);
    fflush(stderr);
}

static void progress_done(void)
{
    if (isatty(STDERR_FILENO)) fprintf(stderr, "\r\033[K");
}
/* ---- the machine ---- */

void bench_machine_info(results *r)
{
    snprintf(r->cpu, sizeof r->cpu, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(r->cpu, sizeof r->cpu, "%s", colon);
        break;
    }
    if (f) fclose(f);
    r->l3 = 0;
    f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    unsigned long long v;
    char unit = 0;
    if (f && fscanf(f, "%llu%c", &v, &unit) >= 1)
        r->l3 = v * (unit == 'K' ? 1024ull : unit == 'M' ? 1024ull * 1024 : 1);
    if (f) fclose(f);
}

/* ---- 1. read bandwidth ---- */

#define READ_UNIT ((size_t)1 << 20) /* the buffer is split over threads in whole MiB */

typedef struct read_job {
    const unsigned char *buf;
    uint64_t *sums; /* one per unit; a slice writes the one at its start */
    lb_isa isa;
} read_job;

static lb_status read_units(void *ctx, size_t b, size_t e)
{
    read_job *j = ctx;
    j->sums[b] = lb__read_sum(j->buf + b * READ_UNIT, (e - b) * READ_UNIT, j->isa);
    return LB_OK;
}

static double best_read(read_job *j, size_t units, int threads, int reps)
{
    double best = 1e30;
    for (int r = 0; r <= reps; r++) { /* pass 0 warms up */
        double t0 = lb__now();
        lb__parallel_for(units, 1, threads, read_units, j);
        double dt = lb__now() - t0;
        if (r && dt < best) best = dt;
    }
    return best;
}

int bench_measure_read(const opts *o, results *r)
{
    size_t units = (size_t)(o->gib * (double)(1u << 30) / (double)READ_UNIT);
    if (units == 0) units = 1;
    unsigned char *buf = aligned_alloc(64, units * READ_UNIT);
    uint64_t *sums = calloc(units, sizeof *sums);
    if (!buf || !sums) {
        free(buf), free(sums);
        return cli_fail("bench", o->json, EXIT_RUNTIME, "out_of_memory", "cannot allocate %zu MiB to measure reads", units);
    }
    memset(buf, 1, units * READ_UNIT); /* touch every page before timing */
    read_job j = {buf, sums, lb_isa_active()};
    snprintf(r->read.method, sizeof r->read.method, "%s", lb__read_sum_method(j.isa));
    r->read.bytes = (uint64_t)units * READ_UNIT;
    r->read.gbps1 = (double)r->read.bytes / best_read(&j, units, 1, o->reps_mem) / 1e9;
    r->read.gbps = o->threads == 1 ? r->read.gbps1 : (double)r->read.bytes / best_read(&j, units, o->threads, o->reps_mem) / 1e9;
    uint64_t total = 0; /* every sum is used: each unit holds 2^20 bytes of 1, so it is checkable */
    for (size_t u = 0; u < units; u++) total += sums[u];
    free(buf), free(sums);
    if (total != (uint64_t)units * (READ_UNIT / 8) * 0x0101010101010101ull)
        return cli_fail("bench", o->json, EXIT_RUNTIME, "internal", "the read loop summed the buffer wrongly");
    return EXIT_OK;
}

/* ---- 2. matrix-vector products ---- */

/* A big view made of copies of a small packed matrix's rows. */
typedef struct tiled {
    lb__qmat m;
    void *data, *scales, *zps;
} tiled;

static void *tile(const void *src, size_t bytes, size_t times)
{
    unsigned char *d = aligned_alloc(64, (bytes * times + 63) / 64 * 64 + 64);
    for (size_t i = 0; d && i < times; i++) memcpy(d + i * bytes, src, bytes);
    return d;
}

/* What a product reads for m (its lb__qmat.bytes, counted the same way). */
static uint64_t qmat_bytes(const lb__qmat *m)
{
    uint64_t b = (uint64_t)m->rows * m->row_bytes;
    if (!m->plain) b += lb_format_bytes(m->scale_format, m->one_scale ? 1 : m->rows * m->blocks);
    if (m->zero_points) b += m->one_scale ? m->zp_row_bytes : (uint64_t)m->rows * m->zp_row_bytes;
    if (!m->plain && m->spec.two_level) b += sizeof(float);
    return b;
}

static void tiled_free(tiled *t)
{
    free(t->data), free(t->scales), free(t->zps);
    memset(t, 0, sizeof *t);
}

/* At least `target` bytes: the small matrix's rows repeated. */
static int tile_matrix(const lb__qmat *small, double target, tiled *t)
{
    memset(t, 0, sizeof *t);
    double ratio = target / (double)qmat_bytes(small);
    size_t times = (size_t)ratio + ((double)(size_t)ratio < ratio); /* round up */
    if (times == 0) times = 1;
    t->m = *small;
    t->m.owned_q = NULL, t->m.owned_buf = NULL;
    t->m.rows = small->rows * times;
    t->m.data = t->data = tile(small->data, small->rows * small->row_bytes, times);
    int ok = t->data != NULL;
    if (!small->plain && !small->one_scale) {
        t->m.scales = t->scales = tile(small->scales, lb_format_bytes(small->scale_format, small->rows * small->blocks), times);
        ok = ok && t->scales;
    }
    if (small->zero_points && !small->one_scale) {
        t->m.zero_points = t->zps = tile(small->zero_points, small->rows * small->zp_row_bytes, times);
        ok = ok && t->zps;
    }
    t->m.bytes = qmat_bytes(&t->m);
    if (!ok) tiled_free(t);
    return ok ? 0 : -1;
}

typedef struct product {
    const lb__qmat *m;
    const lb__w8a8 *a8; /* non-NULL: the W8A8 product on m */
    int act8;           /* 1: the int8-activation decode kernels (qdot8.h) */
} product;

static lb_status run_product(const product *p, const float *x, float *y, int threads)
{
    if (p->a8) return lb__w8a8_matmul(p->a8, x, 1, 0.0f, y, threads);
    return p->act8 ? lb__qmat_matmul_act8(p->m, x, 1, y, threads, lb_isa_active()) : lb__qmat_matmul(p->m, x, 1, y, threads);
}

/* Best of reps full passes, after one untimed pass (first-touch, caches);
 * the timed passes stop once they have taken `budget` seconds (at least
 * two: a slow kernel must not hold the run for minutes). */
static lb_status best_pass(const product *p, const float *x, float *y, int threads, int reps, double budget,
                           double *best)
{
    lb_status st = run_product(p, x, y, threads);
    double spent = 0;
    *best = 1e30;
    for (int r = 0; st == LB_OK && r < reps && (r < 2 || spent < budget); r++) {
        double t0 = lb__now();
        st = run_product(p, x, y, threads);
        double dt = lb__now() - t0;
        spent += dt;
        if (dt < *best) *best = dt;
    }
    return st;
}

/* A kernel that falls back to slow code would take minutes per pass over
 * the whole matrix: it is timed on its first rows instead, as many as one
 * pass of about o->slow_pass_s seconds reads but never fewer than min_bytes
 * (still well beyond the L3), and reported with the rows it ran on. */
static size_t rows_to_time(const product *p, const float *x, float *y, const opts *o, double min_bytes, lb_status *st)
{
    lb__qmat probe = *p->m;
    lb__w8a8 a8 = p->a8 ? *p->a8 : (lb__w8a8){0};
    product pp = {&probe, p->a8 ? &a8 : NULL, p->act8};
    a8.m = &probe;
    probe.rows = (p->m->rows / 16 + SMALL_ROWS - 1) / SMALL_ROWS * SMALL_ROWS; /* a sixteenth, in whole tiles */
    if (probe.rows > p->m->rows) probe.rows = p->m->rows;
    double t0 = lb__now();
    *st = run_product(&pp, x, y, o->threads);
    double full = (lb__now() - t0) * (double)p->m->rows / (double)probe.rows;
    if (*st != LB_OK || full <= o->slow_pass_s) return p->m->rows;
    double per_row = (double)p->m->bytes / (double)p->m->rows;
    double want = (double)p->m->rows * o->slow_pass_s / full, least = min_bytes / per_row;
    if (want < least) want = least;
    size_t rows = ((size_t)want + SMALL_ROWS - 1) / SMALL_ROWS * SMALL_ROWS;
    return rows < p->m->rows ? rows : p->m->rows;
}

static lb_status measure_row(const product *p, const char *name, const item *it, const float *x, float *y,
                             const opts *o, int reps, double min_bytes, mv_row *row)
{
    memset(row, 0, sizeof *row);
    snprintf(row->name, sizeof row->name, "%s", name);
    row->plain = !p->a8 && !p->act8 && cli_is_plain_float(&it->spec);
    row->element = it->spec.element;
    lb_status st = LB_OK;
    lb__qmat view = *p->m;
    lb__w8a8 a8 = p->a8 ? *p->a8 : (lb__w8a8){0};
    product pv = {&view, p->a8 ? &a8 : NULL, p->act8};
    a8.m = &view;
    if (min_bytes > 0) { /* the beyond-L3 rows: maybe fewer rows for a slow kernel */
        view.rows = rows_to_time(p, x, y, o, min_bytes, &st);
        view.bytes = qmat_bytes(&view);
        row->shortened = view.rows < p->m->rows;
    }
    row->rows = view.rows, row->cols = view.cols, row->bytes = view.bytes;
    double budget = min_bytes > 0 ? o->budget_s : o->budget_s / 4;
    if (st == LB_OK) st = best_pass(&pv, x, y, o->threads, reps, budget, &row->sec);
    if (st == LB_OK && min_bytes > 0) { /* and on one thread */
        if (o->threads == 1) row->sec1 = row->sec;
        else st = best_pass(&pv, x, y, 1, reps, budget, &row->sec1);
    }
    return st;
}

/* The W8A8 rows ride on the int8:channel and fp8_e4m3:channel matrices. */
static lb_format w8a8_act(const lb_qspec *s)
{
    if (s->granularity != LB_GRAN_CHANNEL || s->affine || s->two_level) return LB_FMT_FP32;
    return s->element == LB_FMT_INT8 || s->element == LB_FMT_FP8_E4M3 ? s->element : LB_FMT_FP32;
}

/* One size class (beyond L3, or in L3) of one spec, with its W8A8 row
 * and its int8-activation row where the kernels take the spec. */
static lb_status measure_size(const lb__qmat *small, const item *it, double target, int reps, double min_bytes,
                              const float *x, const opts *o, mv_row *rows, size_t *n)
{
    tiled t;
    if (tile_matrix(small, target, &t) != 0) return LB_ERR_NOMEM;
    float *y = malloc(t.m.rows * sizeof *y);
    product p = {&t.m, NULL, 0};
    lb_status st = y ? measure_row(&p, it->name, it, x, y, o, reps, min_bytes, &rows[(*n)++]) : LB_ERR_NOMEM;
    lb_format act = w8a8_act(&it->spec);
    if (st == LB_OK && act != LB_FMT_FP32) {
        lb__w8a8 k;
        char name[128];
        snprintf(name, sizeof name, "w8a8 %s (%s)", act == LB_FMT_INT8 ? "int8" : "fp8", it->name);
        st = lb__w8a8_init(&t.m, act, &k);
        if (st == LB_OK) {
            p.a8 = &k;
            st = measure_row(&p, name, it, x, y, o, reps, min_bytes, &rows[(*n)++]);
            lb__w8a8_free(&k);
        }
    }
    if (st == LB_OK && lb__qdot8_supported(&t.m)) {
        char name[128];
        snprintf(name, sizeof name, "%s +act int8", it->name);
        product p8 = {&t.m, NULL, 1};
        st = measure_row(&p8, name, it, x, y, o, reps, min_bytes, &rows[(*n)++]);
    }
    free(y);
    tiled_free(&t);
    return st;
}

static float *random_floats(size_t n, uint64_t seed)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; v && i < n; i++) { /* xorshift64: any values do; these are in [-1, 1) */
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        v[i] = (float)(seed >> 40) / 8388608.0f - 1.0f;
    }
    return v;
}

int bench_measure_matvec(const opts *o, results *r)
{
    float *w = random_floats((size_t)SMALL_ROWS * COLS, 1), *x = random_floats(COLS, 2);
    int rc = w && x ? EXIT_OK : cli_fail("bench", o->json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    for (size_t i = 0; rc == EXIT_OK && i < o->n_specs; i++) {
        const item *it = &o->specs[i];
        progress("bench: matvec %s\n", it->name);
        lb__qmat small;
        lb_status st = lb__qmat_from_f32(w, SMALL_ROWS, COLS, &it->spec, o->threads, &small);
        if (st != LB_OK) {
            rc = cli_fail_lb("bench", o->json, EXIT_RUNTIME, st);
            break;
        }
        if (qmat_bytes(&small) != small.bytes) /* the tiles are counted as the library counts */
            rc = cli_fail("bench", o->json, EXIT_RUNTIME, "internal", "%s: %llu bytes counted, the matrix says %llu",
                          it->name, (unsigned long long)qmat_bytes(&small), (unsigned long long)small.bytes);
        if (rc == EXIT_OK) st = measure_size(&small, it, o->gib * (double)(1u << 30), o->reps_mem, o->min_bytes, x, o, r->mem, &r->n_mem);
        if (rc == EXIT_OK && st == LB_OK) st = measure_size(&small, it, o->l3_target, o->reps_l3, 0, x, o, r->l3rows, &r->n_l3);
        if (rc == EXIT_OK && st != LB_OK)
            rc = st == LB_ERR_NOMEM ? cli_fail("bench", o->json, EXIT_RUNTIME, "out_of_memory", "%s: out of memory for %.2f GiB",
                                               it->name, o->gib)
                                    : cli_fail_lb("bench", o->json, EXIT_RUNTIME, st);
        lb__qmat_free(&small);
    }
    progress_done();
    free(w), free(x);
    return rc;
}

/* ---- 3. the model ---- */

typedef struct model_ctx {
    const opts *o;
    lb_model *m;
    int32_t *ids;  /* pseudo-random token ids */
    float *logits; /* vocab */
    uint32_t vocab;
} model_ctx;

static lb_status new_runner(const model_ctx *c, const item *it, lb_format kv, size_t ctx, lb_runner **out)
{
    lb_runner_options ro = {.threads = c->o->threads, .attn = &it->spec, .mlp = &it->spec, .embed = &it->spec,
                            .max_ctx = (uint32_t)ctx, .act = it->act, .kv = kv, .decode_act = it->decode_act};
    if (it->stored) /* no spec: every weight as the file stores it; fake: as fp32 copies */
        ro.attn = ro.mlp = ro.embed = NULL, ro.fake = it->stored == 2;
    return lb_runner_new(c->m, &ro, out);
}

/* Decode: prompt (untimed), then n single-token steps, timed. A run
 * stops early after the time budget (a slow kernel: tokens/s is then over
 * the steps done, at least 4), and no further run starts after one that did. */
static lb_status time_decode(const model_ctx *c, lb_runner *r, size_t prompt, size_t n, double *tps, size_t *timed)
{
    double best_rate = 0;
    lb_status st = LB_OK;
    int cut = 0;
    *timed = 0;
    for (int run = 0; st == LB_OK && run < c->o->runs && !cut; run++) {
        lb_runner_reset(r);
        st = lb_runner_forward(r, c->ids, prompt, c->logits, 1);
        double t0 = lb__now(), dt = 0;
        size_t i = 0;
        for (; st == LB_OK && i < n && !(cut = i >= 4 && dt > c->o->budget_s); i++) {
            st = lb_runner_forward(r, c->ids + prompt + i, 1, c->logits, 1);
            dt = lb__now() - t0;
        }
        if (st == LB_OK && (double)i / dt > best_rate) best_rate = (double)i / dt, *timed = i;
    }
    *tps = best_rate;
    return st;
}

static lb_status time_prefill(const model_ctx *c, lb_runner *r, size_t n, double *tps)
{
    double best = 1e30;
    lb_status st = LB_OK;
    for (int run = 0; st == LB_OK && run < c->o->runs && (run == 0 || best <= c->o->budget_s); run++) {
        lb_runner_reset(r);
        double t0 = lb__now();
        st = lb_runner_forward(r, c->ids, n, c->logits, 1);
        double dt = lb__now() - t0;
        if (dt < best) best = dt;
    }
    *tps = (double)n / best;
    return st;
}

static lb_status model_rows(const model_ctx *c, results *res)
{
    const opts *o = c->o;
    size_t ctx = PROMPT_TOKENS + o->decode_tokens > o->prefill_tokens ? PROMPT_TOKENS + o->decode_tokens : o->prefill_tokens;
    lb_status st = LB_OK;
    for (size_t i = 0; st == LB_OK && i < o->n_decode; i++) {
        progress("bench: model %s\n", o->decode[i].name);
        lb_runner *r = NULL;
        model_row *row = &res->dec[res->n_dec];
        memset(row, 0, sizeof *row);
        snprintf(row->name, sizeof row->name, "%s", o->decode[i].name);
        st = new_runner(c, &o->decode[i], LB_FMT_FP32, ctx, &r);
        if (st == LB_OK) {
            lb_runner_memory mem;
            lb_runner_memory_get(r, &mem);
            row->weights = mem.weights;
            st = time_decode(c, r, PROMPT_TOKENS, o->decode_tokens, &row->decode_tps, &row->decode_timed);
        }
        if (st == LB_OK) st = time_prefill(c, r, o->prefill_tokens, &row->prefill_tps);
        if (st == LB_OK) res->n_dec++;
        lb_runner_free(r);
    }
    for (size_t i = 0; st == LB_OK && i < o->n_kv; i++) {
        progress("bench: KV cache %s\n", lb_format_get(o->kv[i])->name);
        lb_runner *r = NULL;
        kv_row *row = &res->kv[res->n_kv];
        memset(row, 0, sizeof *row);
        row->kv = o->kv[i];
        st = new_runner(c, &o->kv_spec, o->kv[i], o->kv_prefill + o->kv_decode, &r);
        if (st == LB_ERR_UNSUPPORTED) { /* a build without that cache format: a row that says so */
            snprintf(row->refused, sizeof row->refused, "%s", lb_last_error());
            st = LB_OK;
        } else if (st == LB_OK) {
            lb_runner_memory mem;
            lb_runner_memory_get(r, &mem);
            row->cache_bytes = mem.kv_cache;
            st = time_decode(c, r, o->kv_prefill, o->kv_decode, &row->tps, &row->timed);
            if (st == LB_OK) st = time_prefill(c, r, o->kv_prefill, &row->prefill_tps);
        }
        if (st == LB_OK) res->n_kv++;
        lb_runner_free(r);
    }
    progress_done();
    return st;
}

int bench_measure_model(const opts *o, results *res)
{
    if (o->no_model) return res->model_note = "skipped (--no-model)", EXIT_OK;
    if (!o->model_given && access(o->model, R_OK) != 0)
        return res->model_note = "skipped: the default model is not there (make .cache/smollm2/... fetches it; or --model PATH)",
               EXIT_OK;
    model_ctx c = {.o = o};
    lb_status st = lb_model_open(o->model, &c.m);
    if (st == LB_OK && (st = lb_runner_supports(c.m, 0)) != LB_OK) lb_model_close(c.m); /* the input's fault: exit 1 */
    if (st != LB_OK) return cli_fail_lb("bench", o->json, EXIT_RUNTIME, st);
    c.vocab = lb_model_arch(c.m)->vocab_size;
    size_t n_ids = PROMPT_TOKENS + o->decode_tokens + o->prefill_tokens + o->kv_prefill + o->kv_decode;
    c.ids = malloc(n_ids * sizeof *c.ids);
    c.logits = malloc((c.vocab ? c.vocab : 1) * sizeof *c.logits);
    if (!c.ids || !c.logits || c.vocab == 0) st = c.vocab ? LB_ERR_NOMEM : LB_ERR_PARSE;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; st == LB_OK && i < n_ids; i++) { /* a fixed pseudo-random sequence of valid ids */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        c.ids[i] = (int32_t)((s >> 33) % c.vocab);
    }
    res->vocab = c.vocab;
    if (st == LB_OK) st = model_rows(&c, res);
    int rc = st == LB_OK ? EXIT_OK
                         : c.vocab == 0 ? cli_fail("bench", o->json, EXIT_RUNTIME, "parse", "%s: no vocabulary size", o->model)
                                        : cli_fail_lb("bench", o->json, st == LB_ERR_ARG || st == LB_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME, st);
    free(c.ids), free(c.logits);
    lb_model_close(c.m);
    return rc;
}
