/* lowbit eval's tasks and their results, shared by the command
 * (cmd_eval.c) and its report (eval_report.c). */
#ifndef LOWBIT_CLI_EVAL_TASKS_H
#define LOWBIT_CLI_EVAL_TASKS_H

#include "cli.h"

#define EVAL_MAX_TASKS 16

/* The metrics of a multiple-choice task. */
typedef enum eval_metric { EVAL_ACC, EVAL_ACC_NORM, EVAL_ACC_NORM_TOK, EVAL_N_METRICS } eval_metric;

typedef struct eval_task {
    const char *name;        /* a task kind's name, or "ppl" */
    const char *data;        /* --data */
    lb_task *task;           /* multiple-choice tasks (NULL for ppl and custom) */
    lb_custom *custom;       /* custom evals */
    lb_custom_result *cbase, *cquant; /* their generations; base/quant below hold their right/wrong */
    lb_item_score *base, *quant; /* per item; quant NULL without a comparison */
    double base_seconds, quant_seconds;
    uint64_t base_tokens, quant_tokens; /* run through the model */
    eval_metric headline;    /* the metric the verdict is on */
    lb_paired_result paired[EVAL_N_METRICS];
    /* ppl: the text's tokens, and perplexity (alone) or KLD (compared) */
    int32_t *ids;
    size_t n_ids;
    lb_ppl_result ppl;
    lb_kld_result kld;
} eval_task;

typedef struct eval_run {
    const char *model, *quant_name; /* quant_name: --vs's path or the options' summary; NULL: no comparison */
    eval_task tasks[EVAL_MAX_TASKS];
    size_t n_tasks;
    uint32_t ctx;            /* ppl windows */
    uint32_t resamples;
    uint64_t seed;
    uint32_t shots;
    size_t limit;
    lb_custom_options custom; /* --max-tokens, --stop, --chat */
} eval_run;

/* The number of items of a task (multiple-choice or custom; 0 for ppl). */
size_t eval_items(const eval_task *t);

/* A metric's name ("acc", "acc_norm", "acc_norm_tok"), and the 0/1
 * outcome of one item under it. */
const char *eval_metric_name(eval_metric m);
double eval_outcome(const lb_item_score *s, eval_metric m);
/* How many items a model got right under m. */
uint64_t eval_correct(const eval_task *t, const lb_item_score *s, eval_metric m);
/* LAMBADA's target perplexity: exp(-mean over items of the word's log-likelihood). */
double eval_target_ppl(const eval_task *t, const lb_item_score *s);

/* --base-items FILE: the base model's scores of every item of every task
 * (not ppl) from an earlier run's --items file, checked against the tasks
 * (task names, item order, lines and labels); base_seconds set to -1. */
int eval_read_base_items(int json, const char *path, eval_run *r);

/* The results: a table (one row per task and model, then the paired
 * comparisons and their verdicts) or one JSON object. */
void eval_report(FILE *out, const eval_run *r, int json);
/* Every item's scores as JSON Lines (task, index, line, label, and per
 * model the choices' log-likelihoods, token counts and outcomes). */
void eval_write_items(FILE *out, const eval_run *r);

#endif
