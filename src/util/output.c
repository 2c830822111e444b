/* The destination rule (output.h, lowbit.h "Outputs"): the inputs a
 * command registered, the files mapped now, and what is at the path. */
#include "util/output.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"
#include "util/sigsafe.h"

/* The registered inputs: (device, inode) as registered, so "./x", "x" and
 * a symbolic link to x are one file. */
struct guarded {
    unsigned long long dev, ino;
    char *what, *path;
};
static struct guarded *guard;
static size_t n_guard;
static int replace_allowed;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

lb_status lb_output_protect(const char *path, const char *what)
{
    if (!path) return lb__fail(LB_ERR_ARG, "lb_output_protect: path is NULL");
    struct stat sb;
    if (stat(path, &sb) != 0) return LB_OK; /* nothing there to protect (reading it will fail and say so) */
    char *w = strdup(what ? what : "an input"), *p = strdup(path);
    pthread_mutex_lock(&lock);
    struct guarded *grown = w && p ? realloc(guard, (n_guard + 1) * sizeof *guard) : NULL;
    if (grown) {
        guard = grown;
        guard[n_guard++] = (struct guarded){(unsigned long long)sb.st_dev, (unsigned long long)sb.st_ino, w, p};
    }
    pthread_mutex_unlock(&lock);
    if (!grown) {
        free(w), free(p);
        return lb__fail(LB_ERR_NOMEM, "out of memory");
    }
    return LB_OK;
}

void lb_output_allow_replace(int allow)
{
    pthread_mutex_lock(&lock);
    replace_allowed = allow != 0;
    pthread_mutex_unlock(&lock);
}

void lb_output_reset(void)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_guard; i++) free(guard[i].what), free(guard[i].path);
    free(guard);
    guard = NULL, n_guard = 0, replace_allowed = 0;
    pthread_mutex_unlock(&lock);
}

static int may_replace(void)
{
    pthread_mutex_lock(&lock);
    int r = replace_allowed;
    pthread_mutex_unlock(&lock);
    return r;
}

/* The file at path (followed through links) against the registered
 * inputs and the files mapped now. */
static lb_status not_an_input(const char *path, const char *dest)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return LB_OK;
    unsigned long long dev = (unsigned long long)sb.st_dev, ino = (unsigned long long)sb.st_ino;
    lb_status st = LB_OK;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_guard && st == LB_OK; i++)
        if (guard[i].dev == dev && guard[i].ino == ino)
            st = lb__fail(LB_ERR_ARG, "refusing to write '%s': it is the same file as %s ('%s'), an input of this command", dest,
                          guard[i].what, guard[i].path);
    pthread_mutex_unlock(&lock);
    char name[LB_MAP_PATH_MAX];
    if (st == LB_OK && lb__map_find_file(dev, ino, name, sizeof name))
        st = lb__fail(LB_ERR_ARG, "refusing to write '%s': it is '%s', which is being read (mapped)", dest, name);
    return st;
}

/* An existing file that replacing would not break. */
static lb_status replaceable(const char *path, const struct stat *ls)
{
    if (ls->st_nlink > 1)
        return lb__fail(LB_ERR_ARG, "'%s' has %llu hard links: replacing it would leave the other names with the old "
                                    "content; remove them or write elsewhere", path, (unsigned long long)ls->st_nlink);
    if (ls->st_uid != geteuid())
        return lb__fail(LB_ERR_ARG, "'%s' belongs to user %u, not to you (user %u): replacing it would change its "
                                    "owner; write elsewhere", path, (unsigned)ls->st_uid, (unsigned)geteuid());
    return LB_OK;
}

/* What both destination checks do first: an absent path is free (*exists
 * 0); one that exists must not be an input nor a symbolic link (kind:
 * "file" or "directory", for the message). */
static lb_status dest_lstat(const char *path, const char *kind, struct stat *ls, int *exists)
{
    *exists = 0;
    if (lstat(path, ls) != 0)
        return errno == ENOENT ? LB_OK : lb__fail(LB_ERR_IO, "cannot check '%s': %s", path, strerror(errno));
    *exists = 1;
    lb_status st = not_an_input(path, path);
    if (st != LB_OK) return st;
    if (S_ISLNK(ls->st_mode))
        return lb__fail(LB_ERR_ARG, "'%s' is a symbolic link: write to the %s it points to, or remove the link", path,
                        kind);
    return LB_OK;
}

lb_status lb__dest_check_file(const char *path, lb__dest *d)
{
    memset(d, 0, sizeof *d);
    struct stat ls;
    int exists;
    lb_status st = dest_lstat(path, "file", &ls, &exists);
    if (st != LB_OK || !exists) return st;
    if (S_ISDIR(ls.st_mode)) return lb__fail(LB_ERR_ARG, "'%s' is a directory, not a file", path);
    if (!S_ISREG(ls.st_mode)) return lb__fail(LB_ERR_ARG, "'%s' exists and is not a regular file", path);
    if (!may_replace()) return lb__fail(LB_ERR_ARG, "'%s' already exists: not replacing it (--force does)", path);
    if ((st = replaceable(path, &ls)) != LB_OK) return st;
    d->exists = 1, d->mode = (unsigned)(ls.st_mode & 07777);
    return LB_OK;
}

lb_status lb_output_check(const char *path)
{
    if (!path || !path[0]) return lb__fail(LB_ERR_ARG, "the output path is empty");
    lb__dest d;
    return lb__dest_check_file(path, &d);
}

static int listed(const char *name, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0) return (int)i + 1;
    return 0;
}

lb_status lb__dest_check_dir(const char *path, const char *const *names, size_t n, lb__dest *d)
{
    memset(d, 0, sizeof *d);
    if (n > LB_OUTDIR_MAX_NAMES) return lb__fail(LB_ERR_ARG, "an output directory of more than %d files", LB_OUTDIR_MAX_NAMES);
    struct stat ls;
    int exists;
    lb_status st = dest_lstat(path, "directory", &ls, &exists);
    if (st != LB_OK || !exists) return st;
    if (!S_ISDIR(ls.st_mode)) return lb__fail(LB_ERR_ARG, "'%s' exists and is not a directory", path);
    DIR *dir = opendir(path);
    if (!dir) return lb__fail(LB_ERR_IO, "cannot read directory '%s': %s", path, strerror(errno));
    int replace = may_replace(), entries = 0;
    struct dirent *e;
    while (st == LB_OK && (e = readdir(dir))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        entries++;
        int k = listed(e->d_name, names, n);
        if (!replace)
            st = lb__fail(LB_ERR_ARG, "'%s' is a directory that is not empty: not overwriting it (--force replaces "
                                      "one that holds only what lowbit writes there)", path);
        else if (!k)
            st = lb__fail(LB_ERR_ARG, "'%s' holds '%s', which lowbit does not write there: not replacing the "
                                      "directory", path, e->d_name);
        else {
            char *child = malloc(strlen(path) + strlen(e->d_name) + 2);
            if (!child) st = lb__fail(LB_ERR_NOMEM, "out of memory");
            else {
                sprintf(child, "%s/%s", path, e->d_name);
                lb__dest cd;
                st = lb__dest_check_file(child, &cd);
                d->child_exists[k - 1] = cd.exists, d->child_mode[k - 1] = cd.mode;
                free(child);
            }
        }
    }
    closedir(dir);
    if (st == LB_OK && entries && ls.st_uid != geteuid())
        st = lb__fail(LB_ERR_ARG, "'%s' belongs to user %u, not to you (user %u): not replacing it", path,
                      (unsigned)ls.st_uid, (unsigned)geteuid());
    if (st != LB_OK) return st;
    d->exists = 1, d->empty_dir = entries == 0, d->mode = (unsigned)(ls.st_mode & 07777);
    return LB_OK;
}
