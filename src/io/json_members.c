/* The members of a top-level JSON object one at a time (see json.h,
 * lb__json_each_member). This file only finds where each key and value
 * begin and end and checks the object's own punctuation; the strict parser
 * reads every key and value, so nothing here decides what is valid JSON
 * inside them. */
#include <string.h>

#include "io/json.h"
#include "util/error.h"

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const unsigned char *s, size_t len, size_t i)
{
    while (i < len && is_ws(s[i])) i++;
    return i;
}

/* End (one past the closing quote) of the string starting at s[i] == '"';
 * 0 if it does not end. Escapes are skipped, not judged. */
static size_t string_end(const unsigned char *s, size_t len, size_t i)
{
    for (i++; i < len; i++) {
        if (s[i] == '\\') i++;
        else if (s[i] == '"') return i + 1;
    }
    return 0;
}

/* End of the value starting at s[i]: an array or object up to its matching
 * bracket (strings skipped, nesting deeper than max_depth refused), a
 * string up to its quote, anything else up to the next delimiter. 0 when
 * it does not end inside the text or nests too deep. */
static size_t value_end(const unsigned char *s, size_t len, size_t i, int max_depth)
{
    if (i >= len) return 0;
    if (s[i] == '"') return string_end(s, len, i);
    if (s[i] != '{' && s[i] != '[') {
        while (i < len && !is_ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']') i++;
        return i;
    }
    int depth = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c == '"') {
            if (!(i = string_end(s, len, i))) return 0;
            continue;
        }
        if (c == '{' || c == '[') {
            if (++depth > max_depth) return 0;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
        }
        i++;
    }
    return 0;
}

lb_status lb__json_each_member(const char *text, size_t len, const char *what, lb__json_member_fn fn, void *ctx)
{
    if (!what) what = "JSON";
    if (!text || !fn) return lb__fail(LB_ERR_ARG, "lb__json_each_member: NULL argument");
    const unsigned char *s = (const unsigned char *)text;
    size_t i = skip_ws(s, len, 0);
    if (i >= len || s[i] != '{') return lb__fail(LB_ERR_PARSE, "%.300s: not a JSON object", what);
    i = skip_ws(s, len, i + 1);
    if (i < len && s[i] == '}') return skip_ws(s, len, i + 1) == len ? LB_OK
                                     : lb__fail(LB_ERR_PARSE, "%.300s: text after the object (byte %zu)", what, i + 1);
    for (;;) {
        /* key */
        size_t key_at = i, key_end = i < len && s[i] == '"' ? string_end(s, len, i) : 0;
        if (!key_end) return lb__fail(LB_ERR_PARSE, "%.300s: expected a member name at byte %zu", what, i);
        lb__json *key;
        lb_status st = lb__json_parse(text + key_at, key_end - key_at, what, &key);
        if (st != LB_OK) return st;
        /* ':' and the value */
        i = skip_ws(s, len, key_end);
        if (i >= len || s[i] != ':') {
            lb__json_free(key);
            return lb__fail(LB_ERR_PARSE, "%.300s: expected ':' at byte %zu", what, i);
        }
        size_t value_at = skip_ws(s, len, i + 1);
        size_t end = value_end(s, len, value_at, LB_JSON_MAX_DEPTH - 1); /* the object itself is one level */
        lb__json *value = NULL;
        if (!end) st = lb__fail(LB_ERR_PARSE, "%.300s: a member's value at byte %zu does not end", what, value_at);
        else st = lb__json_parse(text + value_at, end - value_at, what, &value);
        if (st == LB_OK) st = fn(ctx, key->str, key->len, value, value_at);
        lb__json_free(key);
        lb__json_free(value);
        if (st != LB_OK) return st;
        /* ',' or the end */
        i = skip_ws(s, len, end);
        if (i < len && s[i] == ',') {
            i = skip_ws(s, len, i + 1);
            continue;
        }
        if (i < len && s[i] == '}') break;
        return lb__fail(LB_ERR_PARSE, "%.300s: expected ',' or '}' at byte %zu", what, i);
    }
    return skip_ws(s, len, i + 1) == len ? LB_OK
                                         : lb__fail(LB_ERR_PARSE, "%.300s: text after the object (byte %zu)", what, i + 1);
}
