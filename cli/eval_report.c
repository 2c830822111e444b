/* lowbit eval's results: per task the scores of each model with their
 * standard errors, the paired comparison and its verdict; a summary table
 * across the tasks; or all of it as JSON. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "eval_tasks.h"

const char *eval_metric_name(eval_metric m)
{
    switch (m) {
    case EVAL_ACC: return "acc";
    case EVAL_ACC_NORM: return "acc_norm";
    case EVAL_ACC_NORM_TOK: return "acc_norm_tok";
    case EVAL_N_METRICS: break;
    }
    return "?";
}

double eval_outcome(const lb_item_score *s, eval_metric m)
{
    switch (m) {
    case EVAL_ACC: return s->correct;
    case EVAL_ACC_NORM: return s->correct_norm;
    case EVAL_ACC_NORM_TOK: return s->correct_norm_tok;
    case EVAL_N_METRICS: break;
    }
    return 0;
}

size_t eval_items(const eval_task *t)
{
    return t->task ? lb_task_size(t->task) : t->custom ? lb_custom_size(t->custom) : 0;
}

uint64_t eval_correct(const eval_task *t, const lb_item_score *s, eval_metric m)
{
    uint64_t n = 0;
    for (size_t i = 0; i < eval_items(t); i++) n += eval_outcome(&s[i], m) > 0;
    return n;
}

double eval_target_ppl(const eval_task *t, const lb_item_score *s)
{
    size_t n = lb_task_size(t->task);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += s[i].loglik[0];
    return exp(-sum / (double)n);
}

static int is_lambada(const eval_task *t) { return t->task && lb_task_get_kind(t->task) == LB_TASK_LAMBADA; }
/* one score per item (no length normalisation to speak of) */
static int acc_only(const eval_task *t) { return is_lambada(t) || t->custom; }

/* "indistinguishable from noise at 95%", "worse by X +- Y points". */
static void verdict(char *buf, size_t size, int significant, double diff, double lo, double hi, double scale,
                    const char *unit, int higher_is_better)
{
    if (!significant) {
        snprintf(buf, size, "indistinguishable from noise at 95%%");
        return;
    }
    int worse = higher_is_better ? diff < 0 : diff > 0;
    snprintf(buf, size, "%s by %.2f +- %.2f %s", worse ? "worse" : "better", fabs(diff) * scale, (hi - lo) / 2 * scale, unit);
}

static void mc_verdict(char *buf, size_t size, const eval_task *t)
{
    const lb_paired_result *p = &t->paired[t->headline];
    verdict(buf, size, p->significant, p->diff, p->ci_lo, p->ci_hi, 100, "points", 1);
}

static void ppl_verdict(char *buf, size_t size, const lb_kld_result *k)
{
    double half = 1.959963984540054 * k->dppl_err;
    verdict(buf, size, fabs(k->dppl) > half, k->dppl, k->dppl - half, k->dppl + half, 1, "perplexity", 0);
}

static void json_model(FILE *out, const eval_task *t, const lb_item_score *s, double seconds, uint64_t tokens)
{
    size_t n = eval_items(t);
    fprintf(out, "{");
    for (int m = 0; m < EVAL_N_METRICS; m++) {
        uint64_t c = eval_correct(t, s, (eval_metric)m);
        fprintf(out, "%s\"%s\": ", m ? ", " : "", eval_metric_name((eval_metric)m));
        json_number(out, (double)c / (double)n);
        char se[32];
        snprintf(se, sizeof se, "%s_se", eval_metric_name((eval_metric)m));
        json_field(out, se, lb_binomial_se(c, n));
    }
    if (is_lambada(t)) json_field(out, "ppl", eval_target_ppl(t, s));
    json_field(out, "seconds", seconds);
    json_field(out, "items_per_s", seconds > 0 ? (double)n / seconds : 0);
    json_field(out, "tokens_per_s", seconds > 0 ? (double)tokens / seconds : 0);
    fprintf(out, ", \"tokens_run\": %llu}", (unsigned long long)tokens);
}

static void json_paired(FILE *out, const lb_paired_result *p)
{
    fprintf(out, "{\"diff\": ");
    json_number(out, p->diff);
    json_field(out, "diff_se", p->diff_se);
    json_field(out, "ci_lo", p->ci_lo);
    json_field(out, "ci_hi", p->ci_hi);
    fprintf(out, ", \"only_base\": %llu, \"only_quant\": %llu", (unsigned long long)p->only_a, (unsigned long long)p->only_b);
    json_field(out, "p_mcnemar", p->p_mcnemar);
    json_field(out, "mde", p->mde);
    fprintf(out, ", \"significant\": %s}", p->significant ? "true" : "false");
}

static void json_task(FILE *out, const eval_run *r, const eval_task *t)
{
    char v[128];
    fprintf(out, "{\"task\": ");
    json_string(out, t->name);
    fprintf(out, ", \"data\": ");
    json_string(out, t->data);
    if (!t->task && !t->custom) { /* ppl */
        fprintf(out, ", \"ctx\": %u", r->ctx);
        if (r->quant_name) {
            const lb_kld_result *k = &t->kld;
            fprintf(out, ", \"chunks\": %zu, \"scored_tokens\": %llu", k->chunks, (unsigned long long)k->tokens);
            json_field(out, "ppl_base", k->ppl_base);
            json_field(out, "ppl_base_err", k->ppl_base_err);
            json_field(out, "ppl_quant", k->ppl);
            json_field(out, "ppl_quant_err", k->ppl_err);
            json_field(out, "dppl", k->dppl);
            json_field(out, "dppl_err", k->dppl_err);
            json_field(out, "kld_mean", k->kld_mean);
            json_field(out, "kld_err", k->kld_err);
            json_field(out, "top1_agreement", k->top1_agreement);
            ppl_verdict(v, sizeof v, k);
            fprintf(out, ", \"verdict\": ");
            json_string(out, v);
        } else {
            fprintf(out, ", \"chunks\": %zu, \"scored_tokens\": %llu", t->ppl.chunks, (unsigned long long)t->ppl.tokens);
            json_field(out, "ppl", t->ppl.ppl);
            json_field(out, "ppl_err", t->ppl.ppl_err);
        }
        fprintf(out, "}");
        return;
    }
    fprintf(out, ", \"items\": %zu, \"shots\": %u, \"headline\": \"%s\", \"base\": ", eval_items(t), t->custom ? 0 : r->shots,
            eval_metric_name(t->headline));
    json_model(out, t, t->base, t->base_seconds, t->base_tokens);
    if (t->quant) {
        fprintf(out, ", \"quant\": ");
        json_model(out, t, t->quant, t->quant_seconds, t->quant_tokens);
        fprintf(out, ", \"paired\": {");
        for (int m = 0; m < EVAL_N_METRICS; m++) {
            fprintf(out, "%s\"%s\": ", m ? ", " : "", eval_metric_name((eval_metric)m));
            json_paired(out, &t->paired[m]);
        }
        mc_verdict(v, sizeof v, t);
        fprintf(out, "}, \"verdict\": ");
        json_string(out, v);
    }
    fprintf(out, "}");
}

static void text_model(FILE *out, const char *who, const eval_task *t, const lb_item_score *s, double seconds, uint64_t tokens)
{
    size_t n = eval_items(t);
    fprintf(out, "  %-6s", who);
    for (int m = 0; m < EVAL_N_METRICS; m++) {
        if (acc_only(t) && m > EVAL_ACC) break; /* one choice, or generated text: the norms say nothing */
        uint64_t c = eval_correct(t, s, (eval_metric)m);
        fprintf(out, "  %s %6.2f +- %.2f", eval_metric_name((eval_metric)m), 100.0 * (double)c / (double)n,
                100 * lb_binomial_se(c, n));
    }
    if (is_lambada(t)) fprintf(out, "  ppl %.3f", eval_target_ppl(t, s));
    if (seconds < 0) fprintf(out, "   (scores from --base-items)\n");
    else fprintf(out, "   (%.1f items/s, %.0f tokens/s)\n", seconds > 0 ? (double)n / seconds : 0, seconds > 0 ? (double)tokens / seconds : 0);
}

static void text_task(FILE *out, const eval_run *r, const eval_task *t)
{
    char v[128];
    if (!t->task && !t->custom) {
        fprintf(out, "ppl (%s): windows of %u", t->data, r->ctx);
        if (!r->quant_name) {
            fprintf(out, ", %zu windows, %llu scored tokens\n  base    ppl %.4f +- %.4f\n", t->ppl.chunks,
                    (unsigned long long)t->ppl.tokens, t->ppl.ppl, t->ppl.ppl_err);
            return;
        }
        const lb_kld_result *k = &t->kld;
        ppl_verdict(v, sizeof v, k);
        fprintf(out, ", %zu windows, %llu scored tokens\n  base    ppl %.4f +- %.4f\n  quant   ppl %.4f +- %.4f\n",
                k->chunks, (unsigned long long)k->tokens, k->ppl_base, k->ppl_base_err, k->ppl, k->ppl_err);
        fprintf(out, "  ppl: quant - base %+.4f +- %.4f (paired per token); KLD %.6f +- %.6f; top-1 agreement %.2f%%\n",
                k->dppl, k->dppl_err, k->kld_mean, k->kld_err, 100 * k->top1_agreement);
        fprintf(out, "  verdict: %s\n", v);
        return;
    }
    fprintf(out, "%s (%s): %zu items, ", t->name, t->data, eval_items(t));
    if (t->custom) fprintf(out, "generated greedily%s\n", r->custom.chat_template ? " through the chat template" : "");
    else if (r->shots) fprintf(out, "%u-shot\n", r->shots);
    else fprintf(out, "zero-shot\n");
    text_model(out, "base", t, t->base, t->base_seconds, t->base_tokens);
    if (!t->quant) return;
    text_model(out, "quant", t, t->quant, t->quant_seconds, t->quant_tokens);
    const lb_paired_result *p = &t->paired[t->headline];
    fprintf(out, "  %s: quant - base %+.2f points, 95%% CI [%+.2f, %+.2f], McNemar p %.4g (%llu right only in base, "
            "%llu only in quant), detectable %.2f\n",
            eval_metric_name(t->headline), 100 * p->diff, 100 * p->ci_lo, 100 * p->ci_hi, p->p_mcnemar,
            (unsigned long long)p->only_a, (unsigned long long)p->only_b, 100 * p->mde);
    mc_verdict(v, sizeof v, t);
    fprintf(out, "  verdict: %s\n", v);
}

static void text_summary(FILE *out, const eval_run *r)
{
    fprintf(out, "\n%-12s %-13s %9s %9s %9s %20s %9s  %s\n", "task", "metric", "base", "quant", "diff", "95% CI", "p",
            "verdict");
    for (size_t k = 0; k < r->n_tasks; k++) {
        const eval_task *t = &r->tasks[k];
        char v[128], ci[64];
        if (!t->task && !t->custom) {
            const lb_kld_result *q = &t->kld;
            ppl_verdict(v, sizeof v, q);
            snprintf(ci, sizeof ci, "[%+.3f, %+.3f]", q->dppl - 1.959963984540054 * q->dppl_err, q->dppl + 1.959963984540054 * q->dppl_err);
            fprintf(out, "%-12s %-13s %9.3f %9.3f %+9.3f %20s %9s  %s\n", "ppl", "perplexity", q->ppl_base, q->ppl, q->dppl, ci, "-", v);
            fprintf(out, "%-12s %-13s %9s %9.5f %9s %20s %9s  (+- %.5f; top-1 agreement %.2f%%)\n", "ppl", "kld", "-",
                    q->kld_mean, "", "", "-", q->kld_err, 100 * q->top1_agreement);
            continue;
        }
        const lb_paired_result *p = &t->paired[t->headline];
        mc_verdict(v, sizeof v, t);
        snprintf(ci, sizeof ci, "[%+.2f, %+.2f]", 100 * p->ci_lo, 100 * p->ci_hi);
        fprintf(out, "%-12s %-13s %9.2f %9.2f %+9.2f %20s %9.3g  %s\n", t->name, eval_metric_name(t->headline), 100 * p->mean_a,
                100 * p->mean_b, 100 * p->diff, ci, p->p_mcnemar, v);
    }
}

void eval_report(FILE *out, const eval_run *r, int json)
{
    if (json) {
        fprintf(out, "{\"model\": ");
        json_string(out, r->model);
        fprintf(out, ", \"quant\": ");
        if (r->quant_name) json_string(out, r->quant_name);
        else fprintf(out, "null");
        fprintf(out, ", \"limit\": %zu, \"shots\": %u, \"seed\": %llu, \"resamples\": %u, \"tasks\": [", r->limit, r->shots,
                (unsigned long long)r->seed, r->resamples);
        for (size_t k = 0; k < r->n_tasks; k++) {
            if (k) fprintf(out, ", ");
            json_task(out, r, &r->tasks[k]);
        }
        fprintf(out, "]}\n");
        return;
    }
    if (r->quant_name) fprintf(out, "%s vs %s\n", r->model, r->quant_name);
    for (size_t k = 0; k < r->n_tasks; k++) text_task(out, r, &r->tasks[k]);
    if (r->quant_name) text_summary(out, r);
}

static void json_scores(FILE *out, const lb_item_score *s, uint32_t n)
{
    fprintf(out, "{\"loglik\": [");
    for (uint32_t c = 0; c < n; c++) fprintf(out, "%s%.9g", c ? ", " : "", s->loglik[c]);
    fprintf(out, "], \"tokens\": [");
    for (uint32_t c = 0; c < n; c++) fprintf(out, "%s%u", c ? ", " : "", s->tokens[c]);
    fprintf(out, "], \"loglik_tok\": [");
    for (uint32_t c = 0; c < n; c++) fprintf(out, "%s%.9g", c ? ", " : "", s->loglik_tok[c]);
    fprintf(out, "], \"greedy\": [");
    for (uint32_t c = 0; c < n; c++) fprintf(out, "%s%s", c ? ", " : "", s->greedy[c] ? "true" : "false");
    fprintf(out, "], \"acc\": %d, \"acc_norm\": %d, \"acc_norm_tok\": %d}", s->correct, s->correct_norm, s->correct_norm_tok);
}

static void json_generation(FILE *out, const lb_custom_result *g)
{
    fprintf(out, "{\"output\": ");
    json_string(out, g->output ? g->output : "");
    fprintf(out, ", \"correct\": %d, \"stopped\": %s, \"prompt_tokens\": %u, \"generated_tokens\": %u}", g->correct,
            g->stopped ? "true" : "false", g->prompt_tokens, g->generated_tokens);
}

static void write_custom_items(FILE *out, const eval_task *t)
{
    static const char *const match[] = {[LB_MATCH_EXACT] = "exact", [LB_MATCH_CONTAINS] = "contains",
                                        [LB_MATCH_REGEX] = "regex", [LB_MATCH_CHOICES] = "choices"};
    for (size_t i = 0; i < lb_custom_size(t->custom); i++) {
        lb_custom_item it;
        if (lb_custom_get(t->custom, i, &it) != LB_OK) continue;
        fprintf(out, "{\"task\": \"custom\", \"index\": %zu, \"line\": %llu, \"id\": ", i, (unsigned long long)it.line);
        json_string(out, it.id);
        fprintf(out, ", \"match\": \"%s\", \"prompt\": ", match[it.match]);
        json_string(out, it.prompt);
        if (it.expected) {
            fprintf(out, ", \"expected\": ");
            json_string(out, it.expected);
        } else {
            fprintf(out, ", \"label\": %u", it.label);
        }
        fprintf(out, ", \"base\": ");
        if (it.match == LB_MATCH_CHOICES) json_scores(out, &t->cbase[i].choices, it.n_choices);
        else json_generation(out, &t->cbase[i]);
        if (t->cquant) {
            fprintf(out, ", \"quant\": ");
            if (it.match == LB_MATCH_CHOICES) json_scores(out, &t->cquant[i].choices, it.n_choices);
            else json_generation(out, &t->cquant[i]);
        }
        fprintf(out, "}\n");
    }
}

void eval_write_items(FILE *out, const eval_run *r)
{
    for (size_t k = 0; k < r->n_tasks; k++) {
        const eval_task *t = &r->tasks[k];
        if (t->custom) write_custom_items(out, t);
        for (size_t i = 0; t->task && i < lb_task_size(t->task); i++) {
            lb_task_item it;
            if (lb_task_get(t->task, i, &it) != LB_OK) continue;
            fprintf(out, "{\"task\": ");
            json_string(out, t->name);
            fprintf(out, ", \"index\": %zu, \"line\": %llu, \"label\": %u, \"base\": ", i, (unsigned long long)it.line, it.label);
            json_scores(out, &t->base[i], it.n_choices);
            if (t->quant) {
                fprintf(out, ", \"quant\": ");
                json_scores(out, &t->quant[i], it.n_choices);
            }
            fprintf(out, "}\n");
        }
    }
}
