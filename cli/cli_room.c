/* Room for a temporary file: the directory must take it, and the disk and
 * the process's file-size limit must hold all of it, checked before the
 * work that fills it starts (a full disk found an hour in loses the hour). */
#include <errno.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli_eval.h"

int cli_check_room(const char *cmd, int json, const char *dir, uint64_t bytes, const char *what)
{
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK | X_OK) != 0)
        return cli_fail(cmd, json, EXIT_USAGE, "bad_argument", "%s goes into '%s', which is not a writable directory",
                        what, dir);
    const double mb = 1e6;
    struct statvfs fs;
    if (statvfs(dir, &fs) == 0 && (uint64_t)fs.f_bavail * fs.f_frsize < bytes)
        return cli_fail(cmd, json, EXIT_RUNTIME, "io", "%s needs %.1f MB (%llu bytes) in '%s', which has %.1f MB "
                        "free: give --tmpdir DIR on a disk with room, or fewer --chunks", what, bytes / mb,
                        (unsigned long long)bytes, dir,
                        (double)fs.f_bavail * fs.f_frsize / mb);
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (uint64_t)rl.rlim_cur < bytes)
        return cli_fail(cmd, json, EXIT_RUNTIME, "io", "%s needs %llu bytes, beyond this process's file size limit of "
                        "%llu bytes (ulimit -f): raise it, or give fewer --chunks", what, (unsigned long long)bytes,
                        (unsigned long long)rl.rlim_cur);
    return EXIT_OK;
}
