/* lowbit report: the results of other commands as one self-contained HTML
 * page of inline SVG charts (report_sections.c): no scripts, fonts or
 * links, so it opens offline and anywhere. */
#include <stdlib.h>
#include <string.h>

#include "cli_output.h"
#include "report.h"
#include "report_svg.h"
#include "util/file.h"

#define REPORT_MAX_INPUTS 64
#define REPORT_MAX_INPUT_BYTES (256u << 20)

static const char usage[] =
    "usage: lowbit report RESULTS... -o report.html [--title T] [--force]\n\n"
    "One self-contained HTML page (inline SVG; no scripts, fonts or network) drawing the\n"
    "results of other commands, each a file of their --json output:\n"
    "  inspect --json --histogram [--spec S]  weight histograms with the spec's grid and the outliers\n"
    "  error --json                           SQNR per tensor and spec as a heat map\n"
    "  compare --json                         bits per weight against KLD, per spec\n"
    "  sensitivity --json                     KLD per unit, costliest first\n"
    "  quantize --json with --target-bpw      the Pareto front explored, the candidates, the chosen mix\n"
    "  eval --json                            accuracies with their intervals, paired differences\n"
    "  bench --json                           matvec GB/s against the read bandwidth (the roof)\n"
    "and the token files of kld --save-tokens (the KLD distribution per token). The kind is told\n"
    "from the content; a file that is none of these is refused, naming it.\n";

static const char style[] =
    "body{font-family:sans-serif;margin:24px;max-width:800px;color:#222}"
    "h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ccc}"
    ".src{font-size:12px;color:#777;font-weight:normal}p{font-size:13px}"
    "svg.chart{display:block;margin:10px 0}svg .t{font-size:13px;font-weight:bold}"
    "svg .l{font-size:11px}svg .s{font-size:8px}svg .n{font-size:10px;fill:#444}svg .a{font-size:11px;fill:#333}"
    "svg .r{font-size:10px;fill:#c0392b}";

typedef enum kind { K_INSPECT, K_ERROR, K_COMPARE, K_SENSITIVITY, K_QUANTIZE, K_EVAL, K_BENCH, K_TOKENS, K_NONE } kind;

static kind kind_of(const lb__json *r)
{
    if (!r || r->type != LB_JSON_OBJECT) return K_NONE;
    const char *cmd = lb__json_str(r, "command");
    if (cmd && strcmp(cmd, "sensitivity") == 0) return K_SENSITIVITY;
    if (lb__json_get(r, "architecture") && lb__json_get(r, "tensors")) return K_INSPECT;
    if (lb__json_get(r, "specs") && lb__json_get(r, "tensors") && lb__json_get(r, "weights")) return K_ERROR;
    if (lb__json_get(r, "specs") && lb__json_get(r, "scored_tokens")) return K_COMPARE;
    if (lb__json_get(r, "tasks")) return K_EVAL;
    if (lb__json_get(r, "output") && lb__json_get(r, "format")) return K_QUANTIZE;
    if (lb__json_get(r, "machine") && lb__json_get(r, "matvec")) return K_BENCH;
    return K_NONE;
}

static int section(FILE *f, const char *path, const char *text, size_t len, const lb__json *r, kind k)
{
    switch (k) {
    case K_INSPECT: return report_inspect(f, path, r);
    case K_ERROR: return report_error(f, path, r);
    case K_COMPARE: return report_compare(f, path, r);
    case K_SENSITIVITY: return report_sensitivity(f, path, r);
    case K_QUANTIZE: return report_quantize(f, path, r);
    case K_EVAL: return report_eval(f, path, r);
    case K_BENCH: return report_bench(f, path, r);
    case K_TOKENS: return report_kld_tokens(f, path, text, len);
    case K_NONE: break;
    }
    return -1;
}

typedef struct input {
    const char *path;
    char *text;
    size_t len;
    lb__json *json;
    kind k;
} input;

static int read_input(const char *path, input *in)
{
    in->path = path;
    int rc = cli_read_file("report", 0, path, REPORT_MAX_INPUT_BYTES, &in->text, &in->len);
    if (rc != EXIT_OK) return rc;
    static const char tokens[] = "# window\tposition\tkld";
    if (in->len >= sizeof tokens - 1 && memcmp(in->text, tokens, sizeof tokens - 1) == 0) return in->k = K_TOKENS, EXIT_OK;
    lb_status st = lb__json_parse(in->text, in->len, path, &in->json);
    if (st != LB_OK)
        return cli_fail("report", 0, EXIT_USAGE, "bad_argument", "%s: neither JSON nor a kld --save-tokens file: %s", path,
                        lb_last_error());
    in->k = kind_of(in->json);
    if (in->k == K_NONE)
        return cli_fail("report", 0, EXIT_USAGE, "bad_argument", "%s: not a --json result lowbit report draws (inspect, "
                        "error, compare, sensitivity, eval, quantize, bench) nor a kld --save-tokens file", path);
    return EXIT_OK;
}

static int write_report(const char *out, const char *title, input *in, size_t n)
{
    lb__outfile o;
    lb_status st = lb__out_open(out, &o);
    if (st != LB_OK) return cli_fail_lb("report", 0, EXIT_RUNTIME, st);
    FILE *f = o.f;
    fputs("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
          "<title>", f);
    rsvg_text(f, title);
    fprintf(f, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>", style);
    rsvg_text(f, title);
    fputs("</h1>\n<p>Made by lowbit report from:</p>\n<ul>\n", f);
    for (size_t i = 0; i < n; i++) {
        fputs("<li>", f);
        rsvg_text(f, in[i].path);
        fputs("</li>\n", f);
    }
    fputs("</ul>\n", f);
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) bad = section(f, in[i].path, in[i].text, in[i].len, in[i].json, in[i].k) != 0;
    fputs("</body>\n</html>\n", f);
    if (bad) {
        lb__out_abort(&o);
        return cli_fail("report", 0, EXIT_RUNTIME, "out_of_memory", "out of memory");
    }
    st = lb__out_commit(&o);
    return st == LB_OK ? EXIT_OK : cli_fail_lb("report", 0, EXIT_RUNTIME, st);
}

static int run(int argc, char **argv)
{
    const char *out = NULL, *title = "lowbit report", *paths[REPORT_MAX_INPUTS];
    size_t n = 0;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) && i + 1 < argc) out = argv[++i];
        else if (strcmp(argv[i], "--title") == 0 && i + 1 < argc) title = argv[++i];
        else if (strcmp(argv[i], "--force") == 0) force = 1;
        else if (argv[i][0] == '-' && argv[i][1])
            return cli_fail("report", 0, EXIT_USAGE, "bad_argument", "unknown option or missing value: '%s'", argv[i]);
        else if (n == REPORT_MAX_INPUTS)
            return cli_fail("report", 0, EXIT_USAGE, "bad_argument", "at most %d RESULTS", REPORT_MAX_INPUTS);
        else paths[n++] = argv[i];
    }
    if (!out || !n) return cli_fail("report", 0, EXIT_USAGE, "bad_argument", "need RESULTS and -o report.html\n%s", usage);
    lb_output_allow_replace(force);
    int rc = EXIT_OK;
    for (size_t i = 0; i < n && rc == EXIT_OK; i++) rc = cli_protect("report", 0, paths[i], "a RESULTS file");
    if (rc == EXIT_OK) rc = cli_output_check("report", 0, out);
    if (rc != EXIT_OK) return rc;
    input in[REPORT_MAX_INPUTS];
    memset(in, 0, sizeof in);
    for (size_t i = 0; i < n && rc == EXIT_OK; i++) rc = read_input(paths[i], &in[i]);
    if (rc == EXIT_OK) rc = write_report(out, title, in, n);
    if (rc == EXIT_OK) printf("wrote %s: %zu result%s drawn\n", out, n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++) free(in[i].text), lb__json_free(in[i].json);
    return rc;
}

const cli_command cmd_report = {"report", "draw results as one self-contained HTML page of charts", usage, run};
