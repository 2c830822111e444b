/* What every command that writes shares: its inputs registered once (the
 * library then refuses any output onto them), --force, and the signal
 * handlers that remove temporary outputs (main.c installs them). */
#ifndef LOWBIT_CLI_OUTPUT_H
#define LOWBIT_CLI_OUTPUT_H

#include "cli.h"

/* Registers an input: `what` names it in the refusal ("the --text file").
 * NULL path: nothing. Returns EXIT_OK or the reported exit code. */
int cli_protect(const char *cmd, int json, const char *path, const char *what);
/* The destination rule for a file, before any work: EXIT_OK or, after
 * reporting, EXIT_USAGE (a clash or an existing file without --force) or
 * EXIT_RUNTIME. */
int cli_output_check(const char *cmd, int json, const char *path);
/* Says on stderr which temporaries of an earlier run lie beside path
 * ("OUT.lowbit-tmp.PID.N" of a process that is gone: left by SIGKILL or a
 * crash, safe to delete); removes nothing. */
void cli_note_leftovers(const char *cmd, const char *path);
/* The usage line every writing command shows for --force. */
#define CLI_FORCE_HELP \
    "An existing output is refused unless --force (which keeps its permissions, and still refuses\n" \
    "one of the command's inputs, a hard link or another user's file).\n"

/* SIGINT, SIGTERM, SIGHUP: remove the temporary outputs in progress, then
 * die of the signal; SIGBUS inside a mapped input: say which file shrank,
 * remove them, exit 1. cmd names the command in that message. */
void cli_install_signal_handlers(const char *cmd);

/* A finished file the command removes itself at the end (compare's base
 * distributions): removed by the signal handlers too. NULL forgets it. */
void cli_remove_on_signal(const char *path);

/* Test hook: sleeps LOWBIT_TEST_PAUSE_AFTER_OPEN seconds (when set) once a
 * command has opened (mapped) its model, so a test can truncate it. */
void cli_test_pause_after_open(void);

#endif
