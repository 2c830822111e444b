/* Inputs, --force and signals for the commands that write (cli_output.h). */
#include "cli_output.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

int cli_protect(const char *cmd, int json, const char *path, const char *what)
{
    if (!path) return EXIT_OK;
    lb_status st = lb_output_protect(path, what);
    return st == LB_OK ? EXIT_OK : cli_fail_lb(cmd, json, EXIT_RUNTIME, st);
}

int cli_output_check(const char *cmd, int json, const char *path)
{
    lb_status st = lb_output_check(path);
    return st == LB_OK ? EXIT_OK : cli_fail_lb(cmd, json, st == LB_ERR_ARG ? EXIT_USAGE : EXIT_RUNTIME, st);
}

void cli_note_leftovers(const char *cmd, const char *path)
{
    char dir[4096], prefix[1024];
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "out/" is the directory "out" */
    const char *end = path + n, *slash = end;
    while (slash > path && slash[-1] != '/') slash--;
    if (slash == end || (size_t)(slash - path) >= sizeof dir) return;
    if (slash == path) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int k = snprintf(prefix, sizeof prefix, "%.*s.lowbit-tmp.", (int)(end - slash), slash);
    if (k < 0 || (size_t)k >= sizeof prefix) return;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, (size_t)k) != 0) continue;
        char *rest;
        long pid = strtol(e->d_name + k, &rest, 10);
        if (pid <= 0 || *rest != '.') continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* its process may still be writing it */
        fprintf(stderr, "lowbit %s: note: '%s%s%s' is a temporary output left by an earlier run (process %ld is "
                        "gone: killed or crashed); it is safe to delete\n",
                cmd, slash == path ? "" : dir, slash == path ? "" : "/", e->d_name, pid);
    }
    closedir(d);
}

/* ----- signals: only async-signal-safe calls below ----- */

static const char *signal_cmd = "";

static void put(const char *s) { (void)!write(STDERR_FILENO, s, strlen(s)); }

/* cli_remove_on_signal's file: the handler reads it only while armed is 1 */
static char scratch[4096];
static volatile sig_atomic_t scratch_armed;

void cli_remove_on_signal(const char *path)
{
    scratch_armed = 0;
    if (!path || strlen(path) >= sizeof scratch) return;
    memcpy(scratch, path, strlen(path) + 1);
    scratch_armed = 1;
}

static void remove_outputs(void)
{
    lb_output_remove_temps();
    if (scratch_armed) unlink(scratch);
}

static void on_terminate(int sig)
{
    remove_outputs();
    raise(sig); /* SA_RESETHAND made it the default action: delivered on return, the exit status is the signal's */
}

static void on_bus(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    const char *file = lb_mapped_file_at(si->si_addr);
    remove_outputs();
    if (!file) { /* not a mapped input: a real fault, reported by the default action */
        raise(sig);
        return;
    }
    put("lowbit "), put(signal_cmd), put(": '"), put(file);
    put("' changed while it was being read (it is shorter than when it was opened, e.g. truncated or rewritten "
        "in place); nothing was written\n");
    _exit(EXIT_RUNTIME);
}

void cli_install_signal_handlers(const char *cmd)
{
    signal_cmd = cmd;
    static const int terminating[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof terminating / sizeof *terminating; i++) {
        struct sigaction old, sa;
        /* a signal ignored by whoever started us (nohup, a background job) stays ignored */
        if (sigaction(terminating[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_terminate;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(terminating[i], &sa, NULL);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof terminating / sizeof *terminating; i++) sigaddset(&sa.sa_mask, terminating[i]);
    sigaction(SIGBUS, &sa, NULL);
}

void cli_test_pause_after_open(void)
{
    const char *v = getenv("LOWBIT_TEST_PAUSE_AFTER_OPEN");
    double s = v ? atof(v) : 0;
    if (!(s > 0)) return;
    put("lowbit: test pause\n");
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0) {
    }
}
