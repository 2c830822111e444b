/* lowbit: the command-line front end. Each command lives in its own file;
 * this one only finds the command and handles --help and --version. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_output.h"

static const cli_command *const commands[] = {&cmd_formats, &cmd_cast, &cmd_grid, &cmd_quant, &cmd_inspect, &cmd_error, &cmd_convert, &cmd_plan, &cmd_ppl, &cmd_kld, &cmd_eval, &cmd_generate, &cmd_compare, &cmd_bench, &cmd_quantize, &cmd_imatrix, &cmd_sensitivity, &cmd_report};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out)
{
    fprintf(out,
            "lowbit %s: post-training quantization of large language models\n\n"
            "usage: lowbit COMMAND [OPTIONS] [ARGS]\n\ncommands:\n",
            lb_version());
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(out, "  %-12s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(out,
            "\n'lowbit help COMMAND' or 'lowbit COMMAND --help' shows a command's options.\n"
            "Exit status: 0 success, 1 runtime failure, 2 bad usage.\n");
}

static const cli_command *find(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i]->name, name) == 0) return commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *first = argv[1];
    if (cli_is_help(first)) {
        usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(first, "--version") == 0 || strcmp(first, "version") == 0) {
        printf("lowbit %s\n", lb_version());
        return EXIT_OK;
    }
    if (strcmp(first, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return EXIT_OK;
        }
        const cli_command *c = find(argv[2]);
        if (!c) return cli_fail("help", 0, EXIT_USAGE, "bad_argument", "unknown command '%s'", argv[2]);
        fputs(c->usage, stdout);
        return EXIT_OK;
    }
    const cli_command *c = find(first);
    if (!c) {
        fprintf(stderr, "lowbit: unknown command '%s'\n\n", first);
        usage(stderr);
        return EXIT_USAGE;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        if (cli_is_help(argv[i])) {
            fputs(c->usage, stdout);
            return EXIT_OK;
        }
    }
    cli_install_signal_handlers(c->name);
    return c->run(argc - 1, argv + 1);
}
