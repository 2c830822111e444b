/* lowbit kld: how far a quantized model's next-token distributions are from
 * the base model's, on the same windows as lowbit ppl. */
#include <stdlib.h>
#include <string.h>

#include "cli_eval.h"
#include "cli_output.h"

static const char usage[] =
    "usage: lowbit kld BASE [QUANT] --text FILE [--spec SPEC] [--spec-attn|--spec-mlp|--spec-embed|--spec-head SPEC]\n"
    "                 [--save-base FILE | --base FILE | --base-exact] [--save-tokens FILE] [--fake] [--act int8|fp8_e4m3|ggml [--calib FILE [--calib-tokens N]]]\n"
    "                 [--kv FORMAT] [--decode-act int8|exact] [--scheme S] [--recipe FILE] [--rule PATTERN=SPEC]... [--keep PATTERN]... [--weights-only]\n"
    "                 [--method rtn|smoothquant|awq|gptq|awq+gptq [--alpha A|search] [--damp D] [--block B] [--actorder|--no-actorder]\n"
    "                  [--true-sequential|--no-true-sequential] [--gptq-scales mse|minmax]\n"
    "                  --calib FILE [--calib-seqs N] [--calib-len L]]\n"
    "                 [--keep-sensitive N] [--outlier-threshold T] (with --calib FILE [--calib-tokens N])\n"
    "                 [--type T [--pure] [--output-tensor-type X] [--token-embedding-type X] [--tensor-type P=X]...\n"
    "                  [--leave-output-tensor] [--imatrix FILE | --imatrix-from TEXT]\n"
    "                  [--include-weights S | --exclude-weights S]...]\n"
    "                 [--ctx 512] [--chunks N] [--tokenizer FILE] [--threads N] [--force] [--json] [--quiet]\n\n"
    "KL divergence KL(base || quant) of the next-token distributions, per scored\n"
    "token of lowbit ppl's windows: mean +- standard error, median, p99, max; the\n"
    "top-1 agreement (how often both models' most likely token is the same); both\n"
    "perplexities and their difference with its error from the paired per-token\n"
    "log-likelihoods. QUANT is another model file (the same tokenizer), or BASE\n"
    "quantized under --spec (and the options below). --save-base stores the base model's\n"
    "distributions (16 bits per log-probability) so later runs can skip the base\n"
    "model with --base FILE (then BASE only provides the tokenizer, and QUANT or\n"
    "--spec the model to measure). The base always runs as stored, fp32 KV cache,\n"
    "except with --base-exact: then it is the same quantized model computed with exact\n"
    "activations, and the quant adds --decode-act int8 (that mode's own cost).\n"
    "--save-tokens writes every scored token's window, position, KLD and both NLLs\n"
    "(tab-separated text after a '#' header line): two runs on the same windows then\n"
    "compare token by token, as paired samples. Neither file is written over an\n"
    "input (the models, their tokenizers, the --text and --calib files). " CLI_FORCE_HELP CLI_EVAL_RUNNER_HELP CLI_EVAL_CHECKPOINT_HELP CLI_EVAL_RECIPE_HELP CLI_RECIPE_HELP;

static int run(int argc, char **argv)
{
    int json = 0, force = 0, base_exact = 0;
    const char *paths[2] = {NULL, NULL}, *text = NULL, *save = NULL, *load = NULL, *save_tokens = NULL;
    int n_paths = 0;
    cli_eval_args ea = {0};
    uint32_t ctx = 512;
    size_t chunks = 0;
    for (int i = 1; i < argc; i++) {
        int r;
        if ((r = cli_eval_option("kld", json, argc, argv, &i, &ea)) || (r = cli_parse_window("kld", json, argc, argv, &i, &ctx, &chunks))) {
            if (r < 0) return EXIT_USAGE;
        } else if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--force") == 0) force = 1;
        else if (strcmp(argv[i], "--base-exact") == 0) base_exact = 1;
        else if (strcmp(argv[i], "--text") == 0 && i + 1 < argc) text = argv[++i];
        else if (strcmp(argv[i], "--save-base") == 0 && i + 1 < argc) save = argv[++i];
        else if (strcmp(argv[i], "--base") == 0 && i + 1 < argc) load = argv[++i];
        else if (strcmp(argv[i], "--save-tokens") == 0 && i + 1 < argc) save_tokens = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1]) return cli_fail("kld", json, EXIT_USAGE, "bad_argument", "unknown option or missing value: '%s'", argv[i]);
        else if (n_paths == 2) return cli_fail("kld", json, EXIT_USAGE, "bad_argument", "at most BASE and QUANT");
        else paths[n_paths++] = argv[i];
    }
    if (!paths[0] || !text) return cli_fail("kld", json, EXIT_USAGE, "bad_argument", "need BASE and --text FILE\n%s", usage);
    if (save && load) return cli_fail("kld", json, EXIT_USAGE, "bad_argument", "--save-base and --base exclude each other");
    if (base_exact && (ea.decode_act != LB_FMT_INT8 || paths[1] || load))
        return cli_fail("kld", json, EXIT_USAGE, "bad_argument", "--base-exact measures --decode-act int8 against the "
                        "same model computed exactly: it needs --decode-act int8, and neither QUANT nor --base FILE");
    if (!paths[1] && !cli_eval_compares(&ea))
        return cli_fail("kld", json, EXIT_USAGE, "bad_argument", "nothing to compare: give QUANT, --spec, --scheme, "
                        "--recipe, --rule, --kv, --act or --type");
    ea.max_ctx = ctx;
    /* every input, before any work: --save-base must not land on one */
    lb_output_allow_replace(force);
    int rc = cli_protect("kld", json, paths[0], "BASE");
    if (rc == EXIT_OK) rc = cli_protect("kld", json, paths[1], "QUANT");
    if (rc == EXIT_OK) rc = cli_protect("kld", json, text, "the --text file");
    if (rc == EXIT_OK) rc = cli_protect("kld", json, ea.tokenizer, "the --tokenizer file");
    if (rc == EXIT_OK) rc = cli_protect("kld", json, ea.calib, "the --calib file");
    if (rc == EXIT_OK) rc = cli_protect("kld", json, load, "the --base file");
    if (rc == EXIT_OK && save) rc = cli_output_check("kld", json, save);
    if (rc == EXIT_OK && save_tokens) rc = cli_output_check("kld", json, save_tokens);
    if (rc == EXIT_OK && save && save_tokens && strcmp(save, save_tokens) == 0)
        rc = cli_fail("kld", json, EXIT_USAGE, "bad_argument", "--save-base and --save-tokens name the same file '%s'", save);
    if (rc != EXIT_OK) return rc;
    if (save) cli_note_leftovers("kld", save);
    if (save_tokens) cli_note_leftovers("kld", save_tokens);
    /* the base: the model as stored, unless its distributions come from a
     * file; --base-exact: the same quantized model, exact activations */
    cli_eval_args base_args = cli_eval_base_args(&ea);
    if (base_exact) base_args = ea, base_args.decode_act = LB_FMT_FP32;
    cli_eval_model base, quant = {0};
    rc = cli_eval_open("kld", json, paths[0], &base_args, 0, &base);
    if (rc != EXIT_OK) return rc;
    cli_test_pause_after_open();
    int32_t *ids = NULL;
    size_t n = 0;
    rc = cli_eval_tokens("kld", json, base.tok, text, &ids, &n);
    if (rc == EXIT_OK) rc = cli_eval_check_windows("kld", json, base.model, n, ctx);
    if (rc == EXIT_OK && !load) rc = cli_eval_runner("kld", json, &base_args, &base);
    if (rc == EXIT_OK) rc = cli_eval_open("kld", json, paths[1] ? paths[1] : paths[0], &ea, 1, &quant);
    if (rc == EXIT_OK) {
        cli_progress_ctx progress = {"kld", "window", NULL};
        lb_eval_options o = {.ctx = ctx, .max_chunks = chunks, .bos = lb_tokenizer_add_bos(base.tok) ? lb_tokenizer_bos(base.tok) : -1,
                             .progress = cli_progress_fn, .progress_ctx = &progress, .save_tokens = save_tokens};
        lb_kld_result k;
        lb_status st = lb_kld(base.runner, quant.runner, ids, n, &o, save, load, &k);
        if (st != LB_OK) rc = cli_fail_lb("kld", json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
        else if (json) {
            printf("{\"base\": ");
            json_string(stdout, paths[0]);
            printf(", \"quant\": ");
            json_string(stdout, paths[1] ? paths[1] : paths[0]);
            printf(", \"spec\": ");
            json_string(stdout, ea.spec ? ea.spec : "");
            cli_eval_print_setup(stdout, &ea, 1);
            printf(", \"ctx\": %u, \"chunks\": %zu, \"scored_tokens\": %llu", ctx, k.chunks, (unsigned long long)k.tokens);
            json_field(stdout, "kld_mean", k.kld_mean);
            json_field(stdout, "kld_err", k.kld_err);
            json_field(stdout, "kld_median", k.kld_median);
            json_field(stdout, "kld_p99", k.kld_p99);
            json_field(stdout, "kld_max", k.kld_max);
            json_field(stdout, "top1_agreement", k.top1_agreement);
            json_field(stdout, "ppl_base", k.ppl_base);
            json_field(stdout, "ppl_base_err", k.ppl_base_err);
            json_field(stdout, "ppl", k.ppl);
            json_field(stdout, "ppl_err", k.ppl_err);
            json_field(stdout, "dppl", k.dppl);
            json_field(stdout, "dppl_err", k.dppl_err);
            json_field(stdout, "seconds", k.seconds);
            cli_eval_print_recipe(stdout, &quant, 1);
            cli_eval_print_memory(stdout, quant.runner, 1);
            cli_eval_print_saturation("kld", stdout, quant.runner, &ea, 1);
            printf("}\n");
        } else {
            printf("%s vs %s%s%s", paths[0], paths[1] ? paths[1] : paths[0], ea.spec ? " under " : "", ea.spec ? ea.spec : "");
            cli_eval_print_setup(stdout, &ea, 0);
            printf(": %zu windows of %u, %llu scored tokens\n", k.chunks, ctx, (unsigned long long)k.tokens);
            printf("KLD mean %.6f +/- %.6f   median %.6f   p99 %.6f   max %.6f\n", k.kld_mean, k.kld_err, k.kld_median,
                   k.kld_p99, k.kld_max);
            printf("top-1 agreement %.2f%%\n", 100 * k.top1_agreement);
            printf("PPL base %.4f +/- %.4f   quant %.4f +/- %.4f   delta %+.4f +/- %.4f\n", k.ppl_base, k.ppl_base_err,
                   k.ppl, k.ppl_err, k.dppl, k.dppl_err);
            cli_eval_print_recipe(stdout, &quant, 0);
            cli_eval_print_memory(stdout, quant.runner, 0);
            cli_eval_print_saturation("kld", stdout, quant.runner, &ea, 0);
        }
    }
    free(ids);
    cli_eval_close(&base);
    cli_eval_close(&quant);
    return rc;
}

const cli_command cmd_kld = {"kld", "KL divergence of a quantized model from the base model on a text", usage, run};
