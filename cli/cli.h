/* What the command files share: exit codes, option helpers, number and
 * JSON printing. The CLI is thin: it parses, calls the library, prints. */
#ifndef LOWBIT_CLI_H
#define LOWBIT_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "lowbit.h"

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

typedef struct cli_command {
    const char *name;
    const char *summary;
    const char *usage; /* full --help text */
    int (*run)(int argc, char **argv);
} cli_command;

extern const cli_command cmd_formats, cmd_cast, cmd_grid, cmd_quant, cmd_inspect, cmd_error, cmd_convert, cmd_plan,
    cmd_ppl, cmd_kld, cmd_eval, cmd_generate, cmd_compare, cmd_bench, cmd_quantize, cmd_imatrix, cmd_sensitivity, cmd_report;

/* Reports an error: on stderr as "lowbit CMD: message", or with json set
 * as {"error": {...}} on stdout. Returns exit_code for `return fail(...)`. */
int cli_fail(const char *cmd, int json, int exit_code, const char *status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Same, for a failed library call: status name and lb_last_error(). */
int cli_fail_lb(const char *cmd, int json, int exit_code, lb_status s);

/* Parses a comma-separated list of specs ("int8:channel,mxfp4") into
 * specs[] and their texts into names[]; at most max. allow_plain also
 * takes plain floats (cli_plain_float_spec). Returns EXIT_OK or, after
 * reporting, EXIT_USAGE. */
int cli_parse_specs(const char *cmd, int json, const char *text, lb_qspec *specs, char (*names)[256], size_t max,
                    size_t *n, int allow_plain);

/* "bf16", "fp16" or "fp32" as a spec of its own: the element alone, no
 * scale (what lb_qspec_parse refuses, since there is nothing to scale):
 * weights are rounded to it. 1 if text is one. */
int cli_plain_float_spec(const char *text, lb_qspec *spec);
/* Whether spec is such a plain float. */
int cli_is_plain_float(const lb_qspec *spec);

/* Reads a whole file (at most max_bytes) into a malloc'd buffer; reports
 * a failure and returns its exit code (EXIT_RUNTIME), else EXIT_OK. */
int cli_read_file(const char *cmd, int json, const char *path, size_t max_bytes, char **text, size_t *len);

/* --threads VALUE, one rule for every command: 0 = one per CPU, N = N
 * threads, both at most LB_MAX_THREADS (lowbit.h); anything else is a
 * usage error naming that range. Returns EXIT_OK or, reported, EXIT_USAGE. */
int cli_parse_threads(const char *cmd, int json, const char *value, int *threads);

/* Progress on stderr (cli_progress.c): a bar on a terminal; otherwise a
 * line for the first step, at most one every 2 s, and the last, each with
 * elapsed time, an ETA and note (may be NULL), as "lowbit CMD: WHAT
 * DONE/TOTAL, ...". done == 0 starts a run (and prints nothing). Off with
 * --quiet (cli_progress_set_quiet) or LOWBIT_QUIET set to anything but 0. */
void cli_progress(const char *cmd, const char *what, size_t done, size_t total, const char *note);
void cli_progress_set_quiet(int quiet);
/* Clears a bar left standing (a run that failed midway), so that an error
 * message starts its own line. */
void cli_progress_clear(void);
int cli_progress_quiet(void);
/* An lb_progress_fn for library calls: ctx is a cli_progress_ctx. */
typedef struct cli_progress_ctx {
    const char *cmd, *what;
    const char *note; /* may be NULL */
} cli_progress_ctx;
void cli_progress_fn(void *ctx, size_t done, size_t total);

/* True if arg is --help or -h. */
int cli_is_help(const char *arg);

/* Shortest decimal that reads back as the same double ("448", "0.1",
 * "3.4028235e+38"); "nan", "inf", "-inf" for the specials. */
void cli_format_double(char *buf, size_t size, double v);

/* Same for a float (at most 9 significant digits): "240", "3.4028235e+38". */
void cli_format_float(char *buf, size_t size, float v);

/* An error magnitude to 6 significant digits; "nan" without a sign. */
void cli_format_error(char *buf, size_t size, double v);

/* Text output of names and strings that come from files (cli_escape.c):
 * control characters (C0, DEL, C1, bidirectional overrides) become \xNN
 * or \uNNNN, bytes that are not UTF-8 \xNN; printable UTF-8 stays.
 * cli_escape writes into buf (cut with "..." when it does not fit) and
 * returns it, for printf widths; cli_escape_keep leaves the ASCII controls
 * in keep (such as "\n") as they are; cli_put_escaped writes any length. */
const char *cli_escape(char *buf, size_t size, const char *s);
const char *cli_escape_keep(char *buf, size_t size, const char *s, const char *keep);
void cli_put_escaped(FILE *out, const char *s);
/* The length of the UTF-8 sequence at p with its code point in *cp, or 0
 * when p does not start a valid one (overlong, surrogate, truncated). */
size_t cli_utf8_next(const unsigned char *p, uint32_t *cp);
/* Whether a code point is one of the controls cli_escape escapes. */
int cli_is_control(uint32_t c);

/* Writes a JSON string literal, escaped: controls as \uNNNN (so valid
 * UTF-8 reads back exactly); a byte that is not UTF-8, which JSON cannot
 * hold, as the six characters \\xNN (the text "\xNN", as text output shows it). */
void json_string(FILE *out, const char *s);
/* Writes a JSON number, or the string "nan"/"inf"/"-inf" (JSON has none). */
void json_number(FILE *out, double v);

/* Writes `, "name": v` (the separator first: for fields after the first). */
void json_field(FILE *out, const char *name, double v);

#endif
