/* lowbit ppl: perplexity of a model (optionally fake-quantized) on a text,
 * by llama.cpp's method. */
#include <stdlib.h>
#include <string.h>

#include "cli_eval.h"

static const char usage[] =
    "usage: lowbit ppl MODEL --text FILE [--ctx 512] [--chunks N] [--spec SPEC] [--spec-attn SPEC]\n"
    "                 [--spec-mlp SPEC] [--spec-embed SPEC] [--spec-head SPEC] [--tokenizer FILE]\n"
    "                 [--fake] [--act int8|fp8_e4m3|ggml [--calib FILE [--calib-tokens N]]] [--kv FORMAT] [--decode-act int8|exact]\n"
    "                 [--scheme S] [--recipe FILE] [--rule PATTERN=SPEC]... [--keep PATTERN]... [--weights-only]\n"
    "                 [--method rtn|smoothquant|awq|gptq|awq+gptq [--alpha A|search] [--damp D] [--block B] [--actorder|--no-actorder]\n"
    "                  [--true-sequential|--no-true-sequential] [--gptq-scales mse|minmax]\n"
    "                  --calib FILE [--calib-seqs N] [--calib-len L]]\n"
    "                 [--keep-sensitive N] [--outlier-threshold T] (with --calib FILE [--calib-tokens N])\n"
    "                 [--type T [--pure] [--output-tensor-type X] [--token-embedding-type X] [--tensor-type P=X]...\n"
    "                  [--leave-output-tensor] [--imatrix FILE | --imatrix-from TEXT]\n"
    "                  [--include-weights S | --exclude-weights S]...]\n"
    "                 [--threads N] [--json] [--quiet]\n\n"
    "Perplexity as llama.cpp's perplexity tool measures it: the text is tokenized\n"
    "(BOS first), cut into non-overlapping windows of --ctx tokens whose first token\n"
    "is BOS (when the model adds BOS), each run from an empty cache; only the\n"
    "second half of each window is scored: the logits at positions ctx/2 .. ctx-2\n"
    "predict the tokens after them. Prints PPL +- its standard error, tokens/s and\n"
    "the memory the model takes. --chunks limits the windows. The progress lines on\n"
    "stderr show the perplexity so far, as llama.cpp's do.\n" CLI_EVAL_RUNNER_HELP CLI_EVAL_CHECKPOINT_HELP CLI_EVAL_RECIPE_HELP CLI_RECIPE_HELP;

/* llama.cpp's running perplexity, in the progress lines */
static void progress_ppl(void *ctx, size_t done, size_t total, double ppl, double err)
{
    (void)ctx;
    char note[64];
    snprintf(note, sizeof note, "ppl %.4f +- %.4f", ppl, err);
    cli_progress("ppl", "window", done, total, note);
}

/* the windows' clock starts before the first window, not after it */
static void progress_start(void *ctx, size_t done, size_t total)
{
    (void)ctx;
    if (done == 0) cli_progress("ppl", "window", 0, total, NULL);
}

static int run(int argc, char **argv)
{
    int json = 0;
    const char *model = NULL, *text = NULL;
    cli_eval_args ea = {0};
    uint32_t ctx = 512;
    size_t chunks = 0;
    for (int i = 1; i < argc; i++) {
        int r;
        if ((r = cli_eval_option("ppl", json, argc, argv, &i, &ea)) || (r = cli_parse_window("ppl", json, argc, argv, &i, &ctx, &chunks))) {
            if (r < 0) return EXIT_USAGE;
        } else if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--text") == 0 && i + 1 < argc) text = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1]) return cli_fail("ppl", json, EXIT_USAGE, "bad_argument", "unknown option or missing value: '%s'", argv[i]);
        else if (model) return cli_fail("ppl", json, EXIT_USAGE, "bad_argument", "more than one MODEL");
        else model = argv[i];
    }
    if (!model || !text) return cli_fail("ppl", json, EXIT_USAGE, "bad_argument", "need MODEL and --text FILE\n%s", usage);
    ea.max_ctx = ctx;
    cli_eval_model e;
    int rc = cli_eval_open("ppl", json, model, &ea, 0, &e);
    if (rc != EXIT_OK) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    rc = cli_eval_tokens("ppl", json, e.tok, text, &ids, &n);
    if (rc == EXIT_OK) rc = cli_eval_check_windows("ppl", json, e.model, n, ctx);
    if (rc == EXIT_OK) rc = cli_eval_runner("ppl", json, &ea, &e);
    if (rc == EXIT_OK) {
        lb_eval_options o = {.ctx = ctx, .max_chunks = chunks, .bos = lb_tokenizer_add_bos(e.tok) ? lb_tokenizer_bos(e.tok) : -1,
                             .progress = progress_start, .progress_ppl = progress_ppl};
        lb_ppl_result res;
        lb_status st = lb_perplexity(e.runner, ids, n, &o, &res);
        if (st != LB_OK) rc = cli_fail_lb("ppl", json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
        else if (json) {
            printf("{\"model\": ");
            json_string(stdout, model);
            printf(", \"spec\": ");
            json_string(stdout, ea.spec ? ea.spec : "");
            cli_eval_print_setup(stdout, &ea, 1);
            printf(", \"text_tokens\": %zu, \"ctx\": %u, \"chunks\": %zu, \"scored_tokens\": %llu", n, ctx, res.chunks,
                   (unsigned long long)res.tokens);
            json_field(stdout, "ppl", res.ppl);
            json_field(stdout, "ppl_err", res.ppl_err);
            json_field(stdout, "seconds", res.seconds);
            json_field(stdout, "tokens_per_s", res.tokens_per_s);
            cli_eval_print_recipe(stdout, &e, 1);
            cli_eval_print_memory(stdout, e.runner, 1);
            cli_eval_print_saturation("ppl", stdout, e.runner, &ea, 1);
            printf("}\n");
        } else {
            printf("%s%s%s", model, ea.spec ? " under " : "", ea.spec ? ea.spec : "");
            cli_eval_print_setup(stdout, &ea, 0);
            printf(": %zu tokens of text, %zu windows of %u, %llu scored\n", n, res.chunks, ctx, (unsigned long long)res.tokens);
            printf("PPL = %.4f +/- %.4f   (%.1f s, %.0f tokens/s)\n", res.ppl, res.ppl_err, res.seconds, res.tokens_per_s);
            cli_eval_print_recipe(stdout, &e, 0);
            cli_eval_print_memory(stdout, e.runner, 0);
            cli_eval_print_saturation("ppl", stdout, e.runner, &ea, 0);
        }
    }
    free(ids);
    cli_eval_close(&e);
    return rc;
}

const cli_command cmd_ppl = {"ppl", "perplexity on a text (llama.cpp's method), optionally quantized", usage, run};
