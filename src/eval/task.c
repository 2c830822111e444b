/* Tasks: the item store, loading by kind, --limit and few-shot examples.
 * The readers of each published format are in task_read_*.c. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/task_internal.h"
#include "util/error.h"
#include "util/file.h"

static const char *const kind_names[] = {
    [LB_TASK_HELLASWAG] = "hellaswag", [LB_TASK_ARC] = "arc",         [LB_TASK_MMLU] = "mmlu",
    [LB_TASK_PIQA] = "piqa",           [LB_TASK_WINOGRANDE] = "winogrande", [LB_TASK_LAMBADA] = "lambada",
    [LB_TASK_MC] = "mc",
};
#define N_KINDS (sizeof kind_names / sizeof kind_names[0])

const char *lb_task_kind_name(lb_task_kind k)
{
    return (unsigned)k < N_KINDS ? kind_names[k] : NULL;
}

lb_status lb_task_kind_parse(const char *name, lb_task_kind *out)
{
    for (unsigned k = 1; name && k < N_KINDS; k++)
        if (strcmp(name, kind_names[k]) == 0) {
            if (out) *out = (lb_task_kind)k;
            return LB_OK;
        }
    return lb__fail(LB_ERR_ARG, "unknown task '%s' (hellaswag, arc, mmlu, piqa, winogrande, lambada or mc)",
                    name ? name : "(null)");
}

lb_task *lb__task_new(lb_task_kind kind, const char *what)
{
    lb_task *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = kind;
    t->what = lb__arena_strndup(&t->strings, what ? what : "task", strlen(what ? what : "task"));
    if (!t->what) {
        free(t);
        return NULL;
    }
    return t;
}

lb__task_item *lb__task_push(lb_task *t, uint64_t line)
{
    if (t->n == t->cap) {
        if (t->cap >= LB_TASK_MAX_ITEMS) return NULL;
        size_t cap = t->cap ? 2 * t->cap : 256;
        lb__task_item *items = realloc(t->items, cap * sizeof *items);
        if (!items) return NULL;
        t->items = items, t->cap = cap;
    }
    lb__task_item *it = &t->items[t->n++];
    memset(it, 0, sizeof *it);
    it->line = line;
    it->preamble = it->group = "";
    return it;
}

const char *lb__task_str(lb_task *t, const char *s, size_t n)
{
    return lb__arena_strndup(&t->strings, s, n);
}

lb_status lb__task_fail(const lb_task *t, uint64_t line, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lb__fail(LB_ERR_PARSE, "%s: line %llu: %s", t->what, (unsigned long long)line, msg);
}

lb_status lb__task_check_item(const lb_task *t, const lb__task_item *it)
{
    if (it->n_choices < 1 || it->n_choices > LB_TASK_MAX_CHOICES)
        return lb__task_fail(t, it->line, "%u choices (1..%d taken)", it->n_choices, LB_TASK_MAX_CHOICES);
    if (it->label >= it->n_choices)
        return lb__task_fail(t, it->line, "the label %u is not one of the %u choices", it->label, it->n_choices);
    for (uint32_t c = 0; c < it->n_choices; c++) {
        if (!it->context[c] || !it->context[c][0]) return lb__task_fail(t, it->line, "choice %u has an empty context", c);
        if (!it->continuation[c] || !it->continuation[c][0])
            return lb__task_fail(t, it->line, "choice %u is empty", c);
    }
    return LB_OK;
}

void lb__task_trim(const char **s, size_t *n)
{
    while (*n && strchr(" \t\n\r\v\f", (*s)[*n - 1])) (*n)--;
    while (*n && strchr(" \t\n\r\v\f", (*s)[0])) (*s)++, (*n)--;
}

int lb__lines_next(lb__lines *l, const char **line, size_t *len)
{
    if (l->p >= l->end) return 0;
    const char *nl = memchr(l->p, '\n', (size_t)(l->end - l->p));
    const char *stop = nl ? nl : l->end;
    *line = l->p;
    *len = (size_t)(stop - l->p);
    if (*len && (*line)[*len - 1] == '\r') (*len)--;
    l->p = nl ? nl + 1 : l->end;
    l->no++;
    return 1;
}

static lb_status parse_into(lb_task *t, const char *text, size_t len, const char *labels, size_t labels_len,
                            const char *subject, const lb_task_options *o)
{
    switch (t->kind) {
    case LB_TASK_HELLASWAG: return lb__task_read_hellaswag(t, text, len);
    case LB_TASK_LAMBADA: return lb__task_read_lambada(t, text, len);
    case LB_TASK_ARC:
    case LB_TASK_PIQA:
    case LB_TASK_WINOGRANDE:
    case LB_TASK_MC: return lb__task_read_jsonl(t, text, len, labels, labels_len);
    case LB_TASK_MMLU: return lb__task_read_mmlu(t, text, len, subject, o && o->mmlu_cloze);
    }
    return lb__fail(LB_ERR_ARG, "unknown task kind %d", (int)t->kind);
}

/* MMLU's subject from a file name: "high_school_physics_test.csv" ->
 * "high school physics" (the split suffix dropped, as lm-eval names it). */
static void mmlu_subject(const char *path, char *buf, size_t size)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(buf, size, "%s", base);
    char *dot = strrchr(buf, '.');
    if (dot && strcmp(dot, ".csv") == 0) *dot = 0;
    static const char *const splits[] = {"_test", "_dev", "_val", "_train"};
    size_t n = strlen(buf);
    for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
        size_t m = strlen(splits[k]);
        if (n > m && strcmp(buf + n - m, splits[k]) == 0) {
            buf[n - m] = 0;
            break;
        }
    }
    for (char *p = buf; *p; p++)
        if (*p == '_') *p = ' ';
}

lb_status lb_task_parse(lb_task_kind kind, const char *text, size_t len, const char *labels, size_t labels_len,
                        const char *what, const lb_task_options *o, lb_task **out)
{
    if (!out || (!text && len)) return lb__fail(LB_ERR_ARG, "lb_task_parse: NULL argument");
    *out = NULL;
    if (!lb_task_kind_name(kind)) return lb__fail(LB_ERR_ARG, "lb_task_parse: unknown task kind %d", (int)kind);
    if (kind == LB_TASK_PIQA && !labels) return lb__fail(LB_ERR_ARG, "lb_task_parse: PIQA needs its labels");
    lb_task *t = lb__task_new(kind, what);
    if (!t) return lb__fail(LB_ERR_NOMEM, "out of memory");
    char subject[256];
    mmlu_subject(what ? what : "", subject, sizeof subject);
    lb_status st = parse_into(t, text ? text : "", len, labels, labels_len, subject, o);
    if (st == LB_OK && t->n == 0) st = lb__fail(LB_ERR_PARSE, "%s: no items", t->what);
    if (st != LB_OK) {
        lb_task_free(t);
        return st;
    }
    *out = t;
    return LB_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.csv of an MMLU directory, in name order, into one task. */
static lb_status load_mmlu_dir(const char *dir, const lb_task_options *o, lb_task **out)
{
    DIR *d = opendir(dir);
    if (!d) return lb__fail(LB_ERR_IO, "%s: cannot read the directory", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    lb_status st = LB_OK;
    for (struct dirent *e; st == LB_OK && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".csv") != 0) continue;
        if (n == cap) {
            char **grown = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
            if (!grown) st = lb__fail(LB_ERR_NOMEM, "out of memory");
            else names = grown;
        }
        if (st == LB_OK && !(names[n++] = lb__path_join(dir, e->d_name))) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    closedir(d);
    if (st == LB_OK && n == 0) st = lb__fail(LB_ERR_PARSE, "%s: no .csv files (MMLU: one CSV per subject)", dir);
    lb_task *all = NULL;
    if (st == LB_OK) {
        qsort(names, n, sizeof *names, by_name);
        if (!(all = lb__task_new(LB_TASK_MMLU, dir))) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; st == LB_OK && i < n; i++) {
        char *text = NULL;
        size_t len = 0;
        st = lb__read_file(names[i], LB_TASK_MAX_FILE, &text, &len);
        if (st == LB_OK) {
            char subject[256];
            mmlu_subject(names[i], subject, sizeof subject);
            const char *what = all->what;
            all->what = lb__task_str(all, names[i], strlen(names[i])); /* messages name the file */
            st = all->what ? lb__task_read_mmlu(all, text, len, subject, o && o->mmlu_cloze)
                           : lb__fail(LB_ERR_NOMEM, "out of memory");
            all->what = what;
        }
        free(text);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (st == LB_OK && all->n == 0) st = lb__fail(LB_ERR_PARSE, "%s: no items", dir);
    if (st != LB_OK) {
        lb_task_free(all);
        return st;
    }
    *out = all;
    return LB_OK;
}

/* PIQA's labels beside its questions: valid.jsonl -> valid-labels.lst. */
static char *piqa_labels_path(const char *path)
{
    size_t n = strlen(path);
    size_t stem = n > 6 && strcmp(path + n - 6, ".jsonl") == 0 ? n - 6 : n;
    char *p = malloc(stem + sizeof "-labels.lst");
    if (p) memcpy(p, path, stem), strcpy(p + stem, "-labels.lst");
    return p;
}

lb_status lb_task_load(lb_task_kind kind, const char *path, const lb_task_options *o, lb_task **out)
{
    if (!path || !out) return lb__fail(LB_ERR_ARG, "lb_task_load: NULL argument");
    *out = NULL;
    if (kind == LB_TASK_MMLU) {
        DIR *d = opendir(path);
        if (d) {
            closedir(d);
            return load_mmlu_dir(path, o, out);
        }
    }
    char *text = NULL, *labels = NULL, *labels_path = NULL;
    size_t len = 0, labels_len = 0;
    lb_status st = lb__read_file(path, LB_TASK_MAX_FILE, &text, &len);
    if (st == LB_OK && kind == LB_TASK_PIQA) {
        labels_path = o && o->labels ? NULL : piqa_labels_path(path);
        const char *lp = o && o->labels ? o->labels : labels_path;
        if (!lp) st = lb__fail(LB_ERR_NOMEM, "out of memory");
        else if ((st = lb__read_file(lp, LB_TASK_MAX_FILE, &labels, &labels_len)) != LB_OK)
            st = lb__fail(st, "PIQA's labels '%s': %s (--labels FILE names another)", lp, lb_last_error());
    }
    if (st == LB_OK) st = lb_task_parse(kind, text, len, labels, labels_len, path, o, out);
    free(text), free(labels), free(labels_path);
    return st;
}

void lb_task_free(lb_task *t)
{
    if (!t) return;
    free(t->items);
    lb__arena_free(&t->strings);
    free(t);
}

lb_task_kind lb_task_get_kind(const lb_task *t) { return t ? t->kind : (lb_task_kind)0; }
size_t lb_task_size(const lb_task *t) { return t ? t->n : 0; }

lb_status lb_task_get(const lb_task *t, size_t i, lb_task_item *out)
{
    if (!t || !out || i >= t->n) return lb__fail(LB_ERR_ARG, "lb_task_get: item %zu of %zu", i, t ? t->n : 0);
    const lb__task_item *it = &t->items[i];
    memset(out, 0, sizeof *out);
    out->n_choices = it->n_choices, out->label = it->label;
    out->preamble = it->preamble, out->group = it->group, out->line = it->line;
    for (uint32_t c = 0; c < it->n_choices; c++) out->context[c] = it->context[c], out->continuation[c] = it->continuation[c];
    return LB_OK;
}

void lb_task_limit(lb_task *t, size_t n)
{
    if (t && n < t->n) t->n = n;
}
