/* What lowbit sensitivity and lowbit quantize --target-bpw share. */
#ifndef LOWBIT_CLI_SENSITIVITY_H
#define LOWBIT_CLI_SENSITIVITY_H

#include "cli_eval.h"

/* --spec S, --spec-attn, --spec-mlp, --spec-embed, --spec-head as recipe
 * rules (--spec S: 'model.layers.*=S'; the class options before it, first
 * match winning), so that the qmodel is the one a recipe builds; the
 * --spec* fields are cleared. With a recipe, --type or --act given too:
 * a usage error. EXIT_OK or reported. */
int cli_sensitivity_spec_rules(const char *cmd, int json, cli_eval_args *a);

#endif
