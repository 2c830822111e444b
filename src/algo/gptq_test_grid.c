/* A grid for the tests of the GPTQ solver (gptq.h): the oracle's IntSym,
 * symmetric b-bit integers with one scale per row and group, computed in
 * fp64 as tests/oracle/gptq_ref.py does, so that Q can be compared with
 * the oracle's code for code. Not a production grid (those are the
 * formats' own). */
#include <math.h>
#include <stdlib.h>

#include "algo/gptq.h"
#include "util/error.h"

typedef struct int_sym {
    double kmax, kmin;
    size_t rows, group, groups;
    double *d; /* rows x groups: the scales */
} int_sym;

static lb_status int_sym_params(void *ctx, const float *w, size_t ld, size_t rows, size_t c0, size_t n)
{
    int_sym *g = ctx;
    for (size_t r = 0; r < rows; r++) {
        double amax = 0.0;
        for (size_t t = 0; t < n; t++) amax = fmax(amax, fabs((double)w[r * ld + t]));
        g->d[r * g->groups + c0 / g->group] = amax / g->kmax;
    }
    return LB_OK;
}

static void int_sym_round(void *ctx, size_t c, const float *col, size_t rows, float *out)
{
    const int_sym *g = ctx;
    for (size_t r = 0; r < rows; r++) {
        double d = g->d[r * g->groups + c / g->group];
        double k = d > 0.0 ? fmin(fmax(nearbyint(col[r] / d), g->kmin), g->kmax) : 0.0;
        out[r] = (float)(k * d);
    }
}

/* Plain rounding: every group's parameters from w, every column rounded. */
static lb_status int_sym_rtn(float *w, size_t rows, size_t cols, const lb__gptq_grid *grid, float *col, float *out)
{
    for (size_t a = 0; a < cols; a += grid->group) {
        size_t n = a + grid->group < cols ? grid->group : cols - a;
        lb_status st = grid->params(grid->ctx, w + a, cols, rows, a, n);
        if (st != LB_OK) return st;
        for (size_t c = a; c < a + n; c++) {
            for (size_t r = 0; r < rows; r++) col[r] = w[r * cols + c];
            grid->round(grid->ctx, c, col, rows, out);
            for (size_t r = 0; r < rows; r++) w[r * cols + c] = out[r];
        }
    }
    return LB_OK;
}

lb_status lb__gptq_int_sym_test(float *w, size_t rows, size_t cols, const double *h, int bits, size_t group,
                                size_t block, double damp, int actorder, int static_groups, int threads,
                                double *report)
{
    if (bits < 2 || bits > 16 || !w || rows == 0 || cols == 0)
        return lb__fail(LB_ERR_ARG, "lb__gptq_int_sym_test: bits %d, %zu x %zu", bits, rows, cols);
    size_t gs = group == 0 || group >= cols ? cols : group;
    int_sym g = {.kmax = ldexp(1.0, bits - 1) - 1.0, .kmin = -ldexp(1.0, bits - 1), .rows = rows, .group = gs,
                 .groups = (cols + gs - 1) / gs};
    g.d = calloc(rows * g.groups, sizeof *g.d);
    float *col = malloc(rows * sizeof *col), *out = malloc(rows * sizeof *out);
    lb__gptq_grid grid = {.group = gs, .params = int_sym_params, .round = int_sym_round, .ctx = &g};
    lb_status st = g.d && col && out ? LB_OK : lb__fail(LB_ERR_NOMEM, "lb__gptq_int_sym_test: out of memory");
    if (st == LB_OK && !h) st = int_sym_rtn(w, rows, cols, &grid, col, out);
    else if (st == LB_OK) {
        lb__gptq_options o = {.damp = damp, .block = block, .actorder = actorder, .static_groups = static_groups,
                              .threads = threads};
        lb__gptq_report rep;
        st = lb__gptq(w, rows, cols, h, &o, &grid, &rep);
        if (st == LB_OK && report) {
            report[0] = rep.damp_rel, report[1] = rep.damp_used, report[2] = rep.damp_retries;
            report[3] = (double)rep.dead_columns, report[4] = rep.err_proxy;
        }
    }
    free(g.d), free(col), free(out);
    return st;
}
