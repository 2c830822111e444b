/* Mapped inputs and atomically replaced outputs (see file.h). */
#define _GNU_SOURCE /* renameat2: RENAME_NOREPLACE, RENAME_EXCHANGE (glibc 2.28) */
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"
#include "util/sigsafe.h"

lb_status lb__map_file(const char *path, lb__mapped *out)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return lb__fail(LB_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return lb__fail(LB_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return lb__fail(LB_ERR_IO, "'%s' is not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return lb__fail(LB_ERR_IO, "cannot map '%s': %s", path, strerror(e));
        }
        out->data = p;
        out->size = (size_t)st.st_size;
        lb__map_add(p, out->size, path, (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
    }
    close(fd);
    return LB_OK;
}

void lb__unmap_file(lb__mapped *m)
{
    if (m->data) {
        lb__map_forget(m->data);
        munmap((void *)m->data, m->size);
    }
    m->data = NULL, m->size = 0;
}

lb_status lb__read_file(const char *path, size_t max_bytes, char **out, size_t *len)
{
    *out = NULL;
    lb__mapped m;
    lb_status st = lb__map_file(path, &m);
    if (st != LB_OK) return st;
    if (m.size > max_bytes) {
        lb__unmap_file(&m);
        return lb__fail(LB_ERR_PARSE, "'%s' is %zu bytes, more than the %zu this reader accepts", path, m.size,
                        max_bytes);
    }
    char *buf = malloc(m.size + 1);
    if (!buf) {
        lb__unmap_file(&m);
        return lb__fail(LB_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    if (m.size) memcpy(buf, m.data, m.size);
    buf[m.size] = '\0';
    if (len) *len = m.size;
    lb__unmap_file(&m);
    *out = buf;
    return LB_OK;
}

char *lb__path_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (d) memcpy(d, path, n), d[n] = '\0';
    return d;
}

char *lb__path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void out_free(lb__outfile *o)
{
    lb__temp_forget(o->slot);
    free(o->path), free(o->tmp_path);
    o->path = o->tmp_path = NULL;
    o->f = NULL;
    o->slot = -1;
}

/* Temporary names beside path: "path.lowbit-tmp.PID.N", so that one left
 * behind (after SIGKILL or a power cut) says what it is. Created with
 * O_EXCL (or mkdir), so they never clobber anything, and with mode 0666 /
 * 0777 so that the caller's umask decides a new output's permissions, as
 * for any file a program creates. */
static char *temp_name(const char *path, unsigned attempt)
{
    size_t n = strlen(path) + 48;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s.lowbit-tmp.%ld.%u", path, (long)getpid(), attempt);
    return p;
}

/* rename that never replaces: a destination that appeared while the output
 * was written is kept (renameat2 where the kernel has it; else link, which
 * fails on an existing name just as atomically). */
static int rename_noreplace(const char *from, const char *to, int is_dir)
{
#ifdef RENAME_NOREPLACE
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return -1;
#endif
    if (!is_dir) {
        if (link(from, to) == 0) return unlink(from), 0;
        if (errno == EEXIST) return -1;
    }
    struct stat sb;
    if (!is_dir && lstat(to, &sb) == 0) return errno = EEXIST, -1;
    return rename(from, to); /* a directory: replaces at most an empty one */
}

/* One temporary name, registered for signal cleanup before it exists. */
static lb_status make_temp(const char *path, int is_dir, char **tmp, int *slot, int *fd)
{
    static unsigned counter;
    *tmp = NULL, *slot = -1;
    for (unsigned k = 0; k < 1000; k++) {
        char *p = temp_name(path, __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
        if (!p) return lb__fail(LB_ERR_NOMEM, "out of memory");
        int s = lb__temp_add(p, is_dir);
        if (s < 0) {
            free(p);
            return LB_ERR_IO;
        }
        int ok = is_dir ? mkdir(p, 0777) == 0 : (*fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)) >= 0;
        int e = errno;
        if (ok) {
            *tmp = p, *slot = s;
            return LB_OK;
        }
        lb__temp_forget(s);
        free(p);
        if (e != EEXIST)
            return lb__fail(LB_ERR_IO, "cannot create a %s beside '%s': %s", is_dir ? "directory" : "file", path,
                            strerror(e));
    }
    return lb__fail(LB_ERR_IO, "cannot find a free temporary name beside '%s'", path);
}

lb_status lb__out_open(const char *path, lb__outfile *o)
{
    memset(o, 0, sizeof *o);
    o->slot = -1;
    if (!path[0]) return lb__fail(LB_ERR_ARG, "the output path is empty");
    lb__dest d;
    lb_status st = lb__dest_check_file(path, &d);
    if (st != LB_OK) return st;
    size_t n = strlen(path);
    o->path = malloc(n + 1);
    if (!o->path) return lb__fail(LB_ERR_NOMEM, "out of memory");
    memcpy(o->path, path, n + 1);
    o->replace = d.exists;
    int fd = -1;
    if ((st = make_temp(path, 0, &o->tmp_path, &o->slot, &fd)) != LB_OK) {
        out_free(o);
        return st;
    }
    /* the replacement keeps the old file's permissions from the start: a
     * private file is never readable by others, not even half-written */
    if (d.exists && fchmod(fd, (mode_t)d.mode) != 0) {
        int e = errno;
        close(fd);
        unlink(o->tmp_path);
        out_free(o);
        return lb__fail(LB_ERR_IO, "cannot give the new '%s' the old one's mode %o: %s", path, d.mode, strerror(e));
    }
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        int e = errno;
        close(fd);
        unlink(o->tmp_path);
        out_free(o);
        return lb__fail(LB_ERR_IO, "cannot open '%s': %s", path, strerror(e));
    }
    return LB_OK;
}

lb_status lb__out_write(lb__outfile *o, const void *p, size_t n)
{
    if (o->failed) return LB_ERR_IO;
    if (n && fwrite(p, 1, n, o->f) != n) {
        o->failed = 1;
        return lb__fail(LB_ERR_IO, "writing '%s' failed: %s", o->path, strerror(errno));
    }
    if ((o->unsynced += n) >= LB_OUT_WRITEBACK_BYTES) lb__out_writeback(o);
    return LB_OK;
}

uint64_t lb__out_tell(const lb__outfile *o) { return (uint64_t)ftello(o->f); }

void lb__out_writeback(lb__outfile *o)
{
#ifdef SYNC_FILE_RANGE_WRITE
    if (o->failed || fflush(o->f) != 0) return; /* a failed flush fails again, and is reported, at commit */
    uint64_t end = lb__out_tell(o);
    if (end > o->written_back)
        sync_file_range(fileno(o->f), (off_t)o->written_back, (off_t)(end - o->written_back), SYNC_FILE_RANGE_WRITE);
    o->written_back = end, o->unsynced = 0;
#else
    o->unsynced = 0;
#endif
}

lb_status lb__out_seek(lb__outfile *o, uint64_t offset)
{
    if (o->failed) return LB_ERR_IO;
    if (offset > (uint64_t)INT64_MAX || fseeko(o->f, (off_t)offset, SEEK_SET) != 0) {
        o->failed = 1;
        return lb__fail(LB_ERR_IO, "seeking in '%s' failed: %s", o->path, strerror(errno));
    }
    return LB_OK;
}

lb_status lb__out_pad(lb__outfile *o, uint64_t align)
{
    static const uint8_t zeros[64];
    uint64_t at = lb__out_tell(o), pad = (align - at % align) % align;
    lb_status st = LB_OK;
    while (pad && st == LB_OK) {
        size_t k = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        st = lb__out_write(o, zeros, k);
        pad -= k;
    }
    return st;
}

lb_status lb__out_commit(lb__outfile *o)
{
    int bad = o->failed;
    if (!bad && fflush(o->f) != 0) bad = 1;
    if (!bad && fsync(fileno(o->f)) != 0) bad = 1;
    int e = errno;
    if (fclose(o->f) != 0 && !bad) bad = 1, e = errno;
    o->f = NULL;
    int moved = bad ? -1 : o->replace ? rename(o->tmp_path, o->path) : rename_noreplace(o->tmp_path, o->path, 0);
    if (!bad && moved != 0) bad = 1, e = errno;
    if (bad) {
        unlink(o->tmp_path);
        lb_status st = o->failed               ? LB_ERR_IO
                       : !o->replace && e == EEXIST ? lb__fail(LB_ERR_IO, "'%s' appeared while it was being written: "
                                                                        "not replacing it", o->path)
                                               : lb__fail(LB_ERR_IO, "finishing '%s' failed: %s", o->path, strerror(e));
        out_free(o);
        return st;
    }
    out_free(o);
    return LB_OK;
}

void lb__out_abort(lb__outfile *o)
{
    if (o->f) fclose(o->f);
    if (o->tmp_path) unlink(o->tmp_path);
    if (o->path || o->tmp_path) out_free(o);
}

/* ----- output directories ----- */

static void outdir_free(lb__outdir *d)
{
    for (size_t i = 0; i <= LB_OUTDIR_MAX_NAMES; i++) lb__temp_forget(d->slots[i]), d->slots[i] = -1;
    free(d->path), free(d->tmp_path);
    d->path = d->tmp_path = NULL;
}

/* Removes names[] from dir, then dir. */
static void remove_dir(const char *dir, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *p = lb__path_join(dir, names[i]);
        if (p) unlink(p);
        free(p);
    }
    rmdir(dir);
}

lb_status lb__outdir_open(const char *path, const char *const *names, size_t n, lb__outdir *d)
{
    memset(d, 0, sizeof *d);
    for (size_t i = 0; i <= LB_OUTDIR_MAX_NAMES; i++) d->slots[i] = -1;
    if (!path[0]) return lb__fail(LB_ERR_ARG, "the output path is empty");
    lb__dest dest;
    lb_status st = lb__dest_check_dir(path, names, n, &dest);
    if (st != LB_OK) return st;
    d->names = names, d->n = n;
    d->exists = dest.exists, d->empty_dir = dest.empty_dir, d->mode = dest.mode;
    for (size_t i = 0; i < n; i++) d->child_exists[i] = dest.child_exists[i], d->child_mode[i] = dest.child_mode[i];
#ifndef RENAME_EXCHANGE
    if (d->exists && !d->empty_dir)
        return lb__fail(LB_ERR_UNSUPPORTED, "'%s' is not empty, and this system cannot swap directories atomically: "
                                            "remove it first", path);
#endif
    if (!(d->path = strdup(path))) return lb__fail(LB_ERR_NOMEM, "out of memory");
    int fd;
    if ((st = make_temp(path, 1, &d->tmp_path, &d->slots[0], &fd)) != LB_OK) {
        outdir_free(d);
        return st;
    }
    /* its files too (once renamed into it they are no one's temporary),
     * so that a signal leaves the directory empty for rmdir */
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        char *p = lb__path_join(d->tmp_path, names[i]);
        if (!p) st = lb__fail(LB_ERR_NOMEM, "out of memory");
        else if ((d->slots[1 + i] = lb__temp_add(p, 0)) < 0) st = LB_ERR_IO;
        free(p);
    }
    if (st != LB_OK) lb__outdir_abort(d);
    return st;
}

lb_status lb__outdir_commit(lb__outdir *d)
{
    lb_status st = LB_OK;
    /* the old modes, directory and files, before anything moves */
    for (size_t i = 0; i < d->n && st == LB_OK; i++) {
        if (!d->child_exists[i]) continue;
        char *p = lb__path_join(d->tmp_path, d->names[i]);
        if (!p) st = lb__fail(LB_ERR_NOMEM, "out of memory");
        else if (chmod(p, (mode_t)d->child_mode[i]) != 0)
            st = lb__fail(LB_ERR_IO, "cannot set the mode of '%s/%s': %s", d->path, d->names[i], strerror(errno));
        free(p);
    }
    if (st == LB_OK && d->exists && chmod(d->tmp_path, (mode_t)d->mode) != 0)
        st = lb__fail(LB_ERR_IO, "cannot give the new '%s' the old one's mode %o: %s", d->path, d->mode, strerror(errno));
    if (st == LB_OK && (!d->exists || d->empty_dir)) {
        /* rename replaces an empty directory and fails on anything else */
        if ((d->exists ? rename(d->tmp_path, d->path) : rename_noreplace(d->tmp_path, d->path, 1)) != 0)
            st = lb__fail(LB_ERR_IO, "cannot move the new model into '%s': %s", d->path, strerror(errno));
    } else if (st == LB_OK) {
#ifdef RENAME_EXCHANGE
        /* one atomic swap: the old directory comes out under the temporary
         * name, which is then removed as any temporary is */
        if (renameat2(AT_FDCWD, d->tmp_path, AT_FDCWD, d->path, RENAME_EXCHANGE) != 0)
            st = lb__fail(LB_ERR_IO, "cannot swap the new model into '%s': %s", d->path, strerror(errno));
#else
        st = lb__fail(LB_ERR_UNSUPPORTED, "cannot replace the directory '%s' on this system", d->path);
#endif
    }
    remove_dir(d->tmp_path, d->names, d->n); /* the new one on failure, the old one after a swap */
    outdir_free(d);
    return st;
}

void lb__outdir_abort(lb__outdir *d)
{
    if (d->tmp_path) remove_dir(d->tmp_path, d->names, d->n);
    if (d->path || d->tmp_path) outdir_free(d);
}
