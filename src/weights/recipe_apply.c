/* lb_qmodel_apply: a recipe onto a quantized model. Every weight gets
 * the first rule that matches its canonical name (no rule: KEPT, the
 * 16-bit default); norms, biases and anything else that is not a weight
 * stay as stored whatever a rule says. The whole recipe is checked
 * before the qmodel changes: a rule that matches no weight, a spec for a
 * tensor that is not 2-D, or activations on an embedding leave the qmodel
 * as it was. (What lb_qmodel_set_spec/set_act refuse after that leaves it
 * partly applied; the message names the rule and the tensor.) A group
 * size that does not divide a row is no error here: lb_quantize makes a
 * partial last block, and the writers refuse what their format cannot
 * express, naming the sizes that would work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "weights/recipe_internal.h"

/* "model.embed_tokens.weight, model.layers.0.self_attn.q_proj.weight, ..." */
static void weight_names(const lb_qmodel *q, char *buf, size_t size)
{
    size_t used = 0, shown = 0, total = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        if (lb_qmodel_entry(q, i, &e) != LB_OK || !lb_tensor_is_weight(e.tensor)) continue;
        total++;
        if (shown < LB_RECIPE_NAMES_SHOWN && used < size) {
            used += (size_t)snprintf(buf + used, size - used, "%s%s", shown ? ", " : "", e.tensor->name);
            shown++;
        }
    }
    if (total > shown && used < size) snprintf(buf + used, size - used, ", ... (%zu weights)", total);
}

/* The first non-weight a rule matches, to say why it matched nothing. */
static const char *non_weight_match(const lb_qmodel *q, const lb_recipe *r, size_t rule)
{
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        if (lb_qmodel_entry(q, i, &e) == LB_OK && !lb_tensor_is_weight(e.tensor) &&
            lb__recipe_match(r, e.tensor->name) == (long)rule)
            return e.tensor->name;
    }
    return NULL;
}

/* An embedding is a lookup: it has weights to quantize but no input
 * activations. Its canonical name ends so (lowbit's names.c). */
static int is_embedding(const char *name)
{
    size_t n = strlen(name);
    const char *suffix = "embed_tokens.weight";
    size_t k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

static lb_status check(const lb_qmodel *q, const lb_recipe *r, long *first)
{
    size_t n = lb_qmodel_count(q), n_rules = lb_recipe_count(r);
    size_t *hits = calloc(n_rules ? n_rules : 1, sizeof *hits);
    if (!hits) return lb__fail(LB_ERR_NOMEM, "lb_qmodel_apply: out of memory");
    lb_status s = LB_OK;
    for (size_t i = 0; i < n && s == LB_OK; i++) {
        lb_qentry e;
        s = lb_qmodel_entry(q, i, &e);
        first[i] = -1;
        if (s != LB_OK || !lb_tensor_is_weight(e.tensor)) continue;
        long k = lb__recipe_match(r, e.tensor->name);
        first[i] = k;
        if (k < 0) continue;
        hits[k]++;
        const lb_rule *rule = lb_recipe_rule(r, (size_t)k);
        if (rule->keep) continue;
        if (e.tensor->n_dims != 2)
            s = lb__fail(LB_ERR_ARG, "recipe rule %ld '%s' matches %s, which is %d-D: only 2-D weights are quantized",
                         k + 1, rule->pattern, e.tensor->name, e.tensor->n_dims);
        else if (rule->act.mode != LB_ACT_NONE && is_embedding(e.tensor->name))
            s = lb__fail(LB_ERR_ARG, "recipe rule %ld '%s' quantizes the input activations of %s, an embedding (a "
                                     "lookup, it has none): give it a rule of its own without input_activations",
                         k + 1, rule->pattern, e.tensor->name);
    }
    for (size_t k = 0; k < n_rules && s == LB_OK; k++) {
        if (hits[k]) continue;
        const lb_rule *rule = lb_recipe_rule(r, k);
        const char *other = non_weight_match(q, r, k);
        char names[512];
        weight_names(q, names, sizeof names);
        if (other)
            s = lb__fail(LB_ERR_ARG, "recipe rule %zu '%s' matches no weight: only %s and the like, which are never "
                                     "quantized (norms, biases); weights are named %s", k + 1, rule->pattern, other,
                         names);
        else
            s = lb__fail(LB_ERR_ARG, "recipe rule %zu '%s' matches no weight%s; the weights are named %s", k + 1,
                         rule->pattern, k ? " (or an earlier rule takes them all)" : "", names);
    }
    free(hits);
    return s;
}

lb_status lb_qmodel_apply(lb_qmodel *q, const lb_recipe *r)
{
    if (!q || !r) return lb__fail(LB_ERR_ARG, "lb_qmodel_apply: NULL argument");
    size_t n = lb_qmodel_count(q);
    long *first = malloc((n ? n : 1) * sizeof *first);
    if (!first) return lb__fail(LB_ERR_NOMEM, "lb_qmodel_apply: out of memory");
    lb_status s = check(q, r, first);
    static const lb_qact none = {LB_ACT_NONE, {0}};
    for (size_t i = 0; i < n && s == LB_OK; i++) {
        lb_qentry e;
        s = lb_qmodel_entry(q, i, &e);
        if (s != LB_OK || !lb_tensor_is_weight(e.tensor)) continue;
        const lb_rule *rule = first[i] >= 0 ? lb_recipe_rule(r, (size_t)first[i]) : NULL;
        if (!rule || rule->keep) {
            s = lb_qmodel_keep(q, i);
            if (s == LB_OK) s = lb_qmodel_set_act(q, i, &none);
        } else {
            s = lb_qmodel_set_spec(q, i, &rule->spec);
            if (s == LB_OK) s = lb_qmodel_set_act(q, i, &rule->act);
        }
        if (s != LB_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", lb_last_error());
            s = lb__fail(s, "recipe rule %ld '%s' on %s: %s", first[i] + 1, rule ? rule->pattern : "(none: kept)",
                         e.tensor->name, why);
        }
    }
    if (s == LB_OK) s = lb_qmodel_set_kv(q, lb_recipe_kv(r));
    free(first);
    return s;
}
