/* MMLU (Hendrycks et al. 2021): one CSV per subject, no header, records
 * question,A,B,C,D,answer (RFC 4180: quoted fields may hold commas, line
 * breaks and doubled quotes). Prompts as lm-evaluation-harness writes its
 * `mmlu` (lettered) and `mmlu_continuation` (cloze) tasks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/task_internal.h"
#include "util/error.h"

#define FIELDS 6

typedef struct csv {
    const char *p, *end;
    uint64_t line;
    char *scratch; /* a record's unquoted fields: room for the whole text plus the fields' NULs */
} csv;

/* One record's fields, unquoted into c->scratch (valid until the next
 * record). 0 at the end of the text, 1 for a record, -1 after reporting.
 * *first is its first line. */
static int csv_record(lb_task *t, csv *c, const char **fields, size_t *n_fields, uint64_t *first, lb_status *st)
{
    while (c->p < c->end && (*c->p == '\n' || *c->p == '\r')) c->line += *c->p++ == '\n'; /* blank lines */
    if (c->p >= c->end) return 0;
    *first = c->line;
    *n_fields = 0;
    char *buf = c->scratch;
    for (;;) {
        size_t n = 0;
        if (c->p < c->end && *c->p == '"') {
            uint64_t opened = c->line;
            c->p++;
            for (;;) {
                if (c->p >= c->end)
                    return *st = lb__task_fail(t, opened, "a quoted field is never closed"), -1;
                if (*c->p == '"') {
                    if (c->p + 1 < c->end && c->p[1] == '"') buf[n++] = '"', c->p += 2;
                    else {
                        c->p++;
                        break;
                    }
                } else {
                    c->line += *c->p == '\n';
                    buf[n++] = *c->p++;
                }
            }
            if (c->p < c->end && *c->p != ',' && *c->p != '\n' && *c->p != '\r')
                return *st = lb__task_fail(t, c->line, "text after a quoted field's closing quote"), -1;
        } else {
            while (c->p < c->end && *c->p != ',' && *c->p != '\n' && *c->p != '\r') {
                if (*c->p == '"') return *st = lb__task_fail(t, c->line, "a quote inside an unquoted field"), -1;
                buf[n++] = *c->p++;
            }
        }
        buf[n] = 0;
        if (memchr(buf, 0, n)) return *st = lb__task_fail(t, c->line, "a NUL byte in a field"), -1;
        if (*n_fields == FIELDS)
            return *st = lb__task_fail(t, *first, "more than %d fields (question,A,B,C,D,answer)", FIELDS), -1;
        fields[(*n_fields)++] = buf;
        buf += n + 1;
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->end && *c->p == '\r') c->p++;
        if (c->p < c->end && *c->p == '\n') c->p++, c->line++;
        return 1;
    }
}

static const char *strip(lb_task *t, const char *s)
{
    size_t n = strlen(s);
    lb__task_trim(&s, &n);
    return lb__task_str(t, s, n);
}

/* One record as an item (the first record may be a header line). */
static lb_status add_record(lb_task *t, const char *const *f, size_t nf, uint64_t first, const char *pre,
                            const char *group, int cloze, int first_record)
{
    static const char *const letters[] = {"A", "B", "C", "D"};
    if (first_record && nf == FIELDS && strcmp(f[0], "question") == 0 && strcmp(f[5], "answer") == 0) return LB_OK;
    if (nf != FIELDS) return lb__task_fail(t, first, "%zu fields (question,A,B,C,D,answer: 6)", nf);
    if (strlen(f[5]) != 1 || f[5][0] < 'A' || f[5][0] > 'D')
        return lb__task_fail(t, first, "field 'answer': expected A, B, C or D, not '%.20s'", f[5]);
    lb__task_item *it = lb__task_push(t, first);
    const char *q = it ? strip(t, f[0]) : NULL;
    if (!q) return lb__fail(LB_ERR_NOMEM, "out of memory");
    if (!q[0]) return lb__task_fail(t, first, "field 'question' is empty");
    size_t need = strlen(q) + 32;
    for (int k = 1; k <= 4; k++) need += strlen(f[k]) + 4;
    char *ctx = lb__arena_alloc(&t->strings, need, 1);
    if (!ctx) return lb__fail(LB_ERR_NOMEM, "out of memory");
    if (cloze) snprintf(ctx, need, "Question: %s\nAnswer:", q);
    else snprintf(ctx, need, "%s\nA. %s\nB. %s\nC. %s\nD. %s\nAnswer:", q, f[1], f[2], f[3], f[4]);
    it->n_choices = 4, it->label = (uint32_t)(f[5][0] - 'A');
    it->preamble = pre, it->group = group;
    for (int k = 0; k < 4; k++) {
        it->context[k] = ctx;
        it->continuation[k] = cloze ? lb__task_str(t, f[1 + k], strlen(f[1 + k])) : letters[k];
        if (!it->continuation[k]) return lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    return lb__task_check_item(t, it);
}

lb_status lb__task_read_mmlu(lb_task *t, const char *text, size_t len, const char *subject, int cloze)
{
    char preamble[400];
    snprintf(preamble, sizeof preamble, cloze ? "The following are questions (with answers) about %s.\n\n"
                                              : "The following are multiple choice questions (with answers) about %s.\n\n",
             subject && subject[0] ? subject : "general knowledge");
    const char *pre = lb__task_str(t, preamble, strlen(preamble)), *group = lb__task_str(t, subject ? subject : "", strlen(subject ? subject : ""));
    if (!pre || !group) return lb__fail(LB_ERR_NOMEM, "out of memory");
    csv c = {text, text + len, 1, malloc(len + FIELDS + 1)};
    if (!c.scratch) return lb__fail(LB_ERR_NOMEM, "out of memory");
    const char *f[FIELDS];
    size_t nf;
    uint64_t first;
    lb_status st = LB_OK;
    int r = 0, records = 0;
    while (st == LB_OK && (r = csv_record(t, &c, f, &nf, &first, &st)) == 1) {
        st = add_record(t, f, nf, first, pre, group, cloze, records++ == 0);
    }
    free(c.scratch);
    return r < 0 || st != LB_OK ? st : LB_OK;
}
