/* Recipes: ordered rules from tensor-name patterns to what happens to the
 * matching weights, first match wins (lowbit.h, "Recipes"). A pattern is
 * a glob or "re:REGEX"; regexes are compiled once, when the rule is
 * added, so a bad one is refused there and matching a model's few
 * hundred names costs nothing to speak of. */
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "weights/recipe_internal.h"

typedef struct slot {
    lb_rule rule;   /* rule.pattern points at pattern */
    char *pattern;
    int is_regex;
    regex_t re;     /* is_regex: the whole name, anchored */
} slot;

struct lb_recipe {
    slot *rules;
    size_t n, cap;
    lb_format kv;
};

lb_status lb_recipe_new(lb_recipe **out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb_recipe_new: NULL out");
    *out = calloc(1, sizeof **out);
    if (!*out) return lb__fail(LB_ERR_NOMEM, "lb_recipe_new: out of memory");
    (*out)->kv = LB_FMT_FP32;
    return LB_OK;
}

void lb_recipe_free(lb_recipe *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        if (r->rules[i].is_regex) regfree(&r->rules[i].re);
        free(r->rules[i].pattern);
    }
    free(r->rules);
    free(r);
}

/* One character class at p (just past '['): whether c is in it; *end is
 * set past the closing ']'. 0 with *end = NULL when the set never closes. */
static int set_match(const char *p, char c, const char **end)
{
    int negate = (*p == '!' || *p == '^');
    if (negate) p++;
    int hit = 0;
    const char *start = p;
    while (*p && (*p != ']' || p == start)) {
        if (p[1] == '-' && p[2] && p[2] != ']') {
            if ((unsigned char)c >= (unsigned char)p[0] && (unsigned char)c <= (unsigned char)p[2]) hit = 1;
            p += 3;
        } else {
            if (c == *p) hit = 1;
            p++;
        }
    }
    if (*p != ']') {
        *end = NULL;
        return 0;
    }
    *end = p + 1;
    return hit != negate;
}

int lb__glob_match(const char *pattern, const char *name)
{
    const char *p = pattern, *n = name;
    const char *star_p = NULL, *star_n = NULL; /* the last '*' and where its run ends so far */
    while (*n) {
        if (*p == '*') {
            star_p = ++p;
            star_n = n;
            continue;
        }
        if (*p == '?') {
            p++, n++;
            continue;
        }
        if (*p == '[') {
            const char *end;
            int hit = set_match(p + 1, *n, &end);
            if (!end) return 0; /* an unclosed set matches nothing (lb__pattern_check refuses it) */
            if (hit) {
                p = end, n++;
                continue;
            }
        } else if (*p && *p == *n) {
            p++, n++;
            continue;
        }
        /* mismatch: let the last star take one more character */
        if (!star_p) return 0;
        p = star_p;
        n = ++star_n;
    }
    while (*p == '*') p++;
    return *p == '\0';
}

/* "re:X" compiles as ^(X)$ so that it must match the whole name (Python's
 * re.match anchors only the start; compressed-tensors' "re:" targets use
 * re.match, so "re:.*q_proj" there also matches q_proj.weight_scale: a
 * whole-name match is what a reader of the recipe expects). */
static lb_status compile_regex(const char *pattern, regex_t *re)
{
    const char *body = pattern + 3;
    size_t len = strlen(body);
    char *anchored = malloc(len + 5);
    if (!anchored) return lb__fail(LB_ERR_NOMEM, "recipe: out of memory");
    memcpy(anchored, "^(", 2);
    memcpy(anchored + 2, body, len);
    memcpy(anchored + 2 + len, ")$", 3);
    int rc = regcomp(re, anchored, REG_EXTENDED | REG_NOSUB);
    free(anchored);
    if (rc != 0) {
        char msg[160];
        regerror(rc, re, msg, sizeof msg);
        return lb__fail(LB_ERR_ARG, "recipe: pattern '%s' is not a POSIX extended regex: %s", pattern, msg);
    }
    return LB_OK;
}

lb_status lb__pattern_check(const char *pattern)
{
    if (!pattern || !*pattern) return lb__fail(LB_ERR_ARG, "recipe: empty pattern");
    size_t len = strlen(pattern);
    if (len > LB_RECIPE_MAX_PATTERN)
        return lb__fail(LB_ERR_ARG, "recipe: pattern '%.40s...' is %zu characters (at most %d)", pattern, len,
                        LB_RECIPE_MAX_PATTERN);
    if (strncmp(pattern, "re:", 3) == 0) {
        if (!pattern[3]) return lb__fail(LB_ERR_ARG, "recipe: pattern 're:' has an empty regex");
        regex_t re;
        lb_status s = compile_regex(pattern, &re);
        if (s == LB_OK) regfree(&re);
        return s;
    }
    for (const char *p = pattern; *p; p++)
        if (*p == '[') {
            const char *end;
            set_match(p + 1, 'x', &end);
            if (!end) return lb__fail(LB_ERR_ARG, "recipe: pattern '%s': a '[' set is not closed by ']'", pattern);
            p = end - 1;
        }
    return LB_OK;
}

/* The granularities each activation mode can mean: a static scale is one
 * number fixed in advance (per tensor); dynamic scales come from each
 * input (per token or per group); local is NVFP4's run-time block scales
 * under a calibrated tensor scale. */
static lb_status check_act(const lb_rule *rule)
{
    const lb_qspec *a = &rule->act.spec;
    int ok = 0;
    const char *want = "";
    switch (rule->act.mode) {
    case LB_ACT_NONE: return LB_OK;
    case LB_ACT_STATIC:
        ok = a->granularity == LB_GRAN_TENSOR && !a->affine;
        want = "static activations take one symmetric scale per tensor (e.g. fp8_e4m3:tensor)";
        break;
    case LB_ACT_DYNAMIC:
        ok = (a->granularity == LB_GRAN_TOKEN || a->granularity == LB_GRAN_GROUP) && !a->two_level && !a->affine &&
             a->group_rows <= 1;
        want = "dynamic activations take per-token or per-group symmetric scales (e.g. fp8_e4m3:token, int8:token, "
               "mxfp4; groups along each token, not 2-D bRxC blocks)";
        break;
    case LB_ACT_LOCAL:
        ok = a->granularity == LB_GRAN_GROUP && a->two_level && a->group_rows <= 1;
        want = "local activations are two-level blocks under a calibrated tensor scale (nvfp4)";
        break;
    }
    if (ok) return LB_OK;
    char text[128];
    lb_qspec_format(a, text, sizeof text);
    return lb__fail(LB_ERR_ARG, "recipe rule '%s': activation spec %s: %s", rule->pattern, text, want);
}

static lb_status check_rule(const lb_rule *rule)
{
    if (!rule) return lb__fail(LB_ERR_ARG, "recipe: NULL rule");
    lb_status s = lb__pattern_check(rule->pattern);
    if (s != LB_OK) return s;
    if (rule->keep) {
        if (rule->act.mode != LB_ACT_NONE)
            return lb__fail(LB_ERR_ARG, "recipe rule '%s': a keep rule leaves the layer 16-bit and cannot quantize "
                                        "its input activations", rule->pattern);
        return LB_OK;
    }
    if (lb_qspec_validate(&rule->spec) != LB_OK)
        return lb__fail(LB_ERR_ARG, "recipe rule '%s': weight spec: %s", rule->pattern, lb_last_error());
    switch (rule->act.mode) {
    case LB_ACT_NONE: return LB_OK;
    case LB_ACT_DYNAMIC:
    case LB_ACT_STATIC:
    case LB_ACT_LOCAL:
        if (lb_qspec_validate(&rule->act.spec) != LB_OK)
            return lb__fail(LB_ERR_ARG, "recipe rule '%s': activation spec: %s", rule->pattern, lb_last_error());
        return check_act(rule);
    }
    return lb__fail(LB_ERR_ARG, "recipe rule '%s': activation mode %d is not an lb_act_mode", rule->pattern,
                    (int)rule->act.mode);
}

static lb_status insert(lb_recipe *r, const lb_rule *rule, size_t at)
{
    if (!r) return lb__fail(LB_ERR_ARG, "recipe: NULL recipe");
    lb_status s = check_rule(rule);
    if (s != LB_OK) return s;
    if (r->n >= LB_RECIPE_MAX_RULES)
        return lb__fail(LB_ERR_ARG, "recipe: more than %d rules", LB_RECIPE_MAX_RULES);
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 8;
        slot *grown = realloc(r->rules, cap * sizeof *grown);
        if (!grown) return lb__fail(LB_ERR_NOMEM, "recipe: out of memory");
        r->rules = grown, r->cap = cap;
    }
    slot sl = {*rule, NULL, 0, {0}};
    sl.pattern = strdup(rule->pattern);
    if (!sl.pattern) return lb__fail(LB_ERR_NOMEM, "recipe: out of memory");
    if (strncmp(sl.pattern, "re:", 3) == 0) {
        s = compile_regex(sl.pattern, &sl.re);
        if (s != LB_OK) {
            free(sl.pattern);
            return s;
        }
        sl.is_regex = 1;
    }
    sl.rule.pattern = sl.pattern;
    sl.rule.keep = rule->keep ? 1 : 0;
    memmove(r->rules + at + 1, r->rules + at, (r->n - at) * sizeof *r->rules);
    r->rules[at] = sl;
    r->n++;
    return LB_OK;
}

lb_status lb_recipe_add(lb_recipe *r, const lb_rule *rule)
{
    return insert(r, rule, r ? r->n : 0);
}

lb_status lb_recipe_prepend(lb_recipe *r, const lb_rule *rule)
{
    return insert(r, rule, 0);
}

size_t lb_recipe_count(const lb_recipe *r)
{
    return r ? r->n : 0;
}

const lb_rule *lb_recipe_rule(const lb_recipe *r, size_t i)
{
    return r && i < r->n ? &r->rules[i].rule : NULL;
}

lb_status lb_recipe_set_kv(lb_recipe *r, lb_format kv)
{
    if (!r) return lb__fail(LB_ERR_ARG, "lb_recipe_set_kv: NULL recipe");
    if (kv != LB_FMT_FP32 && kv != LB_FMT_FP8_E4M3)
        return lb__fail(LB_ERR_ARG, "recipe: KV cache format must be fp8_e4m3 (with calibrated per-layer scales) "
                                    "or none");
    r->kv = kv;
    return LB_OK;
}

lb_format lb_recipe_kv(const lb_recipe *r)
{
    return r ? r->kv : LB_FMT_FP32;
}

long lb__recipe_match(const lb_recipe *r, const char *name)
{
    if (!r || !name) return -1;
    for (size_t i = 0; i < r->n; i++) {
        const slot *sl = &r->rules[i];
        int hit = sl->is_regex ? regexec(&sl->re, name, 0, NULL, 0) == 0 : lb__glob_match(sl->pattern, name);
        if (hit) return (long)i;
    }
    return -1;
}

lb_status lb_rule_parse(const char *text, lb_rule *out, char *pattern_buf, size_t pattern_size)
{
    if (!text || !out || !pattern_buf || !pattern_size) return lb__fail(LB_ERR_ARG, "lb_rule_parse: NULL argument");
    /* the first '=': specs hold '=' themselves (scale=bf16), tensor names never do */
    const char *eq = strchr(text, '=');
    if (!eq)
        return lb__fail(LB_ERR_ARG, "rule '%s' has no '=': write PATTERN=SPEC or PATTERN=keep, e.g. "
                                    "'*.mlp.down_proj.weight=int8:channel'", text);
    size_t plen = (size_t)(eq - text);
    if (plen == 0) return lb__fail(LB_ERR_ARG, "rule '%s' has an empty pattern before '='", text);
    if (plen >= pattern_size) return lb__fail(LB_ERR_ARG, "rule '%.40s...': the pattern is too long", text);
    memcpy(pattern_buf, text, plen);
    pattern_buf[plen] = '\0';
    lb_rule rule = {pattern_buf, 0, {0}, {LB_ACT_NONE, {0}}};
    const char *spec = eq + 1;
    if (strcmp(spec, "keep") == 0) rule.keep = 1;
    else if (lb_qspec_parse(spec, &rule.spec) != LB_OK)
        return lb__fail(LB_ERR_ARG, "rule '%s': %s", text, lb_last_error());
    lb_status s = lb__pattern_check(pattern_buf);
    if (s != LB_OK) return s;
    *out = rule;
    return LB_OK;
}
