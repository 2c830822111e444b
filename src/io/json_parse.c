/* The strict JSON reader (see json.h), in two passes over the text.
 *
 * Pass 1 checks everything and measures: the child count of each array
 * and object (in the order they open) and the exact bytes the tree needs.
 * Pass 2 allocates that once and fills it, writing each container's
 * children straight into their final array. Reading twice costs a little
 * time but no scratch copies, so peak memory is the tree itself plus one
 * word per container; and a half-built tree never has to be unwound.
 * Pass 2 can only fail on a duplicate key (checked where the keys are
 * decoded) or on the out-of-memory paths. */
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/json_internal.h"
#include "util/error.h"

/* Node arrays, key arrays and indexes are carved from one region at this
 * alignment; strings and number texts from a second, byte-aligned one. */
#define ALIGN 8
_Static_assert(sizeof(lb__json) % ALIGN == 0, "node arrays must keep the alignment");
_Static_assert(sizeof(lb__json_index) % ALIGN == 0, "the keys array follows the index header");
_Static_assert(_Alignof(lb__json) <= ALIGN && _Alignof(lb__json_index) <= ALIGN, "ALIGN too small");

typedef struct parser {
    const unsigned char *s; /* the text (not NUL-terminated) */
    size_t len, pos;
    const char *what;       /* names the input in messages */
    int build;              /* 0: pass 1 (check and measure), 1: pass 2 (fill) */
    size_t *counts;         /* child count of each container, in opening order */
    size_t n_counts, cap_counts, next_count;
    size_t node_bytes;      /* pass 1: total of the aligned region */
    size_t text_bytes;      /* pass 1: total of the string region */
    char *node_next;        /* pass 2: bump pointers into the two regions */
    char *text_next;
    uint64_t k0, k1;        /* this document's hash key */
} parser;

/* ===== Error messages ===== */

static lb_status syntax_error(const parser *p, size_t off, const char *fmt, ...) LB__PRINTF(3, 4);
static lb_status syntax_error(const parser *p, size_t off, const char *fmt, ...)
{
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    if (off > p->len) off = p->len;
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < off; i++)
        if (p->s[i] == '\n') line++, line_start = i + 1;
    return lb__fail(LB_ERR_PARSE, "%.300s: line %zu, column %zu (byte %zu): %s", p->what, line, off - line_start + 1,
                    off, reason);
}

static lb_status out_of_memory(const parser *p, size_t bytes)
{
    return lb__fail(LB_ERR_NOMEM, "%.300s: out of memory (%zu bytes for a %zu-byte document)", p->what, bytes, p->len);
}

/* What sits at off, for "expected X, found Y": a quoted character, a byte
 * in hex, or the end of the input, with a hint for the usual non-JSON. */
typedef struct found_text {
    char s[64];
} found_text;

static found_text found_at(const parser *p, size_t off)
{
    found_text f;
    if (off >= p->len) {
        snprintf(f.s, sizeof f.s, "end of input");
        return f;
    }
    unsigned c = p->s[off];
    if (c == '/') snprintf(f.s, sizeof f.s, "'/' (comments are not allowed)");
    else if (c == '\'') snprintf(f.s, sizeof f.s, "''' (single quotes are not allowed)");
    else if (c > 0x20 && c < 0x7F) snprintf(f.s, sizeof f.s, "'%c'", (char)c);
    else snprintf(f.s, sizeof f.s, "byte 0x%02X", c);
    return f;
}

/* A key for a message: quoted, at most 80 bytes, anything unprintable as \xNN. */
typedef struct key_text {
    char s[4 * 80 + 8];
} key_text;

static key_text printable_key(const char *key, size_t len)
{
    key_text k;
    size_t w = 0;
    k.s[w++] = '"';
    for (size_t i = 0; i < len && i < 80; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') k.s[w++] = (char)c;
        else w += (size_t)snprintf(k.s + w, sizeof k.s - w, "\\x%02X", c);
    }
    if (len > 80) k.s[w++] = '.', k.s[w++] = '.', k.s[w++] = '.';
    k.s[w++] = '"';
    k.s[w] = '\0';
    return k;
}

/* ===== Lexical pieces ===== */

static void skip_ws(parser *p)
{
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int is_digit(unsigned c) { return c >= '0' && c <= '9'; }
static int is_word(unsigned c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

static int hex4(const unsigned char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = s[i], d;
        if (is_digit(c)) d = c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') d = (c | 0x20) - 'a' + 10;
        else return 0;
        v = v << 4 | d;
    }
    *out = v;
    return 1;
}

/* Length of the well-formed UTF-8 sequence at s (avail bytes left), or 0.
 * The ranges are RFC 3629's: they exclude overlong forms, the surrogates
 * D800-DFFF and anything above U+10FFFF. */
static size_t utf8_length(const unsigned char *s, size_t avail)
{
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t n;
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0; /* a continuation byte, or an overlong 2-byte lead */
    if (c < 0xE0) n = 2;
    else if (c < 0xF0) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c < 0xF5) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    if (avail < n || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return n;
}

static size_t utf8_encode(unsigned cp, char *out)
{
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 0x3F)), out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The string starting at the '"' at p->pos. Pass 1 checks it and adds its
 * decoded size to text_bytes; pass 2 decodes it into the string region and
 * points *out there. *out_len gets the decoded byte count either way. */
static lb_status parse_string(parser *p, const char **out, size_t *out_len)
{
    const unsigned char *s = p->s;
    size_t open = p->pos, i = open + 1, n = p->len, w = 0;
    char *dst = p->build ? p->text_next : NULL;
    for (;;) {
        size_t run = i; /* the common case: a run of plain ASCII */
        while (i < n && s[i] >= 0x20 && s[i] < 0x80 && s[i] != '"' && s[i] != '\\') i++;
        if (dst) memcpy(dst + w, s + run, i - run);
        w += i - run;
        if (i >= n) return syntax_error(p, open, "unterminated string (no closing '\"' before the end of input)");
        unsigned c = s[i];
        if (c == '"') break;
        if (c < 0x20)
            return syntax_error(p, i, "control character 0x%02X in a string (it must be escaped)", c);
        if (c >= 0x80) {
            size_t k = utf8_length(s + i, n - i);
            if (k == 0) return syntax_error(p, i, "invalid UTF-8 sequence starting with byte 0x%02X in a string", c);
            if (dst) memcpy(dst + w, s + i, k);
            w += k, i += k;
            continue;
        }
        /* a backslash */
        if (i + 1 >= n) return syntax_error(p, open, "unterminated string (no closing '\"' before the end of input)");
        unsigned e = s[i + 1], cp;
        char one = 0;
        switch (e) {
        case '"': one = '"'; break;
        case '\\': one = '\\'; break;
        case '/': one = '/'; break;
        case 'b': one = '\b'; break;
        case 'f': one = '\f'; break;
        case 'n': one = '\n'; break;
        case 'r': one = '\r'; break;
        case 't': one = '\t'; break;
        case 'u':
            if (n - i < 6 || !hex4(s + i + 2, &cp))
                return syntax_error(p, i, "invalid escape: \\u must be followed by 4 hex digits");
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return syntax_error(p, i, "invalid escape: lone low surrogate \\u%04X", cp);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (n - i < 12 || s[i + 6] != '\\' || s[i + 7] != 'u' || !hex4(s + i + 8, &lo) || lo < 0xDC00 ||
                    lo > 0xDFFF)
                    return syntax_error(p, i, "invalid escape: high surrogate \\u%04X is not followed by a low "
                                              "surrogate escape", cp);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
            i += 6;
            if (dst) w += utf8_encode(cp, dst + w);
            else w += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            continue;
        default:
            if (e > 0x20 && e < 0x7F) return syntax_error(p, i, "invalid escape '\\%c' in a string", (char)e);
            return syntax_error(p, i, "invalid escape: '\\' followed by byte 0x%02X in a string", e);
        }
        if (dst) dst[w] = one;
        w++, i += 2;
    }
    p->pos = i + 1;
    *out_len = w;
    if (dst) {
        dst[w] = '\0';
        *out = dst;
        p->text_next += w + 1;
    } else {
        p->text_bytes += w + 1;
    }
    return LB_OK;
}

/* ===== Numbers ===== */

static lb_status number_value(const parser *p, const char *text, size_t len, int is_int, double *out)
{
    size_t neg = text[0] == '-';
    if (is_int && len - neg <= 15) { /* below 2^53: exact without strtod */
        uint64_t u = 0;
        for (size_t i = neg; i < len; i++) u = u * 10 + (uint64_t)(text[i] - '0');
        *out = neg ? -(double)u : (double)u;
        return LB_OK;
    }
    char *end;
    *out = strtod(text, &end); /* correctly rounded; +-HUGE_VAL on overflow, which we keep */
    if (end == text + len) return LB_OK;
    /* Only a program that changed LC_NUMERIC gets here: strtod wants that
     * locale's decimal point instead of '.'. */
    const char *dp = localeconv()->decimal_point;
    size_t dl = strlen(dp);
    char *copy = malloc(len + dl + 1);
    if (!copy) return out_of_memory(p, len + dl + 1);
    size_t w = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '.') memcpy(copy + w, dp, dl), w += dl;
        else copy[w++] = text[i];
    }
    copy[w] = '\0';
    *out = strtod(copy, &end);
    int ok = end == copy + w;
    free(copy);
    if (!ok) return syntax_error(p, p->pos, "the C library could not convert this number");
    return LB_OK;
}

/* -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? at p->pos. */
static lb_status parse_number(parser *p, lb__json *v)
{
    const unsigned char *s = p->s;
    size_t start = p->pos, i = start, n = p->len;
    int is_int = 1;
    if (s[i] == '-') i++;
    if (i >= n || !is_digit(s[i])) return syntax_error(p, i, "expected a digit after '-', found %s", found_at(p, i).s);
    if (s[i] == '0') {
        i++;
        if (i < n && is_digit(s[i])) return syntax_error(p, start, "invalid number: leading zeros are not allowed");
    } else {
        while (i < n && is_digit(s[i])) i++;
    }
    if (i < n && s[i] == '.') {
        i++, is_int = 0;
        if (i >= n || !is_digit(s[i]))
            return syntax_error(p, i, "invalid number: expected a digit after the decimal point, found %s",
                                found_at(p, i).s);
        while (i < n && is_digit(s[i])) i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++, is_int = 0;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || !is_digit(s[i]))
            return syntax_error(p, i, "invalid number: expected a digit in the exponent, found %s", found_at(p, i).s);
        while (i < n && is_digit(s[i])) i++;
    }
    size_t len = i - start;
    v->type = LB_JSON_NUMBER;
    v->num_len = len;
    if (!p->build) {
        p->text_bytes += len + 1;
    } else {
        char *t = p->text_next;
        memcpy(t, s + start, len);
        t[len] = '\0';
        p->text_next += len + 1;
        v->str = t;
        lb_status st = number_value(p, t, len, is_int, &v->number);
        if (st != LB_OK) return st;
    }
    p->pos = i;
    return LB_OK;
}

/* ===== Values ===== */

/* Something that cannot start a value: say what it looks like. */
static lb_status not_a_value(const parser *p)
{
    size_t at = p->pos, end = at;
    unsigned c = p->s[at];
    if (c == '+') return syntax_error(p, at, "invalid number: a leading '+' is not allowed");
    if (c == '.') return syntax_error(p, at, "invalid number: a digit must come before the decimal point");
    if (c == '-' || is_word(c)) {
        end = at + 1;
        while (end < p->len && end - at < 24 && (is_word(p->s[end]) || is_digit(p->s[end]) || p->s[end] == '_')) end++;
        const char *w = (const char *)p->s + at;
        int len = (int)(end - at);
        if ((len == 3 && memcmp(w, "NaN", 3) == 0) || (len == 8 && memcmp(w, "Infinity", 8) == 0) ||
            (len == 9 && memcmp(w, "-Infinity", 9) == 0))
            return syntax_error(p, at, "invalid literal '%.*s': NaN and Infinity are not JSON numbers", len, w);
        return syntax_error(p, at, "invalid literal '%.*s' (expected true, false, null, a number, a string, an "
                                   "array or an object)", len, w);
    }
    return syntax_error(p, at, "expected a value, found %s", found_at(p, at).s);
}

static lb_status parse_literal(parser *p, lb__json *v, const char *word, lb__json_type type)
{
    size_t wl = strlen(word), at = p->pos;
    if (p->len - at < wl || memcmp(p->s + at, word, wl) != 0) return not_a_value(p);
    if (at + wl < p->len && (is_word(p->s[at + wl]) || is_digit(p->s[at + wl]))) return not_a_value(p); /* "truex" */
    p->pos += wl;
    v->type = type;
    return LB_OK;
}

static lb_status parse_value(parser *p, lb__json *v, int depth);

/* Opens a container: checks depth, steps past the bracket, and claims its
 * slot in the counts (pass 1 appends one; pass 2 reads the next). */
static lb_status open_container(parser *p, int depth, size_t *slot)
{
    if (depth > LB_JSON_MAX_DEPTH)
        return syntax_error(p, p->pos, "nesting too deep: more than %d arrays and objects inside one another",
                            LB_JSON_MAX_DEPTH);
    p->pos++;
    if (p->build) {
        if (p->next_count >= p->n_counts) return syntax_error(p, p->pos, "internal error: container count mismatch");
        *slot = p->next_count++;
        return LB_OK;
    }
    if (p->n_counts == p->cap_counts) {
        size_t cap = p->cap_counts ? 2 * p->cap_counts : 64;
        size_t *c = realloc(p->counts, cap * sizeof *c);
        if (!c) return out_of_memory(p, cap * sizeof *c);
        p->counts = c, p->cap_counts = cap;
    }
    *slot = p->n_counts++;
    p->counts[*slot] = 0;
    return LB_OK;
}

static void *node_alloc(parser *p, size_t bytes)
{
    void *r = p->node_next;
    p->node_next += bytes;
    return r;
}

static lb_status parse_array(parser *p, lb__json *v, int depth)
{
    size_t slot, n = 0, expect = 0;
    lb_status st = open_container(p, depth, &slot);
    if (st != LB_OK) return st;
    lb__json *items = NULL, scratch;
    if (p->build && (expect = p->counts[slot]) > 0) items = node_alloc(p, expect * sizeof *items);
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
    } else {
        for (;;) {
            if (p->build && n >= expect) return syntax_error(p, p->pos, "internal error: array count mismatch");
            st = parse_value(p, p->build ? &items[n] : &scratch, depth);
            if (st != LB_OK) return st;
            n++;
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == ']') {
                p->pos++;
                break;
            }
            if (p->pos >= p->len || p->s[p->pos] != ',')
                return syntax_error(p, p->pos, "expected ',' or ']' after an array element, found %s",
                                    found_at(p, p->pos).s);
            p->pos++;
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == ']')
                return syntax_error(p, p->pos, "trailing comma before ']' (expected another value)");
        }
    }
    if (!p->build) {
        p->counts[slot] = n;
        p->node_bytes += n * sizeof(lb__json);
    } else if (n != expect) {
        return syntax_error(p, p->pos, "internal error: array count mismatch");
    }
    v->type = LB_JSON_ARRAY;
    v->len = n;
    v->items = items;
    return LB_OK;
}

/* Bytes of an object's keys, key lengths and (if it gets one) index. */
static size_t index_slots(size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

static size_t object_extra_bytes(size_t n)
{
    if (n == 0) return 0;
    size_t b = n * (sizeof(const char *) + sizeof(size_t));
    if (n >= LB__JSON_INDEX_MIN)
        b += sizeof(lb__json_index) + (index_slots(n) * sizeof(uint32_t) + ALIGN - 1) / ALIGN * ALIGN;
    return b;
}

/* The offset of the key whose value starts at value_off: walk back over
 * the ':' and the key string. Only for the duplicate-key message, so only
 * on text pass 1 already found valid (an unescaped '"' inside a key is
 * impossible, so the first '"' met with an even backslash run opens it). */
static size_t key_offset_before(const parser *p, size_t value_off)
{
    size_t i = value_off;
    while (i > 0 && p->s[i - 1] != ':') i--;
    if (i == 0) return 0;
    i--; /* the ':' */
    while (i > 0 && p->s[i - 1] != '"') i--;
    if (i == 0) return 0;
    i--; /* the closing quote */
    for (;;) {
        while (i > 0 && p->s[i - 1] != '"') i--;
        if (i == 0) return 0;
        size_t q = i - 1, bs = 0;
        while (q > bs && p->s[q - 1 - bs] == '\\') bs++;
        if (bs % 2 == 0) return q;
        i = q;
    }
}

/* Pass 2: records member i's key, refusing a repeat. */
static lb_status add_key(parser *p, const lb__json *obj, lb__json_index *ix, size_t i, size_t key_off)
{
    const char *key = obj->keys[i];
    size_t len = obj->key_lens[i], first = SIZE_MAX;
    if (ix) {
        size_t h = (size_t)lb__json_hash(ix->k0, ix->k1, key, len) & ix->mask;
        for (; ix->slots[h]; h = (h + 1) & ix->mask) {
            size_t j = ix->slots[h] - 1;
            if (obj->key_lens[j] == len && memcmp(obj->keys[j], key, len) == 0) {
                first = j;
                break;
            }
        }
        if (first == SIZE_MAX) ix->slots[h] = (uint32_t)(i + 1);
    } else {
        for (size_t j = 0; j < i && first == SIZE_MAX; j++)
            if (obj->key_lens[j] == len && memcmp(obj->keys[j], key, len) == 0) first = j;
    }
    if (first == SIZE_MAX) return LB_OK;
    return syntax_error(p, key_off, "duplicate key %s in one object (first at byte %zu)", printable_key(key, len).s,
                        key_offset_before(p, obj->items[first].offset));
}

static lb_status parse_object(parser *p, lb__json *v, int depth)
{
    size_t slot, n = 0, expect = 0;
    lb_status st = open_container(p, depth, &slot);
    if (st != LB_OK) return st;
    lb__json scratch;
    lb__json_index *ix = NULL;
    if (p->build && (expect = p->counts[slot]) > 0) {
        if (expect > UINT32_MAX / 4) return syntax_error(p, p->pos - 1, "object has too many members (%zu)", expect);
        v->items = node_alloc(p, expect * sizeof(lb__json));
        if (expect >= LB__JSON_INDEX_MIN) {
            ix = node_alloc(p, sizeof *ix);
            ix->k0 = p->k0, ix->k1 = p->k1, ix->mask = index_slots(expect) - 1;
        }
        v->keys = node_alloc(p, expect * sizeof(const char *));
        v->key_lens = node_alloc(p, expect * sizeof(size_t));
        if (ix) ix->slots = node_alloc(p, (index_slots(expect) * sizeof(uint32_t) + ALIGN - 1) / ALIGN * ALIGN);
    }
    v->type = LB_JSON_OBJECT; /* add_key reads the members through v */
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
    } else {
        for (;;) {
            if (p->pos >= p->len || p->s[p->pos] != '"') {
                if (n > 0 && p->pos < p->len && p->s[p->pos] == '}')
                    return syntax_error(p, p->pos, "trailing comma before '}' (expected another member)");
                return syntax_error(p, p->pos, "expected a string key%s, found %s", n ? " after ','" : " or '}'",
                                    found_at(p, p->pos).s);
            }
            if (p->build && n >= expect) return syntax_error(p, p->pos, "internal error: object count mismatch");
            size_t key_off = p->pos, key_len;
            const char *key = NULL;
            st = parse_string(p, &key, &key_len);
            if (st != LB_OK) return st;
            if (p->build) {
                v->keys[n] = key, v->key_lens[n] = key_len;
                st = add_key(p, v, ix, n, key_off);
                if (st != LB_OK) return st;
            }
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':')
                return syntax_error(p, p->pos, "expected ':' after an object key, found %s", found_at(p, p->pos).s);
            p->pos++;
            st = parse_value(p, p->build ? &v->items[n] : &scratch, depth);
            if (st != LB_OK) return st;
            n++;
            skip_ws(p);
            if (p->pos < p->len && p->s[p->pos] == '}') {
                p->pos++;
                break;
            }
            if (p->pos >= p->len || p->s[p->pos] != ',')
                return syntax_error(p, p->pos, "expected ',' or '}' after an object member, found %s",
                                    found_at(p, p->pos).s);
            p->pos++;
            skip_ws(p);
        }
    }
    if (!p->build) {
        p->counts[slot] = n;
        p->node_bytes += n * sizeof(lb__json) + object_extra_bytes(n);
    } else if (n != expect) {
        return syntax_error(p, p->pos, "internal error: object count mismatch");
    }
    v->len = n;
    return LB_OK;
}

static lb_status parse_value(parser *p, lb__json *v, int depth)
{
    skip_ws(p);
    memset(v, 0, sizeof *v);
    v->offset = p->pos;
    if (p->pos >= p->len) return syntax_error(p, p->pos, "unexpected end of input, expected a value");
    switch (p->s[p->pos]) {
    case '{': return parse_object(p, v, depth + 1);
    case '[': return parse_array(p, v, depth + 1);
    case '"': v->type = LB_JSON_STRING; return parse_string(p, &v->str, &v->len);
    case 't': return parse_literal(p, v, "true", LB_JSON_TRUE);
    case 'f': return parse_literal(p, v, "false", LB_JSON_FALSE);
    case 'n': return parse_literal(p, v, "null", LB_JSON_NULL);
    case '-':
        if (p->pos + 1 < p->len && is_word(p->s[p->pos + 1])) return not_a_value(p); /* -Infinity */
        return parse_number(p, v);
    default:
        if (is_digit(p->s[p->pos])) return parse_number(p, v);
        return not_a_value(p);
    }
}

/* ===== Entry points ===== */

/* A per-document hash key. It only has to be unpredictable from outside
 * (address-space layout and time), not secret; lookups never depend on it. */
static void hash_key(const void *a, const void *b, uint64_t *k0, uint64_t *k1)
{
    uint64_t x = (uint64_t)(uintptr_t)a ^ (uint64_t)time(NULL) << 32 ^ (uint64_t)clock();
    uint64_t y = (uint64_t)(uintptr_t)b ^ (uint64_t)(uintptr_t)&hash_key;
    for (int i = 0; i < 2; i++) { /* splitmix64 finaliser, twice */
        x += 0x9E3779B97F4A7C15ull, x = (x ^ x >> 30) * 0xBF58476D1CE4E5B9ull, x = (x ^ x >> 27) * 0x94D049BB133111EBull;
        x ^= x >> 31;
        y ^= x;
        y = (y ^ y >> 30) * 0xBF58476D1CE4E5B9ull, y = (y ^ y >> 27) * 0x94D049BB133111EBull, y ^= y >> 31;
    }
    *k0 = x, *k1 = y;
}

lb_status lb__json_parse(const char *text, size_t len, const char *what, lb__json **out)
{
    if (!out) return lb__fail(LB_ERR_ARG, "lb__json_parse: out is NULL");
    *out = NULL;
    if (!what) what = "JSON";
    if (!text && len > 0) return lb__fail(LB_ERR_ARG, "%.300s: text is NULL but len is %zu", what, len);
    /* Keeps the size sums below from overflowing (the tree is < 64 bytes per input byte). */
    if (len > SIZE_MAX / 64) return lb__fail(LB_ERR_ARG, "%.300s: %zu bytes is too large", what, len);
    parser p = {.s = (const unsigned char *)text, .len = len, .what = what};
    lb__json root;
    lb_status st;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        st = syntax_error(&p, 0, "a UTF-8 byte order mark is not allowed at the start of JSON text");
    else
        st = parse_value(&p, &root, 0);
    if (st == LB_OK) {
        skip_ws(&p);
        if (p.pos < len)
            st = syntax_error(&p, p.pos, "unexpected %s after the JSON value (only whitespace may follow)",
                              found_at(&p, p.pos).s);
    }
    char *base = NULL;
    if (st == LB_OK) {
        size_t total = sizeof(lb__json) + p.node_bytes + p.text_bytes;
        if (total > LB_JSON_MAX_TREE)
            st = lb__fail(LB_ERR_PARSE, "%.300s: the document's %zu bytes would take %zu bytes of tree, more than the "
                                        "%u MiB a JSON input may use", what, len, total, LB_JSON_MAX_TREE >> 20);
        else if (!(base = calloc(1, total))) /* zeroed: empty index slots */
            st = out_of_memory(&p, total);
    }
    if (st == LB_OK) {
        p.build = 1, p.pos = 0;
        p.node_next = base + sizeof(lb__json);
        p.text_next = p.node_next + p.node_bytes;
        hash_key(base, &p, &p.k0, &p.k1);
        st = parse_value(&p, (lb__json *)(void *)base, 0);
        if (st == LB_OK && (p.node_next != base + sizeof(lb__json) + p.node_bytes ||
                            p.text_next != base + sizeof(lb__json) + p.node_bytes + p.text_bytes))
            st = syntax_error(&p, 0, "internal error: the two passes disagree on the size of the tree");
    }
    free(p.counts);
    if (st != LB_OK) {
        free(base);
        return st;
    }
    *out = (lb__json *)(void *)base;
    return LB_OK;
}

void lb__json_free(lb__json *root) { free(root); }
