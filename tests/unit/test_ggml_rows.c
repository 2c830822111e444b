/* lb__ggml_rows_stacked: a tensor of stacked matrices (a mixture's
 * experts) quantized with one importance vector each, as llama-quantize
 * hands them out (row r of m stacks gets slice r / (rows / m)); one vector
 * for every row, and a length that fits neither, as documented. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/ggml_rows.h"
#include "lowbit.h"

#define COLS 256
#define ROWS 6
#define STACKS 3

static uint32_t seed = 14;
static float uniform(void)
{
    seed = seed * 1664525u + 1013904223u;
    return (float)(seed >> 8) / 16777216.0f;
}

static void check_type(lb_dtype t)
{
    const lb_dtype_info *d = lb_dtype_get(t);
    size_t row_bytes = COLS / d->block * d->block_bytes, per = ROWS / STACKS;
    static float x[ROWS * COLS], im[STACKS * COLS];
    static uint8_t got[ROWS * COLS * 4], want[ROWS * COLS * 4];
    for (size_t i = 0; i < ROWS * COLS; i++) x[i] = 2 * uniform() - 1;
    for (size_t i = 0; i < STACKS * COLS; i++) im[i] = 0.01f + 10 * uniform() * uniform();

    /* one slice per stack */
    for (size_t e = 0; e < STACKS; e++)
        CHECK(lb__ggml_rows(t, x + e * per * COLS, per, COLS, im + e * COLS, want + e * per * row_bytes) == LB_OK,
              "%s: %s", d->name, lb_last_error());
    CHECK(lb__ggml_rows_stacked(t, x, ROWS, COLS, im, STACKS * COLS, got, 2) == LB_OK, "%s: %s", d->name,
          lb_last_error());
    CHECK(memcmp(got, want, ROWS * row_bytes) == 0, "%s: each stack with its own slice", d->name);
    /* the slices matter: the first slice for every row differs */
    CHECK(lb__ggml_rows(t, x, ROWS, COLS, im, want) == LB_OK, "%s: %s", d->name, lb_last_error());
    CHECK(memcmp(got, want, ROWS * row_bytes) != 0, "%s: slices not used", d->name);
    /* one vector: every row */
    CHECK(lb__ggml_rows_stacked(t, x, ROWS, COLS, im, COLS, got, 2) == LB_OK, "%s: %s", d->name, lb_last_error());
    CHECK(memcmp(got, want, ROWS * row_bytes) == 0, "%s: one vector for every row", d->name);
    /* a length that is neither (4 stacks do not divide 6 rows; 100 not whole rows): none */
    CHECK(lb__ggml_rows(t, x, ROWS, COLS, NULL, want) == LB_OK, "%s: %s", d->name, lb_last_error());
    CHECK(lb__ggml_rows_stacked(t, x, ROWS, COLS, im, 100, got, 2) == LB_OK &&
              memcmp(got, want, ROWS * row_bytes) == 0,
          "%s: a length not whole rows is no importance", d->name);
    static float im4[4 * COLS];
    for (size_t i = 0; i < 4 * COLS; i++) im4[i] = 1 + uniform();
    CHECK(lb__ggml_rows_stacked(t, x, ROWS, COLS, im4, 4 * COLS, got, 2) == LB_OK &&
              memcmp(got, want, ROWS * row_bytes) == 0,
          "%s: stacks that do not divide the rows are no importance", d->name);
}

int main(void)
{
    const lb_dtype types[] = {LB_DT_Q4_K, LB_DT_Q2_K, LB_DT_IQ4_XS, LB_DT_Q4_0};
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) check_type(types[k]);
    return check_summary();
}
