/* Mixed precision under a budget for lowbit quantize (cli_target.h): the
 * candidates as quantized models, the units measured alone
 * (lb_sensitivity), the choice (lb_mix_choose), the check of the whole
 * (lb_qmodel_compose, measured as one unit), the recipe written. */
#include "cli_target.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli_eval.h"
#include "cli_output.h"
#include "cli_sweep.h"
#include "util/clock.h"
#include "util/file.h"

#define TARGET_CTX 512

static int parse_positive(const char *cmd, int json, const char *opt, const char *v, double *out)
{
    char *end;
    double x = strtod(v, &end);
    double scale = 1;
    if (end != v && strcmp(opt, "--target-size") == 0) {
        if (strcasecmp(end, "GB") == 0) scale = 1e9, end += 2;
        else if (strcasecmp(end, "MB") == 0) scale = 1e6, end += 2;
        else if (strcasecmp(end, "KB") == 0) scale = 1e3, end += 2;
    }
    if (end == v || *end || !(x > 0) || !isfinite(x))
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s takes a positive number%s, not '%s'", opt,
                        strcmp(opt, "--target-size") == 0 ? " of bytes (or with GB, MB, KB)" : "", v);
    *out = x * scale;
    return EXIT_OK;
}

int cli_target_option(const char *cmd, int json, int argc, char **argv, int *i, cli_target_args *t)
{
    const char *o = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    double *slot = strcmp(o, "--target-bpw") == 0 ? &t->bpw
                   : strcmp(o, "--target-size") == 0 ? &t->size_bytes
                   : strcmp(o, "--max-kld") == 0 ? &t->max_kld
                                                  : NULL;
    const char **text = strcmp(o, "--candidates") == 0 ? &t->candidates
                        : strcmp(o, "--recipe-out") == 0 ? &t->recipe_out
                        : strcmp(o, "--sweep") == 0      ? &t->sweep
                                                         : NULL;
    if (!slot && !text) return 0;
    if (!v) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s needs a value", o), -1;
    if (slot) {
        if ((t->bpw > 0) + (t->size_bytes > 0) + (t->max_kld > 0) > 0)
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "one of --target-bpw, --target-size and --max-kld"), -1;
        if (parse_positive(cmd, json, o, v, slot) != EXIT_OK) return -1;
        t->given = 1;
    } else *text = v;
    *i += 1;
    return 1;
}

/* ===== The candidates ===== */

typedef struct cand {
    char name[256];   /* as given: a ggml type name, a spec, or keep */
    lb_qmodel *q;
    double bits;      /* every weight's bits (lb_qmodel_size_of) */
} cand;

typedef struct state {
    const char *cmd;
    int json, gguf, threads;
    cli_eval_model e;
    cli_gguf_args g;     /* the GGUF options with the imatrix computed once */
    cand c[CLI_TARGET_MAX_CANDIDATES];
    size_t n;
    const lb_qmodel *qs[CLI_TARGET_MAX_CANDIDATES];
    lb_units *units;
    size_t nu;
    lb_unit_cost *costs; /* [n x nu] */
    uint64_t params;     /* every weight's elements */
    double fixed_bits;   /* weights in no unit (as candidate 0 holds them) */
    double other_bits;   /* the tensors that are not weights (norms), as stored */
    int32_t *ids;
    size_t n_ids;
    lb_sensitivity_options so;
    size_t windows;      /* of so.ctx tokens measured on: the text's whole windows, at most so.max_windows */
    const char *model, *calib, *sweep; /* the --sweep file's key, and the file */
} state;

static int is_keep(const char *s) { return strcmp(s, "keep") == 0 || strcasecmp(s, "bf16") == 0 || strcasecmp(s, "16-bit") == 0; }

/* A candidate's quantized model: a pure GGUF type, or the decoder layers' weights under a spec (kept). */
static int make_candidate(state *s, const char *name, const cli_recipe_args *ra, const char *calib, cand *c)
{
    snprintf(c->name, sizeof c->name, "%s", name);
    int rc;
    if (s->gguf) {
        if (lb_ggml_type_by_name(name) < 0)
            return cli_fail(s->cmd, s->json, EXIT_USAGE, "bad_argument", "--candidates: '%s' is not a ggml type "
                            "(q4_K, q8_0, iq4_xs, ...)", name);
        lb_status st = lb_qmodel_new(s->e.model, &c->q);
        if (st != LB_OK) return cli_fail_lb(s->cmd, s->json, EXIT_RUNTIME, st);
        cli_gguf_args g = s->g;
        g.type = name, g.pure = 1, g.dry_run = 0;
        rc = cli_gguf_choose(s->cmd, s->json, c->q, &g, s->threads, NULL);
    } else {
        char rule[512];
        cli_recipe_args r = *ra;
        r.n_rules = 0, r.scheme = NULL, r.recipe_file = NULL, r.kv = NULL;
        snprintf(rule, sizeof rule, "model.layers.*%s%s", is_keep(name) ? "" : "=", is_keep(name) ? "" : name);
        r.rules[0] = rule, r.rule_is_keep[0] = is_keep(name), r.n_rules = 1;
        lb_recipe *recipe = NULL;
        rc = cli_recipe_build(s->cmd, s->json, &r, &recipe);
        if (rc == EXIT_OK) rc = cli_recipe_qmodel(s->cmd, s->json, s->e.model, recipe, &c->q);
        lb_recipe_free(recipe);
    }
    if (rc == EXIT_OK) rc = cli_method_apply(s->cmd, s->json, c->q, s->e.tok, calib, ra, s->threads);
    lb_qmodel_size sz;
    lb_status st = rc == EXIT_OK ? lb_qmodel_size_of(c->q, &sz) : LB_OK;
    if (st != LB_OK) rc = cli_fail_lb(s->cmd, s->json, EXIT_RUNTIME, st);
    if (rc == EXIT_OK) c->bits = sz.weight_bits, s->params = sz.weight_params;
    return rc;
}

/* The candidates of the list; engine specs the format cannot hold are left out with a note. */
static int make_candidates(state *s, const char *list, const cli_recipe_args *ra, const char *calib,
                           lb_export_format fmt)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (s->n == CLI_TARGET_MAX_CANDIDATES)
            return cli_fail(s->cmd, s->json, EXIT_USAGE, "bad_argument", "--candidates: at most %d",
                            CLI_TARGET_MAX_CANDIDATES);
        cand *c = &s->c[s->n];
        int rc = make_candidate(s, p, ra, calib, c);
        if (rc != EXIT_OK) return rc;
        lb_export_options o = {.format = fmt};
        if (!s->gguf && lb_export_check(c->q, &o) != LB_OK) {
            fprintf(stderr, "lowbit %s: note: candidate %s left out: %s\n", s->cmd, p, lb_last_error());
            lb_qmodel_free(c->q);
            c->q = NULL;
            continue;
        }
        s->qs[s->n++] = c->q;
    }
    if (s->n < 2)
        return cli_fail(s->cmd, s->json, EXIT_USAGE, "bad_argument", "--candidates: %zu usable candidate%s; a choice "
                        "needs two or more", s->n, s->n == 1 ? "" : "s");
    return EXIT_OK;
}

/* ===== Measuring ===== */

/* Whether candidates a and b hold entry i alike (then one measurement serves both). */
static int same_entry(const lb_qmodel *a, const lb_qmodel *b, size_t i)
{
    lb_qentry x, y;
    if (lb_qmodel_entry(a, i, &x) != LB_OK || lb_qmodel_entry(b, i, &y) != LB_OK) return 0;
    if (x.state != y.state || x.ggml != y.ggml || x.has_qtensor || y.has_qtensor || x.act.mode != y.act.mode ||
        x.has_imatrix != y.has_imatrix)
        return 0;
    char sx[256] = "", sy[256] = "";
    if (x.state == LB_QSTATE_QUANTIZED) {
        lb_qspec_format(&x.spec, sx, sizeof sx), lb_qspec_format(&y.spec, sy, sizeof sy);
        if (strcmp(sx, sy) != 0) return 0;
    }
    if (x.act.mode != LB_ACT_NONE) {
        lb_qspec_format(&x.act.spec, sx, sizeof sx), lb_qspec_format(&y.act.spec, sy, sizeof sy);
        if (strcmp(sx, sy) != 0) return 0;
    }
    return 1;
}

/* twin[c * nu + u]: an earlier candidate holding unit u alike, or c itself. */
static size_t *twins(const state *s)
{
    size_t *t = malloc((s->n * s->nu + 1) * sizeof *t);
    for (size_t c = 0; t && c < s->n; c++)
        for (size_t u = 0; u < s->nu; u++) {
            lb_unit_info info;
            lb_units_get(s->units, u, &info);
            t[c * s->nu + u] = c;
            for (size_t d = 0; d < c; d++) {
                int alike = 1;
                for (size_t k = 0; k < info.n_entries && alike; k++) alike = same_entry(s->qs[c], s->qs[d], info.entries[k]);
                if (alike) {
                    t[c * s->nu + u] = d;
                    break;
                }
            }
        }
    return t;
}

static int measure_cells(state *s);
static int fixed_bits(state *s);

static int measure_units(state *s)
{
    /* the units: the weights of the candidate that changes the most of them */
    for (size_t c = 0; c < s->n; c++) {
        lb_units *u = NULL;
        if (lb_units_make(s->qs[c], LB_UNIT_TENSOR, &u) != LB_OK) continue;
        if (!s->units || lb_units_count(u) > s->nu) {
            lb_units_free(s->units);
            s->units = u, s->nu = lb_units_count(u);
        } else lb_units_free(u);
    }
    if (!s->units) return cli_fail(s->cmd, s->json, EXIT_USAGE, "bad_argument", "no candidate quantizes any weight");
    s->costs = calloc(s->n * s->nu + 1, sizeof *s->costs);
    if (!s->costs) return cli_fail(s->cmd, s->json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    const char *names[CLI_TARGET_MAX_CANDIDATES];
    for (size_t c = 0; c < s->n; c++) names[c] = s->c[c].name;
    cli_sweep_key key = {s->model, s->calib, s->windows, s->so.ctx, names, s->n, s->units};
    int found = 0, rc = s->sweep ? cli_sweep_read(s->cmd, s->json, s->sweep, &key, s->costs, &found) : EXIT_OK;
    if (rc != EXIT_OK) return rc;
    if (!found) {
        if ((rc = measure_cells(s)) != EXIT_OK) return rc;
        if (s->sweep && (rc = cli_sweep_write(s->cmd, s->json, s->sweep, &key, s->costs)) != EXIT_OK) return rc;
    } else if (!s->json)
        fprintf(stderr, "lowbit %s: the measurement comes from --sweep %s\n", s->cmd, s->sweep);
    return fixed_bits(s);
}

/* Every (candidate, weight) measured alone; twins copied. */
static int measure_cells(state *s)
{
    size_t *twin = twins(s);
    unsigned char *skip = calloc(s->n * s->nu + 1, 1);
    if (!s->costs || !twin || !skip) {
        free(twin), free(skip);
        return cli_fail(s->cmd, s->json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    }
    for (size_t k = 0; k < s->n * s->nu; k++) skip[k] = twin[k] != k / s->nu;
    cli_progress_ctx progress = {s->cmd, "measurement", "each weight alone under each candidate"};
    lb_sensitivity_options o = s->so;
    o.skip = skip, o.progress = cli_progress_fn, o.progress_ctx = &progress;
    lb_status st = lb_sensitivity(s->qs, s->n, s->units, s->ids, s->n_ids, &o, s->costs, NULL);
    for (size_t k = 0; st == LB_OK && k < s->n * s->nu; k++)
        if (skip[k]) {
            double bits = s->costs[k].bits, stored = s->costs[k].bits_stored;
            s->costs[k] = s->costs[twin[k] * s->nu + k % s->nu];
            s->costs[k].bits = bits, s->costs[k].bits_stored = stored;
        }
    free(twin), free(skip);
    if (st != LB_OK) return cli_fail_lb(s->cmd, s->json, EXIT_RUNTIME, st);
    return EXIT_OK;
}

/* The bits outside the units: weights no candidate changes, the tensors that are no weights. */
static int fixed_bits(state *s)
{
    double unit_bits = 0;
    for (size_t u = 0; u < s->nu; u++) unit_bits += s->costs[u].bits;
    s->fixed_bits = s->c[0].bits - unit_bits;
    for (size_t i = 0; i < lb_qmodel_count(s->qs[0]); i++) {
        double b;
        if (!lb_tensor_is_weight(lb_model_tensor(s->e.model, i)) && lb_qmodel_entry_bits(s->qs[0], i, &b) == LB_OK)
            s->other_bits += b;
    }
    return EXIT_OK;
}

/* The KLD of q as a whole on the calibration windows. */
static int measure_whole(state *s, const lb_qmodel *q, double *kld, double *err)
{
    lb_units *u = NULL;
    lb_status st = lb_units_make(q, LB_UNIT_MODEL, &u);
    lb_unit_cost cost = {0};
    lb_sensitivity_options o = s->so;
    if (st == LB_OK) st = lb_sensitivity(&q, 1, u, s->ids, s->n_ids, &o, &cost, NULL);
    lb_units_free(u);
    if (st != LB_OK) return cli_fail_lb(s->cmd, s->json, EXIT_RUNTIME, st);
    *kld = cost.kld, *err = cost.kld_err;
    return EXIT_OK;
}

/* ===== Choosing ===== */

typedef struct choice {
    size_t *pick;          /* [nu] */
    lb_mix_result mix;
    double budget_bits;    /* of all weights */
    double bpw, predicted, measured, measured_err;
    long uniform;          /* the best uniform candidate within the bits, or -1 */
    double uniform_predicted, uniform_measured, uniform_err;
    int replaced;          /* 1: the uniform candidate measured better and was taken */
} choice;

static double uniform_predicted(const state *s, size_t c)
{
    double k = 0;
    for (size_t u = 0; u < s->nu; u++) k += s->costs[c * s->nu + u].measured ? s->costs[c * s->nu + u].kld : 0;
    return k;
}

/* What unit u becomes under candidate c: the ggml type the tensor gets
 * (a type whose blocks its rows do not fit falls back, as llama-quantize
 * does), or the candidate as given. */
static const char *held_as(const state *s, size_t c, size_t u)
{
    lb_unit_info info;
    lb_qentry e;
    if (!s->gguf || lb_units_get(s->units, u, &info) != LB_OK || !info.n_entries ||
        lb_qmodel_entry(s->qs[c], info.entries[0], &e) != LB_OK || e.ggml == LB_DT_COUNT)
        return s->c[c].name;
    return lb_dtype_get(e.ggml)->name;
}

static int choose(state *s, const cli_target_args *t, choice *ch)
{
    lb_mix_options mo = {0};
    if (t->bpw > 0) ch->budget_bits = t->bpw * (double)s->params;
    else if (t->size_bytes > 0) ch->budget_bits = t->size_bytes * 8 - s->other_bits;
    if (ch->budget_bits > 0) mo.budget_bits = ch->budget_bits - s->fixed_bits;
    else mo.max_kld = t->max_kld;
    if (t->max_kld <= 0 && !(mo.budget_bits > 0))
        return cli_fail(s->cmd, s->json, EXIT_USAGE, "bad_argument", "the target leaves no bits for the weights");
    double cheapest = s->fixed_bits;
    for (size_t u = 0; u < s->nu; u++) {
        double m = INFINITY;
        for (size_t c = 0; c < s->n; c++) m = fmin(m, s->costs[c * s->nu + u].bits);
        cheapest += m;
    }
    if (ch->budget_bits > 0 && ch->budget_bits < cheapest)
        return cli_fail(s->cmd, s->json, EXIT_USAGE, "bad_argument", "the target, %.3f bits per weight (%.0f bytes), is "
                        "below the cheapest the candidates reach: %.3f bits per weight (%.0f bytes)",
                        ch->budget_bits / (double)s->params, ch->budget_bits / 8, cheapest / (double)s->params,
                        cheapest / 8);
    ch->pick = calloc(s->nu + 1, sizeof *ch->pick);
    if (!ch->pick) return cli_fail(s->cmd, s->json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    lb_status st = lb_mix_choose(s->costs, s->n, s->nu, &mo, ch->pick, &ch->mix);
    if (st != LB_OK) return cli_fail_lb(s->cmd, s->json, EXIT_USAGE, st);
    ch->bpw = (ch->mix.bits + s->fixed_bits) / (double)s->params, ch->predicted = ch->mix.kld;
    double within = ch->budget_bits > 0 ? ch->budget_bits : ch->mix.bits + s->fixed_bits;
    /* the check: the mix as a whole, and the best uniform candidate within the same bits */
    lb_qmodel *mixq = NULL;
    st = lb_qmodel_compose(s->qs, s->n, 0, s->units, ch->pick, &mixq);
    if (st != LB_OK) return cli_fail_lb(s->cmd, s->json, EXIT_RUNTIME, st);
    int rc = measure_whole(s, mixq, &ch->measured, &ch->measured_err);
    lb_qmodel_free(mixq);
    ch->uniform = -1;
    for (size_t c = 0; c < s->n && rc == EXIT_OK; c++) {
        if (s->c[c].bits > within * (1 + 1e-12)) continue;
        double p = uniform_predicted(s, c);
        if (ch->uniform < 0 || p < ch->uniform_predicted) ch->uniform = (long)c, ch->uniform_predicted = p;
    }
    if (rc == EXIT_OK && ch->uniform >= 0) {
        rc = measure_whole(s, s->qs[ch->uniform], &ch->uniform_measured, &ch->uniform_err);
        if (rc == EXIT_OK && ch->uniform_measured < ch->measured) {
            ch->replaced = 1;
            for (size_t u = 0; u < s->nu; u++) ch->pick[u] = (size_t)ch->uniform;
            ch->bpw = s->c[ch->uniform].bits / (double)s->params;
            ch->predicted = ch->uniform_predicted, ch->measured = ch->uniform_measured, ch->measured_err = ch->uniform_err;
        }
    }
    return rc;
}

/* ===== Reporting and the recipe ===== */

static void print_text(const state *s, const cli_target_args *t, const choice *ch, const char *calib, double secs)
{
    printf("mix: %zu weights x %zu candidates, each weight alone, KLD on %zu windows of %u of %s (%.1f s)\n", s->nu,
           s->n, s->windows,
           s->so.ctx, calib, secs);
    printf("  uniform candidates (bits per weight, predicted KLD = the sum of each weight's):\n");
    for (size_t c = 0; c < s->n; c++)
        printf("    %-34s %7.3f bpw  %.6f\n", s->c[c].name, s->c[c].bits / (double)s->params, uniform_predicted(s, c));
    printf("  Pareto front explored (greedy on KLD saved per bit; bits per weight -> predicted KLD):\n");
    size_t n = ch->mix.n_front, step = n > 16 ? (n + 15) / 16 : 1;
    for (size_t k = 0; k < n; k += step)
        printf("    %7.3f  %.6f\n", (ch->mix.front[k].bits + s->fixed_bits) / (double)s->params, ch->mix.front[k].kld);
    if (n && (n - 1) % step)
        printf("    %7.3f  %.6f\n", (ch->mix.front[n - 1].bits + s->fixed_bits) / (double)s->params, ch->mix.front[n - 1].kld);
    if (t->max_kld > 0) printf("  target: predicted KLD at most %g%s\n", t->max_kld, ch->mix.reached ? "" : " (not reached: the best candidates)");
    else printf("  target: %.3f bits per weight\n", ch->budget_bits / (double)s->params);
    printf("  chosen: %.3f bits per weight, predicted KLD %.6f, measured whole %.6f +- %.6f (additivity: the sum is "
           "%.0f%% of the whole)\n", ch->bpw, ch->predicted, ch->measured, ch->measured_err,
           ch->measured > 0 ? 100 * ch->predicted / ch->measured : 100.0);
    if (ch->uniform >= 0)
        printf("  best uniform within those bits: %s, %.3f bpw, measured %.6f +- %.6f: %s\n", s->c[ch->uniform].name,
               s->c[ch->uniform].bits / (double)s->params, ch->uniform_measured, ch->uniform_err,
               ch->replaced ? "better than the mix, so it is taken" : "the mix is better");
    else printf("  no uniform candidate fits within those bits\n");
    /* by what the weights become (a candidate's fallback type counts as that type) */
    const char *names[CLI_TARGET_MAX_CANDIDATES * 4];
    size_t count[CLI_TARGET_MAX_CANDIDATES * 4] = {0}, kinds = 0;
    for (size_t u = 0; u < s->nu; u++) {
        const char *h = held_as(s, ch->pick[u], u);
        size_t k = 0;
        while (k < kinds && strcmp(names[k], h) != 0) k++;
        if (k == kinds && kinds < sizeof names / sizeof *names) names[kinds++] = h;
        if (k < kinds) count[k]++;
    }
    printf("  weights:");
    for (size_t k = 0; k < kinds; k++) printf(" %s x%zu", names[k], count[k]);
    printf("\n");
}

static char *json_text(const state *s, const cli_target_args *t, const choice *ch, const char *recipe, double secs)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fprintf(f, "{\"units\": %zu, \"windows\": %zu, \"ctx\": %u", s->nu,
            s->windows,
            s->so.ctx);
    if (t->bpw > 0) json_field(f, "target_bpw", t->bpw);
    if (t->size_bytes > 0) json_field(f, "target_bytes", t->size_bytes);
    if (t->max_kld > 0) json_field(f, "max_kld", t->max_kld);
    fprintf(f, ", \"candidates\": [");
    for (size_t c = 0; c < s->n; c++) {
        fprintf(f, "%s{\"name\": ", c ? ", " : "");
        json_string(f, s->c[c].name);
        json_field(f, "bpw", s->c[c].bits / (double)s->params);
        json_field(f, "kld_predicted", uniform_predicted(s, c));
        fprintf(f, "}");
    }
    fprintf(f, "], \"front\": [");
    for (size_t k = 0; k < ch->mix.n_front; k++)
        fprintf(f, "%s[%.17g, %.17g]", k ? ", " : "", (ch->mix.front[k].bits + s->fixed_bits) / (double)s->params,
                ch->mix.front[k].kld);
    fprintf(f, "]");
    json_field(f, "bpw", ch->bpw);
    json_field(f, "kld_predicted", ch->predicted);
    json_field(f, "kld_measured", ch->measured);
    json_field(f, "kld_measured_err", ch->measured_err);
    fprintf(f, ", \"uniform\": ");
    if (ch->uniform >= 0) {
        fprintf(f, "{\"name\": ");
        json_string(f, s->c[ch->uniform].name);
        json_field(f, "bpw", s->c[ch->uniform].bits / (double)s->params);
        json_field(f, "kld_measured", ch->uniform_measured);
        json_field(f, "kld_measured_err", ch->uniform_err);
        fprintf(f, ", \"taken\": %s}", ch->replaced ? "true" : "false");
    } else fprintf(f, "null");
    fprintf(f, ", \"recipe\": ");
    json_string(f, recipe);
    json_field(f, "seconds", secs);
    fprintf(f, ", \"weights\": [");
    for (size_t u = 0; u < s->nu; u++) {
        lb_unit_info info;
        lb_units_get(s->units, u, &info);
        const lb_unit_cost *k = &s->costs[ch->pick[u] * s->nu + u];
        fprintf(f, "%s{\"name\": ", u ? ", " : "");
        json_string(f, info.name);
        fprintf(f, ", \"candidate\": ");
        json_string(f, s->c[ch->pick[u]].name);
        fprintf(f, ", \"held_as\": ");
        json_string(f, held_as(s, ch->pick[u], u));
        json_field(f, "bits", k->bits);
        json_field(f, "kld", k->measured ? k->kld : 0);
        fprintf(f, "}");
    }
    fprintf(f, "]}");
    fclose(f);
    return buf;
}

/* The candidate covering the most weights' elements: the GGUF's --type. */
static size_t main_candidate(const state *s, const choice *ch)
{
    double per[CLI_TARGET_MAX_CANDIDATES] = {0};
    for (size_t u = 0; u < s->nu; u++) {
        lb_unit_info info;
        lb_units_get(s->units, u, &info);
        per[ch->pick[u]] += (double)info.params;
    }
    size_t best = 0;
    for (size_t c = 1; c < s->n; c++)
        if (per[c] > per[best]) best = c;
    return best;
}

static int write_recipe(const state *s, const cli_target_args *t, const choice *ch, const char *calib,
                        const char *path)
{
    lb__outfile o;
    lb_status st = lb__out_open(path, &o);
    if (st != LB_OK) return cli_fail_lb(s->cmd, s->json, EXIT_RUNTIME, st);
    FILE *f = o.f;
    char target[96];
    if (t->bpw > 0) snprintf(target, sizeof target, "--target-bpw %g", t->bpw);
    else if (t->size_bytes > 0) snprintf(target, sizeof target, "--target-size %.0f", t->size_bytes);
    else snprintf(target, sizeof target, "--max-kld %g", t->max_kld);
    fprintf(f, "{\"lowbit_recipe\": 1,\n \"description\": ");
    char desc[1024];
    snprintf(desc, sizeof desc, "lowbit quantize %s: one candidate per weight by KLD measured on %s; %.3f bits per "
             "weight, predicted KLD %.6f, measured %.6f", target, calib, ch->bpw, ch->predicted, ch->measured);
    json_string(f, desc);
    if (s->gguf) {
        fprintf(f, ",\n \"format\": \"gguf\",\n \"type\": ");
        char type[64];
        snprintf(type, sizeof type, "%s", s->c[main_candidate(s, ch)].name);
        for (char *p = type; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
        json_string(f, type);
        if (s->g.imatrix_file) fprintf(f, ",\n \"imatrix\": "), json_string(f, s->g.imatrix_file);
        if (s->g.imatrix_text) fprintf(f, ",\n \"imatrix_from\": "), json_string(f, s->g.imatrix_text);
    }
    fprintf(f, ",\n \"rules\": [");
    for (size_t u = 0; u < s->nu; u++) {
        lb_unit_info info;
        lb_units_get(s->units, u, &info);
        const char *name = s->c[ch->pick[u]].name;
        fprintf(f, "%s\n   {\"match\": ", u ? "," : "");
        json_string(f, info.name);
        if (s->gguf) fprintf(f, ", \"ggml\": "), json_string(f, held_as(s, ch->pick[u], u));
        else if (is_keep(name)) fprintf(f, ", \"keep\": true");
        else fprintf(f, ", \"weights\": "), json_string(f, name);
        fprintf(f, "}");
    }
    fprintf(f, "]}\n");
    st = lb__out_commit(&o);
    return st == LB_OK ? EXIT_OK : cli_fail_lb(s->cmd, s->json, EXIT_RUNTIME, st);
}

static void free_state(state *s)
{
    for (size_t c = 0; c < s->n; c++) lb_qmodel_free(s->c[c].q);
    lb_units_free(s->units);
    free(s->costs), free(s->ids);
    lb_imatrix_free(s->g.imatrix);
    cli_eval_close(&s->e);
}

int cli_target_choose(const char *cmd, int json, const char *model, const char *out, int gguf, const cli_gguf_args *gg,
                      const cli_recipe_args *ra, const char *calib, size_t calib_tokens, int threads,
                      const cli_target_args *t, cli_target_result *res)
{
    memset(res, 0, sizeof *res);
    if (!calib)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--target-bpw, --target-size and --max-kld measure each "
                        "weight on a calibration text: give --calib FILE (never the evaluation text)");
    if (gguf && (gg->type || gg->pure || gg->n_rules || gg->n_tensor_types || gg->output_type || gg->embd_type))
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "the target chooses every weight's type: give "
                        "--candidates, not --type, --pure, --rule, --tensor-type, --output-tensor-type or "
                        "--token-embedding-type");
    if (!gguf && (cli_recipe_given(ra) || ra->keep_sensitive))
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "the target chooses every weight's spec: give "
                        "--candidates, not --scheme, --recipe, --rule, --keep, --keep-sensitive or --kv");
    if (ra->method_id == LB_METHOD_SMOOTHQUANT || ra->method_id == LB_METHOD_AWQ || ra->method_id == LB_METHOD_AWQ_GPTQ)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--method %s folds scales into the norms, so no weight "
                        "alone can be measured: use rtn or gptq with a target", ra->method);
    if (!out) return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "need -o OUT");
    if (t->recipe_out) snprintf(res->recipe, sizeof res->recipe, "%s", t->recipe_out);
    else snprintf(res->recipe, sizeof res->recipe, "%s.recipe.json", out);
    int rc = cli_output_check(cmd, json, res->recipe);
    struct stat sb;
    if (rc == EXIT_OK && t->sweep && stat(t->sweep, &sb) != 0) rc = cli_output_check(cmd, json, t->sweep);
    if (rc == EXIT_OK && strcmp(res->recipe, out) == 0)
        rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--recipe-out is the output itself");
    if (rc != EXIT_OK) return rc;
    double t0 = lb__now();
    state s = {.cmd = cmd, .json = json, .gguf = gguf, .threads = threads, .g = *gg, .model = model, .calib = calib,
               .sweep = t->sweep};
    s.g.imatrix = NULL;
    cli_eval_args ea = {.tokenizer = gg->tokenizer, .threads = threads, .max_ctx = TARGET_CTX};
    rc = cli_eval_open(cmd, json, model, &ea, 0, &s.e);
    if (rc == EXIT_OK) rc = cli_eval_tokens(cmd, json, s.e.tok, calib, &s.ids, &s.n_ids);
    uint32_t trained = rc == EXIT_OK ? lb_model_arch(s.e.model)->max_seq_len : 0;
    s.so = (lb_sensitivity_options){.ctx = trained && trained < TARGET_CTX ? trained : TARGET_CTX, .threads = threads,
                                    .bos = rc == EXIT_OK && lb_tokenizer_add_bos(s.e.tok) ? lb_tokenizer_bos(s.e.tok) : -1};
    s.so.max_windows = calib_tokens ? (calib_tokens + s.so.ctx - 1) / s.so.ctx : CLI_TARGET_DEFAULT_WINDOWS;
    s.windows = s.n_ids / s.so.ctx < s.so.max_windows ? s.n_ids / s.so.ctx : s.so.max_windows;
    if (rc == EXIT_OK) rc = cli_eval_check_windows(cmd, json, s.e.model, s.n_ids, s.so.ctx);
    if (rc == EXIT_OK && gguf) rc = cli_gguf_imatrix(cmd, json, &s.g, s.e.model, s.e.tok, threads);
    if (rc == EXIT_OK)
        rc = make_candidates(&s, t->candidates ? t->candidates : gguf ? CLI_TARGET_GGUF_CANDIDATES : CLI_TARGET_SPEC_CANDIDATES,
                             ra, calib, LB_EXPORT_COMPRESSED_TENSORS);
    if (rc == EXIT_OK) rc = measure_units(&s);
    choice ch = {0};
    if (rc == EXIT_OK) rc = choose(&s, t, &ch);
    double secs = lb__now() - t0;
    if (rc == EXIT_OK) rc = write_recipe(&s, t, &ch, calib, res->recipe);
    if (rc == EXIT_OK) {
        if (json) res->json = json_text(&s, t, &ch, res->recipe, secs);
        else {
            print_text(&s, t, &ch, calib, secs);
            printf("  recipe: %s (lowbit quantize %s -o %s --recipe %s%s gives the same file)\n", res->recipe, model,
                   out, res->recipe, s.g.imatrix_file || s.g.imatrix_text || cli_method_given(ra) ? ", with the same "
                   "--imatrix/--method options," : "");
        }
    }
    free(ch.pick);
    lb_mix_result_free(&ch.mix);
    free_state(&s);
    return rc;
}
