/* The sections of lowbit report, one per kind of result (report.h): each
 * reads one result's JSON and draws its charts (report_svg.h). */
#include "report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report_svg.h"

/* Charts list at most this many rows (bars) or tensors (histograms). */
#define REPORT_MAX_BARS 30
#define REPORT_MAX_HISTOGRAMS 12
#define KLD_TOKEN_BINS 50 /* log10 KLD from -8 to 2, 0.2 apart */

static double num(const lb__json *o, const char *key)
{
    const lb__json *v = o ? lb__json_get(o, key) : NULL;
    return v && v->type == LB_JSON_NUMBER ? v->number : NAN;
}

static const lb__json *arr(const lb__json *o, const char *key)
{
    const lb__json *v = o ? lb__json_get(o, key) : NULL;
    return v && v->type == LB_JSON_ARRAY ? v : NULL;
}

static const char *str(const lb__json *o, const char *key)
{
    const char *s = o ? lb__json_str(o, key) : NULL;
    return s ? s : "";
}

static void heading(FILE *f, const char *what, const char *path)
{
    fputs("<h2>", f);
    rsvg_text(f, what);
    fputs(" <span class=\"src\">", f);
    rsvg_text(f, path);
    fputs("</span></h2>\n", f);
}

static void para(FILE *f, const char *text)
{
    fputs("<p>", f);
    rsvg_text(f, text);
    fputs("</p>\n", f);
}

/* ----- inspect --json --histogram ----- */

typedef struct ranked_tensor {
    const lb__json *t;
    double beyond, kurtosis;
} ranked_tensor;

static int by_outliers(const void *pa, const void *pb)
{
    const ranked_tensor *a = pa, *b = pb;
    if (a->beyond != b->beyond) return a->beyond < b->beyond ? 1 : -1;
    return a->kurtosis < b->kurtosis ? 1 : a->kurtosis > b->kurtosis ? -1 : 0;
}

int report_inspect(FILE *f, const char *path, const lb__json *r)
{
    heading(f, "Weights and their grid", path);
    const lb__json *ts = arr(r, "tensors");
    size_t n = 0;
    ranked_tensor *rt = calloc(ts ? ts->len + 1 : 1, sizeof *rt);
    if (!rt) return -1;
    for (size_t i = 0; ts && i < ts->len; i++)
        if (arr(&ts->items[i], "grid") || lb__json_get(&ts->items[i], "histogram"))
            rt[n++] = (ranked_tensor){&ts->items[i], num(&ts->items[i], "beyond_6std"), num(&ts->items[i], "kurtosis")};
    if (!n) {
        para(f, "No histograms in this file: run lowbit inspect MODEL --json --histogram [--spec S].");
        free(rt);
        return 0;
    }
    qsort(rt, n, sizeof *rt, by_outliers);
    char text[512];
    snprintf(text, sizeof text, "The %zu weights with the most values beyond 6 standard deviations (of %zu with "
             "histograms), each a histogram of its values (log counts). Orange lines: the grid of the spec at the "
             "tensor's absmax scale (one scale for the whole tensor: the coarse grid); red bins: beyond 6 standard "
             "deviations, the outliers that stretch that grid.", n < REPORT_MAX_HISTOGRAMS ? n : REPORT_MAX_HISTOGRAMS, n);
    para(f, text);
    for (size_t k = 0; k < n && k < REPORT_MAX_HISTOGRAMS; k++) {
        const lb__json *t = rt[k].t, *h = lb__json_get(t, "histogram"), *c = arr(h, "counts"), *g = arr(t, "grid");
        if (!c) continue;
        double *counts = calloc(c->len + 1, sizeof *counts), *grid = calloc(g ? g->len + 1 : 1, sizeof *grid);
        if (!counts || !grid) {
            free(counts), free(grid), free(rt);
            return -1;
        }
        for (size_t i = 0; i < c->len; i++) counts[i] = c->items[i].number;
        for (size_t i = 0; g && i < g->len; i++) grid[i] = g->items[i].number;
        char title[512];
        snprintf(title, sizeof title, "%s  (%s, kurtosis %.3g, %.0f beyond 6 std%s%s)", str(t, "name"), str(t, "dtype"),
                 num(t, "kurtosis"), num(t, "beyond_6std"), g ? ", grid " : "", g ? str(t, "grid_spec") : "");
        rsvg_histogram(f, title, "weight value", counts, c->len, num(h, "lo"), num(h, "hi"), grid, g ? g->len : 0,
                       6 * num(t, "std"), 1);
        free(counts), free(grid);
    }
    free(rt);
    return 0;
}

/* ----- error --json: SQNR per tensor and spec ----- */

int report_error(FILE *f, const char *path, const lb__json *r)
{
    heading(f, "SQNR per tensor and spec", path);
    const lb__json *specs = arr(r, "specs"), *ts = arr(r, "tensors");
    if (!specs || !ts || !specs->len) return para(f, "No specs in this file."), 0;
    const char **cols = calloc(specs->len, sizeof *cols), **rows = calloc(ts->len + 1, sizeof *rows);
    double *v = calloc(ts->len * specs->len + 1, sizeof *v);
    if (!cols || !rows || !v) {
        free(cols), free(rows), free(v);
        return -1;
    }
    for (size_t c = 0; c < specs->len; c++) cols[c] = str(&specs->items[c], "spec");
    for (size_t i = 0; i < ts->len; i++) {
        rows[i] = str(&ts->items[i], "name");
        const lb__json *s = arr(&ts->items[i], "sqnr_db");
        for (size_t c = 0; c < specs->len; c++)
            v[i * specs->len + c] = s && c < s->len && s->items[c].type == LB_JSON_NUMBER ? s->items[c].number : NAN;
    }
    para(f, "Signal-to-quantization-noise ratio of each weight under each spec (dB; higher is better): the layers "
            "that lose the most are the red cells.");
    rsvg_heatmap(f, "SQNR (dB) per tensor and spec", "dB", rows, ts->len, cols, specs->len, v);
    free(cols), free(rows), free(v);
    return 0;
}

/* ----- compare --json: bits per weight against KLD ----- */

int report_compare(FILE *f, const char *path, const lb__json *r)
{
    heading(f, "Bits per weight against KL divergence", path);
    const lb__json *specs = arr(r, "specs");
    if (!specs || !specs->len) return para(f, "No specs in this file."), 0;
    size_t n = specs->len;
    double *x = calloc(n, sizeof *x), *y = calloc(n, sizeof *y);
    char (*names)[128] = calloc(n, sizeof *names);
    const char **labels = calloc(n, sizeof *labels);
    if (!x || !y || !names || !labels) {
        free(x), free(y), free(names), free(labels);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const lb__json *s = &specs->items[i];
        x[i] = num(s, "bits_per_weight"), y[i] = num(s, "kld_mean");
        const char *m = str(s, "method");
        snprintf(names[i], sizeof names[i], "%s%s%s", str(s, "spec"), *m && strcmp(m, "rtn") ? " " : "",
                 *m && strcmp(m, "rtn") ? m : "");
        labels[i] = names[i];
    }
    rsvg_series s = {"specs", x, y, labels, n, 0, "#4a78b5"};
    para(f, "Each spec's bits per weight (scales counted) and its mean KL divergence from the model as stored: "
            "down and to the left is better.");
    rsvg_scatter(f, "KLD against bits per weight", "bits per weight", "mean KLD (nats per token)", &s, 1, 1);
    free(x), free(y), free(names), free(labels);
    return 0;
}

/* ----- sensitivity --json: sorted bars per kind ----- */

int report_sensitivity(FILE *f, const char *path, const lb__json *r)
{
    heading(f, "Sensitivity: each unit quantized alone", path);
    const lb__json *units = arr(r, "units");
    if (!units || !units->len) return para(f, "No units in this file."), 0;
    static const char *const kinds[] = {"tensor", "layer", "class"};
    const char *labels[REPORT_MAX_BARS];
    double v[REPORT_MAX_BARS], e[REPORT_MAX_BARS];
    for (int k = 0; k < 3; k++) {
        size_t n = 0, total = 0;
        for (size_t i = 0; i < units->len; i++) {
            const lb__json *u = &units->items[i];
            if (strcmp(str(u, "kind"), kinds[k]) != 0) continue;
            total++;
            if (n < REPORT_MAX_BARS) labels[n] = str(u, "name"), v[n] = num(u, "kld"), e[n] = num(u, "kld_err"), n++;
        }
        if (!n) continue;
        char title[160];
        snprintf(title, sizeof title, "KLD per %s, costliest first (%zu of %zu)", kinds[k], n, total);
        rsvg_bars(f, title, "mean KLD when only this unit is quantized (nats per token)", labels, v, e, n, 0, NULL);
    }
    return 0;
}

/* ----- quantize --json with a target: the Pareto front ----- */

int report_quantize(FILE *f, const char *path, const lb__json *r)
{
    heading(f, "Mixed precision: the Pareto front", path);
    const lb__json *mix = lb__json_get(r, "mix"), *front = arr(mix, "front"), *cands = arr(mix, "candidates");
    if (!mix || !front) {
        char text[256];
        snprintf(text, sizeof text, "%s: %s, %.3f bits per weight (no target: no front to draw).", str(r, "output"),
                 str(r, "format"), num(r, "bits_per_weight"));
        para(f, text);
        return 0;
    }
    size_t nf = front->len, nc = cands ? cands->len : 0;
    double *fx = calloc(nf + 1, sizeof *fx), *fy = calloc(nf + 1, sizeof *fy);
    double *cx = calloc(nc + 1, sizeof *cx), *cy = calloc(nc + 1, sizeof *cy);
    const char **cl = calloc(nc + 1, sizeof *cl);
    if (!fx || !fy || !cx || !cy || !cl) {
        free(fx), free(fy), free(cx), free(cy), free(cl);
        return -1;
    }
    for (size_t i = 0; i < nf; i++) {
        const lb__json *p = &front->items[i];
        fx[i] = p->type == LB_JSON_ARRAY && p->len == 2 ? p->items[0].number : NAN;
        fy[i] = p->type == LB_JSON_ARRAY && p->len == 2 ? p->items[1].number : NAN;
    }
    for (size_t i = 0; i < nc; i++)
        cx[i] = num(&cands->items[i], "bpw"), cy[i] = num(&cands->items[i], "kld_predicted"), cl[i] = str(&cands->items[i], "name");
    double bx = num(mix, "bpw"), by = num(mix, "kld_predicted"), mx = bx, my = num(mix, "kld_measured");
    rsvg_series s[4] = {{"front explored (predicted: the weights' KLD summed)", fx, fy, NULL, nf, 1, "#4a78b5"},
                        {"uniform candidates (predicted)", cx, cy, cl, nc, 0, "#888888"},
                        {"chosen mix (predicted)", &bx, &by, NULL, 1, 0, "#27ae60"},
                        {"chosen mix (measured whole)", &mx, &my, NULL, 1, 0, "#c0392b"}};
    char text[400];
    snprintf(text, sizeof text, "%s: %.3f bits per weight; predicted KLD %.5f, measured whole %.5f on the "
             "calibration windows. The greedy walks from the cheapest candidates, spending bits where they save "
             "the most KLD per bit.", str(r, "output"), bx, by, my);
    para(f, text);
    rsvg_scatter(f, "Bits per weight against KLD", "bits per weight", "KLD (nats per token)", s, 4, 1);
    free(fx), free(fy), free(cx), free(cy), free(cl);
    return 0;
}

/* ----- eval --json: results with their intervals ----- */

int report_eval(FILE *f, const char *path, const lb__json *r)
{
    heading(f, "Benchmark accuracy", path);
    const lb__json *tasks = arr(r, "tasks");
    if (!tasks || !tasks->len) return para(f, "No tasks in this file."), 0;
    size_t n = 0, cap = 3 * tasks->len;
    char (*names)[160] = calloc(cap, sizeof *names);
    const char **labels = calloc(cap, sizeof *labels);
    double *mid = calloc(cap, sizeof *mid), *lo = calloc(cap, sizeof *lo), *hi = calloc(cap, sizeof *hi);
    double *dmid = calloc(cap, sizeof *dmid), *dlo = calloc(cap, sizeof *dlo), *dhi = calloc(cap, sizeof *dhi);
    const char **dl = calloc(cap, sizeof *dl);
    size_t nd = 0;
    if (!names || !labels || !mid || !lo || !hi || !dmid || !dlo || !dhi || !dl) n = cap + 1;
    for (size_t i = 0; n <= cap && i < tasks->len; i++) {
        const lb__json *t = &tasks->items[i];
        const char *metric = str(t, "headline");
        if (!*metric) metric = "acc";
        char se_key[64];
        snprintf(se_key, sizeof se_key, "%s_se", metric);
        static const char *const sides[] = {"base", "quant"};
        for (int s = 0; s < 2; s++) {
            const lb__json *m = lb__json_get(t, sides[s]);
            if (!m) continue;
            double v = num(m, metric), se = num(m, se_key);
            snprintf(names[n], sizeof names[n], "%s %s (%s)", str(t, "task"), sides[s], metric);
            labels[n] = names[n], mid[n] = v, lo[n] = v - 1.96 * se, hi[n] = v + 1.96 * se, n++;
        }
        const lb__json *p = lb__json_get(lb__json_get(t, "paired"), metric);
        if (p) {
            dl[nd] = str(t, "task"), dmid[nd] = num(p, "diff"), dlo[nd] = num(p, "ci_lo"), dhi[nd] = num(p, "ci_hi");
            nd++;
        }
    }
    int rc = 0;
    if (n > cap) rc = -1;
    else {
        para(f, "Each task's headline accuracy with its 95% interval (1.96 standard errors); for a comparison, the "
                "paired difference (quantized minus base) with its bootstrap 95% interval: an interval that holds 0 "
                "is indistinguishable from noise.");
        rsvg_intervals(f, "Accuracy (95% intervals)", "accuracy", labels, mid, lo, hi, n, 0, 0);
        if (nd) rsvg_intervals(f, "Paired difference, quantized minus base (95% bootstrap interval)",
                               "difference in accuracy", dl, dmid, dlo, dhi, nd, 1, 0);
    }
    free(names), free(labels), free(mid), free(lo), free(hi), free(dmid), free(dlo), free(dhi), free(dl);
    return rc;
}

/* ----- bench --json: GB/s against the read bandwidth ----- */

int report_bench(FILE *f, const char *path, const lb__json *r)
{
    heading(f, "Kernels against the memory roof", path);
    const lb__json *rows = arr(lb__json_get(r, "matvec"), "rows");
    double read = num(lb__json_get(r, "read"), "gbps");
    if (!rows || !rows->len) return para(f, "No matvec rows in this file."), 0;
    size_t n = rows->len < REPORT_MAX_BARS ? rows->len : REPORT_MAX_BARS;
    const char *labels[REPORT_MAX_BARS];
    double v[REPORT_MAX_BARS];
    for (size_t i = 0; i < n; i++) labels[i] = str(&rows->items[i], "spec"), v[i] = num(&rows->items[i], "gbps");
    char text[256];
    snprintf(text, sizeof text, "Matrix-vector products on packed weights: bytes of weights read per second, against "
             "the read bandwidth measured in the same run (%.1f GB/s, the dashed line: the roof a decode-bound kernel "
             "can reach).", read);
    para(f, text);
    rsvg_bars(f, "Matvec GB/s per spec", "GB/s of packed weights", labels, v, NULL, n, read, "read bandwidth");
    return 0;
}

/* ----- kld --save-tokens: the per-token distribution ----- */

int report_kld_tokens(FILE *f, const char *path, const char *text, size_t len)
{
    heading(f, "KL divergence per token", path);
    double counts[KLD_TOKEN_BINS] = {0};
    size_t n = 0, zero = 0;
    const char *p = text, *e = text + len;
    while (p < e) {
        const char *nl = memchr(p, '\n', (size_t)(e - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(e - p);
        if (l && *p != '#') {
            char line[256];
            snprintf(line, sizeof line, "%.*s", (int)(l < 255 ? l : 255), p);
            char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
            double k = t2 ? strtod(t2 + 1, NULL) : NAN;
            if (isfinite(k)) {
                n++;
                if (k <= 0) zero++;
                else {
                    long b = (long)floor((log10(k) + 8) / 10 * KLD_TOKEN_BINS);
                    counts[b < 0 ? 0 : b >= KLD_TOKEN_BINS ? KLD_TOKEN_BINS - 1 : b]++;
                }
            }
        }
        p += l + 1;
    }
    char msg[256];
    snprintf(msg, sizeof msg, "%zu scored tokens (%zu with KLD 0, not drawn): most tokens barely move, a few carry "
             "most of the divergence (the right tail).", n, zero);
    para(f, msg);
    rsvg_histogram(f, "Per-token KLD (log10 nats)", "log10 KLD", counts, KLD_TOKEN_BINS, -8, 2, NULL, 0, 0, 0);
    return 0;
}
