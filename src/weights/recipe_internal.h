/* Recipes inside the library: the limits and the matcher that
 * recipe_apply.c and the tests share. */
#ifndef LB_WEIGHTS_RECIPE_INTERNAL_H
#define LB_WEIGHTS_RECIPE_INTERNAL_H

#include <stddef.h>

#include "lowbit.h"

/* A recipe's limits: more rules than this is a mistake, not a model
 * (llm-compressor recipes have a handful); a pattern longer than this is
 * not a tensor name. */
#define LB_RECIPE_MAX_RULES 4096
#define LB_RECIPE_MAX_PATTERN 1024
/* A recipe file larger than this is not a recipe. */
#define LB_RECIPE_MAX_FILE (4u << 20)
/* How many weight names an error about a rule that matches nothing lists. */
#define LB_RECIPE_NAMES_SHOWN 4

/* Whether name matches the glob (* any run, dots included; ? one
 * character; [abc], [a-z], [!abc] or [^abc] a set). No escapes: a
 * tensor name holds none of *?[ . Iterative (one backtrack point), so a
 * hostile pattern costs O(len(pattern) x len(name)), never exponential. */
int lb__glob_match(const char *pattern, const char *name);

/* The index of the first rule of r that matches name, or -1. */
long lb__recipe_match(const lb_recipe *r, const char *name);

/* Checks a pattern as lb_recipe_add does (non-empty, bounded, a regex
 * that compiles, a glob whose sets close); LB_ERR_ARG naming it. */
lb_status lb__pattern_check(const char *pattern);

#endif
