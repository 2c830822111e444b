/* lb__jsonw: the JSON text the exporters build config.json,
 * model.safetensors.index.json and hf_quant_config.json from (exporter.h).
 * Commas, newlines and two-space indentation are placed here, so a format
 * only says keys and values; the first allocation failure sticks and is
 * reported once by lb__jsonw_status. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/exporter.h"
#include "util/error.h"

/* Nesting deeper than any config lowbit writes is a bug in the caller. */
#define JSONW_MAX_DEPTH 32

struct lb__jsonw {
    char *buf;
    size_t len, cap;
    int failed;                    /* out of memory (sticky) */
    int misuse;                    /* unbalanced or misplaced call (sticky) */
    int depth;
    int count[JSONW_MAX_DEPTH];    /* values written at each level */
    char kind[JSONW_MAX_DEPTH];    /* '{' or '[' */
    int after_key;                 /* a key was written: its value comes next, on the same line */
};

lb__jsonw *lb__jsonw_new(void) { return calloc(1, sizeof(lb__jsonw)); }

void lb__jsonw_free(lb__jsonw *w)
{
    if (!w) return;
    free(w->buf);
    free(w);
}

static void put(lb__jsonw *w, const char *s, size_t n)
{
    if (w->failed) return;
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n + 1) cap *= 2;
        char *b = realloc(w->buf, cap);
        if (!b) {
            w->failed = 1;
            return;
        }
        w->buf = b, w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

static void puts_(lb__jsonw *w, const char *s) { put(w, s, strlen(s)); }

static void newline(lb__jsonw *w)
{
    put(w, "\n", 1);
    for (int i = 0; i < w->depth; i++) put(w, "  ", 2);
}

/* Before any value or key: the comma and line break its position needs. */
static void before(lb__jsonw *w, int is_key)
{
    if (w->after_key) { /* the value of a key: no comma, same line */
        if (is_key) w->misuse = 1;
        w->after_key = 0;
        return;
    }
    if (w->depth == 0) {
        if (w->len) w->misuse = 1; /* one top-level value only */
        return;
    }
    /* in an object only keys start an entry; in an array no keys */
    if ((w->kind[w->depth - 1] == '{') != is_key) w->misuse = 1;
    if (w->count[w->depth - 1]++) put(w, ",", 1);
    newline(w);
}

static void open_(lb__jsonw *w, char c)
{
    before(w, 0);
    put(w, &c, 1);
    if (w->depth >= JSONW_MAX_DEPTH) {
        w->misuse = 1;
        return;
    }
    w->kind[w->depth] = c;
    w->count[w->depth] = 0;
    w->depth++;
}

void lb__jsonw_object(lb__jsonw *w) { open_(w, '{'); }
void lb__jsonw_array(lb__jsonw *w) { open_(w, '['); }

void lb__jsonw_end(lb__jsonw *w)
{
    if (w->depth == 0 || w->after_key) {
        w->misuse = 1;
        return;
    }
    w->depth--;
    if (w->count[w->depth]) newline(w);
    put(w, w->kind[w->depth] == '{' ? "}" : "]", 1);
}

static void string(lb__jsonw *w, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    put(w, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[7];
        switch (*p) {
        case '"': puts_(w, "\\\""); break;
        case '\\': puts_(w, "\\\\"); break;
        case '\n': puts_(w, "\\n"); break;
        case '\r': puts_(w, "\\r"); break;
        case '\t': puts_(w, "\\t"); break;
        case '\b': puts_(w, "\\b"); break;
        case '\f': puts_(w, "\\f"); break;
        default:
            if (*p < 0x20) { /* the other control characters: \u00XX (bytes >= 0x80 pass: UTF-8) */
                memcpy(e, "\\u00", 4), e[4] = hex[*p >> 4], e[5] = hex[*p & 15], e[6] = 0;
                puts_(w, e);
            } else put(w, (const char *)p, 1);
        }
    }
    put(w, "\"", 1);
}

void lb__jsonw_key(lb__jsonw *w, const char *key)
{
    before(w, 1);
    string(w, key);
    put(w, ": ", 2);
    w->after_key = 1;
}

void lb__jsonw_str(lb__jsonw *w, const char *s)
{
    before(w, 0);
    string(w, s);
}

void lb__jsonw_int(lb__jsonw *w, long long v)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", v);
    before(w, 0);
    puts_(w, b);
}

void lb__jsonw_num(lb__jsonw *w, double v)
{
    char b[40];
    if (!isfinite(v)) { /* JSON has no NaN or infinity: a caller bug, made visible */
        w->misuse = 1;
        snprintf(b, sizeof b, "null");
    } else {
        /* the shortest %g that reads back to v exactly */
        for (int p = 1; p <= 17; p++) {
            snprintf(b, sizeof b, "%.*g", p, v);
            if (strtod(b, NULL) == v) break;
        }
        /* keep it a float to Python's json: 1 -> 1.0 (an int would change the value's type) */
        if (!strpbrk(b, ".eEn")) strncat(b, ".0", sizeof b - strlen(b) - 1);
    }
    before(w, 0);
    puts_(w, b);
}

void lb__jsonw_bool(lb__jsonw *w, int v)
{
    before(w, 0);
    puts_(w, v ? "true" : "false");
}

void lb__jsonw_null(lb__jsonw *w)
{
    before(w, 0);
    puts_(w, "null");
}

void lb__jsonw_raw(lb__jsonw *w, const char *json)
{
    before(w, 0);
    puts_(w, json);
}

lb_status lb__jsonw_status(const lb__jsonw *w)
{
    if (!w || w->failed) return lb__fail(LB_ERR_NOMEM, "out of memory writing JSON");
    if (w->misuse || w->depth || w->after_key)
        return lb__fail(LB_ERR_ARG, "JSON writer: unbalanced or misplaced key/value (depth %d)", w->depth);
    return LB_OK;
}

const char *lb__jsonw_text(const lb__jsonw *w, size_t *len)
{
    if (len) *len = w->buf ? w->len : 0;
    return w->buf ? w->buf : "";
}
