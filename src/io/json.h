/* A strict, small JSON reader (RFC 8259) for the files lowbit loads:
 * config.json, tokenizer.json (megabytes, a 50k-key vocab object),
 * model.safetensors.index.json and safetensors headers.
 *
 * Strict on purpose, because some of these inputs are hostile: exactly one
 * value surrounded by optional space/tab/CR/LF; no comments, trailing
 * commas, single quotes, leading zeros, '+', NaN/Infinity; strings must be
 * valid UTF-8 without raw control characters, with valid escapes and paired
 * surrogates; a key repeated in one object is an error (parsers that keep
 * the first or the last copy disagree about what a safetensors header says);
 * nesting deeper than LB_JSON_MAX_DEPTH is an error, never a stack overflow.
 *
 * The text need not be NUL-terminated (it may be a slice of a mapped file)
 * and is never read past len; the tree does not point into it, so it may be
 * unmapped as soon as lb__json_parse returns.
 *
 * Every syntax error is LB_ERR_PARSE with a message naming the input, the
 * line and column (1-based; columns count bytes) and the byte offset, e.g.
 *   config.json: line 3, column 14 (byte 40): expected ',' or '}' after an object member
 *
 * Memory: the whole tree is one allocation, sized exactly by a first pass
 * over the text (json_parse.c). A node is 72 bytes, so the worst case,
 * "[0,0,0,...]", costs about 37 bytes per input byte; files made of
 * strings and keys cost 2-3x their size (measured: a 256 MiB array of
 * strings, 0.6 GB of tree, parsed in 0.7 s). */
#ifndef LB_IO_JSON_H
#define LB_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "lowbit.h"

/* The most memory one document's tree may take: a hostile input of tiny
 * values ("[0,0,0,...]") costs ~37 bytes of tree per byte, so a 100 MB
 * safetensors header could otherwise ask for 3.7 GB. Real inputs (a
 * 250k-token tokenizer.json) need a few hundred MB at most. */
#define LB_JSON_MAX_TREE (1024u << 20)

/* Arrays and objects nested deeper than this are refused. */
#define LB_JSON_MAX_DEPTH 128

typedef enum lb__json_type {
    LB_JSON_NULL,
    LB_JSON_FALSE,
    LB_JSON_TRUE,
    LB_JSON_NUMBER,
    LB_JSON_STRING,
    LB_JSON_ARRAY,
    LB_JSON_OBJECT
} lb__json_type;

typedef struct lb__json lb__json;
struct lb__json {
    lb__json_type type;
    size_t len;         /* STRING: bytes (may include \u0000); ARRAY/OBJECT: number of children */
    const char *str;    /* STRING: decoded UTF-8, NUL-terminated; NUMBER: the number's source text
                           (num_len bytes; a copy, which happens to be NUL-terminated too) */
    size_t num_len;
    double number;      /* NUMBER: correctly rounded value; +-inf when the magnitude overflows */
    lb__json *items;    /* ARRAY: elements; OBJECT: values, in file order (NULL when len == 0) */
    const char **keys;  /* OBJECT: decoded keys, NUL-terminated, in file order */
    size_t *key_lens;   /* OBJECT: key byte lengths */
    size_t offset;      /* byte offset of this value in the input (for error messages) */
};

/* Parses len bytes of text into *out (NULL on failure). `what` names the
 * input in messages ("config.json", "safetensors header of 'x.safetensors'";
 * NULL reads as "JSON"). LB_ERR_PARSE for malformed text, LB_ERR_NOMEM,
 * LB_ERR_ARG for a NULL out or a NULL text with len > 0. */
lb_status lb__json_parse(const char *text, size_t len, const char *what, lb__json **out);
/* Reads and parses a whole file of at most max_bytes (LB_ERR_IO,
 * LB_ERR_PARSE naming the path). */
lb_status lb__json_read_file(const char *path, size_t max_bytes, lb__json **out);
/* Frees the whole tree; root must be what lb__json_parse returned (or NULL),
 * never an inner node. */
void lb__json_free(lb__json *root);

/* The members of a JSON object, one at a time, without the whole tree:
 * for each member in file order, fn gets its decoded key (key_len bytes,
 * NUL-terminated, may hold a \u0000) and its value as a tree of its own
 * (freed when fn returns; value_at is the value's byte offset in text, its
 * nodes' offsets count from there). A file of a million small members
 * costs one member's tree at a time instead of all of them.
 *
 * Every key and value is read by lb__json_parse, so what is accepted is
 * what lb__json_parse accepts, except that a key repeated in the object is
 * NOT detected here (the caller, which keeps the keys it needs, must) and
 * the LB_JSON_MAX_TREE limit applies to each member, not to the whole.
 * Messages are terser than lb__json_parse's (byte offsets, no line and
 * column): a caller that wants the full diagnosis of a bad document parses
 * it again with lb__json_parse. fn's status stops the walk and is returned. */
typedef lb_status (*lb__json_member_fn)(void *ctx, const char *key, size_t key_len, const lb__json *value,
                                        size_t value_at);
lb_status lb__json_each_member(const char *text, size_t len, const char *what, lb__json_member_fn fn, void *ctx);

/* Object member by key (exact bytes up to the key's NUL), or NULL if obj is
 * not an object or lacks the key. O(1) on average: objects with many
 * members carry a hash index built at parse time (so obj must come from
 * lb__json_parse, not be assembled by hand). */
const lb__json *lb__json_get(const lb__json *obj, const char *key);
/* Exact integers from the number's source text, never via the double
 * (2^53+1 and 18446744073709551615 come out exact). 1 on success; 0 if v is
 * not a number, not an integer (after applying the exponent: "1e3" is 1000,
 * "1.5e1" is 15, "1.5" is not), out of range, or negative for u64 ("-0" is 0). */
int lb__json_u64(const lb__json *v, uint64_t *out);
int lb__json_i64(const lb__json *v, int64_t *out);
/* A member's string (NULL if absent or not a string). */
const char *lb__json_str(const lb__json *obj, const char *key);

#endif
