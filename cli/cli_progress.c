/* Progress on stderr, never on stdout (tables and JSON stay clean). On a
 * terminal: one bar redrawn in place. Elsewhere (a log, CI, a pipe): whole
 * lines, the first step, then at most one every CLI_PROGRESS_EVERY_S
 * seconds, then the last, so a long run is never silent and a log does not
 * fill up. Both with elapsed time and an ETA. --quiet or LOWBIT_QUIET (set,
 * not "0") turns it off. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "util/clock.h"

#define CLI_PROGRESS_EVERY_S 2.0

static int quiet = -1; /* -1: not decided yet (LOWBIT_QUIET is read once) */

/* One clock per (command, unit): compare's rows ("spec") keep theirs
 * while each row's windows run. */
typedef struct progress_state {
    char cmd[32], what[32];
    size_t last_done;
    int running;                   /* between a run's start and its last step */
    double start, last_line, used; /* lb__now() times */
} progress_state;
static progress_state states[4];
static int bar_drawn; /* a bar stands on the terminal's last line */

static progress_state *state_of(const char *cmd, const char *what)
{
    progress_state *oldest = &states[0];
    for (size_t i = 0; i < sizeof states / sizeof *states; i++) {
        if (strcmp(states[i].cmd, cmd) == 0 && strcmp(states[i].what, what) == 0) return &states[i];
        if (states[i].used < oldest->used) oldest = &states[i];
    }
    snprintf(oldest->cmd, sizeof oldest->cmd, "%s", cmd);
    snprintf(oldest->what, sizeof oldest->what, "%s", what);
    oldest->last_done = 0, oldest->running = 0;
    return oldest;
}

void cli_progress_set_quiet(int q) { quiet = q; }

int cli_progress_quiet(void)
{
    if (quiet < 0) {
        const char *e = getenv("LOWBIT_QUIET");
        quiet = e && e[0] && strcmp(e, "0") != 0;
    }
    return quiet;
}

/* "8.1 s", "2m05s", "1h02m" */
static void duration(char *buf, size_t size, double s)
{
    if (!(s >= 0)) s = 0;
    if (s < 60) snprintf(buf, size, "%.1f s", s);
    else if (s < 3600) snprintf(buf, size, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, size, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

void cli_progress(const char *cmd, const char *what, size_t done, size_t total, const char *note)
{
    if (cli_progress_quiet() || total == 0) return;
    double now = lb__now();
    progress_state *st = state_of(cmd, what);
    st->used = now;
    /* a run starts with done == 0, or, without that call, at its first
     * step (then its first step's time is not counted), or when the count
     * goes back */
    if (done == 0 || !st->running || done < st->last_done) st->start = now, st->last_line = 0, st->last_done = 0;
    st->running = 1;
    int first = st->last_done == 0 && done > 0, last = done >= total;
    st->last_done = done;
    if (last) st->running = 0;
    double elapsed = now - st->start;
    char took[32], eta[32];
    duration(took, sizeof took, elapsed);
    duration(eta, sizeof eta, done ? elapsed / (double)done * (double)(total - (done < total ? done : total)) : 0);
    if (isatty(STDERR_FILENO)) {
        int width = 30, filled = (int)((double)done / (double)total * width);
        fprintf(stderr, "\r%s [", cmd);
        for (int i = 0; i < width; i++) fputc(i < filled ? '#' : '.', stderr);
        fprintf(stderr, "] %zu/%zu %s", done, total, what);
        if (done) fprintf(stderr, ", %s, ETA %s", took, eta);
        if (note && note[0]) fprintf(stderr, "; %s", note);
        fprintf(stderr, "\033[K");
        bar_drawn = !last;
        if (last) fprintf(stderr, "\r\033[K");
    } else if (done > 0 && (first || last || now - st->last_line >= CLI_PROGRESS_EVERY_S)) {
        fprintf(stderr, "lowbit %s: %s %zu/%zu, %s elapsed, ETA %s%s%s\n", cmd, what, done, total, took,
                eta, note && note[0] ? "; " : "", note ? note : "");
        st->last_line = now;
    }
    fflush(stderr);
}

void cli_progress_clear(void)
{
    if (bar_drawn) fprintf(stderr, "\r\033[K");
    bar_drawn = 0;
}

void cli_progress_fn(void *ctx, size_t done, size_t total)
{
    const cli_progress_ctx *c = ctx;
    cli_progress(c->cmd, c->what, done, total, c->note);
}
