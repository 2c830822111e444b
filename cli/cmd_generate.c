/* lowbit generate: text from a prompt, greedy or sampled, streamed. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_eval.h"
#include "util/clock.h"

static const char usage[] =
    "usage: lowbit generate MODEL -p|--prompt PROMPT [-n 128] [--temp 0] [--seed 1] [--spec SPEC]\n"
    "                      [--spec-attn SPEC] [--spec-mlp SPEC] [--spec-embed SPEC] [--spec-head SPEC]\n"
    "                      [--fake] [--act int8|fp8_e4m3|ggml [--calib FILE [--calib-tokens N]]] [--kv FORMAT] [--decode-act int8|exact]\n"
    "                      [--scheme S] [--recipe FILE] [--rule PATTERN=SPEC]... [--keep PATTERN]... [--weights-only]\n"
    "                      [--method rtn|smoothquant|awq|gptq|awq+gptq [--alpha A|search] [--damp D] [--block B]\n"
    "                       [--actorder|--no-actorder] [--true-sequential|--no-true-sequential] [--gptq-scales mse|minmax]\n"
    "                       --calib FILE [--calib-seqs N] [--calib-len L]]\n"
    "                      [--keep-sensitive N] [--outlier-threshold T] (with --calib FILE [--calib-tokens N])\n"
    "                      [--type T [--pure] [--output-tensor-type X] [--token-embedding-type X] [--tensor-type P=X]...\n"
    "                       [--leave-output-tensor] [--imatrix FILE | --imatrix-from TEXT]\n"
    "                       [--include-weights S | --exclude-weights S]...]\n"
    "                      [--tokenizer FILE] [--threads N] [--quiet]\n\n"
    "Prints PROMPT's continuation as it is generated: greedy at --temp 0 (the\n"
    "default), otherwise sampled from softmax(logits / temp) with a seeded\n"
    "generator, so a seed repeats its text. Stops after -n tokens or at the\n"
    "end-of-text token. On stderr: tokens/s of the prompt and of generation, and\n"
    "the memory the model takes.\n" CLI_EVAL_RUNNER_HELP CLI_EVAL_CHECKPOINT_HELP CLI_EVAL_RECIPE_HELP CLI_RECIPE_HELP;

static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* NaN or +inf logits (a NaN weight, activations that overflowed) pick no
 * token: generating from them would print garbage with exit 0. */
static int logits_finite(const float *logits, size_t vocab)
{
    for (size_t i = 0; i < vocab; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY) return 0;
    return 1;
}

static int32_t pick(const float *logits, size_t vocab, double temp, uint64_t *rng)
{
    size_t best = 0;
    for (size_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    if (temp <= 0) return (int32_t)best;
    double sum = 0;
    for (size_t i = 0; i < vocab; i++) sum += exp(((double)logits[i] - logits[best]) / temp);
    double u = (double)(next_random(rng) >> 11) / 9007199254740992.0 * sum, acc = 0;
    for (size_t i = 0; i < vocab; i++) {
        acc += exp(((double)logits[i] - logits[best]) / temp);
        if (acc > u) return (int32_t)i;
    }
    return (int32_t)best;
}

/* -n, --temp and --seed: a bad value is a usage error that says what is taken */
static int parse_value(const char *opt, const char *v, long *n_new, double *temp, unsigned long long *seed)
{
    char *end = NULL;
    int digits = v[0] >= '0' && v[0] <= '9';
    errno = 0;
    if (strcmp(opt, "-n") == 0) {
        long n = digits ? strtol(v, &end, 10) : 0;
        if (!digits || *end || errno || n < 1 || n > (1L << 20))
            return cli_fail("generate", 0, EXIT_USAGE, "bad_argument", "-n takes a token count 1..1048576, not '%s'", v);
        *n_new = n;
    } else if (strcmp(opt, "--temp") == 0) {
        double t = strtod(v, &end);
        if (end == v || *end || !(t >= 0 && t < 1e6))
            return cli_fail("generate", 0, EXIT_USAGE, "bad_argument",
                            "--temp takes 0 (greedy) or a positive temperature below 1e6, not '%s'", v);
        *temp = t;
    } else {
        unsigned long long s = digits ? strtoull(v, &end, 10) : 0;
        if (!digits || *end || errno)
            return cli_fail("generate", 0, EXIT_USAGE, "bad_argument",
                            "--seed takes a whole number 0..18446744073709551615, not '%s'", v);
        *seed = s;
    }
    return EXIT_OK;
}

static int run(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL;
    long n_new = 128;
    double temp = 0;
    unsigned long long seed = 1;
    cli_eval_args ea = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r = cli_eval_option("generate", 0, argc, argv, &i, &ea);
        if (r < 0) return EXIT_USAGE;
        if (r) continue;
        if ((strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) && v) prompt = v, i++;
        else if ((strcmp(a, "-n") == 0 || strcmp(a, "--temp") == 0 || strcmp(a, "--seed") == 0) && v) {
            if (parse_value(a, v, &n_new, &temp, &seed) != EXIT_OK) return EXIT_USAGE;
            i++;
        } else if (a[0] == '-' && a[1]) return cli_fail("generate", 0, EXIT_USAGE, "bad_argument", "unknown option or missing value: '%s'", a);
        else if (model) return cli_fail("generate", 0, EXIT_USAGE, "bad_argument", "more than one MODEL");
        else model = a;
    }
    if (!model || !prompt) return cli_fail("generate", 0, EXIT_USAGE, "bad_argument", "need MODEL and -p PROMPT\n%s", usage);
    cli_eval_model e;
    int rc = cli_eval_open("generate", 0, model, &ea, 1, &e);
    if (rc != EXIT_OK) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    lb_status st = lb_tokenize(e.tok, prompt, strlen(prompt), lb_tokenizer_add_bos(e.tok), &ids, &n);
    size_t vocab = lb_runner_vocab_size(e.runner);
    float *logits = malloc(vocab * sizeof *logits);
    if (st == LB_OK && !logits) st = LB_ERR_NOMEM;
    if (st == LB_OK && n == 0) {
        free(ids), free(logits);
        cli_eval_close(&e);
        return cli_fail("generate", 0, EXIT_USAGE, "bad_argument", "the prompt is empty (and the model adds no BOS)");
    }
    double t0 = lb__now();
    if (st == LB_OK) st = lb_runner_forward(e.runner, ids, n, logits, 1);
    double t1 = lb__now();
    long made = 0, nonfinite_at = -1;
    fputs(prompt, stdout);
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    uint32_t room = lb_model_arch(e.model)->max_seq_len; /* the runner's cache: the context, at most 4096 */
    if (room == 0 || room > 4096) room = 4096;
    if (st == LB_OK && (size_t)n_new > room - n) {
        fprintf(stderr, "lowbit generate: the context holds %u tokens: generating %zu, not %ld\n", room, room - n, n_new);
        n_new = (long)(room - n);
    }
    for (long k = 0; st == LB_OK && k < n_new; k++) {
        if (!logits_finite(logits, vocab)) {
            nonfinite_at = (long)n + k;
            st = LB_ERR_NAN;
            break;
        }
        int32_t next = pick(logits, vocab, temp, &rng);
        if (next == lb_tokenizer_eos(e.tok)) break;
        const char *bytes;
        size_t len;
        if (lb_token_bytes(e.tok, next, &bytes, &len) == LB_OK) fwrite(bytes, 1, len, stdout);
        fflush(stdout);
        st = lb_runner_forward(e.runner, &next, 1, logits, 1);
        made += st == LB_OK;
    }
    double t2 = lb__now();
    printf("\n");
    fflush(stdout); /* the statistics below come after the text */
    if (st == LB_OK) {
        fprintf(stderr, "prompt: %zu tokens, %.1f tokens/s; generated: %ld tokens, %.1f tokens/s\n", n,
                n / (t1 - t0 > 0 ? t1 - t0 : 1e-9), made, made / (t2 - t1 > 0 ? t2 - t1 : 1e-9));
        cli_eval_print_memory(stderr, e.runner, 0);
        cli_eval_print_saturation("generate", stderr, e.runner, &ea, 0);
    }
    if (nonfinite_at >= 0)
        rc = cli_fail("generate", 0, EXIT_RUNTIME, lb_status_name(st), "position %ld: the model's logits are not finite "
                      "(NaN or infinity: a NaN weight, or activations that overflowed)", nonfinite_at);
    else if (st != LB_OK) rc = cli_fail("generate", 0, EXIT_RUNTIME, lb_status_name(st), "%s",
                                        st == LB_ERR_NOMEM ? "out of memory" : lb_last_error());
    free(ids), free(logits);
    cli_eval_close(&e);
    return rc;
}

const cli_command cmd_generate = {"generate", "generate text from a prompt (greedy or sampled), streamed", usage, run};
