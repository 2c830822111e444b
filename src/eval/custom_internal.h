/* A custom eval's items in memory (custom_read.c), run by custom_run.c. */
#ifndef LB_EVAL_CUSTOM_INTERNAL_H
#define LB_EVAL_CUSTOM_INTERNAL_H

#include "lowbit.h"
#include "util/arena.h"

struct lb_custom {
    lb_custom_item *items;
    size_t n, cap;
    lb__arena strings;
    const char *what;
};

/* Whether text matches the item's expectation (exact, contains, regex). */
int lb__custom_matches(const lb_custom_item *it, const char *text);

#endif
