/* The units a sensitivity sweep measures (lowbit.h, lb_units_make): sets
 * of qmodel entries that change together. A unit is self-contained: what
 * a method folds into a norm travels with the layer or class that holds
 * the norm (attn: q/k/v/o and input_layernorm; mlp: gate/up/down and
 * post_attention_layernorm), so a layer or class measured alone is the
 * model that method makes with only that part quantized. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/units.h"
#include "util/error.h"

#define EMBED_NAME "model.embed_tokens.weight"
#define HEAD_NAME "lm_head.weight"

/* The decoder layer of a canonical name, or -1. */
long lb__unit_layer_of(const char *name)
{
    static const char prefix[] = "model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0) return -1;
    const char *p = name + sizeof prefix - 1;
    long l = 0;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (l > 1000000L) return -1;
        l = l * 10 + (*p - '0');
    }
    return *p == '.' ? l : -1;
}

/* What a qmodel does to entry e: 1 a weight quantized (a spec or a ggml
 * type), 2 only its activations, 0 nothing. */
static int changes(const lb_qentry *e)
{
    if (e->state == LB_QSTATE_QUANTIZED || e->ggml != LB_DT_COUNT) return 1;
    if (e->act.mode != LB_ACT_NONE) return 2;
    return 0;
}

static lb_status add_unit(lb_units *u, const char *name, lb_unit_kind kind)
{
    if (u->n == u->cap) {
        size_t cap = u->cap ? 2 * u->cap : 16;
        lb__unit *g = realloc(u->u, cap * sizeof *g);
        if (!g) return lb__fail(LB_ERR_NOMEM, "lb_units_make: out of memory");
        u->u = g, u->cap = cap;
    }
    lb__unit *x = &u->u[u->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->kind = kind;
    x->first_layer = LB__UNIT_NO_LAYER;
    return LB_OK;
}

static lb_status add_entry(lb_units *u, const lb_qmodel *q, size_t i)
{
    lb__unit *x = &u->u[u->n - 1];
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 8;
        size_t *g = realloc(x->entries, cap * sizeof *g);
        if (!g) return lb__fail(LB_ERR_NOMEM, "lb_units_make: out of memory");
        x->entries = g, x->cap = cap;
    }
    x->entries[x->n++] = i;
    const lb_tensor *t = lb_model_tensor(lb_qmodel_model(q), i);
    if (lb_tensor_is_weight(t)) x->params += t->n_elements;
    long l = lb__unit_layer_of(t->name);
    size_t n_layers = lb_model_arch(lb_qmodel_model(q))->n_layers;
    /* the embedding changes the input of layer 0; the head only the logits */
    long at = l >= 0 ? l : strcmp(t->name, EMBED_NAME) == 0 ? -1 : (long)n_layers;
    if (x->first_layer == LB__UNIT_NO_LAYER || at < x->first_layer) x->first_layer = at;
    return LB_OK;
}

/* The class of entry name: "attn", "mlp", "embed", "head", or NULL. */
static const char *class_of(const char *name, int tied)
{
    if (strcmp(name, EMBED_NAME) == 0) return tied ? "embed+head" : "embed";
    if (strncmp(name, "lm_head.", 8) == 0) return "head";
    if (lb__unit_layer_of(name) < 0) return NULL;
    if (strstr(name, ".self_attn.") || strstr(name, ".input_layernorm.")) return "attn";
    if (strstr(name, ".mlp.") || strstr(name, ".post_attention_layernorm.")) return "mlp";
    return NULL;
}

/* One unit per distinct key of the entries, in order of first appearance;
 * a unit is made only if q changes one of its entries. key(i) NULL: none. */
static lb_status group_by(lb_units *u, const lb_qmodel *q, lb_unit_kind kind, int tied)
{
    size_t n = lb_qmodel_count(q);
    size_t n_layers = lb_model_arch(lb_qmodel_model(q))->n_layers;
    /* keys: layer units "layer N" (and embed/head as classes), or the class names */
    for (size_t pass = 0; pass < n_layers + 4; pass++) {
        char key[32];
        if (kind == LB_UNIT_LAYER && pass < n_layers) snprintf(key, sizeof key, "layer %zu", pass);
        else {
            static const char *const classes[] = {"embed", "attn", "mlp", "head"};
            size_t c = kind == LB_UNIT_LAYER ? pass - n_layers : pass;
            if (c >= 4) break;
            if (kind == LB_UNIT_LAYER && (c == 1 || c == 2)) continue;
            snprintf(key, sizeof key, "%s", c == 0 && tied ? "embed+head" : classes[c]);
        }
        int any = 0, made = 0;
        for (size_t i = 0; i < n; i++) {
            lb_qentry e;
            lb_status st = lb_qmodel_entry(q, i, &e);
            if (st != LB_OK) return st;
            const char *name = e.tensor->name;
            int member;
            if (kind == LB_UNIT_LAYER && pass < n_layers) member = lb__unit_layer_of(name) == (long)pass;
            else {
                const char *c = class_of(name, tied);
                member = c && strcmp(c, key) == 0;
            }
            if (!member) continue;
            if (!made) {
                if ((st = add_unit(u, key, kind)) != LB_OK) return st;
                made = 1;
            }
            if ((st = add_entry(u, q, i)) != LB_OK) return st;
            any |= changes(&e) != 0;
        }
        if (made && !any) { /* nothing of it changes: no unit */
            free(u->u[u->n - 1].entries);
            u->n--;
        }
    }
    return LB_OK;
}

static lb_status tensors(lb_units *u, const lb_qmodel *q)
{
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        lb_status st = lb_qmodel_entry(q, i, &e);
        if (st != LB_OK) return st;
        if (e.tensor->n_dims == 1 && e.state == LB_QSTATE_REPLACED)
            return lb__fail(LB_ERR_ARG, "lb_units_make: %s was changed by a method (SmoothQuant and AWQ fold scales "
                            "into the norms), so no weight alone is that model: measure layers or classes",
                            e.tensor->name);
    }
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        lb_status st = lb_qmodel_entry(q, i, &e);
        if (st != LB_OK) return st;
        if (!lb_tensor_is_weight(e.tensor) || !changes(&e)) continue;
        if ((st = add_unit(u, e.tensor->name, LB_UNIT_TENSOR)) != LB_OK || (st = add_entry(u, q, i)) != LB_OK)
            return st;
    }
    return LB_OK;
}

/* The classes that are not sets of tensors: the activations (every entry
 * whose input q quantizes, weights as stored) and the KV cache. */
static lb_status act_and_kv(lb_units *u, const lb_qmodel *q)
{
    int made = 0;
    for (size_t i = 0; i < lb_qmodel_count(q); i++) {
        lb_qentry e;
        lb_status st = lb_qmodel_entry(q, i, &e);
        if (st != LB_OK) return st;
        if (e.act.mode == LB_ACT_NONE) continue;
        if (!made && (st = add_unit(u, "act", LB_UNIT_CLASS)) != LB_OK) return st;
        made = 1;
        u->u[u->n - 1].act_only = 1;
        if ((st = add_entry(u, q, i)) != LB_OK) return st;
    }
    if (lb_qmodel_kv(q) != LB_FMT_FP32) {
        lb_status st = add_unit(u, "kv", LB_UNIT_CLASS);
        if (st != LB_OK) return st;
        u->u[u->n - 1].kv = 1;
        u->u[u->n - 1].first_layer = 0;
    }
    return LB_OK;
}

/* Every entry in one unit, and the KV cache when q quantizes it. */
static lb_status whole(lb_units *u, const lb_qmodel *q)
{
    int any = lb_qmodel_kv(q) != LB_FMT_FP32;
    lb_status st = add_unit(u, "model", LB_UNIT_MODEL);
    for (size_t i = 0; i < lb_qmodel_count(q) && st == LB_OK; i++) {
        lb_qentry e;
        if ((st = lb_qmodel_entry(q, i, &e)) == LB_OK) st = add_entry(u, q, i);
        any |= st == LB_OK && changes(&e) != 0;
    }
    if (st != LB_OK) return st;
    u->u[0].kv = lb_qmodel_kv(q) != LB_FMT_FP32;
    if (!any) {
        free(u->u[0].entries);
        u->n = 0;
    }
    return LB_OK;
}

lb_status lb_units_make(const lb_qmodel *q, lb_unit_kind kind, lb_units **out)
{
    return lb__units_make(q, kind, 0, out);
}

lb_status lb__units_make(const lb_qmodel *q, lb_unit_kind kind, int allow_empty, lb_units **out)
{
    if (!q || !out) return lb__fail(LB_ERR_ARG, "lb_units_make: NULL argument");
    *out = NULL;
    lb_units *u = calloc(1, sizeof *u);
    if (!u) return lb__fail(LB_ERR_NOMEM, "lb_units_make: out of memory");
    int tied = lb_model_arch(lb_qmodel_model(q))->tied_embeddings || !lb_model_find(lb_qmodel_model(q), HEAD_NAME);
    lb_status st;
    switch (kind) {
    case LB_UNIT_TENSOR: st = tensors(u, q); break;
    case LB_UNIT_LAYER: st = group_by(u, q, kind, tied); break;
    case LB_UNIT_CLASS:
        st = group_by(u, q, kind, tied);
        if (st == LB_OK) st = act_and_kv(u, q);
        break;
    case LB_UNIT_MODEL: st = whole(u, q); break;
    default: st = lb__fail(LB_ERR_ARG, "lb_units_make: unknown unit kind %d", (int)kind);
    }
    if (st == LB_OK && u->n == 0 && !allow_empty)
        st = lb__fail(LB_ERR_ARG, "lb_units_make: the quantized model changes nothing (no weight, activation or KV "
                      "cache is quantized)");
    if (st != LB_OK) {
        lb_units_free(u);
        return st;
    }
    *out = u;
    return LB_OK;
}

void lb_units_free(lb_units *u)
{
    if (!u) return;
    for (size_t i = 0; i < u->n; i++) free(u->u[i].entries);
    free(u->u);
    free(u);
}

size_t lb_units_count(const lb_units *u) { return u ? u->n : 0; }

lb_status lb_units_get(const lb_units *u, size_t i, lb_unit_info *out)
{
    if (!u || !out) return lb__fail(LB_ERR_ARG, "lb_units_get: NULL argument");
    if (i >= u->n) return lb__fail(LB_ERR_ARG, "lb_units_get: unit %zu of %zu", i, u->n);
    const lb__unit *x = &u->u[i];
    *out = (lb_unit_info){.name = x->name, .kind = x->kind, .n_entries = x->n, .entries = x->entries, .kv = x->kv,
                          .act_only = x->act_only, .params = x->params};
    return LB_OK;
}
