/* Custom eval files: JSON Lines of prompts and what a right answer looks
 * like (lowbit.h, "custom evals"). */
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "eval/custom_internal.h"
#include "eval/task_internal.h"
#include "io/json.h"
#include "util/error.h"
#include "util/file.h"

/* The task helpers name the file and line; a throwaway task carries the name. */
static lb_status fail_at(const lb_custom *c, uint64_t line, const char *msg, const char *field)
{
    return lb__fail(LB_ERR_PARSE, "%s: line %llu: %s%s%s", c->what, (unsigned long long)line, field ? "field '" : "",
                    field ? field : "", msg);
}

static const char *dup_str(lb_custom *c, const lb__json *v)
{
    return lb__arena_strndup(&c->strings, v->str, v->len);
}

static int is_text(const lb__json *v) { return v && v->type == LB_JSON_STRING && strlen(v->str) == v->len; }

static lb_status parse_item(lb_custom *c, uint64_t no, const lb__json *o)
{
    if (c->n == c->cap) {
        if (c->cap >= LB_TASK_MAX_ITEMS) return fail_at(c, no, "too many items", NULL);
        size_t cap = c->cap ? 2 * c->cap : 64;
        lb_custom_item *items = realloc(c->items, cap * sizeof *items);
        if (!items) return lb__fail(LB_ERR_NOMEM, "out of memory");
        c->items = items, c->cap = cap;
    }
    lb_custom_item it = {.id = "", .line = no};
    const lb__json *prompt = lb__json_get(o, "prompt"), *expected = lb__json_get(o, "expected"),
                   *match = lb__json_get(o, "match"), *choices = lb__json_get(o, "choices"),
                   *id = lb__json_get(o, "id"), *stop = lb__json_get(o, "stop"), *max = lb__json_get(o, "max_tokens");
    if (!is_text(prompt) || prompt->len == 0) return fail_at(c, no, "': expected a non-empty string", "prompt");
    if (id && !is_text(id)) return fail_at(c, no, "': expected a string", "id");
    if (stop && (!is_text(stop) || stop->len == 0)) return fail_at(c, no, "': expected a non-empty string", "stop");
    uint64_t mt = 0;
    if (max && (!lb__json_u64(max, &mt) || mt < 1 || mt > 4096)) return fail_at(c, no, "': expected 1..4096", "max_tokens");
    it.max_tokens = (uint32_t)mt;
    if (match && !is_text(match)) return fail_at(c, no, "': expected exact, contains, regex or choices", "match");
    const char *m = match ? match->str : choices ? "choices" : "exact";
    if (strcmp(m, "exact") == 0) it.match = LB_MATCH_EXACT;
    else if (strcmp(m, "contains") == 0) it.match = LB_MATCH_CONTAINS;
    else if (strcmp(m, "regex") == 0) it.match = LB_MATCH_REGEX;
    else if (strcmp(m, "choices") == 0) it.match = LB_MATCH_CHOICES;
    else return fail_at(c, no, "': expected exact, contains, regex or choices", "match");
    if (it.match == LB_MATCH_CHOICES) {
        int64_t label;
        if (!choices || choices->type != LB_JSON_ARRAY || choices->len < 2 || choices->len > LB_TASK_MAX_CHOICES)
            return fail_at(c, no, "': expected an array of 2..16 strings", "choices");
        if (!lb__json_i64(lb__json_get(o, "label"), &label) || label < 0 || (uint64_t)label >= choices->len)
            return fail_at(c, no, "': expected the index of the right choice", "label");
        it.n_choices = (uint32_t)choices->len, it.label = (uint32_t)label;
        for (size_t k = 0; k < choices->len; k++) {
            if (!is_text(&choices->items[k]) || choices->items[k].len == 0)
                return fail_at(c, no, "': every choice a non-empty string", "choices");
            if (!(it.choices[k] = dup_str(c, &choices->items[k]))) return lb__fail(LB_ERR_NOMEM, "out of memory");
        }
    } else {
        if (!is_text(expected) || expected->len == 0) return fail_at(c, no, "': expected a non-empty string", "expected");
        if (!(it.expected = dup_str(c, expected))) return lb__fail(LB_ERR_NOMEM, "out of memory");
        if (it.match == LB_MATCH_REGEX) {
            regex_t re;
            int err = regcomp(&re, it.expected, REG_EXTENDED | REG_NOSUB);
            if (err) {
                char why[128];
                regerror(err, &re, why, sizeof why);
                return lb__fail(LB_ERR_PARSE, "%s: line %llu: field 'expected': not a POSIX extended regular expression (%s)",
                                c->what, (unsigned long long)no, why);
            }
            regfree(&re);
        }
    }
    if (!(it.prompt = dup_str(c, prompt)) || (id && !(it.id = dup_str(c, id))) || (stop && !(it.stop = dup_str(c, stop))))
        return lb__fail(LB_ERR_NOMEM, "out of memory");
    c->items[c->n++] = it;
    return LB_OK;
}

lb_status lb_custom_parse(const char *text, size_t len, const char *what, lb_custom **out)
{
    if (!out || (!text && len)) return lb__fail(LB_ERR_ARG, "lb_custom_parse: NULL argument");
    *out = NULL;
    lb_custom *c = calloc(1, sizeof *c);
    if (!c || !(c->what = lb__arena_strndup(&c->strings, what ? what : "custom", strlen(what ? what : "custom")))) {
        free(c);
        return lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    lb__lines l = {text ? text : "", (text ? text : "") + len, 0};
    const char *line;
    size_t n;
    lb_status st = LB_OK;
    while (st == LB_OK && lb__lines_next(&l, &line, &n)) {
        int blank = 1;
        for (size_t i = 0; i < n && blank; i++) blank = line[i] == ' ' || line[i] == '\t';
        if (blank) continue;
        lb__json *o = NULL;
        if ((st = lb__json_parse(line, n, "line", &o)) != LB_OK) st = fail_at(c, l.no, lb_last_error(), NULL);
        else if (o->type != LB_JSON_OBJECT) st = fail_at(c, l.no, "expected a JSON object", NULL);
        else st = parse_item(c, l.no, o);
        lb__json_free(o);
    }
    if (st == LB_OK && c->n == 0) st = lb__fail(LB_ERR_PARSE, "%s: no items", c->what);
    if (st != LB_OK) {
        lb_custom_free(c);
        return st;
    }
    *out = c;
    return LB_OK;
}

lb_status lb_custom_load(const char *path, lb_custom **out)
{
    if (!path || !out) return lb__fail(LB_ERR_ARG, "lb_custom_load: NULL argument");
    char *text = NULL;
    size_t len = 0;
    lb_status st = lb__read_file(path, LB_TASK_MAX_FILE, &text, &len);
    if (st == LB_OK) st = lb_custom_parse(text, len, path, out);
    free(text);
    return st;
}

void lb_custom_free(lb_custom *c)
{
    if (!c) return;
    free(c->items);
    lb__arena_free(&c->strings);
    free(c);
}

size_t lb_custom_size(const lb_custom *c) { return c ? c->n : 0; }

lb_status lb_custom_get(const lb_custom *c, size_t i, lb_custom_item *out)
{
    if (!c || !out || i >= c->n) return lb__fail(LB_ERR_ARG, "lb_custom_get: item %zu of %zu", i, c ? c->n : 0);
    *out = c->items[i];
    return LB_OK;
}

void lb_custom_limit(lb_custom *c, size_t n)
{
    if (c && n < c->n) c->n = n;
}

/* white space at both ends does not count for exact */
static void trimmed(const char *s, const char **p, size_t *n)
{
    *p = s, *n = strlen(s);
    lb__task_trim(p, n);
}

int lb__custom_matches(const lb_custom_item *it, const char *text)
{
    switch (it->match) {
    case LB_MATCH_EXACT: {
        const char *a, *b;
        size_t na, nb;
        trimmed(text, &a, &na), trimmed(it->expected, &b, &nb);
        return na == nb && memcmp(a, b, na) == 0;
    }
    case LB_MATCH_CONTAINS: return strstr(text, it->expected) != NULL;
    case LB_MATCH_REGEX: {
        regex_t re;
        if (regcomp(&re, it->expected, REG_EXTENDED | REG_NOSUB) != 0) return 0;
        int hit = regexec(&re, text, 0, NULL, 0) == 0;
        regfree(&re);
        return hit;
    }
    case LB_MATCH_CHOICES: return 0;
    }
    return 0;
}
