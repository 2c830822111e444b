/* Running a custom eval: greedy generation checked against each item's
 * expectation, and the "choices" items scored as multiple-choice items. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/custom_internal.h"
#include "eval/task_internal.h"
#include "util/error.h"

#define DEFAULT_MAX_TOKENS 64

/* The text the model sees: the prompt, or one user turn of the chat template. */
static lb_status prompt_text(const lb_custom_options *o, const char *prompt, char **out)
{
    if (o && o->chat_template) return lb_chat_prompt(o->chat_template, prompt, out);
    size_t n = strlen(prompt);
    if (!(*out = malloc(n + 1))) return lb__fail(LB_ERR_NOMEM, "out of memory");
    memcpy(*out, prompt, n + 1);
    return LB_OK;
}

typedef struct text_buf {
    char *s;
    size_t n, cap;
} text_buf;

static lb_status append(text_buf *b, const char *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s) return lb__fail(LB_ERR_NOMEM, "out of memory");
        b->s = s, b->cap = cap;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
    return LB_OK;
}

static lb_status generate(lb_runner *r, const lb_tokenizer *tok, const lb_custom_item *it, const lb_custom_options *o,
                          size_t index, float *logits, lb_custom_result *res)
{
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n = 0, vocab = lb_runner_vocab_size(r);
    lb_status st = prompt_text(o, it->prompt, &text);
    if (st == LB_OK) st = lb_tokenize(tok, text, strlen(text), lb_tokenizer_add_bos(tok), &ids, &n);
    free(text);
    if (st == LB_OK && (n == 0 || n >= lb_runner_context(r)))
        st = lb__fail(LB_ERR_ARG, "item %zu (line %llu): a prompt of %zu tokens (the runner's context holds %u)", index,
                      (unsigned long long)it->line, n, lb_runner_context(r));
    text_buf out = {0};
    if (st == LB_OK) st = append(&out, "", 0);
    res->prompt_tokens = (uint32_t)n;
    lb_runner_reset(r);
    if (st == LB_OK) st = lb_runner_forward(r, ids, n, logits, 1);
    free(ids);
    uint32_t max = it->max_tokens ? it->max_tokens : o && o->max_tokens ? o->max_tokens : DEFAULT_MAX_TOKENS;
    const char *stop = it->stop ? it->stop : o ? o->stop : NULL;
    int32_t eos = lb_tokenizer_eos(tok);
    for (uint32_t k = 0; st == LB_OK && k < max; k++) {
        size_t best = 0;
        for (size_t v = 0; v < vocab; v++) {
            if (!isfinite(logits[v])) {
                st = lb__fail(LB_ERR_NAN, "item %zu (line %llu): the model's logits are not finite", index,
                              (unsigned long long)it->line);
                break;
            }
            if (logits[v] > logits[best]) best = v;
        }
        if (st != LB_OK) break;
        int32_t next = (int32_t)best;
        if (next == eos) {
            res->stopped = 1;
            break;
        }
        const char *bytes;
        size_t len;
        if ((st = lb_token_bytes(tok, next, &bytes, &len)) != LB_OK || (st = append(&out, bytes, len)) != LB_OK) break;
        res->generated_tokens++;
        char *hit = stop ? strstr(out.s, stop) : NULL;
        if (hit) {
            *hit = 0, out.n = (size_t)(hit - out.s);
            res->stopped = 1;
            break;
        }
        if (lb_runner_position(r) >= lb_runner_context(r)) break; /* the context is full */
        st = lb_runner_forward(r, &next, 1, logits, 1);
    }
    res->output = out.s;
    if (st == LB_OK) res->correct = (uint8_t)lb__custom_matches(it, out.s);
    return st;
}

/* The choices items as one multiple-choice task, scored together. */
static lb_status score_choices(lb_runner *r, const lb_tokenizer *tok, const lb_custom *c, const lb_custom_options *o,
                               lb_custom_result *results)
{
    lb_task *t = lb__task_new(LB_TASK_MC, c->what);
    size_t *of = calloc(c->n ? c->n : 1, sizeof *of);
    lb_item_score *scores = NULL;
    lb_status st = t && of ? LB_OK : lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == LB_OK && i < c->n; i++) {
        const lb_custom_item *it = &c->items[i];
        if (it->match != LB_MATCH_CHOICES) continue;
        char *text = NULL;
        if ((st = prompt_text(o, it->prompt, &text)) != LB_OK) break;
        lb__task_item *ti = lb__task_push(t, it->line);
        const char *ctx = ti ? lb__task_str(t, text, strlen(text)) : NULL;
        free(text);
        if (!ctx) {
            st = lb__fail(LB_ERR_NOMEM, "out of memory");
            break;
        }
        ti->n_choices = it->n_choices, ti->label = it->label;
        for (uint32_t k = 0; k < it->n_choices; k++) ti->context[k] = ctx, ti->continuation[k] = it->choices[k];
        of[t->n - 1] = i;
    }
    if (st == LB_OK && t->n) {
        scores = calloc(t->n, sizeof *scores);
        st = scores ? lb_task_score(r, tok, t, NULL, scores) : lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    for (size_t j = 0; st == LB_OK && j < t->n; j++) {
        lb_custom_result *res = &results[of[j]];
        res->choices = scores[j];
        res->correct = scores[j].correct;
        res->stopped = 1;
        if (!(res->output = calloc(1, 1))) st = lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    free(scores), free(of);
    lb_task_free(t);
    return st;
}

lb_status lb_custom_run(lb_runner *r, const lb_tokenizer *tok, const lb_custom *c, const lb_custom_options *o,
                        lb_custom_result *results)
{
    if (!r || !tok || !c || !results) return lb__fail(LB_ERR_ARG, "lb_custom_run: NULL argument");
    memset(results, 0, c->n * sizeof *results);
    size_t vocab = lb_runner_vocab_size(r);
    float *logits = malloc(vocab * sizeof *logits);
    lb_status st = logits ? score_choices(r, tok, c, o, results) : lb__fail(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == LB_OK && i < c->n; i++) {
        if (c->items[i].match != LB_MATCH_CHOICES) st = generate(r, tok, &c->items[i], o, i, logits, &results[i]);
        if (st == LB_OK && o && o->progress) o->progress(o->progress_ctx, i + 1, c->n);
    }
    lb_runner_reset(r);
    free(logits);
    if (st != LB_OK) lb_custom_results_free(results, c->n);
    return st;
}

void lb_custom_results_free(lb_custom_result *results, size_t n)
{
    for (size_t i = 0; results && i < n; i++) free(results[i].output), results[i].output = NULL;
}
