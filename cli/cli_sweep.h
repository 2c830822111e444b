/* The measurement of a --target run kept in a file (--sweep FILE), so that
 * one measurement serves several budgets: JSON with what it was made from
 * (model, calibration text, windows, candidates, units) and every cell's
 * cost. */
#ifndef LOWBIT_CLI_SWEEP_H
#define LOWBIT_CLI_SWEEP_H

#include "cli.h"

typedef struct cli_sweep_key {
    const char *model, *calib;
    size_t windows;
    uint32_t ctx;
    const char *const *candidates;
    size_t n_candidates;
    const lb_units *units;
} cli_sweep_key;

/* Reads path into costs ([candidates x units]) when it exists: *found 1;
 * a file of another run (any key differs) or malformed is a usage error
 * naming what differs. *found 0 when there is no file. */
int cli_sweep_read(const char *cmd, int json, const char *path, const cli_sweep_key *k, lb_unit_cost *costs, int *found);
/* Writes it (the output rule: never over an input). */
int cli_sweep_write(const char *cmd, int json, const char *path, const cli_sweep_key *k, const lb_unit_cost *costs);

#endif
