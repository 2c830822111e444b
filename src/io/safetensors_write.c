/* safetensors writer (see safetensors.h). Byte-deterministic: the header
 * lists __metadata__ first, then tensors by name in byte order, compact
 * JSON escaped as serde_json (the Python package's serializer) escapes it,
 * padded with spaces to a multiple of 8; the data follows in the same order
 * with no gaps. Everything the reader would refuse is refused here first,
 * before any file is created. */
#include "io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

/* ===== Checks on the caller's strings ===== */

/* Well-formed UTF-8 (no overlong forms, surrogates or code points past
 * U+10FFFF): the JSON header must be UTF-8 or readers refuse the file. */
static int valid_utf8(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s;
        if (c < 0x80) {
            s++;
            continue;
        }
        int n;
        unsigned cp, min;
        if (c >= 0xC2 && c <= 0xDF) n = 1, cp = c & 0x1F, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF) n = 2, cp = c & 0x0F, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4) n = 3, cp = c & 0x07, min = 0x10000;
        else return 0;
        for (int k = 1; k <= n; k++) {
            if ((s[k] & 0xC0) != 0x80) return 0; /* also stops at the NUL */
            cp = cp << 6 | (s[k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        s += n + 1;
    }
    return 1;
}

/* ===== A growing text buffer for the header ===== */

typedef struct text_buf {
    char *p;
    size_t len, cap;
    int oom; /* an append failed: the text is incomplete */
} text_buf;

static void put(text_buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = 1;
                return;
            }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void puts_(text_buf *b, const char *s) { put(b, s, strlen(s)); }

static void put_u64(text_buf *b, uint64_t v)
{
    char num[24];
    int n = snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    put(b, num, (size_t)n);
}

/* A JSON string, escaped as serde_json does: the short escapes where JSON
 * has them, \u00xx (lowercase hex) for other control bytes, everything
 * else (UTF-8 included) as is. */
static void put_string(text_buf *b, const char *s)
{
    put(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) snprintf(u, sizeof u, "\\u%04x", c), esc = u;
        }
        if (esc) {
            put(b, run, (size_t)(s - run));
            puts_(b, esc);
            run = s + 1;
        }
    }
    put(b, run, (size_t)(s - run));
    put(b, "\"", 1);
}

/* ===== Order and sizes ===== */

typedef struct out_entry {
    const char *name;     /* tensor name or metadata key */
    size_t i;             /* index in the caller's array */
    uint64_t bytes;       /* tensors: data bytes */
} out_entry;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const out_entry *)a)->name, ((const out_entry *)b)->name);
}

static lb_status check_tensor(const char *path, const lb__st_out_tensor *t, size_t i, uint64_t *bytes)
{
    if (!t->name || !t->name[0])
        return lb__fail(LB_ERR_ARG, "'%s': tensor %zu has %s name", path, i, t->name ? "an empty" : "no");
    if (strcmp(t->name, "__metadata__") == 0)
        return lb__fail(LB_ERR_ARG, "'%s': tensor %zu: '__metadata__' is reserved for the metadata", path, i);
    if (!valid_utf8(t->name))
        return lb__fail(LB_ERR_ARG, "'%s': tensor %zu: the name is not valid UTF-8", path, i);
    const lb_dtype_info *d = lb_dtype_get(t->dtype);
    if (!d || !d->st_name || d->block != 1)
        return lb__fail(LB_ERR_ARG, "'%s': tensor '%.200s': dtype %s has no safetensors name", path, t->name,
                        d ? d->name : "(invalid id)");
    if (t->n_dims < 0 || t->n_dims > LB_MAX_DIMS)
        return lb__fail(LB_ERR_ARG, "'%s': tensor '%.200s': %d dimensions (0 to %d allowed)", path, t->name,
                        t->n_dims, LB_MAX_DIMS);
    uint64_t count = 1;
    for (int k = 0; k < t->n_dims; k++) {
        if (t->shape[k] && count > UINT64_MAX / t->shape[k])
            return lb__fail(LB_ERR_ARG, "'%s': tensor '%.200s': the element count overflows 64 bits", path, t->name);
        count *= t->shape[k];
    }
    if (count > UINT64_MAX / d->block_bytes)
        return lb__fail(LB_ERR_ARG, "'%s': tensor '%.200s': the byte count overflows 64 bits", path, t->name);
    *bytes = count * d->block_bytes;
    return LB_OK;
}

/* Sorts the entries and refuses a name that appears twice. */
static lb_status sort_unique(const char *path, out_entry *e, size_t n, const char *kind)
{
    qsort(e, n, sizeof *e, by_name);
    for (size_t k = 1; k < n; k++)
        if (strcmp(e[k - 1].name, e[k].name) == 0)
            return lb__fail(LB_ERR_ARG, "'%s': %s '%.200s' appears twice", path, kind, e[k].name);
    return LB_OK;
}

/* ===== The header ===== */

static lb_status make_header(const char *path, const lb__st_out_tensor *t, const out_entry *te, size_t n,
                             const char *const *meta_values, const out_entry *me, size_t n_meta, text_buf *b)
{
    put(b, "{", 1);
    if (n_meta) {
        puts_(b, "\"__metadata__\":{");
        for (size_t k = 0; k < n_meta; k++) {
            if (k) put(b, ",", 1);
            put_string(b, me[k].name);
            put(b, ":", 1);
            put_string(b, meta_values[me[k].i]);
        }
        put(b, "}", 1);
    }
    uint64_t at = 0;
    for (size_t k = 0; k < n; k++) {
        const lb__st_out_tensor *x = &t[te[k].i];
        if (k || n_meta) put(b, ",", 1);
        put_string(b, x->name);
        puts_(b, ":{\"dtype\":");
        put_string(b, lb_dtype_get(x->dtype)->st_name);
        puts_(b, ",\"shape\":[");
        for (int d = 0; d < x->n_dims; d++) {
            if (d) put(b, ",", 1);
            put_u64(b, x->shape[d]);
        }
        puts_(b, "],\"data_offsets\":[");
        put_u64(b, at);
        put(b, ",", 1);
        if (te[k].bytes > UINT64_MAX - at)
            return lb__fail(LB_ERR_ARG, "'%s': the tensors' total size overflows 64 bits", path);
        at += te[k].bytes;
        put_u64(b, at);
        puts_(b, "]}");
    }
    put(b, "}", 1);
    /* Spaces up to a multiple of 8, as the Python package pads, so the data
     * section starts 8-aligned. */
    while (!b->oom && b->len % 8) put(b, " ", 1);
    if (b->oom) return lb__fail(LB_ERR_NOMEM, "'%s': out of memory building the header", path);
    if (b->len > LB_ST_MAX_HEADER)
        return lb__fail(LB_ERR_ARG, "'%s': the header would be %zu bytes, over the %u-byte limit readers accept",
                        path, b->len, LB_ST_MAX_HEADER);
    return LB_OK;
}

/* ===== Writing ===== */

void lb__st_stream_abort(lb__st_stream *s)
{
    if (!s) return;
    lb__out_abort(&s->o);
    free(s->te), free(s->offset), free(s->done);
    memset(s, 0, sizeof *s);
}

lb_status lb__st_stream_open(const char *path, const lb__st_out_tensor *t, size_t n, const char *const *meta_keys,
                             const char *const *meta_values, size_t n_meta, lb__st_stream *s)
{
    memset(s, 0, sizeof *s);
    if (!path) return lb__fail(LB_ERR_ARG, "lb__st_stream_open: NULL path");
    if (n && !t) return lb__fail(LB_ERR_ARG, "'%s': %zu tensors but no array", path, n);
    if (n_meta && (!meta_keys || !meta_values))
        return lb__fail(LB_ERR_ARG, "'%s': %zu metadata entries but no key or value array", path, n_meta);
    if (n > SIZE_MAX / sizeof(out_entry) || n_meta > SIZE_MAX / sizeof(out_entry))
        return lb__fail(LB_ERR_ARG, "'%s': too many entries", path);

    out_entry *te = malloc((n ? n : 1) * sizeof *te), *me = malloc((n_meta ? n_meta : 1) * sizeof *me);
    uint64_t *offset = malloc((n ? n : 1) * sizeof *offset);
    uint8_t *done = calloc(n ? n : 1, 1);
    text_buf hdr = {0};
    lb_status st = LB_OK;
    if (!te || !me || !offset || !done) st = lb__fail(LB_ERR_NOMEM, "'%s': out of memory", path);
    for (size_t i = 0; i < n && st == LB_OK; i++) {
        te[i].name = t[i].name, te[i].i = i;
        st = check_tensor(path, &t[i], i, &te[i].bytes);
    }
    for (size_t i = 0; i < n_meta && st == LB_OK; i++) {
        me[i].name = meta_keys[i], me[i].i = i, me[i].bytes = 0;
        if (!meta_keys[i] || !meta_values[i])
            st = lb__fail(LB_ERR_ARG, "'%s': metadata entry %zu has a NULL key or value", path, i);
        else if (!valid_utf8(meta_keys[i]) || !valid_utf8(meta_values[i]))
            st = lb__fail(LB_ERR_ARG, "'%s': metadata entry %zu is not valid UTF-8", path, i);
    }
    if (st == LB_OK) st = sort_unique(path, te, n, "tensor name");
    if (st == LB_OK) st = sort_unique(path, me, n_meta, "metadata key");
    if (st == LB_OK) st = make_header(path, t, te, n, meta_values, me, n_meta, &hdr);
    free(me);
    if (st == LB_OK) {
        /* where each tensor's bytes go: the data section follows the 8-byte
         * length and the header, in the header's (sorted) order */
        uint64_t at = 8 + (uint64_t)hdr.len;
        for (size_t k = 0; k < n; k++) offset[te[k].i] = at, at += te[k].bytes;
        st = lb__out_open(path, &s->o);
    }
    if (st == LB_OK) {
        uint8_t len8[8];
        for (int k = 0; k < 8; k++) len8[k] = (uint8_t)((uint64_t)hdr.len >> (8 * k));
        st = lb__out_write(&s->o, len8, 8);
        if (st == LB_OK) st = lb__out_write(&s->o, hdr.p, hdr.len);
    }
    free(hdr.p);
    s->t = t, s->n = n, s->te = te, s->offset = offset, s->done = done, s->at = 8 + (uint64_t)hdr.len;
    if (st != LB_OK) lb__st_stream_abort(s);
    return st;
}

lb_status lb__st_stream_put(lb__st_stream *s, size_t i, const void *data, uint64_t bytes)
{
    if (!s->te) return lb__fail(LB_ERR_ARG, "lb__st_stream_put: the stream is not open");
    if (i >= s->n) return lb__fail(LB_ERR_ARG, "'%s': no tensor %zu (%zu listed)", s->o.path, i, s->n);
    const char *name = s->t[i].name;
    uint64_t want = 0;
    lb_status st = check_tensor(s->o.path, &s->t[i], i, &want);
    if (st != LB_OK) return st;
    if (s->done[i]) return lb__fail(LB_ERR_ARG, "'%s': tensor '%.200s' written twice", s->o.path, name);
    if (bytes != want)
        return lb__fail(LB_ERR_ARG, "'%s': tensor '%.200s' is %llu bytes, the header says %llu", s->o.path, name,
                        (unsigned long long)bytes, (unsigned long long)want);
    if (bytes > SIZE_MAX)
        return lb__fail(LB_ERR_NOMEM, "'%s': tensor '%.200s' has %llu bytes, more than this machine can address",
                        s->o.path, name, (unsigned long long)bytes);
    if (bytes && !data) return lb__fail(LB_ERR_ARG, "'%s': tensor '%.200s': no data", s->o.path, name);
    /* a seek only when the tensors come out of header order (it flushes the stdio buffer) */
    if (s->at != s->offset[i]) st = lb__out_seek(&s->o, s->offset[i]);
    if (st == LB_OK) st = lb__out_write(&s->o, data, (size_t)bytes);
    if (st != LB_OK) return st;
    s->at = s->offset[i] + bytes;
    s->done[i] = 1;
    return LB_OK;
}

lb_status lb__st_stream_commit(lb__st_stream *s)
{
    if (!s->te) return lb__fail(LB_ERR_ARG, "lb__st_stream_commit: the stream is not open");
    for (size_t i = 0; i < s->n; i++)
        if (!s->done[i]) {
            lb_status st = lb__fail(LB_ERR_ARG, "'%s': tensor '%.200s' was never written", s->o.path, s->t[i].name);
            lb__st_stream_abort(s);
            return st;
        }
    lb_status st = lb__out_commit(&s->o); /* frees o, removing the temporary on failure */
    free(s->te), free(s->offset), free(s->done);
    memset(s, 0, sizeof *s);
    return st;
}

lb_status lb__st_write(const char *path, const lb__st_out_tensor *t, size_t n, const char *const *meta_keys,
                       const char *const *meta_values, size_t n_meta, lb__tensor_fill_fn fill, void *ctx)
{
    if (!path) return lb__fail(LB_ERR_ARG, "lb__st_write: NULL path");
    if (n && (!t || !fill)) return lb__fail(LB_ERR_ARG, "'%s': %zu tensors but no %s", path, n, t ? "fill" : "array");
    lb__st_stream s;
    lb_status st = lb__st_stream_open(path, t, n, meta_keys, meta_values, n_meta, &s);
    if (st != LB_OK) return st;
    /* in header order: one sequential write, one buffer the size of the largest tensor */
    void *buf = NULL;
    size_t cap = 0;
    for (size_t k = 0; k < n && st == LB_OK; k++) {
        size_t i = s.te[k].i;
        uint64_t bytes = s.te[k].bytes;
        if (bytes > SIZE_MAX) {
            st = lb__fail(LB_ERR_NOMEM, "'%s': tensor '%.200s' has %llu bytes, more than this machine can address",
                          path, t[i].name, (unsigned long long)bytes);
            break;
        }
        size_t need = bytes ? (size_t)bytes : 1; /* fill always gets a valid pointer */
        if (need > cap) {
            free(buf); /* no realloc: the old bytes are not needed */
            buf = malloc(need);
            cap = buf ? need : 0;
            if (!buf) {
                st = lb__fail(LB_ERR_NOMEM, "'%s': out of memory for tensor '%.200s' (%llu bytes)", path, t[i].name,
                              (unsigned long long)bytes);
                break;
            }
        }
        st = fill(ctx, i, buf, bytes);
        if (st != LB_OK) {
            char msg[700];
            snprintf(msg, sizeof msg, "%s", lb_last_error());
            st = lb__fail(st, "'%s': tensor '%.200s': %s", path, t[i].name, msg[0] ? msg : "the fill callback failed");
            break;
        }
        st = lb__st_stream_put(&s, i, buf, bytes);
    }
    free(buf);
    if (st == LB_OK) return lb__st_stream_commit(&s);
    lb__st_stream_abort(&s);
    return st;
}
