/* lowbit imatrix: llama.cpp's importance matrix, computed with lowbit's
 * forward pass on a calibration text (or converted from another imatrix
 * file), written as the GGUF imatrix llama-quantize --imatrix reads. */
#include <stdlib.h>
#include <string.h>

#include "cli_eval.h"
#include "cli_imatrix.h"
#include "cli_output.h"
#include "util/clock.h"

static const char usage[] =
    "usage: lowbit imatrix MODEL --text FILE -o OUT.gguf [--ctx 512] [--chunks N] [--process-output]\n"
    "                     [--tokenizer FILE] [--threads N] [--force] [--json] [--quiet]\n"
    "       lowbit imatrix --in-file IMATRIX -o OUT.gguf [--force] [--json]\n\n"
    "The importance matrix llama-imatrix computes, from lowbit's own forward pass:\n"
    "for every linear layer of the blocks (attn_q/k/v/output, ffn_gate/up/down) the\n"
    "sum over the text's tokens of each input column's square, and the tokens\n"
    "counted. As llama-imatrix with the same --ctx and --chunks: the text is\n"
    "tokenized (BOS first when the model adds one) and cut into windows of --ctx\n"
    "tokens (at least two windows' worth needed), each window's first token made\n"
    "BOS when the model adds one, each run from an empty cache with the weights\n"
    "as stored, in fp32. --process-output also records the output head's input\n"
    "(only an untied head, named output.weight, as llama.cpp does). OUT is the GGUF\n"
    "imatrix llama-imatrix writes (imatrix.datasets names FILE as given), for\n"
    "llama-quantize --imatrix OUT or lowbit quantize --imatrix OUT.\n"
    "--in-file reads an imatrix (GGUF or the legacy .dat) and writes it as GGUF,\n"
    "as llama-imatrix --in-file does (a legacy file's sums and counts times 512).\n" CLI_FORCE_HELP;

static void print_summary(const char *out, const lb_imatrix *im, size_t text_tokens, double seconds, int json)
{
    lb_imatrix_info info;
    lb_imatrix_get_info(im, &info);
    if (json) {
        printf("{\"output\": ");
        json_string(stdout, out);
        printf(", \"entries\": %zu, \"chunks\": %u, \"chunk_size\": %u", info.entries, info.chunk_count,
               info.chunk_size);
        if (text_tokens) printf(", \"text_tokens\": %zu", text_tokens);
        json_field(stdout, "seconds", seconds);
        printf("}\n");
    } else {
        printf("wrote %s: %zu entries, %u chunks of %u tokens", out, info.entries, info.chunk_count, info.chunk_size);
        if (text_tokens) printf(" (%zu tokens of text)", text_tokens);
        printf(" in %.1f s\n", seconds);
    }
}

static int convert(const char *in, const char *out, int json)
{
    int rc = cli_protect("imatrix", json, in, "the --in-file");
    if (rc == EXIT_OK) rc = cli_output_check("imatrix", json, out);
    if (rc != EXIT_OK) return rc;
    double t0 = lb__now();
    lb_imatrix *im;
    lb_status st = lb_imatrix_load(in, &im);
    if (st != LB_OK) return cli_fail_lb("imatrix", json, EXIT_RUNTIME, st);
    st = lb_imatrix_save(im, out);
    lb_imatrix_free(im);
    /* a legacy file's chunks change on conversion: say what was written */
    if (st == LB_OK) st = lb_imatrix_load(out, &im);
    if (st != LB_OK) return cli_fail_lb("imatrix", json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
    print_summary(out, im, 0, lb__now() - t0, json);
    lb_imatrix_free(im);
    return EXIT_OK;
}

static int run(int argc, char **argv)
{
    int json = 0, force = 0, process_output = 0, threads = 0;
    const char *model = NULL, *text = NULL, *out = NULL, *in_file = NULL, *tokenizer = NULL;
    uint32_t ctx = 512;
    size_t chunks = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r;
        if ((r = cli_parse_window("imatrix", json, argc, argv, &i, &ctx, &chunks))) {
            if (r < 0) return EXIT_USAGE;
        } else if (strcmp(a, "--json") == 0) json = 1;
        else if (strcmp(a, "--quiet") == 0) cli_progress_set_quiet(1);
        else if (strcmp(a, "--force") == 0) force = 1;
        else if (strcmp(a, "--process-output") == 0) process_output = 1;
        else if (strcmp(a, "--text") == 0 && v) text = argv[++i];
        else if (strcmp(a, "-o") == 0 && v) out = argv[++i];
        else if (strcmp(a, "--in-file") == 0 && v) in_file = argv[++i];
        else if (strcmp(a, "--tokenizer") == 0 && v) tokenizer = argv[++i];
        else if (strcmp(a, "--threads") == 0 && v) {
            if (cli_parse_threads("imatrix", json, argv[++i], &threads) != EXIT_OK) return EXIT_USAGE;
        } else if (a[0] == '-' && a[1])
            return cli_fail("imatrix", json, EXIT_USAGE, "bad_argument", "unknown option or missing value: '%s'", a);
        else if (model) return cli_fail("imatrix", json, EXIT_USAGE, "bad_argument", "more than one MODEL");
        else model = a;
    }
    lb_output_allow_replace(force);
    if (in_file) {
        if (model || text || !out)
            return cli_fail("imatrix", json, EXIT_USAGE, "bad_argument", "--in-file takes -o OUT and no MODEL or --text\n%s", usage);
        return convert(in_file, out, json);
    }
    if (!model || !text || !out)
        return cli_fail("imatrix", json, EXIT_USAGE, "bad_argument", "need MODEL, --text FILE and -o OUT\n%s", usage);
    int rc = cli_protect("imatrix", json, model, "the model");
    if (rc == EXIT_OK) rc = cli_output_check("imatrix", json, out);
    if (rc != EXIT_OK) return rc;
    cli_eval_args ea = {.tokenizer = tokenizer, .threads = threads, .max_ctx = ctx};
    cli_eval_model e;
    if ((rc = cli_eval_open("imatrix", json, model, &ea, 0, &e)) != EXIT_OK) return rc;
    double t0 = lb__now();
    lb_imatrix *im = NULL;
    size_t n = 0;
    rc = cli_imatrix_compute("imatrix", json, e.model, e.tok, text, ctx, chunks, threads, process_output, &im, &n);
    if (rc == EXIT_OK) {
        lb_status st = lb_imatrix_save(im, out);
        if (st == LB_OK) print_summary(out, im, n, lb__now() - t0, json);
        else rc = cli_fail_lb("imatrix", json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
    }
    lb_imatrix_free(im);
    cli_eval_close(&e);
    return rc;
}

const cli_command cmd_imatrix = {"imatrix", "llama.cpp's importance matrix from a calibration text (GGUF imatrix)",
                                 usage, run};
