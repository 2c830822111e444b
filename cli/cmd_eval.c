/* lowbit eval: benchmark accuracy by log-likelihood, base vs quantized,
 * with a paired verdict on whether the difference is noise. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli_eval.h"
#include "cli_output.h"
#include "eval_tasks.h"
#include "util/clock.h"
#include "util/file.h"

static const char usage[] =
    "usage: lowbit eval MODEL --task NAME --data PATH [--task NAME --data PATH]... [--limit N]\n"
    "                  [--shots K [--shots-from PATH]] [--mmlu-form letters|cloze] [--labels FILE] [--seed N]\n"
    "                  [--vs QUANT | --spec S | --scheme S | --recipe FILE | --type T | ...] [--decode-act int8|exact] [--resamples R]\n"
    "                  [--max-tokens N] [--stop STR] [--chat] [--items FILE] [--base-items FILE] [--ctx 512] [--chunks N] [--tokenizer FILE] [--threads N] [--force] [--json] [--quiet]\n\n"
    "Scores MODEL on benchmarks by log-likelihood (zero-shot unless --shots): each choice's\n"
    "continuation given its context, joined by a space, as lm-evaluation-harness scores it.\n"
    "NAME and the file PATH it reads, in the benchmark's published format:\n"
    "  hellaswag   llama.cpp's 6-line text (hellaswag_val_full.txt) or rowanz's JSONL\n"
    "              (ctx_a, ctx_b, activity_label, endings, label; lm-eval's preprocessing)\n"
    "  arc         AI2's JSONL (question.stem, question.choices[].text/label, answerKey)\n"
    "  mmlu        Hendrycks' CSVs question,A,B,C,D,answer: one file or a directory of them;\n"
    "              --mmlu-form letters (default: lm-eval's mmlu prompt, choices A-D) or cloze\n"
    "  piqa        goal/sol1/sol2 JSONL with its labels file (default: PATH's -labels.lst\n"
    "              sibling, as valid.jsonl / valid-labels.lst; --labels FILE names another)\n"
    "  winogrande  sentence with '_', option1, option2, answer (partial scoring: the words\n"
    "              after the blank, given the sentence up to it with each option)\n"
    "  lambada     OpenAI's JSONL {\"text\"} or the original plain text: the last word,\n"
    "              right when every one of its tokens is the model's first choice; also the\n"
    "              target perplexity\n"
    "  mc          lowbit's JSONL: {\"context\": \"...\", \"choices\": [\"...\", ...], \"label\": N}\n"
    "  custom      prompts with expected answers (JSONL: \"prompt\", \"expected\", \"match\": exact,\n"
    "              contains, regex (POSIX extended) or choices (with \"choices\" and \"label\", scored\n"
    "              as mc); optional \"id\", \"stop\", \"max_tokens\"), generated greedily up to\n"
    "              --max-tokens N (64) or --stop STR; --chat wraps each prompt in the model's\n"
    "              chat template (GGUF or tokenizer_config.json: chatml, llama3, llama2, gemma, phi3)\n"
    "  ppl         a text: perplexity on lowbit ppl's windows (--ctx, --chunks), and with a\n"
    "              comparison the KL divergence and the paired perplexity difference\n"
    "Reported: acc; acc_norm (log-likelihood per character of the choice, lm-eval's);\n"
    "acc_norm_tok (mean log-likelihood per token after what the choices share, llama.cpp's\n"
    "HellaSwag score); each +- its binomial standard error. --limit N takes each file's\n"
    "first N items. --shots K puts K solved examples (drawn per item with --seed, never\n"
    "the item itself) from --shots-from PATH (default: the task's own file) before each item.\n\n"
    "Base vs quantized: --vs QUANT (another checkpoint with the same tokenizer), or MODEL\n"
    "quantized under --spec, --scheme, --recipe, --type ... as lowbit kld takes them. Both\n"
    "are scored on the same items; per task: the paired difference, McNemar's exact test on\n"
    "the items where they disagree, a 95% bootstrap interval (--resamples R, default 10000,\n"
    "fixed --seed), the smallest difference this many items could detect (80% power, 5%\n"
    "level), and a verdict: \"indistinguishable from noise at 95%\" or \"worse by X +- Y\n"
    "points\". --items FILE writes every item's scores as JSON Lines (to read the failures);\n"
    "--base-items FILE takes the base model's scores from such a file of an earlier run (the\n"
    "same tasks, --limit and --shots) instead of scoring it again: one base, many quantizations.\n"
    CLI_FORCE_HELP CLI_EVAL_RUNNER_HELP CLI_EVAL_CHECKPOINT_HELP CLI_EVAL_RECIPE_HELP CLI_RECIPE_HELP;

typedef struct task_args {
    const char *name, *data, *shots_from, *labels;
} task_args;

static int parse_count(const char *opt, const char *v, unsigned long long max, unsigned long long *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long n = v[0] >= '0' && v[0] <= '9' ? strtoull(v, &end, 10) : 0;
    if (!end || *end || errno || n > max)
        return cli_fail("eval", 0, EXIT_USAGE, "bad_argument", "%s takes a whole number 0..%llu, not '%s'", opt, max, v);
    *out = n;
    return EXIT_OK;
}

/* Loads one task: its file, --limit, few-shot examples. */
static int load_task(int json, const task_args *ta, const lb_task_options *to, size_t limit, uint32_t shots,
                     uint64_t seed, eval_task *out)
{
    static const eval_metric headline[] = {
        [LB_TASK_HELLASWAG] = EVAL_ACC_NORM, [LB_TASK_ARC] = EVAL_ACC_NORM, [LB_TASK_MMLU] = EVAL_ACC,
        [LB_TASK_PIQA] = EVAL_ACC_NORM,      [LB_TASK_WINOGRANDE] = EVAL_ACC, [LB_TASK_LAMBADA] = EVAL_ACC,
        [LB_TASK_MC] = EVAL_ACC,
    };
    out->name = ta->name, out->data = ta->data;
    if (strcmp(ta->name, "ppl") == 0) return EXIT_OK;
    lb_status st;
    if (strcmp(ta->name, "custom") == 0) {
        out->headline = EVAL_ACC;
        if ((st = lb_custom_load(ta->data, &out->custom)) != LB_OK) return cli_fail_lb("eval", json, EXIT_RUNTIME, st);
        if (limit) lb_custom_limit(out->custom, limit);
        return EXIT_OK;
    }
    lb_task_kind kind;
    if ((st = lb_task_kind_parse(ta->name, &kind)) != LB_OK)
        return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "%s, custom or ppl", lb_last_error());
    lb_task_options o = *to;
    o.labels = ta->labels;
    if ((st = lb_task_load(kind, ta->data, &o, &out->task)) != LB_OK) return cli_fail_lb("eval", json, EXIT_RUNTIME, st);
    out->headline = headline[kind];
    if (shots) {
        lb_task *ex = out->task;
        if (ta->shots_from && (st = lb_task_load(kind, ta->shots_from, &o, &ex)) != LB_OK)
            return cli_fail_lb("eval", json, EXIT_RUNTIME, st);
        st = lb_task_fewshot(out->task, ex, shots, seed);
        if (ex != out->task) lb_task_free(ex);
        if (st != LB_OK) return cli_fail_lb("eval", json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
    }
    if (limit) lb_task_limit(out->task, limit);
    return EXIT_OK;
}

/* A custom eval's generations, and their right/wrong as item scores. */
static int run_custom(int json, eval_run *r, eval_task *t, cli_eval_model *m, int quant)
{
    size_t n = lb_custom_size(t->custom);
    lb_custom_result *g = calloc(n, sizeof *g);
    lb_item_score *s = calloc(n, sizeof *s);
    if (!g || !s) {
        free(g), free(s);
        return cli_fail("eval", json, EXIT_RUNTIME, "out_of_memory", "out of memory");
    }
    *(quant ? &t->cquant : &t->cbase) = g;
    *(quant ? &t->quant : &t->base) = s;
    cli_progress_ctx progress = {"eval", "item", quant ? "custom, quantized" : "custom, base"};
    lb_custom_options o = r->custom;
    o.progress = cli_progress_fn, o.progress_ctx = &progress;
    double t0 = lb__now();
    lb_status st = lb_custom_run(m->runner, m->tok, t->custom, &o, g);
    *(quant ? &t->quant_seconds : &t->base_seconds) = lb__now() - t0;
    if (st != LB_OK) return cli_fail_lb("eval", json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
    uint64_t run = 0;
    for (size_t i = 0; i < n; i++) {
        s[i].correct = s[i].correct_norm = s[i].correct_norm_tok = g[i].correct;
        run += g[i].prompt_tokens + g[i].generated_tokens + g[i].choices.tokens_run;
    }
    *(quant ? &t->quant_tokens : &t->base_tokens) = run;
    return EXIT_OK;
}

/* Scores every multiple-choice task and custom eval with one model. */
static int score_all(int json, eval_run *r, cli_eval_model *m, int quant)
{
    for (size_t k = 0; k < r->n_tasks; k++) {
        eval_task *t = &r->tasks[k];
        if (!quant && t->base) continue; /* from --base-items */
        if (t->custom) {
            int rc = run_custom(json, r, t, m, quant);
            if (rc != EXIT_OK) return rc;
            continue;
        }
        if (!t->task) continue;
        lb_item_score *s = calloc(lb_task_size(t->task), sizeof *s);
        if (!s) return cli_fail("eval", json, EXIT_RUNTIME, "out_of_memory", "out of memory");
        *(quant ? &t->quant : &t->base) = s;
        char note[64];
        snprintf(note, sizeof note, "%s, %s", t->name, quant ? "quantized" : "base");
        cli_progress_ctx progress = {"eval", "item", note};
        lb_task_score_options o = {.progress = cli_progress_fn, .progress_ctx = &progress};
        double t0 = lb__now();
        lb_status st = lb_task_score(m->runner, m->tok, t->task, &o, s);
        *(quant ? &t->quant_seconds : &t->base_seconds) = lb__now() - t0;
        if (st != LB_OK) return cli_fail_lb("eval", json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
        uint64_t run = 0;
        for (size_t i = 0; i < lb_task_size(t->task); i++) run += s[i].tokens_run;
        *(quant ? &t->quant_tokens : &t->base_tokens) = run;
    }
    return EXIT_OK;
}

/* The perplexity tasks: alone, or the KLD of quant from base. */
static int ppl_all(int json, eval_run *r, cli_eval_model *base, cli_eval_model *quant, size_t chunks)
{
    for (size_t k = 0; k < r->n_tasks; k++) {
        eval_task *t = &r->tasks[k];
        if (t->task || t->custom) continue;
        int rc = cli_eval_tokens("eval", json, base->tok, t->data, &t->ids, &t->n_ids);
        if (rc == EXIT_OK) rc = cli_eval_check_windows("eval", json, base->model, t->n_ids, r->ctx);
        if (rc != EXIT_OK) return rc;
        cli_progress_ctx progress = {"eval", "window", "ppl"};
        lb_eval_options o = {.ctx = r->ctx, .max_chunks = chunks,
                             .bos = lb_tokenizer_add_bos(base->tok) ? lb_tokenizer_bos(base->tok) : -1,
                             .progress = cli_progress_fn, .progress_ctx = &progress};
        lb_status st = quant ? lb_kld(base->runner, quant->runner, t->ids, t->n_ids, &o, NULL, NULL, &t->kld)
                             : lb_perplexity(base->runner, t->ids, t->n_ids, &o, &t->ppl);
        if (st != LB_OK) return cli_fail_lb("eval", json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
    }
    return EXIT_OK;
}

static int compare_all(int json, eval_run *r)
{
    for (size_t k = 0; k < r->n_tasks; k++) {
        eval_task *t = &r->tasks[k];
        if (!t->quant) continue;
        size_t n = eval_items(t);
        double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        lb_status st = a && b ? LB_OK : LB_ERR_NOMEM;
        for (int m = 0; st == LB_OK && m < EVAL_N_METRICS; m++) {
            for (size_t i = 0; i < n; i++) a[i] = eval_outcome(&t->base[i], (eval_metric)m), b[i] = eval_outcome(&t->quant[i], (eval_metric)m);
            st = n >= 2 ? lb_paired_compare(a, b, n, 1, r->resamples, r->seed, &t->paired[m]) : LB_OK;
        }
        free(a), free(b);
        if (st != LB_OK) return cli_fail_lb("eval", json, EXIT_RUNTIME, st);
    }
    return EXIT_OK;
}

static int write_items(int json, const char *path, const eval_run *r)
{
    lb__outfile o;
    lb_status st = lb__out_open(path, &o);
    if (st == LB_OK) {
        eval_write_items(o.f, r);
        st = lb__out_commit(&o);
    }
    return st == LB_OK ? EXIT_OK : cli_fail_lb("eval", json, EXIT_RUNTIME, st);
}

static int run(int argc, char **argv)
{
    int json = 0, force = 0, chat = 0;
    const char *model = NULL, *vs = NULL, *items = NULL, *base_items = NULL;
    char *chat_template = NULL;
    task_args ta[EVAL_MAX_TASKS] = {{0}};
    size_t n_ta = 0, chunks = 0;
    unsigned long long limit = 0, shots = 0, seed = 1, resamples = 10000;
    lb_task_options to = {0};
    cli_eval_args ea = {0};
    eval_run r = {.ctx = 512};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc;
        if ((rc = cli_eval_option("eval", json, argc, argv, &i, &ea)) || (rc = cli_parse_window("eval", json, argc, argv, &i, &r.ctx, &chunks))) {
            if (rc < 0) return EXIT_USAGE;
        } else if (strcmp(a, "--json") == 0) json = 1;
        else if (strcmp(a, "--force") == 0) force = 1;
        else if (strcmp(a, "--task") == 0 && v) {
            if (n_ta == EVAL_MAX_TASKS) return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "at most %d tasks", EVAL_MAX_TASKS);
            ta[n_ta++].name = v, i++;
        } else if ((strcmp(a, "--data") == 0 || strcmp(a, "--shots-from") == 0 || strcmp(a, "--labels") == 0) && v) {
            if (n_ta == 0) return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "%s comes after the --task it is for", a);
            const char **slot = a[2] == 'd' ? &ta[n_ta - 1].data : a[2] == 's' ? &ta[n_ta - 1].shots_from : &ta[n_ta - 1].labels;
            if (*slot) return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "%s given twice for --task %s", a, ta[n_ta - 1].name);
            *slot = v, i++;
        } else if (strcmp(a, "--limit") == 0 && v) {
            if (parse_count(a, v, 1ull << 32, &limit) != EXIT_OK) return EXIT_USAGE;
            i++;
        } else if (strcmp(a, "--shots") == 0 && v) {
            if (parse_count(a, v, 64, &shots) != EXIT_OK) return EXIT_USAGE;
            i++;
        } else if (strcmp(a, "--seed") == 0 && v) {
            if (parse_count(a, v, UINT64_MAX, &seed) != EXIT_OK) return EXIT_USAGE;
            i++;
        } else if (strcmp(a, "--resamples") == 0 && v) {
            if (parse_count(a, v, 1000000, &resamples) != EXIT_OK || resamples < 100)
                return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "--resamples takes 100..1000000");
            i++;
        } else if (strcmp(a, "--mmlu-form") == 0 && v) {
            if (strcmp(v, "letters") && strcmp(v, "cloze"))
                return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "--mmlu-form takes letters or cloze, not '%s'", v);
            to.mmlu_cloze = strcmp(v, "cloze") == 0, i++;
        } else if (strcmp(a, "--max-tokens") == 0 && v) {
            unsigned long long mt;
            if (parse_count(a, v, 4096, &mt) != EXIT_OK || mt == 0)
                return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "--max-tokens takes 1..4096");
            r.custom.max_tokens = (uint32_t)mt, i++;
        } else if (strcmp(a, "--stop") == 0 && v) {
            if (!v[0]) return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "--stop takes a non-empty string");
            r.custom.stop = v, i++;
        } else if (strcmp(a, "--chat") == 0) chat = 1;
        else if (strcmp(a, "--vs") == 0 && v) vs = v, i++;
        else if (strcmp(a, "--items") == 0 && v) items = v, i++;
        else if (strcmp(a, "--base-items") == 0 && v) base_items = v, i++;
        else if (a[0] == '-' && a[1]) return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "unknown option or missing value: '%s'", a);
        else if (model) return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "more than one MODEL (the quantized one goes after --vs)");
        else model = a;
    }
    if (!model || n_ta == 0) return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "need MODEL and --task NAME --data PATH\n%s", usage);
    for (size_t k = 0; k < n_ta; k++)
        if (!ta[k].data) return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "--task %s needs --data PATH", ta[k].name);
    if (vs && cli_eval_compares(&ea))
        return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "--vs QUANT or the quantization options, not both");
    int compare = vs || cli_eval_compares(&ea);
    if (base_items && !compare)
        return cli_fail("eval", json, EXIT_USAGE, "bad_argument", "--base-items is for a comparison (--vs QUANT, --spec, --scheme ...)");
    /* inputs first: --items must not land on one */
    lb_output_allow_replace(force);
    int rc = cli_protect("eval", json, model, "MODEL");
    if (rc == EXIT_OK) rc = cli_protect("eval", json, vs, "QUANT");
    for (size_t k = 0; rc == EXIT_OK && k < n_ta; k++) {
        rc = cli_protect("eval", json, ta[k].data, "a --data file");
        if (rc == EXIT_OK) rc = cli_protect("eval", json, ta[k].shots_from, "a --shots-from file");
        if (rc == EXIT_OK) rc = cli_protect("eval", json, ta[k].labels, "a --labels file");
    }
    if (rc == EXIT_OK) rc = cli_protect("eval", json, ea.tokenizer, "the --tokenizer file");
    if (rc == EXIT_OK) rc = cli_protect("eval", json, ea.calib, "the --calib file");
    if (rc == EXIT_OK) rc = cli_protect("eval", json, base_items, "the --base-items file");
    if (rc == EXIT_OK && items) rc = cli_output_check("eval", json, items);
    if (rc != EXIT_OK) return rc;
    r.model = model, r.seed = seed, r.resamples = (uint32_t)resamples, r.shots = (uint32_t)shots, r.limit = (size_t)limit;
    r.quant_name = compare ? (vs ? vs : "quantized") : NULL;
    for (size_t k = 0; rc == EXIT_OK && k < n_ta; k++) {
        rc = load_task(json, &ta[k], &to, (size_t)limit, (uint32_t)shots, seed, &r.tasks[k]);
        r.n_tasks = k + 1;
    }
    if (rc == EXIT_OK && base_items) rc = eval_read_base_items(json, base_items, &r);
    cli_eval_args base_args = cli_eval_base_args(&ea);
    cli_eval_model base = {0}, quant = {0};
    /* both models before any scoring: a bad option of the quantized one
     * is reported before minutes of work */
    if (rc == EXIT_OK) rc = cli_eval_open("eval", json, model, &base_args, 1, &base);
    if (rc == EXIT_OK && compare) rc = cli_eval_open("eval", json, vs ? vs : model, &ea, 1, &quant);
    if (rc == EXIT_OK && chat) { /* the base model's template, for both */
        lb_status st = lb_chat_template(base.model, &chat_template);
        if (st != LB_OK) rc = cli_fail_lb("eval", json, EXIT_RUNTIME, st);
        else if (!chat_template) rc = cli_fail("eval", json, EXIT_USAGE, "bad_argument", "--chat: '%s' carries no chat template", model);
        else if (!lb_chat_family(chat_template))
            rc = cli_fail("eval", json, EXIT_USAGE, "bad_argument", "--chat: the model's chat template is of no family lowbit "
                          "writes (chatml, llama3, llama2 [INST], gemma, phi3)");
        r.custom.chat_template = chat_template;
    }
    if (rc == EXIT_OK) rc = score_all(json, &r, &base, 0);
    if (rc == EXIT_OK && compare) rc = score_all(json, &r, &quant, 1);
    if (rc == EXIT_OK) rc = ppl_all(json, &r, &base, compare ? &quant : NULL, chunks);
    if (rc == EXIT_OK) rc = compare_all(json, &r);
    if (rc == EXIT_OK && items) rc = write_items(json, items, &r);
    if (rc == EXIT_OK) eval_report(stdout, &r, json);
    if (rc == EXIT_OK && compare && !json) {
        cli_eval_print_recipe(stdout, &quant, 0);
        cli_eval_print_saturation("eval", stdout, quant.runner, &ea, 0);
    }
    for (size_t k = 0; k < r.n_tasks; k++) {
        lb_task_free(r.tasks[k].task);
        if (r.tasks[k].custom) {
            lb_custom_results_free(r.tasks[k].cbase, r.tasks[k].cbase ? lb_custom_size(r.tasks[k].custom) : 0);
            lb_custom_results_free(r.tasks[k].cquant, r.tasks[k].cquant ? lb_custom_size(r.tasks[k].custom) : 0);
            free(r.tasks[k].cbase), free(r.tasks[k].cquant);
            lb_custom_free(r.tasks[k].custom);
        }
        free(r.tasks[k].base), free(r.tasks[k].quant), free(r.tasks[k].ids);
    }
    free(chat_template);
    cli_eval_close(&base);
    cli_eval_close(&quant);
    return rc;
}

const cli_command cmd_eval = {"eval", "benchmark accuracy (HellaSwag, ARC, MMLU, ...), base vs quantized, with a verdict", usage, run};
