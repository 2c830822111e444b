/* --sweep FILE (cli_sweep.h). */
#include "cli_sweep.h"

#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "util/file.h"

#define SWEEP_MAX_BYTES (256u << 20)

int cli_sweep_write(const char *cmd, int json, const char *path, const cli_sweep_key *k, const lb_unit_cost *costs)
{
    lb__outfile o;
    lb_status st = lb__out_open(path, &o);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
    FILE *f = o.f;
    fprintf(f, "{\"lowbit_sweep\": 1, \"model\": ");
    json_string(f, k->model);
    fprintf(f, ", \"calib\": ");
    json_string(f, k->calib);
    fprintf(f, ", \"windows\": %zu, \"ctx\": %u,\n \"candidates\": [", k->windows, k->ctx);
    for (size_t c = 0; c < k->n_candidates; c++) fprintf(f, "%s", c ? ", " : ""), json_string(f, k->candidates[c]);
    size_t nu = lb_units_count(k->units);
    fprintf(f, "],\n \"units\": [");
    for (size_t u = 0; u < nu; u++) {
        lb_unit_info info;
        lb_units_get(k->units, u, &info);
        fprintf(f, "%s", u ? ", " : ""), json_string(f, info.name);
    }
    fprintf(f, "],\n \"costs\": [");
    for (size_t i = 0; i < k->n_candidates * nu; i++) {
        const lb_unit_cost *c = &costs[i];
        fprintf(f, "%s[%d, %.17g, %.17g, %.17g, %.17g, %.17g]", i ? ",\n  " : "\n  ", c->measured, c->kld, c->kld_err,
                c->nll, c->bits, c->bits_stored);
    }
    fprintf(f, "]}\n");
    st = lb__out_commit(&o);
    return st == LB_OK ? EXIT_OK : cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
}

static int differs(const char *cmd, int json, const char *path, const char *what)
{
    return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--sweep %s was made from another run (not the same %s): give "
                    "another file, or remove it to measure again", path, what);
}

int cli_sweep_read(const char *cmd, int json, const char *path, const cli_sweep_key *k, lb_unit_cost *costs, int *found)
{
    struct stat sb;
    *found = 0;
    if (stat(path, &sb) != 0) return EXIT_OK;
    lb__json *r = NULL;
    lb_status st = lb__json_read_file(path, SWEEP_MAX_BYTES, &r);
    if (st != LB_OK) return cli_fail_lb(cmd, json, EXIT_USAGE, st);
    int rc = EXIT_OK;
    uint64_t v, windows, ctx;
    const char *model = r->type == LB_JSON_OBJECT ? lb__json_str(r, "model") : NULL;
    const char *calib = model ? lb__json_str(r, "calib") : NULL;
    const lb__json *cands = lb__json_get(r, "candidates"), *units = lb__json_get(r, "units"),
                   *cells = lb__json_get(r, "costs");
    size_t nu = lb_units_count(k->units);
    if (!calib || !lb__json_u64(lb__json_get(r, "lowbit_sweep"), &v) || v != 1 ||
        !lb__json_u64(lb__json_get(r, "windows"), &windows) || !lb__json_u64(lb__json_get(r, "ctx"), &ctx) ||
        !cands || cands->type != LB_JSON_ARRAY || !units || units->type != LB_JSON_ARRAY || !cells ||
        cells->type != LB_JSON_ARRAY)
        rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--sweep %s is no sweep file of lowbit quantize", path);
    else if (strcmp(model, k->model) != 0) rc = differs(cmd, json, path, "model");
    else if (strcmp(calib, k->calib) != 0) rc = differs(cmd, json, path, "--calib text");
    else if (windows != k->windows || ctx != k->ctx) rc = differs(cmd, json, path, "windows");
    else if (cands->len != k->n_candidates) rc = differs(cmd, json, path, "candidates");
    else if (units->len != nu) rc = differs(cmd, json, path, "weights");
    for (size_t c = 0; rc == EXIT_OK && c < k->n_candidates; c++)
        if (cands->items[c].type != LB_JSON_STRING || strcmp(cands->items[c].str, k->candidates[c]) != 0)
            rc = differs(cmd, json, path, "candidates");
    for (size_t u = 0; rc == EXIT_OK && u < nu; u++) {
        lb_unit_info info;
        lb_units_get(k->units, u, &info);
        if (units->items[u].type != LB_JSON_STRING || strcmp(units->items[u].str, info.name) != 0)
            rc = differs(cmd, json, path, "weights");
    }
    if (rc == EXIT_OK && cells->len != k->n_candidates * nu) rc = differs(cmd, json, path, "cost table size");
    for (size_t i = 0; rc == EXIT_OK && i < cells->len; i++) {
        const lb__json *x = &cells->items[i];
        int ok = x->type == LB_JSON_ARRAY && x->len == 6;
        for (size_t j = 0; ok && j < 6; j++) ok = x->items[j].type == LB_JSON_NUMBER;
        if (!ok) {
            rc = cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--sweep %s: cost %zu is not 6 numbers", path, i + 1);
            break;
        }
        costs[i] = (lb_unit_cost){.measured = x->items[0].number != 0, .kld = x->items[1].number,
                                  .kld_err = x->items[2].number, .nll = x->items[3].number,
                                  .bits = x->items[4].number, .bits_stored = x->items[5].number};
    }
    lb__json_free(r);
    *found = rc == EXIT_OK;
    return rc;
}
