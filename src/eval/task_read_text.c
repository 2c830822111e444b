/* The line-oriented benchmark files: HellaSwag (llama.cpp's 6-line text
 * form, or rowanz's JSONL with lm-eval's preprocessing) and LAMBADA
 * (OpenAI's JSONL, or the original plain text). */
#include <string.h>

#include "eval/task_internal.h"
#include "io/json.h"
#include "util/error.h"

/* The first byte that is not blank: '{' means JSON Lines. */
static int looks_like_jsonl(const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n') continue;
        return text[i] == '{';
    }
    return 0;
}

/* ---- HellaSwag ---- */

/* lm-eval's hellaswag preprocess(): strip, " [title]" -> ". ", every
 * "[...]" removed (the shortest), "  " -> " " (one left-to-right pass, as
 * Python's str.replace). Into t's arena. */
static const char *hs_preprocess(lb_task *t, const char *s)
{
    size_t n = strlen(s);
    lb__task_trim(&s, &n);
    char *a = lb__arena_alloc(&t->strings, 2 * n + 1, 1), *b = lb__arena_alloc(&t->strings, 2 * n + 1, 1);
    if (!a || !b) return NULL;
    size_t m = 0;
    for (size_t i = 0; i < n;) { /* " [title]" -> ". " */
        if (n - i >= 8 && memcmp(s + i, " [title]", 8) == 0) a[m++] = '.', a[m++] = ' ', i += 8;
        else a[m++] = s[i++];
    }
    size_t k = 0;
    for (size_t i = 0; i < m;) { /* "\[.*?\]": '.' matches no newline, so a bracket pair spans none */
        if (a[i] == '[') {
            size_t j = i + 1;
            while (j < m && a[j] != ']' && a[j] != '\n') j++;
            if (j < m && a[j] == ']') {
                i = j + 1;
                continue;
            }
        }
        b[k++] = a[i++];
    }
    m = 0;
    for (size_t i = 0; i < k;) {
        if (i + 1 < k && b[i] == ' ' && b[i + 1] == ' ') a[m++] = ' ', i += 2;
        else a[m++] = b[i++];
    }
    a[m] = 0;
    return a;
}

/* Python's str.capitalize() on ASCII: the first letter up, the rest down
 * (other bytes unchanged). */
static void capitalize(char *s)
{
    for (size_t i = 0; s[i]; i++) {
        char c = s[i];
        if (i == 0 && c >= 'a' && c <= 'z') s[i] = (char)(c - 32);
        else if (i > 0 && c >= 'A' && c <= 'Z') s[i] = (char)(c + 32);
    }
}

static lb_status hs_jsonl_item(lb_task *t, uint64_t no, const lb__json *o)
{
    const char *label_name, *ctx_a, *ctx_b;
    lb_status st = lb__task_field_str(t, no, o, "activity_label", &label_name);
    if (st == LB_OK) st = lb__task_field_str(t, no, o, "ctx_a", &ctx_a);
    if (st == LB_OK) st = lb__task_field_str(t, no, o, "ctx_b", &ctx_b);
    if (st != LB_OK) return st;
    const lb__json *endings = lb__json_get(o, "endings"), *label = lb__json_get(o, "label");
    if (!endings || endings->type != LB_JSON_ARRAY || endings->len < 2 || endings->len > LB_TASK_MAX_CHOICES)
        return lb__task_fail(t, no, "field 'endings': expected an array of 2..%d strings", LB_TASK_MAX_CHOICES);
    int64_t gold = -1;
    if (label && label->type == LB_JSON_STRING && label->len == 1 && label->str[0] >= '0' && label->str[0] <= '9')
        gold = label->str[0] - '0';
    else if (!label || !lb__json_i64(label, &gold)) gold = -1;
    if (gold < 0 || (uint64_t)gold >= endings->len)
        return lb__task_fail(t, no, "field 'label': expected the index of the right ending (0..%zu)", endings->len - 1);
    lb__task_item *it = lb__task_push(t, no);
    if (!it) return lb__fail(LB_ERR_NOMEM, "out of memory");
    size_t la = strlen(label_name), a = strlen(ctx_a), b = strlen(ctx_b);
    char *raw = lb__arena_alloc(&t->strings, la + 2 + a + 1 + b + 1, 1);
    if (!raw) return lb__fail(LB_ERR_NOMEM, "out of memory");
    char *cap = raw + la + 2 + a + 1;
    memcpy(raw, label_name, la), memcpy(raw + la, ": ", 2), memcpy(raw + la + 2, ctx_a, a), raw[la + 2 + a] = ' ';
    memcpy(cap, ctx_b, b + 1);
    capitalize(cap);
    const char *ctx = hs_preprocess(t, raw);
    if (!ctx) return lb__fail(LB_ERR_NOMEM, "out of memory");
    it->n_choices = (uint32_t)endings->len, it->label = (uint32_t)gold;
    for (uint32_t c = 0; c < it->n_choices; c++) {
        const lb__json *e = &endings->items[c];
        if (e->type != LB_JSON_STRING || strlen(e->str) != e->len)
            return lb__task_fail(t, no, "field 'endings': item %u is not a string", c);
        it->context[c] = ctx;
        if (!(it->continuation[c] = hs_preprocess(t, e->str))) return lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    return lb__task_check_item(t, it);
}

/* llama.cpp's form: context, gold index, then the 4 endings; 6 lines a task. */
static lb_status hs_text(lb_task *t, const char *text, size_t len)
{
    lb__lines l = {text, text + len, 0};
    const char *line[6];
    size_t n[6];
    for (;;) {
        int k = 0;
        while (k < 6 && lb__lines_next(&l, &line[k], &n[k])) k++;
        if (k == 0) return LB_OK;
        uint64_t first = l.no - (uint64_t)k + 1;
        if (k < 6)
            return lb__task_fail(t, first, "a task of %d lines at the end (6 each: context, label, 4 endings)", k);
        if (n[1] != 1 || line[1][0] < '0' || line[1][0] > '3')
            return lb__task_fail(t, first + 1, "the label line must be one digit 0..3, not '%.*s'", (int)(n[1] < 40 ? n[1] : 40),
                                 line[1]);
        lb__task_item *it = lb__task_push(t, first);
        if (!it) return lb__fail(LB_ERR_NOMEM, "out of memory");
        const char *ctx = lb__task_str(t, line[0], n[0]);
        it->n_choices = 4, it->label = (uint32_t)(line[1][0] - '0');
        for (int c = 0; c < 4; c++) {
            it->context[c] = ctx;
            it->continuation[c] = lb__task_str(t, line[2 + c], n[2 + c]);
            if (!ctx || !it->continuation[c]) return lb__fail(LB_ERR_NOMEM, "out of memory");
            if (memchr(line[2 + c], 0, n[2 + c]) || memchr(line[0], 0, n[0]))
                return lb__task_fail(t, first, "a NUL byte in the task");
        }
        lb_status st = lb__task_check_item(t, it);
        if (st != LB_OK) return st;
    }
}

lb_status lb__task_read_hellaswag(lb_task *t, const char *text, size_t len)
{
    return looks_like_jsonl(text, len) ? lb__task_each_json_line(t, text, len, hs_jsonl_item) : hs_text(t, text, len);
}

/* ---- LAMBADA ---- */

/* A passage split at its last space: the context and the target word
 * (lm-eval: " ".join(text.split(" ")[:-1]) and the last piece). */
static lb_status lambada_item(lb_task *t, uint64_t no, const char *text, size_t len)
{
    while (len && (text[len - 1] == ' ' || text[len - 1] == '\t')) len--; /* a stray trailing blank */
    if (memchr(text, 0, len)) return lb__task_fail(t, no, "a NUL byte in the passage");
    const char *space = NULL;
    for (size_t i = len; i-- > 0;)
        if (text[i] == ' ') {
            space = text + i;
            break;
        }
    if (!space || space == text) return lb__task_fail(t, no, "a passage needs a context and a last word after a space");
    lb__task_item *it = lb__task_push(t, no);
    if (!it) return lb__fail(LB_ERR_NOMEM, "out of memory");
    it->n_choices = 1, it->label = 0;
    it->context[0] = lb__task_str(t, text, (size_t)(space - text));
    it->continuation[0] = lb__task_str(t, space + 1, (size_t)(text + len - space - 1));
    if (!it->context[0] || !it->continuation[0]) return lb__fail(LB_ERR_NOMEM, "out of memory");
    return lb__task_check_item(t, it);
}

static lb_status lambada_jsonl_item(lb_task *t, uint64_t no, const lb__json *o)
{
    const char *text;
    lb_status st = lb__task_field_str(t, no, o, "text", &text);
    return st == LB_OK ? lambada_item(t, no, text, strlen(text)) : st;
}

lb_status lb__task_read_lambada(lb_task *t, const char *text, size_t len)
{
    if (looks_like_jsonl(text, len)) return lb__task_each_json_line(t, text, len, lambada_jsonl_item);
    lb__lines l = {text, text + len, 0};
    const char *line;
    size_t n;
    while (lb__lines_next(&l, &line, &n)) {
        if (n == 0) continue;
        lb_status st = lambada_item(t, l.no, line, n);
        if (st != LB_OK) return st;
    }
    return LB_OK;
}
