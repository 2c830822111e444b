/* lowbit eval --base-items FILE: the base model's per-item scores read back
 * from an earlier run's --items file, so that several quantizations are
 * compared with one scoring of the base. */
#include <stdlib.h>
#include <string.h>

#include "eval_tasks.h"
#include "io/json.h"
#include "util/file.h"

static int fail_line(int json, const char *path, uint64_t line, const char *what)
{
    return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "--base-items %s: line %llu: %s", path,
                    (unsigned long long)line, what);
}

static int numbers(const lb__json *a, uint32_t n, double *out)
{
    if (!a || a->type != LB_JSON_ARRAY || a->len != n) return 0;
    for (uint32_t c = 0; c < n; c++) {
        if (a->items[c].type != LB_JSON_NUMBER) return 0;
        out[c] = a->items[c].number;
    }
    return 1;
}

static int flag(const lb__json *o, const char *key, uint8_t *out)
{
    const lb__json *v = lb__json_get(o, key);
    uint64_t u;
    if (v && (v->type == LB_JSON_TRUE || v->type == LB_JSON_FALSE)) return *out = v->type == LB_JSON_TRUE, 1;
    if (!lb__json_u64(v, &u) || u > 1) return 0;
    *out = (uint8_t)u;
    return 1;
}

/* An item's multiple-choice scores ("base" of a task item or a custom choices item). */
static int item_scores(const lb__json *b, uint32_t n, lb_item_score *s)
{
    double tokens[LB_TASK_MAX_CHOICES];
    const lb__json *greedy = lb__json_get(b, "greedy");
    if (!numbers(lb__json_get(b, "loglik"), n, s->loglik) || !numbers(lb__json_get(b, "loglik_tok"), n, s->loglik_tok) ||
        !numbers(lb__json_get(b, "tokens"), n, tokens) || !greedy || greedy->type != LB_JSON_ARRAY || greedy->len != n ||
        !flag(b, "acc", &s->correct) || !flag(b, "acc_norm", &s->correct_norm) || !flag(b, "acc_norm_tok", &s->correct_norm_tok))
        return 0;
    for (uint32_t c = 0; c < n; c++) {
        s->tokens[c] = (uint32_t)tokens[c];
        if (greedy->items[c].type != LB_JSON_TRUE && greedy->items[c].type != LB_JSON_FALSE) return 0;
        s->greedy[c] = greedy->items[c].type == LB_JSON_TRUE;
    }
    return 1;
}

static int custom_result(const lb__json *b, lb_custom_result *g)
{
    const char *out = lb__json_str(b, "output");
    uint64_t pt, gt;
    if (!out || !flag(b, "correct", &g->correct) || !flag(b, "stopped", &g->stopped) ||
        !lb__json_u64(lb__json_get(b, "prompt_tokens"), &pt) || !lb__json_u64(lb__json_get(b, "generated_tokens"), &gt))
        return 0;
    g->prompt_tokens = (uint32_t)pt, g->generated_tokens = (uint32_t)gt;
    return (g->output = strdup(out)) != NULL;
}

/* One line into the task it belongs to; 0 or a reported exit code. */
static int take_line(int json, const char *path, uint64_t no, const lb__json *o, eval_task *t, size_t index)
{
    uint64_t idx, line, label = 0;
    if (!lb__json_u64(lb__json_get(o, "index"), &idx) || idx != index || !lb__json_u64(lb__json_get(o, "line"), &line))
        return fail_line(json, path, no, "not the next item of its task (an --items file of the same tasks, --limit and --shots)");
    const lb__json *b = lb__json_get(o, "base");
    if (!b || b->type != LB_JSON_OBJECT) return fail_line(json, path, no, "no \"base\" object");
    if (t->task) {
        lb_task_item it;
        lb_task_get(t->task, index, &it);
        if (line != it.line || !lb__json_u64(lb__json_get(o, "label"), &label) || label != it.label)
            return fail_line(json, path, no, "the item's line or label differ from the --data file's");
        if (!item_scores(b, it.n_choices, &t->base[index])) return fail_line(json, path, no, "malformed \"base\" scores");
        return EXIT_OK;
    }
    lb_custom_item it;
    lb_custom_get(t->custom, index, &it);
    if (line != it.line) return fail_line(json, path, no, "the item's line differs from the --data file's");
    lb_custom_result *g = &t->cbase[index];
    int good = it.match == LB_MATCH_CHOICES ? item_scores(b, it.n_choices, &g->choices) : custom_result(b, g);
    if (!good) return fail_line(json, path, no, "malformed \"base\" result");
    if (it.match == LB_MATCH_CHOICES) g->correct = g->choices.correct, g->output = strdup("");
    if (!g->output) return cli_fail("eval", json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    lb_item_score *s = &t->base[index];
    s->correct = s->correct_norm = s->correct_norm_tok = g->correct;
    return EXIT_OK;
}

int eval_read_base_items(int json, const char *path, eval_run *r)
{
    char *text = NULL;
    size_t len = 0;
    lb_status st = lb__read_file(path, 1ull << 32, &text, &len);
    if (st != LB_OK) return cli_fail_lb("eval", json, EXIT_RUNTIME, st);
    size_t next[EVAL_MAX_TASKS] = {0};
    for (size_t k = 0; k < r->n_tasks; k++) {
        eval_task *t = &r->tasks[k];
        size_t n = eval_items(t);
        if (!n) continue;
        t->base = calloc(n, sizeof *t->base);
        if (t->custom) t->cbase = calloc(n, sizeof *t->cbase);
        if (!t->base || (t->custom && !t->cbase)) {
            free(text);
            return cli_fail("eval", json, EXIT_RUNTIME, "out_of_memory", "out of memory");
        }
        t->base_seconds = -1; /* not run here */
    }
    int rc = EXIT_OK;
    uint64_t no = 0;
    for (const char *p = text, *end = text + len; rc == EXIT_OK && p < end; no++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *stop = nl ? nl : end;
        lb__json *o = NULL;
        if (stop > p && lb__json_parse(p, (size_t)(stop - p), path, &o) != LB_OK) rc = fail_line(json, path, no + 1, lb_last_error());
        const char *task = o ? lb__json_str(o, "task") : NULL;
        size_t k = 0;
        while (task && k < r->n_tasks && (strcmp(r->tasks[k].name, task) != 0 || next[k] == eval_items(&r->tasks[k]))) k++;
        if (rc == EXIT_OK && o && (!task || k == r->n_tasks))
            rc = fail_line(json, path, no + 1, "an item of no task of this run, or one too many");
        if (rc == EXIT_OK && o) rc = take_line(json, path, no + 1, o, &r->tasks[k], next[k]), next[k]++;
        lb__json_free(o);
        p = nl ? nl + 1 : end;
    }
    free(text);
    for (size_t k = 0; rc == EXIT_OK && k < r->n_tasks; k++)
        if (next[k] != eval_items(&r->tasks[k]))
            rc = cli_fail("eval", json, EXIT_USAGE, "bad_argument", "--base-items %s: %zu items of task %s, not %zu", path,
                          next[k], r->tasks[k].name, eval_items(&r->tasks[k]));
    return rc;
}
