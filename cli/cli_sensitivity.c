/* --spec options as recipe rules (cli_sensitivity.h). */
#include "cli_sensitivity.h"

#include <stdio.h>
#include <string.h>

#define SPEC_RULE_SIZE 512

int cli_sensitivity_spec_rules(const char *cmd, int json, cli_eval_args *a)
{
    /* the rules' text lives as long as the process: argv-like */
    static char rules[5][SPEC_RULE_SIZE];
    const char *spec[5] = {a->spec_attn, a->spec_mlp, a->spec_embed, a->spec_head, a->spec};
    static const char *const pattern[5] = {"model.layers.*.self_attn.*", "model.layers.*.mlp.*",
                                           "model.embed_tokens.weight", "lm_head.weight", "model.layers.*"};
    int any = 0;
    for (int k = 0; k < 5; k++) any |= spec[k] != NULL;
    if (!any) return EXIT_OK;
    if (a->gguf.given || cli_recipe_given(&a->recipe) || a->act)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "--spec* say how the weights are quantized: they do not "
                        "combine with --scheme, --recipe, --rule, --keep, --type or --act");
    for (int k = 0; k < 5; k++) {
        if (!spec[k]) continue;
        if (a->recipe.n_rules == CLI_RECIPE_MAX_RULES)
            return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "too many rules");
        snprintf(rules[k], sizeof rules[k], "%s=%s", pattern[k], spec[k]);
        a->recipe.rule_is_keep[a->recipe.n_rules] = 0;
        a->recipe.rules[a->recipe.n_rules++] = rules[k];
    }
    a->spec = a->spec_attn = a->spec_mlp = a->spec_embed = a->spec_head = NULL;
    return EXIT_OK;
}
