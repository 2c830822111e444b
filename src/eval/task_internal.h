/* A benchmark's items in memory, and what its readers share. The readers
 * (task_read_*.c) parse one published file format each into the items of
 * lowbit.h's task model: per choice a context and a continuation, joined
 * by one space when scored. Strings live in the task's arena. */
#ifndef LB_EVAL_TASK_INTERNAL_H
#define LB_EVAL_TASK_INTERNAL_H

#include "lowbit.h"
#include "util/arena.h"

/* The largest benchmark file read (the biggest published ones, MMLU's
 * auxiliary train set and HellaSwag's train JSONL, are under 200 MB). */
#define LB_TASK_MAX_FILE (1024ull << 20)
/* The most items one task holds (MMLU's test set is 14042, HellaSwag's
 * train set 39905). */
#define LB_TASK_MAX_ITEMS (1u << 24)

typedef struct lb__task_item {
    uint32_t n_choices, label;
    const char *preamble, *group;
    const char *context[LB_TASK_MAX_CHOICES];
    const char *continuation[LB_TASK_MAX_CHOICES];
    uint64_t line;
} lb__task_item;

struct lb_task {
    lb_task_kind kind;
    lb__task_item *items;
    size_t n, cap;
    lb__arena strings;
    const char *what; /* the file's name, for messages */
    const uint8_t *labels; /* PIQA's labels while its questions are read */
    size_t n_labels;
};

/* A new empty task (NULL when out of memory). */
lb_task *lb__task_new(lb_task_kind kind, const char *what);
/* Appends a zeroed item at `line` (NULL when out of memory or full). */
lb__task_item *lb__task_push(lb_task *t, uint64_t line);
/* A NUL-terminated copy of s[0..n) in the task's arena. */
const char *lb__task_str(lb_task *t, const char *s, size_t n);
/* LB_ERR_PARSE "WHAT: line L: MSG". */
lb_status lb__task_fail(const lb_task *t, uint64_t line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Python's str.strip() on ASCII white space: moves *s and shortens *n
 * (lm-eval strips questions, endings and Winogrande's rest this way). */
void lb__task_trim(const char **s, size_t *n);
/* Checks every choice of the last item: non-empty context and
 * continuation, a label among the choices. */
lb_status lb__task_check_item(const lb_task *t, const lb__task_item *it);

/* One line of a text at a time: [*line, *line + *len) without the line
 * break (LF or CRLF); *no counts lines from 1. 0 at the end. */
typedef struct lb__lines {
    const char *p, *end;
    uint64_t no;
} lb__lines;
int lb__lines_next(lb__lines *l, const char **line, size_t *len);

/* JSON Lines: fn gets each non-blank line's object (a line that is not
 * one is refused naming it). */
struct lb__json;
typedef lb_status (*lb__task_json_fn)(lb_task *t, uint64_t line, const struct lb__json *obj);
lb_status lb__task_each_json_line(lb_task *t, const char *text, size_t len, lb__task_json_fn fn);
/* A string member (without NUL bytes), or LB_ERR_PARSE naming the field. */
lb_status lb__task_field_str(const lb_task *t, uint64_t line, const struct lb__json *obj, const char *key,
                             const char **out);

/* The readers, each filling t from one file's bytes. */
lb_status lb__task_read_hellaswag(lb_task *t, const char *text, size_t len);
lb_status lb__task_read_lambada(lb_task *t, const char *text, size_t len);
lb_status lb__task_read_jsonl(lb_task *t, const char *text, size_t len, const char *labels, size_t labels_len);
lb_status lb__task_read_mmlu(lb_task *t, const char *text, size_t len, const char *subject, int cloze);

#endif
