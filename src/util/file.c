/* Mapped inputs and atomically replaced outputs (see file.h). */
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"

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
    }
    close(fd);
    return LB_OK;
}

void lb__unmap_file(lb__mapped *m)
{
    if (m->data) munmap((void *)m->data, m->size);
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

char *lb__path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void out_free(lb__outfile *o)
{
    free(o->path), free(o->tmp_path);
    o->path = o->tmp_path = NULL;
    o->f = NULL;
}

/* Temporary names beside path: "path.tmp.PID.N". Created with O_EXCL (or
 * mkdir), so they never clobber anything, and with mode 0666 / 0777 so
 * that the caller's umask decides the final permissions, as for any file
 * a program creates. */
static char *temp_name(const char *path, unsigned attempt)
{
    size_t n = strlen(path) + 48;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s.tmp.%ld.%u", path, (long)getpid(), attempt);
    return p;
}

lb_status lb__make_temp_dir(const char *path, char **out)
{
    static unsigned counter;
    *out = NULL;
    for (unsigned k = 0; k < 1000; k++) {
        char *p = temp_name(path, counter++);
        if (!p) return lb__fail(LB_ERR_NOMEM, "out of memory");
        if (mkdir(p, 0777) == 0) {
            *out = p;
            return LB_OK;
        }
        int e = errno;
        free(p);
        if (e != EEXIST) return lb__fail(LB_ERR_IO, "cannot create a directory beside '%s': %s", path, strerror(e));
    }
    return lb__fail(LB_ERR_IO, "cannot find a free temporary name beside '%s'", path);
}

lb_status lb__out_open(const char *path, lb__outfile *o)
{
    static unsigned counter;
    memset(o, 0, sizeof *o);
    size_t n = strlen(path);
    o->path = malloc(n + 1);
    if (!o->path) return lb__fail(LB_ERR_NOMEM, "out of memory");
    memcpy(o->path, path, n + 1);
    int fd = -1, e = EEXIST;
    for (unsigned k = 0; k < 1000 && fd < 0 && e == EEXIST; k++) {
        free(o->tmp_path);
        if (!(o->tmp_path = temp_name(path, counter++))) {
            out_free(o);
            return lb__fail(LB_ERR_NOMEM, "out of memory");
        }
        fd = open(o->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        e = fd < 0 ? errno : 0;
    }
    if (fd < 0) {
        out_free(o);
        return lb__fail(LB_ERR_IO, "cannot create a file beside '%s': %s", path, strerror(e));
    }
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        e = errno;
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
    return LB_OK;
}

uint64_t lb__out_tell(const lb__outfile *o) { return (uint64_t)ftello(o->f); }

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
    if (!bad && rename(o->tmp_path, o->path) != 0) bad = 1, e = errno;
    if (bad) {
        unlink(o->tmp_path);
        lb_status st = o->failed ? LB_ERR_IO : lb__fail(LB_ERR_IO, "finishing '%s' failed: %s", o->path, strerror(e));
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
    out_free(o);
}
