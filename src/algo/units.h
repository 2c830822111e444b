/* The units of a sensitivity sweep (units.c; lowbit.h, lb_units_make), as
 * the measurement (sensitivity.c) reads them. */
#ifndef LB_ALGO_UNITS_H
#define LB_ALGO_UNITS_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

/* first_layer of a unit that touches no tensor (only possible while it is made) */
#define LB__UNIT_NO_LAYER (-2L)

typedef struct lb__unit {
    char name[128];
    lb_unit_kind kind;
    size_t *entries, n, cap;
    int kv, act_only;
    uint64_t params;
    long first_layer; /* the first decoder layer whose input changes: -1 the embedding, n_layers the head only */
} lb__unit;

struct lb_units {
    lb__unit *u;
    size_t n, cap;
};

/* lb_units_make; with allow_empty an empty list when q changes nothing. */
lb_status lb__units_make(const lb_qmodel *q, lb_unit_kind kind, int allow_empty, lb_units **out);

/* The decoder layer of a canonical name (model.layers.N.*), or -1. */
long lb__unit_layer_of(const char *name);

#endif
