/* The JSON Lines benchmarks: ARC (AI2), PIQA (with its labels file),
 * Winogrande, and lowbit's own multiple-choice JSONL; and the JSONL
 * helpers the other readers share. Prompts as lm-evaluation-harness
 * writes them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/task_internal.h"
#include "io/json.h"
#include "util/error.h"

lb_status lb__task_field_str(const lb_task *t, uint64_t no, const lb__json *obj, const char *key, const char **out)
{
    const lb__json *v = lb__json_get(obj, key);
    if (!v) return lb__task_fail(t, no, "no field '%s'", key);
    if (v->type != LB_JSON_STRING || strlen(v->str) != v->len)
        return lb__task_fail(t, no, "field '%s': expected a string (without NUL)", key);
    *out = v->str;
    return LB_OK;
}

lb_status lb__task_each_json_line(lb_task *t, const char *text, size_t len, lb__task_json_fn fn)
{
    lb__lines l = {text, text + len, 0};
    const char *line;
    size_t n;
    while (lb__lines_next(&l, &line, &n)) {
        int blank = 1;
        for (size_t i = 0; i < n && blank; i++) blank = line[i] == ' ' || line[i] == '\t';
        if (blank) continue;
        lb__json *o = NULL;
        lb_status st = lb__json_parse(line, n, "line", &o);
        if (st != LB_OK) st = lb__task_fail(t, l.no, "%s", lb_last_error());
        else if (o->type != LB_JSON_OBJECT) st = lb__task_fail(t, l.no, "expected a JSON object");
        else st = fn(t, l.no, o);
        lb__json_free(o);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}

/* prefix + s + suffix into t's arena (NULL when out of memory). */
static const char *concat3(lb_task *t, const char *prefix, const char *s, const char *suffix)
{
    size_t a = strlen(prefix), b = strlen(s), c = strlen(suffix);
    char *out = lb__arena_alloc(&t->strings, a + b + c + 1, 1);
    if (out) memcpy(out, prefix, a), memcpy(out + a, s, b), memcpy(out + a + b, suffix, c + 1);
    return out;
}

/* "Question: Q\nAnswer:" with the choices as continuations (ARC, PIQA). */
static lb_status question_item(lb_task *t, uint64_t no, const char *question, const char *const *choices, uint32_t n,
                               uint32_t label)
{
    lb__task_item *it = lb__task_push(t, no);
    const char *ctx = it ? concat3(t, "Question: ", question, "\nAnswer:") : NULL;
    if (!ctx) return lb__fail(LB_ERR_NOMEM, "out of memory");
    it->n_choices = n, it->label = label;
    for (uint32_t c = 0; c < n; c++) {
        it->context[c] = ctx;
        if (!(it->continuation[c] = lb__task_str(t, choices[c], strlen(choices[c])))) return lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    return lb__task_check_item(t, it);
}

static lb_status arc_item(lb_task *t, uint64_t no, const lb__json *o)
{
    const lb__json *q = lb__json_get(o, "question");
    if (!q || q->type != LB_JSON_OBJECT) return lb__task_fail(t, no, "field 'question': expected an object");
    const char *stem, *key;
    lb_status st = lb__task_field_str(t, no, q, "stem", &stem);
    if (st == LB_OK) st = lb__task_field_str(t, no, o, "answerKey", &key);
    if (st != LB_OK) return st;
    const lb__json *choices = lb__json_get(q, "choices");
    if (!choices || choices->type != LB_JSON_ARRAY || choices->len < 2 || choices->len > LB_TASK_MAX_CHOICES)
        return lb__task_fail(t, no, "field 'question.choices': expected an array of 2..%d choices", LB_TASK_MAX_CHOICES);
    const char *texts[LB_TASK_MAX_CHOICES];
    uint32_t label = UINT32_MAX;
    for (uint32_t c = 0; c < choices->len; c++) {
        const char *text, *name;
        if (choices->items[c].type != LB_JSON_OBJECT) return lb__task_fail(t, no, "field 'question.choices': item %u is not an object", c);
        if ((st = lb__task_field_str(t, no, &choices->items[c], "text", &text)) != LB_OK ||
            (st = lb__task_field_str(t, no, &choices->items[c], "label", &name)) != LB_OK)
            return st;
        texts[c] = text;
        if (strcmp(name, key) == 0) label = c;
    }
    if (label == UINT32_MAX) return lb__task_fail(t, no, "field 'answerKey': '%.20s' is none of the choices' labels", key);
    return question_item(t, no, stem, texts, (uint32_t)choices->len, label);
}

/* PIQA's labels, one per item, read before the items. */
typedef struct piqa_labels {
    uint8_t *v;
    size_t n;
} piqa_labels;

static lb_status piqa_item(lb_task *t, uint64_t no, const lb__json *o)
{
    const char *goal, *sols[2];
    lb_status st = lb__task_field_str(t, no, o, "goal", &goal);
    if (st == LB_OK) st = lb__task_field_str(t, no, o, "sol1", &sols[0]);
    if (st == LB_OK) st = lb__task_field_str(t, no, o, "sol2", &sols[1]);
    if (st != LB_OK) return st;
    if (t->n >= t->n_labels) return lb__task_fail(t, no, "more questions than the labels file has labels (%zu)", t->n_labels);
    return question_item(t, no, goal, sols, 2, t->labels[t->n]);
}

static lb_status winogrande_item(lb_task *t, uint64_t no, const lb__json *o)
{
    const char *sentence, *options[2];
    lb_status st = lb__task_field_str(t, no, o, "sentence", &sentence);
    if (st == LB_OK) st = lb__task_field_str(t, no, o, "option1", &options[0]);
    if (st == LB_OK) st = lb__task_field_str(t, no, o, "option2", &options[1]);
    if (st != LB_OK) return st;
    const lb__json *answer = lb__json_get(o, "answer");
    int64_t a = 0;
    if (answer && answer->type == LB_JSON_STRING && answer->len == 1) a = answer->str[0] - '0';
    else if (!answer || !lb__json_i64(answer, &a)) a = 0;
    if (a != 1 && a != 2) return lb__task_fail(t, no, "field 'answer': expected \"1\" or \"2\"");
    const char *blank = strchr(sentence, '_');
    if (!blank) return lb__task_fail(t, no, "field 'sentence': no blank '_'");
    /* lm-eval's partial scoring: sentence[:blank] + option, then the rest
     * after the blank, stripped, as the one continuation */
    lb__task_item *it = lb__task_push(t, no);
    const char *rest = blank + 1;
    size_t rn = strlen(rest);
    lb__task_trim(&rest, &rn);
    const char *cont = it ? lb__task_str(t, rest, rn) : NULL;
    if (!cont) return lb__fail(LB_ERR_NOMEM, "out of memory");
    it->n_choices = 2, it->label = (uint32_t)(a - 1);
    for (int c = 0; c < 2; c++) {
        const char *head = lb__task_str(t, sentence, (size_t)(blank - sentence));
        if (!head || !(it->context[c] = concat3(t, head, options[c], ""))) return lb__fail(LB_ERR_NOMEM, "out of memory");
        it->continuation[c] = cont;
    }
    return lb__task_check_item(t, it);
}

static lb_status mc_item(lb_task *t, uint64_t no, const lb__json *o)
{
    const char *context;
    lb_status st = lb__task_field_str(t, no, o, "context", &context);
    if (st != LB_OK) return st;
    const lb__json *choices = lb__json_get(o, "choices"), *label = lb__json_get(o, "label");
    if (!choices || choices->type != LB_JSON_ARRAY || choices->len < 2 || choices->len > LB_TASK_MAX_CHOICES)
        return lb__task_fail(t, no, "field 'choices': expected an array of 2..%d strings", LB_TASK_MAX_CHOICES);
    int64_t gold;
    if (!label || !lb__json_i64(label, &gold) || gold < 0 || (uint64_t)gold >= choices->len)
        return lb__task_fail(t, no, "field 'label': expected the index of the right choice (0..%zu)", choices->len - 1);
    lb__task_item *it = lb__task_push(t, no);
    const char *ctx = it ? lb__task_str(t, context, strlen(context)) : NULL;
    if (!ctx) return lb__fail(LB_ERR_NOMEM, "out of memory");
    it->n_choices = (uint32_t)choices->len, it->label = (uint32_t)gold;
    for (uint32_t c = 0; c < it->n_choices; c++) {
        const lb__json *v = &choices->items[c];
        if (v->type != LB_JSON_STRING || strlen(v->str) != v->len)
            return lb__task_fail(t, no, "field 'choices': item %u is not a string (without NUL)", c);
        it->context[c] = ctx;
        if (!(it->continuation[c] = lb__task_str(t, v->str, v->len))) return lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    return lb__task_check_item(t, it);
}

/* PIQA's labels file: one 0 or 1 per line. */
static lb_status read_labels(const lb_task *t, const char *text, size_t len, piqa_labels *out)
{
    lb__lines l = {text, text + len, 0};
    const char *line;
    size_t n, cap = 0;
    while (lb__lines_next(&l, &line, &n)) {
        if (n == 0 && l.p >= l.end) break;
        if (n != 1 || (line[0] != '0' && line[0] != '1'))
            return lb__fail(LB_ERR_PARSE, "%s's labels: line %llu: expected 0 or 1", t->what, (unsigned long long)l.no);
        if (out->n == cap) {
            uint8_t *v = realloc(out->v, (cap = cap ? 2 * cap : 1024));
            if (!v) return lb__fail(LB_ERR_NOMEM, "out of memory");
            out->v = v;
        }
        out->v[out->n++] = (uint8_t)(line[0] - '0');
    }
    return LB_OK;
}

lb_status lb__task_read_jsonl(lb_task *t, const char *text, size_t len, const char *labels, size_t labels_len)
{
    switch (t->kind) {
    case LB_TASK_ARC: return lb__task_each_json_line(t, text, len, arc_item);
    case LB_TASK_WINOGRANDE: return lb__task_each_json_line(t, text, len, winogrande_item);
    case LB_TASK_MC: return lb__task_each_json_line(t, text, len, mc_item);
    case LB_TASK_PIQA: break;
    case LB_TASK_HELLASWAG:
    case LB_TASK_MMLU:
    case LB_TASK_LAMBADA: return lb__fail(LB_ERR_ARG, "lb__task_read_jsonl: not a JSONL task");
    }
    piqa_labels lab = {0};
    lb_status st = read_labels(t, labels ? labels : "", labels_len, &lab);
    if (st == LB_OK) {
        t->labels = lab.v, t->n_labels = lab.n;
        st = lb__task_each_json_line(t, text, len, piqa_item);
        t->labels = NULL, t->n_labels = 0;
    }
    if (st == LB_OK && t->n != lab.n)
        st = lb__fail(LB_ERR_PARSE, "%s: %zu questions but %zu labels", t->what, t->n, lab.n);
    free(lab.v);
    return st;
}
