/* lb__gptq_spec_test (gptq_grid.h): GPTQ with a spec's grid in one call,
 * for the Python tests. Not used by the library itself. */
#include <stdlib.h>

#include "algo/gptq_grid.h"
#include "util/error.h"

/* Plain rounding through the grid: every group's scales from w. */
static lb_status grid_rtn(float *w, size_t rows, size_t cols, const lb__gptq_grid *grid)
{
    size_t group = grid->group == 0 || grid->group >= cols ? cols : grid->group;
    float *col = malloc(rows * sizeof *col), *out = malloc(rows * sizeof *out);
    lb_status st = col && out ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t a = 0; a < cols && st == LB_OK; a += group) {
        size_t n = a + group < cols ? group : cols - a;
        if ((st = grid->params(grid->ctx, w + a, cols, rows, a, n)) != LB_OK) break;
        for (size_t c = a; c < a + n; c++) {
            for (size_t r = 0; r < rows; r++) col[r] = w[r * cols + c];
            grid->round(grid->ctx, c, col, rows, out);
            for (size_t r = 0; r < rows; r++) w[r * cols + c] = out[r];
        }
    }
    free(col), free(out);
    return st;
}

lb_status lb__gptq_spec_test(const char *spec_text, float *w, size_t rows, size_t cols, const double *h,
                             float tensor_amax, size_t block, double damp, int actorder, int static_groups,
                             int threads, double *report, lb_qtensor **out)
{
    lb_qspec spec;
    lb_status st = lb_qspec_parse(spec_text, &spec);
    if (st != LB_OK) return st;
    if (!w) return lb__fail(LB_ERR_ARG, "lb__gptq_spec_test: NULL weight");
    lb__gptq_spec_grid g;
    lb__gptq_grid grid;
    if ((st = lb__gptq_grid_init(&g, &spec, w, rows, cols, tensor_amax, threads, 0, &grid)) != LB_OK) return st;
    if (!h) {
        st = grid_rtn(w, rows, cols, &grid);
    } else {
        lb__gptq_options o = {.damp = damp, .block = block, .actorder = actorder, .static_groups = static_groups,
                              .threads = threads};
        lb__gptq_report rep;
        st = lb__gptq(w, rows, cols, h, &o, &grid, &rep);
        if (st == LB_OK && report) {
            report[0] = rep.damp_rel, report[1] = rep.damp_used, report[2] = rep.damp_retries;
            report[3] = (double)rep.dead_columns, report[4] = rep.err_proxy;
        }
    }
    if (st == LB_OK && out) st = lb__gptq_grid_qtensor(&g, w, out);
    lb__gptq_grid_free(&g);
    return st;
}
