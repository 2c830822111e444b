/* The recipe file (README, "Recipe files"): strict JSON, versioned.
 *
 *   {"lowbit_recipe": 1,
 *    "description": "any text",                    optional
 *    "scheme": "W4A16:g64",                        optional: its rule comes after the file's
 *    "kv_cache": "fp8",                            optional: "fp8" | "fp8_e4m3" | "none" | null
 *    "rules": [                                    optional if a scheme is given; first match wins
 *      {"match": "re:.*mlp\\.down_proj\\.weight", "keep": true},
 *      {"match": ["*.q_proj.weight", "*.k_proj.weight"], "weights": "int4:g64:scale=bf16",
 *       "input_activations": {"spec": "fp8_e4m3:token", "mode": "dynamic"}}]}
 *
 * Every key not listed is an error naming it and its line (a misspelt
 * "wieghts" must not silently quantize nothing), as is a value of the
 * wrong type and a version other than 1. A "match" list makes one rule per
 * pattern, each of which must match a weight. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "util/error.h"
#include "util/file.h"
#include "weights/recipe_internal.h"

#define RECIPE_VERSION 1

typedef struct ctx {
    const char *text;
    size_t len;
    const char *what;
} ctx;

static size_t line_of(const ctx *c, size_t offset)
{
    size_t line = 1;
    for (size_t i = 0; i < offset && i < c->len; i++) line += c->text[i] == '\n';
    return line;
}

static lb_status bad(const ctx *c, const lb__json *at, const char *fmt, ...) LB__PRINTF(3, 4);
static lb_status bad(const ctx *c, const lb__json *at, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lb__fail(LB_ERR_PARSE, "%s: line %zu: %s", c->what, line_of(c, at->offset), msg);
}

/* Every key of obj is one of allowed (a NULL-terminated list). */
static lb_status known_keys(const ctx *c, const lb__json *obj, const char *where, const char *const *allowed)
{
    for (size_t i = 0; i < obj->len; i++) {
        int ok = 0;
        for (const char *const *k = allowed; *k && !ok; k++) ok = strcmp(obj->keys[i], *k) == 0 && strlen(*k) == obj->key_lens[i];
        if (ok) continue;
        char list[200] = "";
        for (const char *const *k = allowed; *k; k++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k == allowed ? "" : ", ", *k);
        char key[80];
        snprintf(key, sizeof key, "%.64s", obj->keys[i]);
        char msg[300];
        snprintf(msg, sizeof msg, "unknown key '%s' in %s", key, where);
        return bad(c, &obj->items[i], "%s (allowed: %s)", msg, list);
    }
    return LB_OK;
}

static lb_status want_type(const ctx *c, const lb__json *v, lb__json_type t, const char *what, const char *type)
{
    if (v->type == t) return LB_OK;
    return bad(c, v, "%s must be %s", what, type);
}

static lb_status parse_act(const ctx *c, const lb__json *v, const char *where, lb_qact *act)
{
    static const char *const keys[] = {"spec", "mode", NULL};
    char at[80];
    snprintf(at, sizeof at, "input_activations of %s", where);
    lb_status s = known_keys(c, v, at, keys);
    if (s != LB_OK) return s;
    const lb__json *spec = lb__json_get(v, "spec"), *mode = lb__json_get(v, "mode");
    if (!spec || !mode) return bad(c, v, "%s needs \"spec\" and \"mode\" (dynamic, static or local)", at);
    if ((s = want_type(c, spec, LB_JSON_STRING, "input_activations \"spec\"", "a spec string")) != LB_OK) return s;
    if ((s = want_type(c, mode, LB_JSON_STRING, "input_activations \"mode\"", "\"dynamic\", \"static\" or \"local\"")) != LB_OK)
        return s;
    if (strcmp(mode->str, "dynamic") == 0) act->mode = LB_ACT_DYNAMIC;
    else if (strcmp(mode->str, "static") == 0) act->mode = LB_ACT_STATIC;
    else if (strcmp(mode->str, "local") == 0) act->mode = LB_ACT_LOCAL;
    else return bad(c, mode, "input_activations \"mode\" is '%.40s': dynamic, static or local", mode->str);
    if (lb_qspec_parse(spec->str, &act->spec) != LB_OK) return bad(c, spec, "input_activations: %s", lb_last_error());
    return LB_OK;
}

/* One rule object: appends one rule per pattern of its "match". */
static lb_status parse_rule(const ctx *c, const lb__json *v, size_t index, lb_recipe *r)
{
    static const char *const keys[] = {"match", "keep", "weights", "input_activations", "description", NULL};
    char where[40];
    snprintf(where, sizeof where, "rule %zu", index + 1);
    lb_status s = want_type(c, v, LB_JSON_OBJECT, where, "an object {\"match\": ..., \"weights\" or \"keep\": ...}");
    if (s != LB_OK) return s;
    if ((s = known_keys(c, v, where, keys)) != LB_OK) return s;
    const lb__json *match = lb__json_get(v, "match"), *keep = lb__json_get(v, "keep"),
                   *weights = lb__json_get(v, "weights"), *act = lb__json_get(v, "input_activations"),
                   *desc = lb__json_get(v, "description");
    if (desc && (s = want_type(c, desc, LB_JSON_STRING, "\"description\"", "a string")) != LB_OK) return s;
    if (!match) return bad(c, v, "%s has no \"match\" (a pattern, or a list of them)", where);
    if (match->type != LB_JSON_STRING && (match->type != LB_JSON_ARRAY || match->len == 0))
        return bad(c, match, "\"match\" of %s must be a pattern string or a non-empty list of them", where);
    lb_rule rule = {NULL, 0, {0}, {LB_ACT_NONE, {0}}};
    if (keep) {
        if (keep->type != LB_JSON_TRUE && keep->type != LB_JSON_FALSE)
            return bad(c, keep, "\"keep\" of %s must be true or false", where);
        rule.keep = keep->type == LB_JSON_TRUE;
    }
    if (rule.keep && weights) return bad(c, weights, "%s says both \"keep\": true and \"weights\": choose one", where);
    if (rule.keep && act && act->type != LB_JSON_NULL)
        return bad(c, act, "%s keeps its weights 16-bit: \"input_activations\" would need quantized weights", where);
    if (!rule.keep) {
        if (!weights) return bad(c, v, "%s needs \"weights\": SPEC (e.g. \"int4:g128\") or \"keep\": true", where);
        if ((s = want_type(c, weights, LB_JSON_STRING, "\"weights\"", "a spec string such as \"int4:g128\"")) != LB_OK)
            return s;
        if (lb_qspec_parse(weights->str, &rule.spec) != LB_OK)
            return bad(c, weights, "\"weights\" of %s: %s", where, lb_last_error());
        if (act && act->type != LB_JSON_NULL) {
            if ((s = want_type(c, act, LB_JSON_OBJECT, "\"input_activations\"", "an object {\"spec\", \"mode\"} or null")) != LB_OK)
                return s;
            if ((s = parse_act(c, act, where, &rule.act)) != LB_OK) return s;
        }
    }
    size_t n = match->type == LB_JSON_STRING ? 1 : match->len;
    for (size_t k = 0; k < n; k++) {
        const lb__json *p = match->type == LB_JSON_STRING ? match : &match->items[k];
        if (p->type != LB_JSON_STRING) return bad(c, p, "\"match\" of %s: every pattern must be a string", where);
        if (strlen(p->str) != p->len) return bad(c, p, "\"match\" of %s: a pattern holds a NUL character", where);
        rule.pattern = p->str;
        if ((s = lb_recipe_add(r, &rule)) != LB_OK) return bad(c, p, "%s", lb_last_error());
    }
    return LB_OK;
}

static lb_status parse_root(const ctx *c, const lb__json *root, lb_recipe *r)
{
    static const char *const keys[] = {"lowbit_recipe", "description", "scheme", "kv_cache", "rules", NULL};
    lb_status s = want_type(c, root, LB_JSON_OBJECT, "a recipe", "an object {\"lowbit_recipe\": 1, ...}");
    if (s != LB_OK) return s;
    if ((s = known_keys(c, root, "the recipe", keys)) != LB_OK) return s;
    const lb__json *version = lb__json_get(root, "lowbit_recipe"), *desc = lb__json_get(root, "description"),
                   *scheme = lb__json_get(root, "scheme"), *kv = lb__json_get(root, "kv_cache"),
                   *rules = lb__json_get(root, "rules");
    uint64_t ver = 0;
    if (!version) return bad(c, root, "not a lowbit recipe: \"lowbit_recipe\": %d is missing", RECIPE_VERSION);
    if (!lb__json_u64(version, &ver) || ver != RECIPE_VERSION)
        return bad(c, version, "\"lowbit_recipe\" is the format's version: this lowbit reads %d, not '%.20s'", RECIPE_VERSION,
                   version->type == LB_JSON_NUMBER ? version->str : "a non-number");
    if (desc && (s = want_type(c, desc, LB_JSON_STRING, "\"description\"", "a string")) != LB_OK) return s;
    if (rules) {
        if ((s = want_type(c, rules, LB_JSON_ARRAY, "\"rules\"", "a list of rule objects")) != LB_OK) return s;
        for (size_t i = 0; i < rules->len; i++)
            if ((s = parse_rule(c, &rules->items[i], i, r)) != LB_OK) return s;
    }
    if (scheme) {
        if ((s = want_type(c, scheme, LB_JSON_STRING, "\"scheme\"", "a scheme name such as \"W4A16\"")) != LB_OK) return s;
        lb_recipe *base;
        if (lb_scheme_recipe_named(scheme->str, &base) != LB_OK) return bad(c, scheme, "%s", lb_last_error());
        for (size_t k = 0; k < lb_recipe_count(base) && s == LB_OK; k++) s = lb_recipe_add(r, lb_recipe_rule(base, k));
        lb_recipe_free(base);
        if (s != LB_OK) return s;
    }
    if (lb_recipe_count(r) == 0)
        return bad(c, root, "the recipe has no rules: give \"rules\" or a \"scheme\"");
    if (kv && kv->type != LB_JSON_NULL) {
        if (kv->type != LB_JSON_STRING) return bad(c, kv, "\"kv_cache\" must be \"fp8\", \"none\" or null");
        if (strcmp(kv->str, "fp8") == 0 || strcmp(kv->str, "fp8_e4m3") == 0) s = lb_recipe_set_kv(r, LB_FMT_FP8_E4M3);
        else if (strcmp(kv->str, "none") != 0)
            return bad(c, kv, "\"kv_cache\" is '%.40s': \"fp8\" (FP8 E4M3, calibrated per-layer scales) or \"none\"",
                       kv->str);
    }
    return s;
}

lb_status lb_recipe_parse(const char *json, size_t len, const char *what, lb_recipe **out)
{
    if (!out || (!json && len)) return lb__fail(LB_ERR_ARG, "lb_recipe_parse: NULL argument");
    *out = NULL;
    ctx c = {json, len, what ? what : "recipe"};
    lb__json *root;
    lb_status s = lb__json_parse(json, len, c.what, &root);
    if (s != LB_OK) return s;
    lb_recipe *r;
    s = lb_recipe_new(&r);
    if (s == LB_OK) {
        s = parse_root(&c, root, r);
        if (s != LB_OK) lb_recipe_free(r);
        else *out = r;
    }
    lb__json_free(root);
    return s;
}

lb_status lb_recipe_load(const char *path, lb_recipe **out)
{
    if (!path || !out) return lb__fail(LB_ERR_ARG, "lb_recipe_load: NULL argument");
    *out = NULL;
    char *text;
    size_t len;
    lb_status s = lb__read_file(path, LB_RECIPE_MAX_FILE, &text, &len);
    if (s != LB_OK) return s;
    s = lb_recipe_parse(text, len, path, out);
    free(text);
    return s;
}
