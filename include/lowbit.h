/*
 * lowbit — post-training quantization of large language models.
 *
 * This is the one public header. Everything the library offers is declared
 * here with the lb_ prefix; the library never prints or exits: every call
 * that can fail returns an lb_status, and lb_last_error() says what went
 * wrong, where, and what was expected.
 */
#ifndef LOWBIT_H
#define LOWBIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOWBIT_VERSION_MAJOR 0
#define LOWBIT_VERSION_MINOR 1
#define LOWBIT_VERSION_PATCH 0
#define LOWBIT_VERSION_STRING "0.1.0"

/* Marks the library's API: the shared library is built with
 * -fvisibility=hidden, so only what carries LB_API is exported (its
 * internals, lb__*, stay inside it; the C unit tests that call them link
 * the static library). Every function declared here carries it. */
#if defined(__GNUC__) || defined(__clang__)
#define LB_API __attribute__((visibility("default")))
#else
#define LB_API
#endif

LB_API const char *lb_version(void);

/* ===== Status and errors ===== */

/* Values are append-only: they may be returned across a shared-library
 * boundary, so a number once given is never reused. */
typedef enum lb_status {
    LB_OK = 0,
    LB_ERR_ARG = 1,        /* a caller passed an invalid argument */
    LB_ERR_FORMAT = 2,     /* unknown number format name or id */
    LB_ERR_NAN = 3,        /* NaN met a format that has no NaN encoding */
    LB_ERR_NOMEM = 4,      /* an allocation failed */
    LB_ERR_IO = 5,         /* reading or writing a file failed */
    LB_ERR_PARSE = 6,      /* malformed input data */
    LB_ERR_UNSUPPORTED = 7 /* valid request this build cannot serve */
} lb_status;

/* A short, stable name for a status ("nan", "unknown_format", ...). */
LB_API const char *lb_status_name(lb_status s);

/* The message of the last failed call on this thread ("" if none). */
LB_API const char *lb_last_error(void);

/* ===== Number formats ===== */

/* One id per format; the ids are append-only (they may be stored). */
typedef enum lb_format {
    LB_FMT_FP32 = 0,
    LB_FMT_FP16 = 1,
    LB_FMT_BF16 = 2,
    LB_FMT_FP8_E4M3 = 3,     /* "FN": no inf, NaN = S.1111.111, max 448 */
    LB_FMT_FP8_E5M2 = 4,     /* IEEE-like: inf and NaNs, max 57344 */
    LB_FMT_FP8_E4M3FNUZ = 5, /* AMD MI300: bias 8, NaN = 0x80, no -0 */
    LB_FMT_FP8_E5M2FNUZ = 6, /* AMD MI300: bias 16, NaN = 0x80, no -0 */
    LB_FMT_FP6_E2M3 = 7,     /* OCP MX element, no inf/NaN, max 7.5 */
    LB_FMT_FP6_E3M2 = 8,     /* OCP MX element, no inf/NaN, max 28 */
    LB_FMT_FP4_E2M1 = 9,     /* OCP MX / NVFP4 element, max 6 */
    LB_FMT_E8M0 = 10,        /* MX scale: 2^(c-127), 0xFF = NaN, no zero */
    LB_FMT_UE4M3 = 11,       /* NVFP4 block scale: E4M3 with sign bit 0 */
    LB_FMT_INT8 = 12,
    LB_FMT_UINT8 = 13,
    LB_FMT_INT4 = 14,
    LB_FMT_UINT4 = 15,
    LB_FMT_COUNT = 16
} lb_format;

typedef enum lb_format_kind {
    LB_KIND_FLOAT = 0, /* sign-exponent-mantissa */
    LB_KIND_INT = 1    /* two's complement or unsigned integer */
} lb_format_kind;

/* How a float format spends its special bit patterns. */
typedef enum lb_specials {
    LB_SPECIALS_IEEE = 0, /* exponent all ones: inf (mantissa 0) or NaN */
    LB_SPECIALS_FN = 1,   /* no inf; only S.1...1 (all ones) is NaN */
    LB_SPECIALS_FNUZ = 2, /* no inf, no -0; the code 1000...0 is NaN */
    LB_SPECIALS_NONE = 3, /* every code is a finite number */
    LB_SPECIALS_E8M0 = 4  /* exponent only: all ones is NaN, no zero */
} lb_specials;

/* What happens to a finite value beyond the format's range, or to inf.
 * Rounding is always to nearest, ties to even. */
typedef enum lb_overflow {
    LB_SATURATE = 0, /* clamp to +-max finite (inf too); NaN stays NaN where
                        the format has one and is LB_ERR_NAN otherwise */
    LB_IEEE = 1      /* ml_dtypes semantics: overflow and inf become inf,
                        else NaN, as the format allows; formats with
                        neither saturate. NaN into a format without NaN
                        is still LB_ERR_NAN: it never becomes a number. */
} lb_overflow;

typedef struct lb_format_info lb_format_info;

/* A row's scalar codecs, the reference every fast path is tested against.
 * encode rounds x once to nearest, ties to even (LB_OK or LB_ERR_NAN);
 * decode returns the fp32 bit pattern of a code's value (exact for every
 * code). They assume the default floating-point environment and set no
 * error text: lb_encode_value/lb_decode_value are the checked wrappers. */
typedef lb_status (*lb_encode_fn)(const lb_format_info *f, double x, lb_overflow mode, uint32_t *code);
typedef uint32_t (*lb_decode_fn)(const lb_format_info *f, uint32_t code);

/* One row of the format table. Every number here is exact. */
struct lb_format_info {
    lb_format id;
    const char *name;        /* as the CLI spells it: "fp8_e4m3" */
    lb_format_kind kind;
    int bits;                /* width of one code in bits */
    int sign_bits;           /* 1 if the format carries a sign bit */
    int exp_bits;            /* float formats: exponent field width */
    int man_bits;            /* float formats: mantissa field width */
    int bias;                /* float formats: exponent bias */
    lb_specials specials;    /* float formats: inf/NaN policy */
    double max_finite;       /* largest finite value */
    double min_finite;       /* most negative finite value (0 if unsigned) */
    double min_normal;       /* smallest positive normal (1 for ints) */
    double min_subnormal;    /* smallest positive value */
    uint64_t finite_values;  /* distinct finite values; +0 and -0 count once */
    const char *summary;     /* one line: where the format is used */
    lb_encode_fn encode;     /* scalar reference encoder */
    lb_decode_fn decode;     /* scalar reference decoder */
};

/* The row for a format, or NULL for an id out of range. */
LB_API const lb_format_info *lb_format_get(lb_format f);

/* Looks a format up by name (case-insensitive; "e4m3" style aliases are
 * accepted for the fp8 formats). LB_ERR_FORMAT if unknown. */
LB_API lb_status lb_format_by_name(const char *name, lb_format *out);

/* Bytes needed to store n codes of a format in the bulk layout:
 * 4-bit formats pack two codes per byte (element 2i in the low nibble,
 * element 2i+1 in the high nibble), 6- and 8-bit formats take one byte
 * per code (6-bit codes in the low bits), 16-bit formats two bytes and
 * fp32 four, little-endian. Returns 0 if the size would overflow. */
LB_API size_t lb_format_bytes(lb_format f, size_t n);

/* ===== Casts ===== */

/* Every `threads` argument: 0 (or less) means one per online CPU, N >= 1
 * means N; both are capped here (more buys nothing for these
 * bandwidth-bound loops and keeps the work table on the stack). The CLI's
 * --threads takes 0..LB_MAX_THREADS. */
#define LB_MAX_THREADS 64

/* Progress of a long call (lb_runner_new's layers, lb_perplexity's and
 * lb_kld's windows, lb_model_save_opts's tensors): done of total
 * steps, 0 first (the work starts), total last. Called on the calling
 * thread. */
typedef void (*lb_progress_fn)(void *ctx, size_t done, size_t total);


/* Encodes one value, rounded once from binary64. Unsigned formats
 * (e8m0, ue4m3, uint*) take negative inputs as overflow below their range:
 * LB_SATURATE clamps them to the smallest value, LB_IEEE gives NaN
 * where the format has one. */
LB_API lb_status lb_encode_value(lb_format f, double x, lb_overflow mode, uint32_t *code);

/* Decodes one code (its low `bits` bits; LB_ERR_ARG if higher bits set).
 * Every code of every format decodes exactly into a float. */
LB_API lb_status lb_decode_value(lb_format f, uint32_t code, float *out);

/* Bulk conversion of n fp32 values into the bulk layout described at
 * lb_format_bytes. threads <= 0 means one per online CPU. The result does
 * not depend on the thread count. On LB_ERR_NAN the message names the
 * first offending element and dst holds unspecified bytes. */
LB_API lb_status lb_encode_f32(lb_format f, lb_overflow mode, const float *src, size_t n,
                               void *dst, int threads);

/* Bulk conversion of n codes in the bulk layout back to fp32. */
LB_API lb_status lb_decode_f32(lb_format f, const void *src, size_t n, float *dst, int threads);

/* ===== Tensor quantization ===== */

/* How many values share one scale. */
typedef enum lb_granularity {
    LB_GRAN_TENSOR = 0,  /* one scale for the whole tensor */
    LB_GRAN_CHANNEL = 1, /* one per row (output channel of a weight [out, in]) */
    LB_GRAN_TOKEN = 2,   /* one per row of an activation [tokens, hidden]: same math */
    LB_GRAN_GROUP = 3    /* blocks of `group` consecutive values along a row */
} lb_granularity;

/* How the scale of a block is chosen. */
typedef enum lb_scale_search {
    LB_SEARCH_ABSMAX = 0, /* the scale that maps the block's largest magnitude to the element max */
    LB_SEARCH_MSE = 1     /* absmax times the clipping ratio r = 1 - k/20, k = 0..10, with the
                             smallest squared error over the block (ties: the larger r),
                             measured in units of the scale (fp32, 16 fixed lanes) times scale^2 */
} lb_scale_search;

/* How an E8M0 (power of two) block scale is rounded; X = 2^e. */
typedef enum lb_mx_rounding {
    LB_MX_FLOOR = 0, /* OCP MX v1.0 sec. 6.3: e = floor(log2 amax) - emax_elem */
    LB_MX_CEIL = 1,  /* e = ceil(log2 amax) - emax_elem, from amax's fp32 exponent field as
                        torchao CEIL does (a subnormal amax counts as 2^-126) */
    LB_MX_EVEN = 2,  /* amax rounded to the element's mantissa width first (torchao EVEN,
                        compressed-tensors' MXFP4: carries when mantissa >= 1.75) */
    LB_MX_RCEIL = 3  /* e = ceil(log2(amax / max_elem)) (NVIDIA cuBLAS, torchao RCEIL) */
} lb_mx_rounding;

/* Which codes a symmetric integer grid uses (int8, int4 with an fp32,
 * fp16, bf16 or ue4m3 scale; x' = q * s).
 * FULL, the default, uses every code, -8..7 and -128..127, with a positive
 * scale: over the block's most negative value min and largest value max
 * (both taken with 0), s = -min/8 (int8: -min/128), unless max would then
 * pass code 7, fl(7 s) < max (int8: 127), when s = max/7 (max/127): the
 * smallest positive scale under which nothing clips. So a block whose
 * largest magnitude is negative gets ggml's scale |x|/8 unless its positive
 * side is within 7/8 of it; one whose largest magnitude is positive keeps
 * max/7, because with a positive scale code +8 does not exist.
 * SIGNED is ggml's Q4_0/Q8_0 rule, the scale may be negative: m = the
 * block's value of largest magnitude with its sign (min when -min >= max,
 * so a tie takes the positive scale), s = m/-8 (int8: m/-128), so m lands
 * on code -8 (-128) whatever its sign and the other side gets 8 (128)
 * steps, +8 clamped to +7. fp32, fp16 and bf16 scales only, single level.
 * With clip=mse, min and max (FULL) or m (SIGNED) are first multiplied by
 * the ratio tried. RESTRICTED is the older grid: s = amax/7 (amax/127),
 * codes +-7 (+-127), never -8 (-128).
 * lb_qspec_parse's default when the text names no range: SIGNED for int4
 * under an fp32, fp16 or bf16 scale, single level (it measured best:
 * BENCHMARKS.md, "Round-to-nearest grids"), FULL otherwise; a zeroed
 * struct says FULL. */
typedef enum lb_int_range {
    LB_RANGE_FULL = 0,
    LB_RANGE_RESTRICTED = 1,
    LB_RANGE_SIGNED = 2
} lb_int_range;

/* A quantization recipe. Parse one from text with lb_qspec_parse:
 *   ELEMENT[:GRANULARITY][:OPTION]...      or a preset name
 *   ELEMENT      any format but e8m0/ue4m3 (scale formats) and fp32/bf16
 *                (they keep fp32's exponent range: a scale would be subnormal)
 *   GRANULARITY  tensor | channel | token | gN (blocks of N along a row;
 *                bN says the same; 1 <= N <= 2^30) | bRxC (2-D blocks of
 *                R rows by C columns, e.g. b128x128; gRxC and blockRxC say
 *                the same; R >= 2: b1xC is gC. Symmetric, single level,
 *                clip=absmax only)
 *   OPTION       sym | affine | scale=fp32|fp16|bf16|e8m0|ue4m3 (e4m3 = ue4m3)
 *                | twolevel (ue4m3 or fp16 block scales) | clip=absmax|mse
 *                | round=floor|ceil|even|rceil (e8m0 scales)
 *                | range=full|restricted|signed (symmetric int8/int4: lb_int_range)
 *   presets      mxfp8_e4m3 mxfp8_e5m2 mxfp6_e2m3 mxfp6_e3m2 mxfp4 mxint8 nvfp4
 *                (options may follow: mxfp4:round=rceil)
 * e.g. "int4:g128:affine", "fp8_e4m3:channel", "int8:tensor", "nvfp4".
 * Scales are rounded to nearest and saturate at the scale format's largest
 * value (then the block's elements saturate too). */
typedef struct lb_qspec {
    lb_format element;         /* element format */
    lb_granularity granularity;
    size_t group;              /* LB_GRAN_GROUP: values per block (>= 1) */
    lb_format scale_format;    /* fp32, fp16, bf16, e8m0 or ue4m3 */
    int affine;                /* 1: zero point (integer elements only) */
    int two_level;             /* 1: an fp32 tensor scale over the block scales (NVFP4) */
    lb_scale_search search;
    lb_mx_rounding mx_rounding;/* e8m0 scales only */
    int int_frac_bits;         /* MXINT8: the element's implied 2^-6 (6); else 0 */
    lb_int_range range;        /* symmetric int8/int4 with a non-e8m0 scale only (SIGNED: fp32/fp16/bf16,
                                  single level); else FULL (0) */
    size_t group_rows;         /* LB_GRAN_GROUP: rows a block spans; 0 or 1: one row (gN), R >= 2: 2-D
                                  R x group blocks (bRxC); 0 for the other granularities */
} lb_qspec;

LB_API lb_status lb_qspec_parse(const char *text, lb_qspec *out);

/* Checks a spec filled in by hand: every field in range and a defined
 * combination (lb_quantize does the same). */
LB_API lb_status lb_qspec_validate(const lb_qspec *spec);

/* The canonical text of a spec (what lb_qspec_parse reads back to the
 * same spec; "invalid" for a spec lb_qspec_validate refuses). Returns the
 * length, like snprintf. */
LB_API int lb_qspec_format(const lb_qspec *spec, char *buf, size_t size);

/* A quantized 2-D tensor [rows, cols] (cols is the reduction axis). */
typedef struct lb_qtensor lb_qtensor;

/* The stored layout, stable and documented (README, "Packed layout"):
 * data     rows of packed element codes, each row starting on a byte:
 *          4-bit: two per byte, element 2i in the low nibble; 6-bit: a
 *          little-endian bit stream, element i in bits [6i, 6i+6), so
 *          four values fill three bytes; 8-bit: one byte; 16-bit (fp16):
 *          two bytes, little-endian.
 * scales   scale_rows x scales_per_row codes of scale_format (one for a
 *          tensor scale), in lb_format_bytes layout, row-major; scale_rows
 *          is rows, or ceil(rows / group_rows) for 2-D blocks (scale row i
 *          serves rows [i R, i R + R)), or 1 for a tensor scale.
 * zero_points  affine only: one per scale, as a code of the element format
 *          (two's complement for int8/int4), rows of zero_point_row_bytes
 *          in the bulk layout (int4/uint4: two per byte, low nibble first).
 * tensor_scale two-level only: the fp32 multiplier over the block scales. */
typedef struct lb_qtensor_view {
    lb_qspec spec;
    size_t rows, cols;
    const uint8_t *data;
    size_t row_bytes;          /* bytes per packed row */
    size_t data_bytes;         /* rows * row_bytes */
    const uint8_t *scales;
    size_t scales_per_row;     /* 1 for tensor (then rows is irrelevant: one scale) */
    size_t scale_count;
    size_t scale_bytes;
    const uint8_t *zero_points; /* NULL unless affine */
    size_t zero_point_row_bytes;
    size_t zero_point_bytes;
    float tensor_scale;        /* 1 unless two-level */
    size_t scale_rows;         /* rows of scales: rows; ceil(rows / group_rows) for 2-D blocks; 1 for tensor */
} lb_qtensor_view;

/* Quantizes x [rows, cols] (row-major, rows * cols floats). NaN or
 * infinity in x is LB_ERR_NAN naming the index (quantization needs a
 * finite range); the spec is checked as lb_qspec_validate does. threads
 * <= 0: one per CPU; the bytes depend neither on the thread count nor on
 * the caller's floating-point environment. */
LB_API lb_status lb_quantize(const lb_qspec *spec, const float *x, size_t rows, size_t cols, int threads,
                             lb_qtensor **out);
/* Writes rows * cols floats to out. */
LB_API lb_status lb_dequantize(const lb_qtensor *q, float *out, int threads);
LB_API lb_status lb_qtensor_view_get(const lb_qtensor *q, lb_qtensor_view *view);
LB_API void lb_qtensor_free(lb_qtensor *q);

/* What quantization cost, against the original. */
typedef struct lb_qstats {
    size_t count;
    double mse, rmse, mae;
    double max_abs_error;
    size_t max_error_index;      /* where the largest error is */
    float max_error_original, max_error_dequantized;
    double sqnr_db;              /* 10 log10(sum x^2 / sum (x - x')^2); inf if exact */
    double saturated_fraction;   /* x beyond the range its block can represent (allowing fp32
                                    rounding of the scale, and half a step for affine) */
    double flushed_fraction;     /* x != 0 but x' == 0 */
    double bits_per_value;       /* element bits plus every scale, zero point and tensor scale */
} lb_qstats;

/* The bytes a rows x cols tensor takes under spec, without quantizing:
 * exactly what lb_quantize stores (data_bytes + scale_bytes +
 * zero_point_bytes of its view, + 4 for a two-level tensor scale), every
 * row of codes and of zero points starting on a byte. A plain fp32, fp16
 * or bf16 spec (element only, which lb_qspec_validate refuses but the
 * runner accepts as "keep at that precision") is its codes alone. 0 if the
 * spec is invalid, a size is 0, or the count passes 2^53. */
LB_API uint64_t lb_qspec_bytes(const lb_qspec *spec, uint64_t rows, uint64_t cols);
/* The same as bits per value: 8 x lb_qspec_bytes / (rows x cols), the one
 * figure every command reports (lb_qstats_compute, error, compare, plan;
 * the runner holds exactly that many bytes). 0 if the spec is invalid or a
 * size is 0. */
LB_API double lb_qspec_bits_per_value(const lb_qspec *spec, uint64_t rows, uint64_t cols);

/* x and xhat: the rows * cols original and dequantized values. */
LB_API lb_status lb_qstats_compute(const float *x, const float *xhat, const lb_qtensor *q, lb_qstats *out);

/* What a tensor's values look like before quantization (lowbit inspect). */
typedef struct lb_tensor_stats {
    uint64_t count;
    double absmax, mean, std;   /* std: population standard deviation */
    double kurtosis;            /* E[(x-mean)^4] / std^4: 3 for a normal distribution, larger for heavy tails */
    double outlier_ratio;       /* largest row absmax / median row absmax (rows: output channels of a
                                   [out, in] weight); inf when the median is 0, 1 for one row */
    uint64_t beyond_6std;       /* values with |x - mean| > 6 std */
} lb_tensor_stats;

/* Statistics of rows x cols values (NaN or infinity: LB_ERR_NAN naming
 * the index). Sums in double, in index order. */
LB_API lb_status lb_tensor_stats_compute(const float *x, uint64_t rows, uint64_t cols, lb_tensor_stats *out);

/* ===== Tensor storage types (model files) =====
 *
 * The element types a checkpoint stores: safetensors' dtypes and ggml's
 * block-quantized types (GGUF). A block type stores `block` elements in
 * `block_bytes` bytes, in ggml's exact layout; a plain type has block 1. */

typedef enum lb_dtype {
    LB_DT_F32, LB_DT_F16, LB_DT_BF16, LB_DT_F64, LB_DT_F8_E4M3, LB_DT_F8_E5M2,
    LB_DT_I8, LB_DT_I16, LB_DT_I32, LB_DT_I64, LB_DT_U8, LB_DT_BOOL,
    LB_DT_Q4_0, LB_DT_Q4_1, LB_DT_Q5_0, LB_DT_Q5_1, LB_DT_Q8_0,
    LB_DT_Q2_K, LB_DT_Q3_K, LB_DT_Q4_K, LB_DT_Q5_K, LB_DT_Q6_K,
    LB_DT_MXFP4, LB_DT_NVFP4,
    LB_DT_IQ4_NL, LB_DT_IQ4_XS, /* ggml's non-linear 4-bit grid (kvalues_iq4nl): 32-block, 256-superblock */
    /* A weight of a quantized Hugging Face checkpoint (compressed-tensors or
     * ModelOpt directory) that lowbit presents as one logical tensor of the
     * original shape: its codes, scales, zero points and global scale are
     * other tensors of the file. lb_tensor_to_f32 dequantizes it exactly as
     * the format's own package does; lb_dtype_to_f32 cannot (the bytes of one
     * tensor do not say it all), lb_dtype_bytes has no size for it, and its
     * lb_tensor.data is no byte array (n_bytes counts every component). */
    LB_DT_QUANTIZED,
    LB_DT_COUNT
} lb_dtype;

typedef struct lb_dtype_info {
    lb_dtype id;
    const char *name;        /* lowbit's name: "f32", "bf16", "q4_0", "mxfp4" ... */
    const char *st_name;     /* safetensors dtype string ("F32", "F8_E4M3" ...) or NULL */
    int ggml_type;           /* GGUF tensor type id, or -1 if GGUF has none */
    unsigned block;          /* elements per block (1 for plain types) */
    unsigned block_bytes;    /* bytes per block */
    int can_read;            /* lb_dtype_to_f32 supports it */
    int can_write;           /* lb_dtype_from_f32 supports it */
} lb_dtype_info;

LB_API const lb_dtype_info *lb_dtype_get(lb_dtype t);
/* By lowbit name, safetensors name or ggml name (case-insensitive). */
LB_API lb_status lb_dtype_by_name(const char *name, lb_dtype *out);
/* The dtype of a GGUF tensor type id (LB_ERR_PARSE if unknown). */
LB_API lb_status lb_dtype_from_ggml(int ggml_type, lb_dtype *out);
/* Bytes of n elements; LB_ERR_ARG if n is not a multiple of the block or
 * the count overflows 64 bits (*bytes untouched). */
LB_API lb_status lb_dtype_bytes(lb_dtype t, uint64_t n, uint64_t *bytes);

/* Converts n elements (a multiple of the block) to fp32, bit-identical to
 * the gguf Python package's dequantization for the ggml types. Integers
 * and bools convert exactly where fp32 can hold them (rounded otherwise). */
LB_API lb_status lb_dtype_to_f32(lb_dtype t, const void *src, size_t n, float *dst);
/* Converts n fp32 values (a multiple of the block) to t, for the types
 * lowbit writes (can_write: f32, f16, bf16 and the ggml block types it
 * quantizes), byte-identical to the pinned llama.cpp's ggml_quantize_chunk
 * without an importance matrix. LB_ERR_UNSUPPORTED otherwise; LB_ERR_NAN
 * on NaN/infinity for a block type. */
LB_API lb_status lb_dtype_from_f32(lb_dtype t, const float *src, size_t n, void *dst);

/* ===== Models =====
 *
 * One view of a checkpoint whatever its file type (GGUF, a safetensors file,
 * a Hugging Face directory with config.json and one or more safetensors
 * shards, a llama2.c .bin): named tensors plus the architecture. Tensor
 * data stays in the read-only mapping of the file; nothing is copied. */

#define LB_MAX_DIMS 8

typedef enum lb_model_kind {
    LB_MODEL_GGUF, LB_MODEL_SAFETENSORS, LB_MODEL_HF_DIR, LB_MODEL_LLAMA2C
} lb_model_kind;

/* How a checkpoint lays out rotary pairs in the q/k projection rows:
 * (i, i + head_dim/2) as Hugging Face stores them, or adjacent (2i, 2i+1)
 * as llama2.c and llama.cpp's llama-family GGUF files do (its converter
 * permutes q_proj and k_proj). `lowbit convert` permutes between them. */
typedef enum lb_rope_layout { LB_ROPE_HALF, LB_ROPE_ADJACENT } lb_rope_layout;

typedef struct lb_arch {
    char name[32];          /* "llama", "mistral", "qwen2", "qwen3", or "" if unknown */
    uint32_t n_layers, dim, hidden_dim, n_heads, n_kv_heads, head_dim, vocab_size, max_seq_len;
    double rope_theta, norm_eps;
    int tied_embeddings;    /* the output head is the token embedding */
    int qkv_bias;           /* q/k/v projections have biases (Qwen2) */
    int qk_norm;            /* per-head RMSNorm of q and k (Qwen3) */
    lb_rope_layout rope_layout;
    /* Llama-3 rope scaling (config.json rope_scaling with rope_type "llama3");
     * factor 0 when absent. GGUF files carry it as the rope_freqs.weight tensor. */
    double rope_scale_factor, rope_low_freq_factor, rope_high_freq_factor;
    uint32_t rope_original_ctx;
} lb_arch;

typedef struct lb_tensor {
    const char *name;       /* canonical: the Hugging Face name (model.layers.3.self_attn.q_proj.weight);
                               a tensor with no such name keeps its file name */
    const char *file_name;  /* as the file names it (blk.3.attn_q.weight, or llama2.c's wq[3]) */
    lb_dtype dtype;
    int n_dims;
    uint64_t shape[LB_MAX_DIMS]; /* outermost first, as numpy and PyTorch (a GGUF ne[] reversed) */
    uint64_t n_elements, n_bytes;
    const void *data;       /* in the file's read-only mapping */
} lb_tensor;

typedef struct lb_model lb_model;

/* Opens a .gguf, .safetensors or llama2.c .bin file or a Hugging Face
 * model directory. The file type comes from the content (GGUF magic, a
 * safetensors JSON header); only when the content is too broken to tell
 * does the name (.gguf, .safetensors) choose the reader that explains what
 * is wrong. Anything else is read as a llama2.c checkpoint. */
LB_API lb_status lb_model_open(const char *path, lb_model **out);
LB_API void lb_model_close(lb_model *m);
LB_API lb_model_kind lb_model_get_kind(const lb_model *m);
LB_API const lb_arch *lb_model_arch(const lb_model *m);
/* The tensors, in file order: for (i = 0; i < lb_model_tensor_count(m);
 * i++) t = lb_model_tensor(m, i); (NULL for i past the end). They live as
 * long as the model. */
LB_API size_t lb_model_tensor_count(const lb_model *m);
LB_API const lb_tensor *lb_model_tensor(const lb_model *m, size_t i);
/* Parameters: the elements of every tensor the file holds (norms and
 * biases included; a tied output head, which the file stores once, counts
 * once). 0 for NULL. */
LB_API uint64_t lb_model_param_count(const lb_model *m);
/* By canonical or file name; NULL if absent. */
LB_API const lb_tensor *lb_model_find(const lb_model *m, const char *name);
/* The whole tensor as fp32 (dst holds n_elements floats). */
LB_API lb_status lb_tensor_to_f32(const lb_tensor *t, float *dst);
/* Drops the tensor's pages from this process's memory (they stay in the
 * page cache): a pass over a model larger than RAM calls it after each
 * tensor, so resident memory stays near one tensor's size. */
LB_API void lb_tensor_release(const lb_tensor *t);
/* A tensor's weight role: 1 for the matrices quantization applies to
 * (2-D projections, embeddings and output head), 0 for norms, biases and
 * anything else. */
LB_API int lb_tensor_is_weight(const lb_tensor *t);

/* A quantized Hugging Face checkpoint (config.json quantization_config of
 * compressed-tensors, or ModelOpt with hf_quant_config.json) as lowbit reads
 * it: each quantized module's weight is one LB_DT_QUANTIZED tensor named
 * <module>.weight; the tensors it is made of (weight_packed, weight_scale,
 * weight_zero_point, weight_shape, weight_global_scale, weight_scale_2) and
 * the engines' activation and KV-cache scales (input_scale,
 * input_global_scale, k_scale, v_scale ...) are not in the tensor list:
 * they are counted here. Everything lives as long as the model. */
typedef struct lb_quant_group {
    const char *name;        /* "group_0" (ModelOpt: the quant_algo, or a layer's under MIXED_PRECISION) */
    const char *format;      /* "pack-quantized", "nvfp4-pack-quantized" ... (ModelOpt: "FP8", "NVFP4" ...) */
    const char *weights;     /* one line: "int4 group 128 asymmetric", "fp8_e4m3 per channel" */
    const char *input;       /* one line, or "none" (weight-only) */
    size_t modules;          /* modules of the checkpoint it quantizes */
} lb_quant_group;

typedef struct lb_model_quant {
    const char *method;      /* "compressed-tensors" or "modelopt" */
    const char *format;      /* the config's format ("mixed-precision" when groups differ) or quant_algo */
    const char *kv_cache;    /* e.g. "fp8_e4m3 per tensor", or "none" */
    size_t n_groups;
    const lb_quant_group *groups;
    size_t quantized;        /* LB_DT_QUANTIZED tensors */
    size_t hidden;           /* file tensors folded into them or set aside (not in the tensor list) */
} lb_model_quant;

/* The model's quantization, or NULL when it is not a quantized checkpoint. */
LB_API const lb_model_quant *lb_model_quantization(const lb_model *m);

/* Writes the model to path: a .gguf file, a .safetensors file, or (any
 * other name) a Hugging Face directory with config.json and
 * model.safetensors, which must not exist yet or be empty. Floating-point
 * tensors are stored as `dtype` (f32, f16 or bf16; or, for GGUF, q8_0,
 * q4_0 or mxfp4, which apply to weight matrices whose rows are whole
 * blocks, the rest staying f32); LB_DT_COUNT keeps f32/f16/bf16 tensors as
 * they are and converts the other floating-point ones (ggml blocks, fp8,
 * f64) to f32. Integer and bool tensors always keep their type. q_proj/k_proj rows are
 * permuted between rotary layouts as the target expects (Hugging Face:
 * half-split; GGUF llama/mistral: adjacent). GGUF metadata of a GGUF
 * source (the tokenizer too) is carried over as it is. A Hugging Face
 * directory is written for llama, mistral, qwen2 and qwen3 only. Refuses
 * to overwrite a file the model is read from; the destination follows the
 * rule of "Outputs" below. Written to temporary names and renamed into
 * place: on failure nothing is left behind. A NaN or
 * infinite value in any floating-point tensor is LB_ERR_NAN naming the
 * tensor and the first such element (lb_model_save_opts can copy them). */
LB_API lb_status lb_model_save(const lb_model *m, const char *path, lb_dtype dtype);

typedef struct lb_save_options {
    lb_dtype dtype;      /* as lb_model_save's (LB_DT_COUNT: keep the float types) */
    int allow_nonfinite; /* 1: copy NaN and infinite values (block types still refuse them) */
    lb_progress_fn progress; /* optional: after each tensor is written (done of total) */
    void *progress_ctx;
} lb_save_options;
LB_API lb_status lb_model_save_opts(const lb_model *m, const char *path, const lb_save_options *o);

/* ===== Outputs =====
 *
 * Every file or directory the library writes (lb_model_save, lb_kld's
 * save_base) goes through one routine and one rule, for the whole process:
 * - a destination that is an input is refused: a file registered with
 *   lb_output_protect, or one the library has mapped now (an open model's
 *   files); the same file however it is spelled ("./x", a symbolic link);
 * - an existing destination is refused unless lb_output_allow_replace(1)
 *   (the CLI's --force); an empty directory counts as free, and a
 *   directory is replaced only when it holds nothing but what lowbit
 *   writes there;
 * - when replacing, a destination that is a symbolic link, has other hard
 *   links or belongs to another user is refused (replacing would break or
 *   take it over); a replaced file or directory keeps its permission bits.
 * These refusals are LB_ERR_ARG, with a message naming the clash. The bytes
 * go to a temporary "DEST.lowbit-tmp.PID.N" beside the destination,
 * renamed into place when complete; lb_output_remove_temps removes those in
 * progress (a SIGKILL can still leave one: it is safe to delete). */

/* Registers an input of the command: `what` names it in messages ("the
 * model", "the --text file"). A path that does not exist is ignored. */
LB_API lb_status lb_output_protect(const char *path, const char *what);
/* Whether an existing destination may be replaced (default 0). */
LB_API void lb_output_allow_replace(int allow);
/* Forgets the registered inputs; replacing is refused again. */
LB_API void lb_output_reset(void);
/* The rule for a destination file, before any work is done (the writers
 * check again when they open it). */
LB_API lb_status lb_output_check(const char *path);
/* Removes every temporary output in progress. Async-signal-safe: for a
 * SIGINT/SIGTERM/SIGBUS handler (the library installs none itself). */
LB_API void lb_output_remove_temps(void);
/* The name of the mapped input file that holds addr (a SIGBUS si_addr:
 * the file shrank under the mapping), or NULL. Async-signal-safe. */
LB_API const char *lb_mapped_file_at(const void *addr);

/* Canonical (Hugging Face) name of a GGUF tensor name, into buf; returns 0
 * if the name has no mapping (buf then holds the name unchanged). And the
 * reverse. */
LB_API int lb_name_from_gguf(const char *gguf_name, char *buf, size_t size);
LB_API int lb_name_to_gguf(const char *hf_name, char *buf, size_t size);

/* ===== Evaluation: tokenizers and the forward pass ===== */

typedef struct lb_tokenizer lb_tokenizer;

/* The tokenizer a model carries or sits beside: GGUF metadata
 * (tokenizer.ggml.*: GPT-2 style byte-level BPE, or llama's SentencePiece
 * BPE), tokenizer.json in a Hugging Face directory, or for a llama2.c
 * checkpoint a llama2.c tokenizer file beside it (tokenizer.bin, or
 * tok<vocab>.bin). */
LB_API lb_status lb_tokenizer_from_model(const lb_model *m, const char *model_path, lb_tokenizer **out);
/* A tokenizer file: tokenizer.json, or a llama2.c tokenizer .bin (which
 * needs the vocabulary size: the file does not say it). */
LB_API lb_status lb_tokenizer_from_file(const char *path, uint32_t vocab_size, lb_tokenizer **out);
LB_API void lb_tokenizer_free(lb_tokenizer *t);
/* The file the tokenizer was read from (NULL when it came from a GGUF
 * model's metadata): an input to protect (lb_output_protect). */
LB_API const char *lb_tokenizer_source(const lb_tokenizer *t);
LB_API uint32_t lb_tokenizer_vocab_size(const lb_tokenizer *t);
LB_API int32_t lb_tokenizer_bos(const lb_tokenizer *t); /* -1 if none */
LB_API int32_t lb_tokenizer_eos(const lb_tokenizer *t);
/* Whether texts start with BOS for this model (GGUF's
 * tokenizer.ggml.add_bos_token; SentencePiece and llama2.c: yes; byte-level
 * BPE without the key: no), as llama.cpp decides it. */
LB_API int lb_tokenizer_add_bos(const lb_tokenizer *t);
/* Text (any bytes) to ids, as the reference tokenizer does it; *ids is
 * malloc'd. add_bos prepends the BOS id when the tokenizer has one (pass
 * lb_tokenizer_add_bos(t) to do what the model expects). */
LB_API lb_status lb_tokenize(const lb_tokenizer *t, const char *text, size_t len, int add_bos, int32_t **ids,
                            size_t *n);
/* The bytes of one token as it reads in text (byte-level tokens decoded,
 * SentencePiece's U+2581 as a space, <0xNN> byte tokens as the byte). */
LB_API lb_status lb_token_bytes(const lb_tokenizer *t, int32_t id, const char **bytes, size_t *len);

/* Chat prompts. The chat template a model carries: a GGUF's
 * tokenizer.chat_template; beside a Hugging Face model, tokenizer_config.json's
 * chat_template (a string, or the "default" entry of a list), else
 * chat_template.jinja. *out is malloc'd, or NULL when the model has none. */
LB_API lb_status lb_chat_template(const lb_model *m, char **out);
/* The family of a template, recognised by the markers it writes:
 * "chatml", "llama3", "llama2" ([INST]), "gemma" or "phi3"; NULL for
 * others. lowbit does not run the template (a Jinja program). */
LB_API const char *lb_chat_family(const char *tmpl);
/* One user message and the assistant's header after it, as the family
 * writes them (a ChatML template's literal default system message first,
 * as SmolLM2's writes it when the conversation has none); without BOS (the
 * tokenizer adds it). *out malloc'd. LB_ERR_UNSUPPORTED for a template of
 * no known family. */
LB_API lb_status lb_chat_prompt(const char *tmpl, const char *user, char **out);

typedef struct lb_runner lb_runner;

/* Which weights a quantization spec applies to. By default the runner
 * stores each specified weight matrix packed in its quantized format and
 * computes on the packed codes (no dequantized copy of the matrix is
 * kept); with fake = 1 it fake-quantizes instead (quantize, then
 * dequantize to fp32: the simulated path, for comparison). A spec whose
 * element is bf16, fp16 or fp32 at tensor granularity (not valid for
 * lb_quantize: there is nothing to scale) rounds the weights to that
 * format (stored as 16-bit codes unless fake). Matrices without a spec
 * keep their stored values: a GGUF's ggml block types (Q4_K, Q8_0, MXFP4
 * ...) are computed on in place, the file's bytes read from the model's
 * mapping (so the model must stay open while the runner lives), with the
 * product times the weight's "<name>.scale" tensor where the file has one
 * (NVFP4's second level, as llama.cpp applies it); float types (and
 * everything under fake) as fp32 copies. */
typedef struct lb_runner_options {
    int threads;             /* 0: one per CPU */
    const lb_qspec *attn;    /* q/k/v/o projections; NULL: as stored */
    const lb_qspec *mlp;     /* gate/up/down projections */
    const lb_qspec *embed;   /* token embedding */
    const lb_qspec *head;    /* output head (an untied one) */
    uint32_t max_ctx;        /* KV cache length; 0: the model's context, capped at 4096 */
    int fake;                /* 1: fake-quantize (fp32 copies) instead of computing on packed weights
                                (a GGUF's block-typed weights too: fp32 copies of their values) */
    /* W8A8: LB_FMT_INT8 or LB_FMT_FP8_E4M3 quantizes the inputs of the
     * attention and MLP projections per token on the fly (their weights
     * must then be int8 symmetric or fp8_e4m3, channel or tensor scale);
     * 0 (LB_FMT_FP32): activations stay fp32. See lb_runner_calibrate for
     * static scales. Not combinable with fake. */
    lb_format act;
    /* KV cache element format: 0 (LB_FMT_FP32), LB_FMT_BF16, LB_FMT_FP16,
     * LB_FMT_FP8_E4M3, LB_FMT_FP8_E5M2, LB_FMT_INT8 or LB_FMT_INT4 (the
     * last four with one fp32 scale per token and KV head). */
    lb_format kv;
    lb_progress_fn progress; /* optional: after each layer is loaded (done of n_layers) */
    void *progress_ctx;
    /* 1: compute as llama.cpp's CPU backend does: the input of every
     * matmul whose weight is stored in a GGUF block type (or f16/bf16) is
     * rounded to that type's ggml vec_dot type (Q8_0, Q8_1, Q8_K, f16,
     * bf16) first, as ggml quantizes it, and decoded back to fp32. The
     * token embedding (a row lookup) is not. Not combinable with act. */
    int ggml_act;
    /* LB_FMT_INT8: every product on packed weights with 4-bit (int4,
     * uint4, fp4) or int8 elements quantizes its input to int8 per block
     * of 32 (scale absmax / 127) and sums the integer products exactly,
     * on every token, prefill too (so ppl and kld measure what decode
     * computes): faster decode, slightly rounded activations (README,
     * "Decode modes"). Other matrices, fp32 copies and a GGUF's ggml
     * blocks stay exact. 0 (LB_FMT_FP32): exact. Not combinable with
     * act. */
    lb_format decode_act;
} lb_runner_options;

/* Called with each linear layer's input during a forward pass (for
 * calibration statistics): the layer's canonical weight name and the
 * activations, rows tokens x cols features, before the matmul. */
typedef void (*lb_activation_hook)(void *ctx, const char *weight_name, const float *x, size_t rows, size_t cols);

/* A Llama-family model ready to run: weights packed in their quantized
 * format, a GGUF's ggml blocks read in place from m (m must outlive the
 * runner), or fp32 copies (of the float types, or fake-quantized), a KV
 * cache in the chosen format. Only the architectures
 * the forward pass implements run (see lb_runner_supports); every tensor
 * it reads is checked, present and of the right shape, before anything is
 * allocated from the metadata, so the layer count, head sizes and
 * vocabulary are bounded by what the file holds (the context by max_ctx,
 * or the model's up to 4096). */
LB_API lb_status lb_runner_new(const lb_model *m, const lb_runner_options *o, lb_runner **out);
/* LB_OK if the forward pass implements the model over max_ctx positions
 * (0: lb_runner_new's default): architecture llama (tied or untied head,
 * Llama-3 rope scaling, q/k/v biases), mistral, qwen2 (q/k/v biases) or
 * qwen3 (q/k norms), and none of what it does not compute (experts,
 * sliding windows past max_ctx, other activations or norms, other rope
 * scalings, partial rotary, softcaps, scaled embeddings, parallel
 * residuals, tensors it would not read). LB_ERR_UNSUPPORTED naming the
 * architecture or feature otherwise. lb_runner_new checks it too. */
LB_API lb_status lb_runner_supports(const lb_model *m, uint32_t max_ctx);
LB_API void lb_runner_free(lb_runner *r);
LB_API void lb_runner_set_hook(lb_runner *r, lb_activation_hook hook, void *ctx);
/* Forgets the KV cache: the next tokens start at position 0. */
LB_API void lb_runner_reset(lb_runner *r);
/* Runs n tokens after those already in the cache (prefill processes them
 * together, with matrix-matrix products). logits: NULL, or room for
 * n x vocab floats (every position) or, with last_only, vocab floats. */
LB_API lb_status lb_runner_forward(lb_runner *r, const int32_t *tokens, size_t n, float *logits, int last_only);
/* W8A8 with static activation scales: runs the tokens (in windows of the
 * runner's context, each from position 0; the cache is reset before and
 * after) with fp32 activations, records each projection input's largest
 * magnitude, and from then on quantizes that input with the fixed scale
 * absmax / 127 (int8) or absmax / 448 (fp8_e4m3) instead of per token.
 * Calls add up (the maximum over all calibration tokens); a call that fails
 * records nothing. A non-finite activation is LB_ERR_NAN naming the
 * projection. LB_ERR_ARG without act. */
LB_API lb_status lb_runner_calibrate(lb_runner *r, const int32_t *tokens, size_t n);

/* What a runner holds in memory. */
typedef struct lb_runner_memory {
    uint64_t weights;        /* weight matrices as held (packed, or fp32 copies) */
    uint64_t weights_fp32;   /* what the same matrices would take as fp32 */
    uint64_t other;          /* embeddings kept fp32, norms, biases, rotary tables */
    uint64_t kv_cache;       /* the KV cache at its full context, scales included */
    uint64_t packed_matrices, fp32_matrices; /* how many matrices are held each way */
    lb_format decode_act;    /* options.decode_act as built */
    uint64_t int8_act_matrices; /* matrices it applies to (packed, of a format its kernels take) */
    const char *int8_kernels;   /* the kernel set of that mode on this CPU ("avx512-vnni-vbmi-bf16",
                                   "avx2", "neon", ...: which formats it takes depends on it) */
} lb_runner_memory;
LB_API void lb_runner_memory_get(const lb_runner *r, lb_runner_memory *out);

/* Values that a low-precision path clamped to its largest code instead of
 * rounding (counted over the runner's life, calibration excluded): the KV
 * cache (of the values stored in a cache that is not fp32; fp16 saturates
 * from 65520 on, see kvcache.h) and W8A8 activations (of the values
 * quantized; only static --calib scales clip). */
typedef struct lb_runner_saturation {
    uint64_t kv_saturated, kv_values;
    uint64_t act_saturated, act_values;
} lb_runner_saturation;
LB_API void lb_runner_saturation_get(const lb_runner *r, lb_runner_saturation *out);

LB_API uint32_t lb_runner_vocab_size(const lb_runner *r);
LB_API uint32_t lb_runner_position(const lb_runner *r); /* tokens in the cache */
LB_API uint32_t lb_runner_context(const lb_runner *r);  /* the most tokens the cache holds */

/* ===== Evaluation: perplexity and KL divergence =====
 *
 * llama.cpp's perplexity method: the tokens are cut into non-overlapping
 * windows of ctx tokens (the first of each replaced by BOS when the
 * tokenizer has one); each window is run from an empty cache and only the
 * second half is scored: the logits at positions ctx/2 .. ctx-2 predict
 * the tokens after them (ctx/2 - 1 per window), so every scored token sees
 * at least ctx/2 tokens of context. */

/* -log softmax(logits)[target], with the log-sum-exp in double. */
LB_API double lb_nll(const float *logits, size_t vocab, int32_t target);

/* Running mean and spread of negative log-likelihoods (Welford's
 * updates: no cancellation when every value is the same). */
typedef struct lb_ppl_acc {
    double mean, m2; /* m2: sum of squared deviations from the mean */
    uint64_t count;
} lb_ppl_acc;
LB_API void lb_ppl_add(lb_ppl_acc *a, double nll);
/* ppl = exp(mean nll); err its standard error, exp(mean) x sd / sqrt(count - 1). */
LB_API void lb_ppl_get(const lb_ppl_acc *a, double *ppl, double *err);


typedef struct lb_eval_options {
    uint32_t ctx;          /* window length (default 512 when 0) */
    size_t max_chunks;     /* 0: every whole window of the text */
    int32_t bos;           /* the BOS id, or -1 */
    lb_progress_fn progress;
    void *progress_ctx;
    /* optional, lb_perplexity only, instead of or with progress: after each
     * window, the perplexity of the windows scored so far and its standard
     * error (llama.cpp prints these as it goes) */
    void (*progress_ppl)(void *ctx, size_t done, size_t total, double ppl, double ppl_err);
    /* optional, lb_kld only: a text file of every scored token (window,
     * position, KLD, NLL base, NLL quant; tab-separated, one line each
     * after a "#" header line), written under the output rule below, so
     * two runs on the same windows can be compared token by token
     * (paired differences) */
    const char *save_tokens;
} lb_eval_options;

typedef struct lb_ppl_result {
    double ppl, ppl_err;
    uint64_t tokens;       /* scored */
    size_t chunks;
    double seconds, tokens_per_s; /* tokens run through the model (all of each window) per second */
} lb_ppl_result;

/* Non-finite logits, or a perplexity that overflows (finite NLLs whose
 * mean passes 709 nats), are LB_ERR_NAN naming the window and position. */
LB_API lb_status lb_perplexity(lb_runner *r, const int32_t *tokens, size_t n, const lb_eval_options *o, lb_ppl_result *out);

typedef struct lb_kld_result {
    double kld_mean, kld_err, kld_median, kld_p99, kld_max; /* KL(base || quant) per scored token, nats */
    double top1_agreement;  /* fraction of scored tokens whose argmax agrees */
    double ppl_base, ppl_base_err, ppl, ppl_err;
    double dppl, dppl_err;  /* ppl - ppl_base, its error from the paired per-token differences */
    uint64_t tokens;
    size_t chunks;
    double seconds;
} lb_kld_result;

/* KL divergence of quant's next-token distributions from base's on the
 * same windows. The base distributions come from `base` (a runner), or,
 * with base NULL, from the file load_base; save_base (optional) stores
 * them (log-probabilities, 16 bits each over each position's range:
 * error below 1/131070 of that range) for later runs. A load_base file
 * must match the run (vocabulary, windows, token ids, size) and hold a
 * valid log-probability range at every position (LB_ERR_PARSE naming the
 * position). A KLD, NLL or perplexity that is not finite is LB_ERR_NAN
 * naming the window and position, as in lb_perplexity. */
LB_API lb_status lb_kld(lb_runner *base, lb_runner *quant, const int32_t *tokens, size_t n, const lb_eval_options *o,
                 const char *save_base, const char *load_base, lb_kld_result *out);
/* The bytes save_base writes for `chunks` windows of ctx tokens (ctx >= 4)
 * over a vocabulary: a 32-byte header and 8 + 2 vocab per scored token;
 * UINT64_MAX if that overflows. */
LB_API uint64_t lb_kld_base_bytes(uint32_t vocab, uint32_t ctx, uint64_t chunks);

/* ===== Evaluation: benchmarks by log-likelihood =====
 *
 * A task is a list of items read from a benchmark's published file. Each
 * item has 2..LB_TASK_MAX_CHOICES choices and the index of the right one;
 * choice c is scored as the log-likelihood of its continuation given its
 * context, joined by one space (lm-evaluation-harness's target delimiter):
 * text = preamble + few-shot examples + context_c + " " + continuation_c.
 * Most tasks share one context among the choices; Winogrande's partial
 * scoring has one context per choice (the sentence up to the blank, the
 * option filled in) and one shared continuation (the rest). LAMBADA's
 * items have one choice: the passage's last word. */

#define LB_TASK_MAX_CHOICES 16

typedef enum lb_task_kind {
    LB_TASK_HELLASWAG = 1,  /* llama.cpp's 6-line text, or rowanz's JSONL (ctx_a, ctx_b, activity_label,
                               endings, label) preprocessed as lm-eval does */
    LB_TASK_ARC = 2,        /* AI2's JSONL: question.stem, question.choices[].text/label, answerKey */
    LB_TASK_MMLU = 3,       /* Hendrycks' CSVs question,A,B,C,D,answer: one file or a directory of them */
    LB_TASK_PIQA = 4,       /* goal/sol1/sol2 JSONL and its labels file (one 0/1 per line) */
    LB_TASK_WINOGRANDE = 5, /* sentence with '_', option1, option2, answer (1 or 2) */
    LB_TASK_LAMBADA = 6,    /* OpenAI's JSONL {"text"} or the original plain text, one passage per line */
    LB_TASK_MC = 7          /* lowbit's JSONL: {"context": S, "choices": [S, ...], "label": N} */
} lb_task_kind;

/* "hellaswag", "arc", "mmlu", "piqa", "winogrande", "lambada", "mc"; NULL
 * for other values. And back (LB_ERR_ARG naming the choices). */
LB_API const char *lb_task_kind_name(lb_task_kind k);
LB_API lb_status lb_task_kind_parse(const char *name, lb_task_kind *out);

typedef struct lb_task_options {
    /* MMLU: 0 (default) lettered choices as lm-eval's mmlu prompts them
     * (the subject line, the question, "A. ..." to "D. ...", "Answer:",
     * choices " A" to " D"); 1 the cloze form ("Question: ...\nAnswer:",
     * the answer's text as the choice) */
    int mmlu_cloze;
    /* PIQA: the labels file; NULL: PATH with ".jsonl" replaced by
     * "-labels.lst", as the published valid.jsonl / valid-labels.lst */
    const char *labels;
} lb_task_options;

typedef struct lb_task lb_task;

/* Reads a benchmark file (or an MMLU directory: every *.csv in it, in
 * name order). A malformed file is LB_ERR_PARSE naming the file, the line
 * and the field; a file without items is LB_ERR_PARSE too. */
LB_API lb_status lb_task_load(lb_task_kind kind, const char *path, const lb_task_options *o, lb_task **out);
/* The same from bytes in memory (`what` names them in messages); MMLU:
 * one CSV (its subject from `what`'s file name). PIQA needs the labels'
 * bytes too (labels, labels_len; ignored by other kinds). */
LB_API lb_status lb_task_parse(lb_task_kind kind, const char *text, size_t len, const char *labels, size_t labels_len,
                               const char *what, const lb_task_options *o, lb_task **out);
LB_API void lb_task_free(lb_task *t);
LB_API lb_task_kind lb_task_get_kind(const lb_task *t);
LB_API size_t lb_task_size(const lb_task *t);

typedef struct lb_task_item {
    uint32_t n_choices;
    uint32_t label;                                 /* the right choice */
    const char *preamble;                           /* before any few-shot examples ("" if none) */
    const char *context[LB_TASK_MAX_CHOICES];      /* few-shot examples included */
    const char *continuation[LB_TASK_MAX_CHOICES]; /* without the delimiter */
    const char *group;                              /* MMLU's subject, else "" */
    uint64_t line;                                  /* where the item starts in its file (1-based) */
} lb_task_item;
/* Item i (0-based); the strings belong to t. LB_ERR_ARG past the end. */
LB_API lb_status lb_task_get(const lb_task *t, size_t i, lb_task_item *out);

/* Keeps the first n items (n >= size: all): --limit's fixed subset. */
LB_API void lb_task_limit(lb_task *t, size_t n);

/* Few-shot: prefixes each item's contexts with k solved examples from
 * `examples` (context, " ", right continuation, "\n\n" each; after the
 * item's preamble), drawn without replacement by a generator seeded with
 * `seed` and the item's index, skipping any example whose context and
 * continuations equal the item's (so examples = t itself never shows an
 * item its own answer). Needs k < size of examples (LB_ERR_ARG). */
LB_API lb_status lb_task_fewshot(lb_task *t, const lb_task *examples, uint32_t k, uint64_t seed);

/* One item's scores under one model. */
typedef struct lb_item_score {
    double loglik[LB_TASK_MAX_CHOICES];   /* sum of log p over the continuation's tokens */
    uint32_t tokens[LB_TASK_MAX_CHOICES]; /* continuation tokens (lm-eval: the tokens of context + " " +
                                             continuation after those of the context alone) */
    double loglik_tok[LB_TASK_MAX_CHOICES]; /* mean log p over the tokens after the choices' common
                                               token prefix (llama.cpp's HellaSwag score) */
    uint8_t greedy[LB_TASK_MAX_CHOICES];  /* every continuation token was the model's argmax */
    uint8_t correct;          /* argmax loglik is the label (ties: the first); LAMBADA: greedy */
    uint8_t correct_norm;     /* argmax loglik / characters of the continuation (lm-eval's acc_norm) */
    uint8_t correct_norm_tok; /* argmax loglik_tok (llama.cpp's) */
    uint32_t tokens_run;      /* tokens through the model for this item (shared prefix once) */
} lb_item_score;

typedef struct lb_task_score_options {
    lb_progress_fn progress; /* optional: after each item */
    void *progress_ctx;
} lb_task_score_options;

/* Scores every item: for each, the tokens the choices share are run once
 * from an empty cache and each choice continues from that cache
 * (lb_runner_rewind), so a 4-choice item costs its context once plus four
 * continuations. scores: room for lb_task_size(t). An item longer than the
 * runner's context, or one with nothing before its continuation (no BOS
 * and an empty context), is LB_ERR_ARG naming it; non-finite logits
 * LB_ERR_NAN naming the item. */
LB_API lb_status lb_task_score(lb_runner *r, const lb_tokenizer *tok, const lb_task *t, const lb_task_score_options *o,
                               lb_item_score *scores);

/* ===== Evaluation: custom evals =====
 *
 * A JSON Lines file of prompts with what a right answer looks like, one
 * object per line:
 *   {"prompt": "...", "expected": "...", "match": "exact"}   the generated
 *       text, stripped of white space at both ends, equals expected's (stripped)
 *   {"prompt": "...", "expected": "...", "match": "contains"}  expected
 *       occurs in the generated text
 *   {"prompt": "...", "expected": "REGEX", "match": "regex"}  a POSIX
 *       extended regular expression matches somewhere in it
 *   {"prompt": "...", "choices": ["...", ...], "label": N, "match": "choices"}
 *       scored by log-likelihood as a multiple-choice task item (the
 *       prompt as context), no generation; right when the label's choice
 *       is the most likely (acc)
 * "match" defaults to "exact" with "expected", "choices" with "choices".
 * Optional: "id" (a string, echoed in results), "stop" (generation ends at
 * this string, which is cut off), "max_tokens" (1..4096). Generation is
 * greedy; it ends at the end-of-text token, the stop string or the token
 * limit. */

typedef enum lb_match { LB_MATCH_EXACT = 1, LB_MATCH_CONTAINS = 2, LB_MATCH_REGEX = 3, LB_MATCH_CHOICES = 4 } lb_match;

typedef struct lb_custom lb_custom;

typedef struct lb_custom_item {
    const char *id;          /* "" when the line has none */
    const char *prompt;
    lb_match match;
    const char *expected;    /* NULL for choices */
    uint32_t n_choices, label;
    const char *choices[LB_TASK_MAX_CHOICES];
    const char *stop;        /* NULL: the run's */
    uint32_t max_tokens;     /* 0: the run's */
    uint64_t line;
} lb_custom_item;

/* Reads a custom eval file (LB_ERR_PARSE naming the line and the field;
 * a regex that does not compile is refused with regcomp's reason). */
LB_API lb_status lb_custom_load(const char *path, lb_custom **out);
LB_API lb_status lb_custom_parse(const char *text, size_t len, const char *what, lb_custom **out);
LB_API void lb_custom_free(lb_custom *c);
LB_API size_t lb_custom_size(const lb_custom *c);
LB_API lb_status lb_custom_get(const lb_custom *c, size_t i, lb_custom_item *out);
LB_API void lb_custom_limit(lb_custom *c, size_t n);

typedef struct lb_custom_options {
    uint32_t max_tokens;     /* 0: 64 */
    const char *stop;        /* NULL: none (end-of-text and the token limit only) */
    const char *chat_template; /* non-NULL: each prompt as one user turn of this template (lb_chat_prompt) */
    lb_progress_fn progress;
    void *progress_ctx;
} lb_custom_options;

typedef struct lb_custom_result {
    char *output;            /* the generated text (malloc'd; "" for choices items) */
    uint8_t correct;
    uint8_t stopped;         /* 1: at the stop string or end-of-text; 0: at the token limit or the context's end */
    uint32_t prompt_tokens, generated_tokens;
    lb_item_score choices;   /* choices items: their scores */
} lb_custom_result;

/* Runs every item; results: room for lb_custom_size(c), freed with
 * lb_custom_results_free. A prompt beyond the runner's context is
 * LB_ERR_ARG naming the item; non-finite logits LB_ERR_NAN. */
LB_API lb_status lb_custom_run(lb_runner *r, const lb_tokenizer *tok, const lb_custom *c, const lb_custom_options *o,
                               lb_custom_result *results);
LB_API void lb_custom_results_free(lb_custom_result *results, size_t n);

/* Rewinds the KV cache to pos tokens (pos <= lb_runner_position): the next
 * tokens continue from there, as if the later ones had never been run.
 * LB_ERR_ARG past the cache's position. */
LB_API lb_status lb_runner_rewind(lb_runner *r, uint32_t pos);

/* ===== Evaluation: is a difference noise? =====
 *
 * Two models scored on the same items give paired outcomes. These
 * statistics say whether their difference could be chance. */

/* An accuracy's standard error as lm-eval gives it: the sample standard
 * deviation of the 0/1 outcomes over sqrt(n): sqrt(p (1 - p) / (n - 1)). */
LB_API double lb_binomial_se(uint64_t correct, uint64_t n);

/* McNemar's exact test: b items only the first model got right, c only the
 * second; the two-sided p-value 2 P(X <= min(b, c)) for X ~ Binomial(b + c,
 * 1/2), at most 1 (1 when b + c = 0). Computed in log space: exact to
 * double rounding for any counts. */
LB_API double lb_mcnemar_exact(uint64_t b, uint64_t c);

typedef struct lb_paired_result {
    uint64_t n;                 /* items */
    double mean_a, mean_b;      /* mean outcome of each (accuracy for 0/1 outcomes) */
    double diff;                /* mean_b - mean_a */
    double diff_se;             /* the paired standard error: sd(b_i - a_i) / sqrt(n) */
    double ci_lo, ci_hi;        /* the 95% percentile bootstrap interval of diff */
    uint64_t only_a, only_b;    /* 0/1 outcomes: items only a / only b got right */
    double p_mcnemar;           /* 0/1 outcomes: lb_mcnemar_exact(only_a, only_b); else NaN */
    double mde;                 /* the smallest |diff| this many items detect with 80% power at 5%
                                   (two-sided): (1.959964 + 0.841621) sd(b_i - a_i) / sqrt(n),
                                   the sd at least that of one disagreement in n */
    int significant;            /* 0/1 outcomes: p_mcnemar < 0.05; else the bootstrap interval excludes 0 */
} lb_paired_result;

/* The paired comparison of outcomes a[i] and b[i] (the same n items):
 * resamples items with replacement `resamples` times (0: 10000) by
 * xorshift64* seeded with seed (0: 1) -- resample r draws n indices
 * floor(u n), u the generator's next 53 bits / 2^53 -- and takes the
 * 2.5th and 97.5th percentiles of the resampled differences with linear
 * interpolation between order statistics (numpy's default). binary: the
 * outcomes are 0/1 (McNemar's test applies). LB_ERR_ARG for n < 2. */
LB_API lb_status lb_paired_compare(const double *a, const double *b, size_t n, int binary, uint32_t resamples,
                                   uint64_t seed, lb_paired_result *out);

/* ===== Napkin math (lowbit plan) =====
 *
 * What a precision buys before anything is quantized: weight memory, KV
 * cache per token, concurrency, and decode/prefill bounds on a GPU, every
 * figure derived from the stated inputs. */

/* A decoder's shape, from a config.json, a checkpoint or a preset. */
typedef struct lb_shape {
    char name[64];
    uint64_t n_layers, dim, n_heads, n_kv_heads, head_dim, hidden_dim, vocab_size, max_ctx;
    int tied_embeddings, qkv_bias, o_bias, qk_norm;
    /* mixture of experts: MoE layers replace the dense MLP with n_experts
     * routed experts (experts_per_token active) plus shared experts */
    uint64_t n_experts, experts_per_token, moe_hidden_dim;
    uint64_t n_shared_experts, shared_hidden_dim; /* each shared expert's width */
    int shared_expert_gate;                       /* Qwen-MoE: a dim -> 1 gate on the shared expert */
    uint64_t n_dense_layers;                      /* leading layers that keep a dense MLP */
    /* which layers hold a KV cache: full attention caches every token,
     * sliding-window layers at most `sliding_window`, the rest (linear
     * attention, state-space) none */
    uint64_t n_full_layers, n_sliding_layers, sliding_window;
    /* multi-head latent attention (DeepSeek): one compressed KV vector of
     * kv_lora_rank + qk_rope_head_dim per token and layer */
    uint64_t q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
} lb_shape;

typedef struct lb_param_count {
    uint64_t total;
    uint64_t active;     /* used per token: MoE layers count experts_per_token routed experts */
    uint64_t embedding;  /* the token embedding */
    uint64_t lm_head;    /* 0 when tied to the embedding */
    uint64_t attention, mlp, norms, router;
} lb_param_count;

/* From config.json text (Hugging Face names: hidden_size,
 * num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
 * intermediate_size, vocab_size, tie_word_embeddings, num_experts /
 * num_local_experts / n_routed_experts, num_experts_per_tok,
 * moe_intermediate_size, n_shared_experts / shared_expert_intermediate_size,
 * first_k_dense_replace, layer_types, sliding_window,
 * full_attention_interval, q_lora_rank, kv_lora_rank, ...; a text_config
 * object is read in place of the top level). A missing required field is
 * LB_ERR_PARSE naming it. */
LB_API lb_status lb_shape_from_config(const char *json, size_t len, const char *what, lb_shape *out);
/* From an open model: its architecture and its tensors' shapes. */
LB_API lb_status lb_shape_from_model(const lb_model *m, lb_shape *out);
/* Built-in shapes by name ("llama-3-8b", "llama-3-70b", "mixtral-8x7b",
 * "deepseek-v3", ...); LB_ERR_ARG listing them if unknown. */
LB_API lb_status lb_shape_preset(const char *name, lb_shape *out);
/* The preset names, NULL-terminated. */
LB_API const char *const *lb_shape_preset_names(void);
LB_API void lb_shape_params(const lb_shape *s, lb_param_count *out);

/* A GPU's figures (the built-in table: src/plan/gpus.def, each figure
 * with its source). Peaks are DENSE: vendors often quote sparse peaks,
 * twice as high. */
typedef struct lb_gpu {
    char name[32];         /* id: "h100-sxm" */
    char display[64];      /* "NVIDIA H100 SXM5 80GB" */
    double mem_bytes;      /* memory */
    double bw_bytes_s;     /* memory bandwidth, bytes/s */
    double bf16_flops, fp8_flops, fp4_flops, int8_ops; /* dense tensor peaks per second; 0 where absent */
} lb_gpu;

LB_API size_t lb_gpu_count(void);
LB_API const lb_gpu *lb_gpu_at(size_t i);
/* Case-insensitive; LB_ERR_ARG listing the known GPUs if unknown. */
LB_API lb_status lb_gpu_find(const char *name, lb_gpu *out);

typedef enum lb_compute { LB_COMPUTE_BF16, LB_COMPUTE_FP8, LB_COMPUTE_FP4, LB_COMPUTE_INT8 } lb_compute;

typedef struct lb_plan_request {
    lb_shape shape;
    lb_gpu gpu;
    unsigned n_gpus;           /* tensor parallel: memory, bandwidth and peak add up (ideal) */
    lb_qspec weights;          /* spec of the weight matrices (rows: output features, cols: input) */
    int quantize_embeddings;   /* 0: token embedding and output head stay 16-bit */
    lb_qspec kv;               /* KV cache spec, one row per token and KV head, head_dim columns */
    uint64_t ctx;              /* tokens per sequence */
    uint64_t batch;            /* sequences decoded together; 0: as many as fit */
    double reserve;            /* fraction of GPU memory held back for the runtime (activations, workspace) */
    lb_compute compute;        /* tensor-core precision of the prefill matmuls */
} lb_plan_request;

typedef struct lb_plan {
    lb_param_count params;
    double weight_bits;        /* bits per weight of the weight matrices, scales included */
    double bytes_matrices;     /* the quantized matrices */
    double bytes_16bit;        /* kept at 16 bits: norms, biases, router, and (unless quantized) embedding and head */
    double bytes_weights;      /* both */
    double kv_bits;            /* bits per cached element, scales included */
    double kv_bytes_per_token; /* one token in every KV layer */
    double kv_bytes_per_seq;   /* a sequence of ctx tokens (sliding layers hold at most their window) */
    double mem_total, mem_reserve, mem_for_kv; /* mem_for_kv < 0: the weights do not fit */
    int fits;
    uint64_t max_batch;        /* sequences of ctx tokens whose KV fits */
    uint64_t batch;            /* the batch the "batch" bounds use */
    /* decode: one step reads the weights it uses (MoE: the experts the
     * batch routes to, expected under uniform routing) and every sequence's KV */
    double decode_bytes_1, decode_flops_1, decode_tps_1;   /* batch 1: tokens/s upper bound */
    double decode_bytes_b, decode_flops_b, decode_tps_b;   /* at `batch`: tokens/s summed over sequences */
    int decode_compute_bound_1, decode_compute_bound_b;
    /* prefill of one sequence of ctx tokens */
    double prefill_flops, prefill_compute_s, prefill_memory_s, prefill_s, prefill_tps;
    int prefill_compute_bound;
    double peak_flops, bandwidth; /* of all GPUs, for the chosen compute precision */
} lb_plan;

/* LB_ERR_ARG for an invalid request (no GPU figures, ctx 0, a compute
 * precision the GPU lacks); a model that does not fit is not an error:
 * fits = 0 and max_batch = 0. */
LB_API lb_status lb_plan_compute(const lb_plan_request *r, lb_plan *out);

/* ===== The quantized model =====
 *
 * An lb_qmodel is what `lowbit quantize` writes and what the runner, the
 * algorithms (src/algo) and the writers (src/export) share: an overlay on
 * an open lb_model that says, per tensor (same index as lb_model_tensor),
 * what the output holds:
 *   STORED     as the file stores it (norms, biases, anything not a weight)
 *   REPLACED   fp32 values a transform folded in (e.g. SmoothQuant's scales
 *              into a norm), written in the output's 16-bit dtype
 *   QUANTIZED  quantized under a spec: the quantized tensor an algorithm
 *              set (GPTQ), or one made on demand, deterministically, from
 *              the tensor's values (stored, or the replacement)
 *   KEPT       a weight kept in 16-bit (a `keep` rule; the output head)
 * plus what engines need beside the weights: how each linear layer's
 * input is quantized (lb_qact) and its calibrated range, fused groups
 * (q/k/v, gate/up of a layer) that share one global scale, and the KV
 * cache format with calibrated per-layer k/v ranges.
 *
 * Memory: nothing is quantized or copied until asked (a replacement and a
 * set quantized tensor are held); lb_qmodel_quantized makes one tensor at
 * a time, so a writer streams a model larger than RAM. The model must
 * outlive the qmodel. Not thread-safe for writes; concurrent reads are
 * fine. */
typedef struct lb_qmodel lb_qmodel;

typedef enum lb_qstate {
    LB_QSTATE_STORED = 0,
    LB_QSTATE_REPLACED = 1,
    LB_QSTATE_QUANTIZED = 2,
    LB_QSTATE_KEPT = 3
} lb_qstate;

/* How a linear layer's input activations are quantized at inference. */
typedef enum lb_act_mode {
    LB_ACT_NONE = 0,    /* 16-bit activations (weight-only schemes) */
    LB_ACT_DYNAMIC = 1, /* scales computed from each input at run time (per token, or per group) */
    LB_ACT_STATIC = 2,  /* one scale per tensor fixed from calibration (input_amax) */
    LB_ACT_LOCAL = 3    /* block scales at run time under a calibrated static tensor scale (NVFP4 W4A4:
                           compressed-tensors' dynamic "local") */
} lb_act_mode;

typedef struct lb_qact {
    lb_act_mode mode;
    lb_qspec spec;      /* element and granularity (token, tensor or group) of the activations */
} lb_qact;

typedef struct lb_qentry {
    const lb_tensor *tensor; /* the stored tensor: canonical name, shape, stored dtype */
    lb_qstate state;
    lb_qspec spec;           /* QUANTIZED: the weight spec */
    int replaced;            /* 1: the values were replaced (REPLACED, or QUANTIZED from a replacement) */
    int has_qtensor;         /* QUANTIZED: an algorithm set the quantized tensor (else made on demand) */
    lb_qact act;             /* input activations (linear weights of a QUANTIZED/KEPT layer); mode NONE otherwise */
    float input_amax;        /* calibrated largest |input| of this layer; 0: not calibrated */
    int fused_group;         /* -1, or an id shared by the layers an engine fuses (q/k/v, gate/up) */
    float group_amax;        /* two-level specs: the largest |w| over the fused group, from which the
                                shared tensor (global) scale is made; 0: the tensor's own */
    lb_dtype ggml;           /* stored in a GGUF as this ggml type (lb_qmodel_set_ggml); LB_DT_COUNT: not */
    int has_imatrix;         /* an importance vector was set (lb_qmodel_set_imatrix) */
} lb_qentry;

/* A qmodel over m with every tensor STORED, fused groups found from the
 * canonical names, no activation quantization, no KV format. */
LB_API lb_status lb_qmodel_new(const lb_model *m, lb_qmodel **out);
LB_API void lb_qmodel_free(lb_qmodel *q);
LB_API const lb_model *lb_qmodel_model(const lb_qmodel *q);
LB_API size_t lb_qmodel_count(const lb_qmodel *q);
/* By canonical or file name: LB_ERR_ARG if absent (index untouched). */
LB_API lb_status lb_qmodel_find(const lb_qmodel *q, const char *name, size_t *index);
LB_API lb_status lb_qmodel_entry(const lb_qmodel *q, size_t i, lb_qentry *out);

/* Quantize tensor i under spec (a 2-D weight; the spec is validated and
 * must fit the shape). Drops a quantized tensor set earlier. */
LB_API lb_status lb_qmodel_set_spec(lb_qmodel *q, size_t i, const lb_qspec *spec);
/* Keep weight i in 16-bit (undoes a spec). */
LB_API lb_status lb_qmodel_keep(lb_qmodel *q, size_t i);
/* Replace tensor i's values (n_elements floats, copied; finite). A
 * QUANTIZED tensor stays quantized, now from these values. */
LB_API lb_status lb_qmodel_replace(lb_qmodel *q, size_t i, const float *values);
/* Set the quantized tensor of a QUANTIZED entry (its spec and shape must
 * match); the qmodel takes ownership, also on failure. */
LB_API lb_status lb_qmodel_set_qtensor(lb_qmodel *q, size_t i, lb_qtensor *qt);
LB_API lb_status lb_qmodel_set_act(lb_qmodel *q, size_t i, const lb_qact *act);
LB_API lb_status lb_qmodel_set_input_amax(lb_qmodel *q, size_t i, float amax);
/* Store tensor i as ggml type t in a GGUF (lb_export_gguf): its values in
 * the quantized model become dequantize(quantize(source)) in t, so the
 * runner evaluates what the file holds. Drops a spec (the entry is KEPT,
 * or REPLACED, or STORED for a tensor that is no weight); t = LB_DT_COUNT
 * undoes it. LB_ERR_ARG when t has no ggml id or a row (the innermost
 * dimension) is not whole blocks of t. The Hugging Face writers
 * (lb_export) refuse a qmodel with such entries. */
LB_API lb_status lb_qmodel_set_ggml(lb_qmodel *q, size_t i, lb_dtype t);
/* Per-column importance of tensor i (n = its row length, or row length x
 * experts; copied; finite, >= 0) for quantizers that weigh errors by it
 * (the K-quants and IQ4 in ggml); NULL clears it. */
LB_API lb_status lb_qmodel_set_imatrix(lb_qmodel *q, size_t i, const float *w, size_t n);

/* LLM.int8()-style outlier columns (Dettmers et al. 2022): the input
 * columns cols[0..n) of QUANTIZED weight i (ascending, each once, below
 * the row length, fewer than all; copied) stay in 16-bit (the qmodel's
 * dtype) beside the quantized rest. The spec quantizes the weight with
 * those columns zeroed (its range, and a fused group's, from the rest), and
 * the runner computes y = Q(W_rest) x_rest + W_out x_out: x_rest is the
 * input with those features zeroed (what quantized activations, per token
 * or static, see), x_out those features in fp32. lb_qmodel_values_f32
 * gives the dequantized rest with the 16-bit columns in place. n = 0
 * clears them; lb_qmodel_keep and lb_qmodel_set_ggml drop them; a set
 * quantized tensor is dropped (made anew from the rest). LB_ERR_ARG for an
 * entry that is not QUANTIZED or is an embedding (a lookup has no input
 * features). No engine format carries split columns: lb_export,
 * lb_export_check and lb_export_gguf refuse a qmodel that has any
 * (LB_ERR_UNSUPPORTED, nothing written). */
LB_API lb_status lb_qmodel_set_outliers(lb_qmodel *q, size_t i, const uint32_t *cols, size_t n);
/* Entry i's outlier columns (borrowed, valid until the entry changes) and
 * their count in *n (may be NULL); NULL and 0 when it has none. */
LB_API const uint32_t *lb_qmodel_outliers(const lb_qmodel *q, size_t i, size_t *n);

/* What the weights take, counted as the runner holds them: a QUANTIZED
 * weight its codes, scales and zero points (lb_qspec_bits_per_value, at
 * its full width) plus, per outlier column, 16 bits (32 when the dtype is
 * f32) per row and a 32-bit column index; KEPT and REPLACED ones 16 bits
 * each (32 for f32); a ggml type its blocks' bytes; STORED ones as
 * stored. */
typedef struct lb_qmodel_size {
    uint64_t weight_params;       /* elements of every weight (lb_tensor_is_weight) */
    double weight_bits;           /* their bits */
    double bits_per_weight;       /* weight_bits / weight_params */
    uint64_t layer_params;        /* of them, the decoder layers' (model.layers.N.*) */
    double layer_bits;
    double layer_bits_per_weight; /* layer_bits / layer_params */
    uint64_t outlier_columns;     /* 16-bit outlier columns over all weights */
    uint64_t outlier_params;      /* the weights in them */
} lb_qmodel_size;
LB_API lb_status lb_qmodel_size_of(const lb_qmodel *q, lb_qmodel_size *out);
/* The bits of tensor i as lb_qmodel_size_of counts them. */
LB_API lb_status lb_qmodel_entry_bits(const lb_qmodel *q, size_t i, double *bits);

/* The values tensor i has before quantization: the replacement, or the
 * stored values as fp32 (dst: n_elements floats). */
LB_API lb_status lb_qmodel_source_f32(const lb_qmodel *q, size_t i, float *dst);
/* The values tensor i has in the quantized model, as fp32: dequantized
 * when QUANTIZED, rounded to 16-bit when KEPT or REPLACED (bf16 unless
 * lb_qmodel_set_dtype), as stored otherwise. */
LB_API lb_status lb_qmodel_values_f32(const lb_qmodel *q, size_t i, float *dst, int threads);
/* The quantized tensor of a QUANTIZED entry: the one set (*owned = 0:
 * borrowed) or a new one made from the source values (*owned = 1: the
 * caller frees it). Deterministic: the same bytes every call. */
LB_API lb_status lb_qmodel_quantized(const lb_qmodel *q, size_t i, int threads, lb_qtensor **out, int *owned);

/* The 16-bit dtype of KEPT and REPLACED tensors and of 16-bit scales in
 * the output: LB_DT_BF16 (default), LB_DT_F16 or LB_DT_F32. */
LB_API lb_status lb_qmodel_set_dtype(lb_qmodel *q, lb_dtype dtype);
LB_API lb_dtype lb_qmodel_dtype(const lb_qmodel *q);

/* KV cache: LB_FMT_FP32 (none, default) or LB_FMT_FP8_E4M3 with one
 * static scale per layer for k and for v (amax / 448, from calibration). */
LB_API lb_status lb_qmodel_set_kv(lb_qmodel *q, lb_format kv);
LB_API lb_format lb_qmodel_kv(const lb_qmodel *q);
LB_API lb_status lb_qmodel_set_kv_amax(lb_qmodel *q, uint32_t layer, float k_amax, float v_amax);
LB_API lb_status lb_qmodel_kv_amax(const lb_qmodel *q, uint32_t layer, float *k_amax, float *v_amax);

/* A runner over the quantized model: weights as the qmodel says (packed
 * when QUANTIZED), activations quantized as each entry's lb_qact says
 * (calibrated scales when static), the KV cache in the qmodel's format.
 * o's attn/mlp/embed/head/act must be unset (the qmodel says). */
LB_API lb_status lb_runner_from_qmodel(const lb_qmodel *q, const lb_runner_options *o, lb_runner **out);

/* The quantized model a quantized checkpoint holds (lb_model_quantization
 * not NULL), as an engine computes it:
 *   weights      a module whose inputs are quantized too QUANTIZED with
 *                the file's codes and scales, byte for byte, where lowbit's
 *                layout holds them (FP8 and INT8 per tensor, channel or
 *                group; NVFP4; MXFP4; MXFP8): scales applied in fp32, as a
 *                W8A8/W4A4 GEMM does; weight-only modules (and FP8 128x128
 *                blocks) STORED, dequantized as the format's package does,
 *                in the scale's dtype, as a weight-only kernel (Marlin) does
 *   activations  each module's input quantization from the config: dynamic
 *                per token or per group (FP8, INT8, MX), static per tensor
 *                (input_amax from input_scale: amax = scale x 448, or x 127
 *                for int8), NVFP4 "local" (input_amax from the global scale)
 *   KV cache     fp8_e4m3 with per-layer k/v ranges from k_scale, v_scale
 * (scale conventions: README, "Reading quantized checkpoints"). The qmodel's
 * dtype is f32 (static scales used as stored). LB_CKPT_WEIGHTS_ONLY: the
 * weights alone (16-bit activations, unquantized KV cache). A config lowbit
 * cannot simulate (asymmetric or output activations, an NVFP4 KV cache ...)
 * is LB_ERR_UNSUPPORTED naming the module and what, unless weights-only; a
 * missing, NaN, negative or zero scale is LB_ERR_PARSE naming the tensor. A
 * model that is not a quantized checkpoint gives lb_qmodel_new's qmodel. */
#define LB_CKPT_WEIGHTS_ONLY 1u
LB_API lb_status lb_qmodel_from_checkpoint(const lb_model *m, unsigned flags, lb_qmodel **out);

/* ===== Recipes =====
 *
 * Ordered rules, first match wins, from canonical Hugging Face tensor
 * names to what happens to them. A pattern is a glob (* matches any run
 * of characters, dots included; ? one character; [...] a set) or
 * "re:REGEX" (POSIX extended, matched against the whole name). Rules
 * apply to weights (lb_tensor_is_weight); a tensor no rule matches stays
 * as the defaults say (16-bit: KEPT). Applying a recipe in which a rule
 * matches no tensor is LB_ERR_ARG naming the rule. */
typedef struct lb_recipe lb_recipe;

typedef struct lb_rule {
    const char *pattern;
    int keep;            /* 1: keep 16-bit; else weights quantized under spec */
    lb_qspec spec;
    lb_qact act;         /* input activations of the matched layers */
} lb_rule;

LB_API lb_status lb_recipe_new(lb_recipe **out);
LB_API void lb_recipe_free(lb_recipe *r);
/* Appends a rule (pattern and strings copied). */
LB_API lb_status lb_recipe_add(lb_recipe *r, const lb_rule *rule);
/* Puts a rule before all others ( --rule / --keep override a scheme). */
LB_API lb_status lb_recipe_prepend(lb_recipe *r, const lb_rule *rule);
LB_API size_t lb_recipe_count(const lb_recipe *r);
LB_API const lb_rule *lb_recipe_rule(const lb_recipe *r, size_t i);
/* "PATTERN=SPEC" (SPEC a qspec text, or "keep"): the CLI's --rule. */
LB_API lb_status lb_rule_parse(const char *text, lb_rule *out, char *pattern_buf, size_t pattern_size);
/* The recipe file format (README, "Recipe files"): strict JSON, unknown
 * keys rejected, errors name the line. */
LB_API lb_status lb_recipe_load(const char *path, lb_recipe **out);
LB_API lb_status lb_recipe_parse(const char *json, size_t len, const char *what, lb_recipe **out);
/* KV cache format of the recipe (LB_FMT_FP32: none). */
LB_API lb_status lb_recipe_set_kv(lb_recipe *r, lb_format kv);
LB_API lb_format lb_recipe_kv(const lb_recipe *r);
/* Sets every weight of q as the recipe says (first matching rule; no
 * match: KEPT) and the KV format. */
LB_API lb_status lb_qmodel_apply(lb_qmodel *q, const lb_recipe *r);

/* ===== Schemes =====
 * The names users speak (llm-compressor / ModelOpt presets), each a
 * recipe: W8A8-FP8, W8A8-FP8-STATIC, FP8-BLOCK, W8A8-INT8, W8A16, W4A16,
 * W4A16-ASYM, NVFP4, NVFP4A16, MXFP4, MXFP4A16, MXFP8. The output head
 * (and a tied embedding) stays 16-bit; norms are never quantized. */
typedef struct lb_scheme {
    const char *name;
    const char *summary;     /* one line: weights, activations */
    const char *weights;     /* qspec text */
    lb_act_mode act_mode;
    const char *act;         /* qspec text of the activations, NULL if none */
    int needs_calibration;   /* 1: static scales (STATIC, NVFP4 W4A4) */
    const char *aliases;     /* other spellings, space-separated ("FP8_DYNAMIC"); "" if none */
} lb_scheme;

LB_API size_t lb_scheme_count(void);
LB_API const lb_scheme *lb_scheme_at(size_t i);
/* Case-insensitive; also the llm-compressor spellings (FP8_DYNAMIC...). */
LB_API const lb_scheme *lb_scheme_find(const char *name);
/* The scheme's recipe: one rule, "model.layers.*", for the linear layers
 * of the decoder blocks. The output head and the embeddings match no rule
 * and so stay 16-bit (KEPT), which is why a scheme needs no keep rules
 * (a keep rule for lm_head would match nothing in a tied model). */
LB_API lb_status lb_scheme_recipe(const lb_scheme *s, lb_recipe **out);
/* "NAME" or "NAME:gN": the scheme's recipe with its group size set to N
 * (W4A16:g64 for 576-wide layers, which 128 does not divide). Integer
 * schemes take it (a channel scheme becomes groups of N), FP8-BLOCK too
 * (N x N weight blocks, activation groups of N); MX, NVFP4 and per-tensor/channel FP8 fix
 * their blocks and refuse it. LB_ERR_ARG naming the schemes otherwise. */
LB_API lb_status lb_scheme_recipe_named(const char *text, lb_recipe **out);

/* ===== Calibration =====
 * Runs the tokens through the quantized model (windows of ctx tokens,
 * each from position 0; weights as the qmodel says, activations fp32) and
 * records, as the running maximum over all calls, every quantized linear
 * layer's largest input magnitude (lb_qentry.input_amax; over the features
 * that are not its outlier columns) and, when the
 * qmodel has a KV format, each layer's k and v ranges. */
typedef struct lb_calib_options {
    int threads;
    uint32_t ctx;            /* window length; 0: 512 */
    lb_progress_fn progress; /* optional: after each window */
    void *progress_ctx;
} lb_calib_options;
LB_API lb_status lb_calibrate(lb_qmodel *q, const int32_t *tokens, size_t n, const lb_calib_options *o);

/* ===== Outlier methods: SmoothQuant, AWQ and GPTQ =====
 * Transform a quantized model whose specs are set (lb_qmodel_apply) using
 * calibration text: scales per input channel folded into the norms and
 * layers in front (the model computes the same before quantization, so
 * the output needs nothing special), weights replaced by their scaled and
 * clipped values, which the entries' specs then quantize; or (GPTQ) the
 * quantized tensors themselves chosen with the inputs' second-order
 * statistics. RTN (round to nearest) leaves the model as it is. A method
 * with nothing to work on is LB_ERR_ARG naming the one to use: SmoothQuant
 * smooths the inputs of layers whose activations are quantized, AWQ
 * weight-only layers, GPTQ any layer quantized under a spec.
 * Calibration windows are drawn from the tokens deterministically
 * (src/algo/calib_pass.h).
 *
 * GPTQ (Frantar et al. 2023) calibrates sequentially: decoder layer i's
 * inputs come from the layers < i as already quantized (each layer
 * corrects the error of those before it), its own linear inputs from its
 * unquantized values. Per linear input, H = sum of x x^T over every
 * calibration token (q/k/v share the attention input's, gate/up the MLP
 * input's, o_proj and down_proj their own); each QUANTIZED weight of the
 * decoder layers (q/k/v/o, gate/up/down) is then rounded column by column
 * onto its spec's grid, the rounding error of each column compensated in
 * the columns not yet rounded, and the result set as the entry's quantized
 * tensor (lb_qmodel_set_qtensor: what the runner evaluates and the writers
 * store). Weights with 16-bit outlier columns and kept ones are left as
 * they are; the embeddings and the output head are rounded to nearest.
 * GGUF types (lb_qmodel_set_ggml) are LB_ERR_UNSUPPORTED for now. When
 * the Cholesky factor of the dampened H does not exist, the dampening is
 * raised (x10 each time) and `warn` is told which weight, and how much.
 * AWQ+GPTQ runs AWQ first (scales folded, weights clipped: its own
 * calibration), then GPTQ on the transformed weights, on the same windows.
 * GPTQ into a ggml block type chooses each block's scales with the entry's
 * importance vector (lb_qmodel_set_imatrix), or without one with the
 * input's mean x^2 (diag(H) / tokens). SmoothQuant, AWQ and AWQ+GPTQ
 * rescale input channels: LB_ERR_ARG when a decoder weight has an
 * importance vector (it was measured on the unscaled inputs).
 *
 * ABI: the GPTQ fields (damp .. static_groups) and warn/warn_ctx were
 * added to lb_method_options after sample_rows, gptq_scales after
 * warn_ctx; a caller built against an older struct must be rebuilt. */
typedef enum lb_method {
    LB_METHOD_RTN = 0,
    LB_METHOD_SMOOTHQUANT = 1, /* Xiao et al. 2023; for W8A8 (activations quantized) */
    LB_METHOD_AWQ = 2,         /* Lin et al. 2024; for weight-only specs and GGUF types */
    LB_METHOD_GPTQ = 3,        /* Frantar et al. 2023; for any weight spec (weight-only or W8A8) */
    LB_METHOD_AWQ_GPTQ = 4,    /* AWQ's scales and clipping, then GPTQ on the result */
    LB_METHOD_COUNT = 5
} lb_method;
/* "rtn", "smoothquant", "awq", "gptq", "awq+gptq"; NULL for a value out
 * of range. */
LB_API const char *lb_method_name(lb_method m);
/* LB_ERR_ARG naming the methods for an unknown name. */
LB_API lb_status lb_method_parse(const char *name, lb_method *out);

/* A message for the caller to show (a warning: the library never prints). */
typedef void (*lb_message_fn)(void *ctx, const char *message);

/* How GPTQ chooses a group's scales before rounding its columns (on a
 * spec's grid; the ggml types' blocks always take their quantizer's
 * search). MSE, the default: the spec's clip=mse search (the clipping
 * ratio of least squared error per block, as `clip=mse` in a spec and
 * llm-compressor's "mse" observer), where the spec's scales take it (not
 * e8m0, not two-level: there, MINMAX); on SmolLM2 W4A16:g64 GPTQ
 * --actorder gives KLD 0.175 with it and 0.204 without (RTN 0.397).
 * MINMAX: the group's range, as round-to-nearest and the GPTQ paper's
 * reference code. The stored tensor's spec is the entry's either way. */
typedef enum lb_gptq_scales { LB_GPTQ_SCALES_MSE = 0, LB_GPTQ_SCALES_MINMAX = 1 } lb_gptq_scales;

/* The order GPTQ rounds a weight's columns in. ACT, the default (the
 * paper's act-order; llm-compressor's default, actorder "static"):
 * decreasing diag(H), the inputs' energy, with every group's scales chosen
 * before any column is rounded; the tensor is stored in its own order (no
 * g_idx), so readers see nothing different. FILE: the stored order, as
 * the paper's first variant. On SmolLM2 W4A16:g64, KLD 0.175 in ACT order
 * and 0.291 in FILE order (RTN 0.397): at 4 bits on a small model, the
 * order decides whether GPTQ removes half of RTN's error or a quarter. */
typedef enum lb_gptq_order { LB_GPTQ_ORDER_ACT = 0, LB_GPTQ_ORDER_FILE = 1 } lb_gptq_order;

/* Which inputs a decoder layer's weights are rounded against (the layers
 * before it are rounded first in both). SUBLAYER, the default (the GPTQ
 * reference code's --true-sequential): q/k/v, then o_proj against the
 * inputs the rounded q/k/v make, then gate/up, then down_proj against the
 * rounded gate/up's, so each weight corrects the error of those before it
 * in the layer too; the layer's products are computed once per window.
 * LAYER: every weight against the unrounded layer's inputs
 * (llm-compressor's sequential pipeline); the layer runs twice per window,
 * once to collect and once through the rounded weights. */
typedef enum lb_gptq_sequential { LB_GPTQ_SEQ_SUBLAYER = 0, LB_GPTQ_SEQ_LAYER = 1 } lb_gptq_sequential;

typedef struct lb_method_options {
    lb_method method;
    float alpha;             /* SmoothQuant's migration strength in [0, 1] (the paper: 0.5 for most models) */
    int alpha_search;        /* 1: alpha chosen per group from a grid by the output error instead */
    uint32_t calib_seqs;     /* calibration windows; 0: 128 */
    uint32_t calib_len;      /* tokens per window; 0: 512, at most the model's context */
    uint32_t sample_rows;    /* rows of each input kept for the output-error searches (SmoothQuant, AWQ);
                                0: 4096 */
    double damp;             /* GPTQ: dampening added to diag(H), a fraction of its mean, in (0, 1]; 0: 0.01
                                (the paper's). Raised x10 (and reported through warn) while H + damp is not
                                positive definite */
    uint32_t block;          /* GPTQ: columns per lazy batch update (the paper's B); 0: 128. Any value gives
                                the same result up to fp32 summation order; it only trades cache for speed */
    lb_gptq_order gptq_order; /* GPTQ: the columns' rounding order (0: LB_GPTQ_ORDER_ACT); ACT implies
                                static_groups */
    int static_groups;       /* GPTQ in FILE order: 1: every group's scales chosen from the weights before any
                                rounding (0: each group's when its first column is reached, the error of the
                                earlier columns applied, as the paper) */
    int threads;             /* 0: one per CPU */
    lb_progress_fn progress; /* optional: after each layer (done of n_layers) */
    void *progress_ctx;
    lb_message_fn warn;      /* optional: warnings (GPTQ's raised dampening), one per event */
    void *warn_ctx;
    lb_gptq_scales gptq_scales; /* GPTQ on a spec's grid: how each group's scales are chosen */
    lb_gptq_sequential gptq_sequential; /* GPTQ: the inputs inside a layer (0: LB_GPTQ_SEQ_SUBLAYER) */
} lb_method_options;
LB_API lb_status lb_qmodel_apply_method(lb_qmodel *q, const int32_t *tokens, size_t n, const lb_method_options *o);

/* ===== 16-bit outliers: sensitive layers and outlier columns =====
 * The remedy of keeping in 16-bit what quantization hurts most: whole
 * decoder layers chosen by measurement, or (LLM.int8(), Dettmers et al.
 * 2022) the weight columns that meet outlier activation features. */

/* The cost of quantizing one decoder layer alone. */
typedef struct lb_layer_kld {
    uint32_t layer;
    int measured;   /* 1: the layer has quantized weights and was measured; 0: nothing of it is quantized */
    double kld;     /* mean KL(base || this layer quantized) per scored token, nats (0 when not measured) */
    double kld_err; /* its standard error */
    int kept;       /* 1: lb_qmodel_keep_sensitive kept the layer in 16-bit */
} lb_layer_kld;

typedef struct lb_sensitivity_options {
    uint32_t ctx;            /* window length; 0: 512, or the model's context if shorter */
    size_t max_windows;      /* windows of the tokens used; 0: every whole window */
    int32_t bos;             /* >= 0: replaces each window's first token (as lb_kld's windows); -1: none */
    int threads;             /* 0: one per CPU */
    lb_progress_fn progress; /* optional: after each layer of each window (done of windows x n_layers) */
    void *progress_ctx;
    const unsigned char *skip; /* lb_sensitivity: NULL, or [candidates x units]: 1 leaves that cell unmeasured
                                  (the caller knows it: e.g. two candidates that quantize a unit alike) */
} lb_sensitivity_options;

/* For each decoder layer L that q quantizes (any weight QUANTIZED or held
 * in a ggml type), the KL divergence of the model with only layer L as q
 * holds it (weights, norms, activation quantization; the other layers,
 * the embeddings and the head as stored, fp32 KV cache) from the model as
 * stored, on lb_kld's windows of the tokens (whole windows of ctx, the
 * second half scored): lowbit kld's figure for a recipe quantizing layer L
 * alone. out[n_layers] receives the layers sorted by KLD, largest first
 * (ties and unmeasured layers by index, unmeasured last). Static
 * activation scales must be calibrated first. Memory: one runner of the
 * model as stored (context ctx) plus one extra copy of one layer at a
 * time, one window's base logits at its scored rows (ctx/2 x vocab
 * floats) and 128 rows of the measured model's. Time: window by window,
 * each layer runs from the window's input to it on (the base model's,
 * kept), about half the layer passes of a loop of lb_kld calls; each
 * measured layer is quantized again for every window. */
LB_API lb_status lb_layer_sensitivity(const lb_qmodel *q, const int32_t *tokens, size_t n,
                                      const lb_sensitivity_options *o, lb_layer_kld *out);
/* lb_layer_sensitivity, then the `keep` measured layers of largest KLD kept
 * in 16-bit (lb_qmodel_keep on each of their weights, activations 16-bit;
 * fewer when fewer layers are quantized). ranking_out: NULL, or n_layers
 * entries (the ranking, kept ones marked). LB_ERR_ARG when keep exceeds
 * the layer count. */
LB_API lb_status lb_qmodel_keep_sensitive(lb_qmodel *q, const int32_t *tokens, size_t n, size_t keep,
                                          const lb_sensitivity_options *o, lb_layer_kld *ranking_out);

/* ===== Sensitivity of units: tensors, layers, classes =====
 * What quantizing one part of a model costs, each part alone (the rest as
 * stored), for one or more candidate quantized models of the same model:
 * the measurement behind `lowbit sensitivity` and the mixed-precision
 * choice of `lowbit quantize --target-bpw`. */
typedef enum lb_unit_kind {
    LB_UNIT_TENSOR = 0, /* each weight the candidate quantizes */
    LB_UNIT_LAYER = 1,  /* each decoder layer (all its entries: weights, norms, activations), the embedding, the head */
    LB_UNIT_CLASS = 2,  /* attn, mlp (every layer's, with the norm in front), embed, head, kv, act */
    LB_UNIT_MODEL = 3   /* one unit, "model": everything q changes (lowbit kld's figure for q itself) */
} lb_unit_kind;

typedef struct lb_units lb_units;
typedef struct lb_imatrix lb_imatrix; /* ("Importance matrices" below) */

typedef struct lb_unit_info {
    const char *name;   /* a tensor's canonical name; "layer N"; "embed", "head" ("embed+head" when tied),
                           "attn", "mlp", "kv", "act" */
    lb_unit_kind kind;
    size_t n_entries;   /* qmodel entries it takes from the candidate */
    const size_t *entries;
    int kv;             /* 1: the KV cache as the candidate holds it */
    int act_only;       /* 1: the entries' activation quantization alone, the weights as stored */
    uint64_t params;    /* elements of its weights (lb_tensor_is_weight) */
} lb_unit_info;

/* The units of the given kind that q changes (a weight QUANTIZED or given a
 * ggml type, an activation quantized, the KV cache), in model order; for
 * LB_UNIT_CLASS also kv and act when q quantizes them. LB_UNIT_TENSOR
 * refuses a q whose method changed 1-D tensors (SmoothQuant and AWQ fold
 * scales into the norms: one tensor alone would not be that model); its
 * layers and classes carry their norms. LB_ERR_ARG when q changes
 * nothing. */
LB_API lb_status lb_units_make(const lb_qmodel *q, lb_unit_kind kind, lb_units **out);
LB_API void lb_units_free(lb_units *u);
LB_API size_t lb_units_count(const lb_units *u);
LB_API lb_status lb_units_get(const lb_units *u, size_t i, lb_unit_info *out);

typedef struct lb_unit_cost {
    int measured;       /* 0: the candidate changes nothing of the unit (kld 0, bits as stored) */
    double kld;         /* mean KL(base || unit quantized) per scored token, nats */
    double kld_err;     /* its standard error */
    double nll;         /* mean negative log-likelihood of the scored tokens (perplexity exp(nll)) */
    double bits;        /* the unit's weight bits as the candidate holds them (lb_qmodel_entry_bits) */
    double bits_stored; /* as stored */
} lb_unit_cost;

typedef struct lb_sensitivity_summary {
    size_t windows;         /* of ctx tokens */
    uint32_t ctx;
    uint64_t scored_tokens; /* windows x scored rows */
    double base_nll;        /* the model as stored (perplexity exp(base_nll)) */
    double seconds;
} lb_sensitivity_summary;

/* For each candidate c and unit u, costs[c * n_units + u]: the model with
 * unit u as candidate c holds it and everything else as stored, against
 * the model as stored, on lb_kld's windows of the tokens (whole windows of
 * ctx, BOS first when bos >= 0, the second half scored): lowbit kld's
 * figure for a recipe quantizing that unit alone (and, for a layer unit,
 * lb_layer_sensitivity's). Candidates are qmodels of one model with
 * static scales calibrated; units come from lb_units_make on any of them
 * (a unit a candidate leaves as stored costs 0, unmeasured). Memory: one
 * runner of the model as stored plus one unit's extra copy at a time, the
 * window's base logits at its scored rows and the inputs to each layer
 * (ctx x dim floats per layer). Time: for each window, each measured unit
 * runs from its first layer on, reloading its layers from the candidate
 * and back. progress: after each measurement (done of windows x
 * candidates x units). */
LB_API lb_status lb_sensitivity(const lb_qmodel *const *cands, size_t n_cands, const lb_units *units,
                                const int32_t *tokens, size_t n, const lb_sensitivity_options *o,
                                lb_unit_cost *costs, lb_sensitivity_summary *summary);

/* The proxy beside the measurement, from calibration statistics alone:
 * for each unit, the sum over its quantized linear weights of
 * sum_j E[x_j^2] * sum_r (W_rj - Q(W)_rj)^2 -- the expected squared error
 * of the layer outputs under a diagonal input covariance, E[x^2] being the
 * importance matrix's values (lb_imatrix_compute). NaN for a unit it
 * cannot score: a quantized weight without an imatrix entry (an
 * embedding, a tied head), activations alone, the KV cache. */
LB_API lb_status lb_unit_proxy(const lb_qmodel *cand, const lb_units *units, const lb_imatrix *im, int threads,
                               double *proxy);
/* Spearman's rank correlation of x and y over the i where both are
 * finite (average ranks for ties); NaN with fewer than 3 such pairs or a
 * constant side. */
LB_API double lb_rank_correlation(const double *x, const double *y, size_t n);

/* A qmodel whose entries are the candidates': each unit's from
 * cands[choice[u]], every other entry (and the KV cache unless a kv unit
 * says otherwise) from cands[base]. Nothing is copied: it borrows from the
 * candidates (an algorithm's quantized tensors, imatrices), so free it
 * before any of them and do not change it. What a chosen mix is measured
 * as before it is written. */
LB_API lb_status lb_qmodel_compose(const lb_qmodel *const *cands, size_t n_cands, size_t base, const lb_units *units,
                                   const size_t *choice, lb_qmodel **out);

/* ===== Mixed precision under a budget =====
 * One candidate per unit from lb_sensitivity's costs, the units' costs
 * taken as additive: each unit's candidates reduce to their lower convex
 * hull in (bits, KLD), every unit starts at its cheapest, and the step of
 * most KLD saved per bit is taken while it fits (then smaller steps that
 * still fit): the greedy of bit allocation, optimal on the hulls up to
 * the last step. The path it walks is the Pareto front it explored. */
typedef struct lb_mix_point {
    double bits, kld; /* the units' total bits and summed KLD */
} lb_mix_point;

typedef struct lb_mix_options {
    double budget_bits; /* > 0: the units' bits at most this */
    double max_kld;     /* when budget_bits is 0: the fewest bits whose summed KLD is at most this */
} lb_mix_options;

typedef struct lb_mix_result {
    double bits, kld;    /* the choice's total bits and summed (predicted) KLD */
    int reached;         /* max_kld: 0 when even the best candidates sum above it (the best is chosen) */
    lb_mix_point *front; /* the path, cheapest first (lb_mix_result_free) */
    size_t n_front;
} lb_mix_result;

/* costs: [n_cands x n_units] (lb_sensitivity's; an unmeasured cell counts
 * KLD 0 at its bits). choice[n_units]: the candidate of each unit.
 * LB_ERR_ARG when the budget is below the cheapest candidates. */
LB_API lb_status lb_mix_choose(const lb_unit_cost *costs, size_t n_cands, size_t n_units, const lb_mix_options *o,
                               size_t *choice, lb_mix_result *out);
LB_API void lb_mix_result_free(lb_mix_result *r);

typedef struct lb_outlier_options {
    float threshold;         /* a feature whose largest |x| over the tokens exceeds it is an outlier (paper: 6.0) */
    uint32_t ctx;            /* window length; 0: 512, or the model's context if shorter */
    int threads;             /* 0: one per CPU */
    lb_progress_fn progress; /* optional: after each window */
    void *progress_ctx;
} lb_outlier_options;

/* LLM.int8()'s decomposition chosen from calibration: runs the tokens (in
 * windows of ctx, each from position 0) through the model as its source
 * values (lb_qmodel_source_f32: unquantized, as folded so far; fp32
 * activations and KV cache), takes the largest |x| of every input feature
 * of every QUANTIZED linear weight (not an embedding), and sets the
 * features above the threshold as that weight's outlier columns
 * (lb_qmodel_set_outliers; a weight whose every feature is above it is
 * kept in 16-bit instead). *n_columns (may be NULL): the columns set over
 * all weights. A non-finite activation is LB_ERR_NAN naming the weight. */
LB_API lb_status lb_qmodel_select_outliers(lb_qmodel *q, const int32_t *tokens, size_t n,
                                           const lb_outlier_options *o, uint64_t *n_columns);

/* ===== Importance matrices (llama.cpp's imatrix) =====
 * Per weight, the sum over calibration tokens of each input column's
 * squared activation, and how many tokens were summed: what llama-imatrix
 * writes and llama-quantize --imatrix reads to weight the K-quant and IQ4
 * quantizers. Entries are named as llama.cpp names the weights
 * (blk.0.attn_q.weight); lookups also take lowbit's canonical names
 * (model.layers.0.self_attn.q_proj.weight). */
typedef struct lb_imatrix lb_imatrix;

typedef struct lb_imatrix_entry {
    const char *name;        /* llama.cpp's weight name */
    size_t cols;             /* the weight's input columns (its row length) */
    size_t n_mat;            /* matrices: 1 for a dense weight, the experts of a stacked one (a legacy
                                file does not say them: 1, with cols the experts' columns end to end) */
    const float *sums;       /* cols x n_mat (matrix-major): the file's sums. GGUF: sum of x^2;
                                legacy .dat: the mean of x^2 times ncall, as that format stores it */
    const int64_t *counts;   /* n_mat: tokens summed per matrix (legacy: the entry's single ncall) */
    const float *values;     /* cols x n_mat: what llama-quantize hands its quantizer, matrix e at
                                values + e * cols: sums / count (count 0: 1.0); legacy: sums / ncall */
} lb_imatrix_entry;

typedef struct lb_imatrix_info {
    size_t entries;
    uint32_t chunk_count;    /* windows the statistic was computed on */
    uint32_t chunk_size;     /* tokens per window (0 when the file does not say: legacy) */
    int legacy;              /* read from the legacy binary .dat format */
    size_t n_datasets;       /* lb_imatrix_dataset(im, 0 .. n_datasets-1) */
    int has_metadata;        /* GGUF: imatrix.datasets, imatrix.chunk_count and imatrix.chunk_size are all
                                there (llama-quantize refuses a GGUF imatrix without them); computed: 1;
                                legacy: 0 (that format has none to miss) */
} lb_imatrix_info;

/* Reads a GGUF imatrix (<name>.in_sum2 and <name>.counts F32 tensors,
 * imatrix.* KVs) or the legacy .dat format, told apart by the GGUF magic.
 * Every length, count and size is checked; a malformed file, a negative,
 * fractional or non-finite count, or a NaN, infinite or negative sum is
 * LB_ERR_PARSE naming the file and the entry. */
LB_API lb_status lb_imatrix_load(const char *path, lb_imatrix **out);
LB_API void lb_imatrix_free(lb_imatrix *im);
LB_API size_t lb_imatrix_count(const lb_imatrix *im);
LB_API void lb_imatrix_get_info(const lb_imatrix *im, lb_imatrix_info *out);
/* The datasets the file names (the calibration text's path); NULL past the end. */
LB_API const char *lb_imatrix_dataset(const lb_imatrix *im, size_t i);
/* Entry i in name order (LB_ERR_ARG past the end). The pointers live as
 * long as im. */
LB_API lb_status lb_imatrix_entry_at(const lb_imatrix *im, size_t i, lb_imatrix_entry *out);
/* By llama.cpp's or lowbit's canonical name: 1 and the entry, or 0. */
LB_API int lb_imatrix_find(const lb_imatrix *im, const char *name, lb_imatrix_entry *out);
/* The quantizer weights of a tensor, by either name: 1 with *values
 * (cols x n_mat floats, *n of them), or 0 (NULL, 0) when the file has no
 * entry: the quantizer then runs without one, as llama-quantize does. A
 * caller checks *n against the tensor's row length times its experts. */
LB_API int lb_imatrix_values(const lb_imatrix *im, const char *name, const float **values, size_t *n);
/* Writes the GGUF imatrix exactly as llama-imatrix writes it (entries in
 * name order, KVs general.type, imatrix.datasets, imatrix.chunk_count,
 * imatrix.chunk_size). A legacy file is converted as llama-imatrix
 * --in-file converts one: sums and counts times the chunk size, 512.
 * The destination follows the rule of "Outputs". */
LB_API lb_status lb_imatrix_save(const lb_imatrix *im, const char *path);

/* Computes the statistic with lowbit's forward pass as llama-imatrix does
 * with its defaults: the tokens (already tokenized, BOS first when the
 * model adds one) are cut into n / ctx windows of ctx tokens (at least two
 * needed), the first token of each replaced by bos when bos >= 0; each
 * window runs from an empty cache with fp32 weights as stored, and every
 * input row of every linear layer in the blocks (q, k, v, o, gate, up,
 * down) adds its x_j^2 to its weight's column sums and 1 to its count.
 * The output head only with process_output (and, as in llama.cpp, only an
 * untied head named output.weight). A non-finite activation is LB_ERR_NAN
 * naming the weight. */
typedef struct lb_imatrix_options {
    uint32_t ctx;            /* window length; 0: 512 */
    size_t max_chunks;       /* 0: every whole window */
    int32_t bos;             /* replaces each window's first token; -1: none (0 is a token id: set it) */
    int threads;             /* 0: one per CPU */
    int process_output;      /* also the output head's input (llama-imatrix --process-output) */
    const char *dataset;     /* recorded in imatrix.datasets (the text's path); NULL: none */
    lb_progress_fn progress; /* optional: after each window */
    void *progress_ctx;
} lb_imatrix_options;
LB_API lb_status lb_imatrix_compute(const lb_model *m, const int32_t *tokens, size_t n, const lb_imatrix_options *o,
                                    lb_imatrix **out);

/* ===== Export =====
 * Writes a quantized model as a complete Hugging Face model directory an
 * engine loads. */
typedef enum lb_export_format {
    LB_EXPORT_COMPRESSED_TENSORS = 0, /* vLLM, SGLang */
    LB_EXPORT_MODELOPT = 1            /* TensorRT-LLM, vLLM (FP8, NVFP4, MXFP8) */
} lb_export_format;

typedef struct lb_export_options {
    lb_export_format format;
    uint64_t max_shard_bytes;  /* 0: 5 GB (Hugging Face's default) */
    const char *model_path;    /* where the model was opened from (tokenizer and generation files beside it) */
    int threads;
    int verify;                /* 1: read the output back and check every tensor against the qmodel */
    lb_progress_fn progress;   /* optional: after each tensor (done of total) */
    void *progress_ctx;
} lb_export_options;

typedef struct lb_export_result {
    uint64_t tensors, quantized;   /* tensors written (scales not counted), of them quantized weights */
    uint64_t bytes;                /* safetensors payload */
    uint64_t weight_params;        /* elements of the weights */
    double bits_per_weight;        /* every weight byte, scales included, over weight_params */
    uint32_t shards;
} lb_export_result;

/* Checks that every entry is expressible in the format (before writing;
 * LB_ERR_UNSUPPORTED naming the tensor, the format and what would work). */
LB_API lb_status lb_export_check(const lb_qmodel *q, const lb_export_options *o);
/* Writes dir (the rule of "Outputs": complete or absent). */
LB_API lb_status lb_export(const lb_qmodel *q, const char *dir, const lb_export_options *o, lb_export_result *out);

/* ===== GGUF (llama.cpp) =====
 * A quantized model as one GGUF file llama.cpp loads, in the types
 * llama-quantize writes: lb_gguf_choose gives every tensor the ggml type
 * llama-quantize would for a file type ("Q4_K_M") and records it in the
 * qmodel (lb_qmodel_set_ggml), so ppl/kld on the qmodel evaluate the file;
 * lb_export_gguf writes it. From a GGUF input the output is what
 * `llama-quantize` writes (metadata in its order, tensors in its order and
 * alignment), byte for byte where lowbit's quantizer matches ggml's. */
typedef struct lb_gguf_options {
    const char *type;                  /* llama-quantize's file type name ("Q4_K_M", "q8_0", "NVFP4") */
    int pure;                          /* every quantized tensor the file type's default type */
    const char *output_tensor_type;    /* ggml type name ("q8_0") for output.weight, or NULL */
    const char *token_embedding_type;  /* ggml type name for token_embd.weight, or NULL */
    const char *const *tensor_types;   /* "PATTERN=TYPE" as llama-quantize's --tensor-type (GGUF names) */
    size_t n_tensor_types;
    int leave_output;                  /* output.weight keeps its type (--leave-output-tensor) */
    int threads;
    lb_progress_fn progress;           /* lb_export_gguf: after each tensor (done of total) */
    void *progress_ctx;
    /* llama-quantize --imatrix. lb_gguf_choose: the mix takes its rules for a file type quantized with an
     * imatrix (when at least one entry is selected), and every tensor whose type changes gets the entry
     * of its GGUF name (lb_qmodel_set_imatrix), or none when there is no such entry; an entry whose length
     * is not the row length times the experts is LB_ERR_ARG, but for token_embd.weight (then none), as
     * llama-quantize has it. lb_export_gguf (given the same options) records quantize.imatrix.file,
     * .dataset (the first; both cut to 127 bytes), .entries_count (entries selected) and .chunks_count
     * (when not 0) after general.file_type. NULL: entries keep what lb_qmodel_set_imatrix gave them. */
    const lb_imatrix *imatrix;
    const char *imatrix_file;          /* quantize.imatrix.file: the path as given (NULL: not written) */
    const char *const *imatrix_include; /* --include-weights: only the entries whose name contains one */
    size_t n_imatrix_include;
    const char *const *imatrix_exclude; /* --exclude-weights: not the entries whose name contains one
                                           (not with imatrix_include: LB_ERR_ARG) */
    size_t n_imatrix_exclude;
} lb_gguf_options;

/* Chooses each tensor's ggml type (o->type's mix and the overrides) and
 * sets it on q. ggml_types (may be NULL): lb_qmodel_count ints, each
 * entry's ggml type id, filled even when a type has no lb_dtype yet (then
 * LB_ERR_UNSUPPORTED, q unchanged), so a dry run can show the choice.
 * LB_ERR_ARG for an unknown file type, ggml type or a bad pattern. */
LB_API lb_status lb_gguf_choose(lb_qmodel *q, const lb_gguf_options *o, int *ggml_types);
/* ggml's name of a ggml type id ("q4_K"); "?" if lowbit does not know it. */
LB_API const char *lb_ggml_type_name(int ggml_type);
/* The ggml type id of a name ("q4_k", "Q8_0", case-insensitive), or -1. */
LB_API int lb_ggml_type_by_name(const char *name);
/* The GGUF name of entry i ("blk.0.attn_q.weight"). */
LB_API lb_status lb_qmodel_gguf_name(const lb_qmodel *q, size_t i, char *buf, size_t size);
/* Writes path (complete or absent; never over an input). Every entry in
 * its ggml type (lb_gguf_choose); an entry with none as stored (F32 if GGUF
 * has no such type); a QUANTIZED entry (a lowbit spec) is refused.
 * o->type names general.file_type (NULL: none written). out may be NULL. */
LB_API lb_status lb_export_gguf(const lb_qmodel *q, const char *path, const lb_gguf_options *o,
                                lb_export_result *out);

/* ===== Instruction sets ===== */

/* Values are append-only. Only AVX2 < AVX512 is an order of capability;
 * NEON belongs to another architecture and is no level above them. */
typedef enum lb_isa {
    LB_ISA_SCALAR = 0, /* portable C reference */
    LB_ISA_AVX2 = 1,   /* x86-64 AVX2 + F16C + FMA */
    LB_ISA_AVX512 = 2, /* x86-64 AVX-512 F/BW/DQ/VL */
    LB_ISA_NEON = 3    /* aarch64 Advanced SIMD (mandatory in ARMv8-A) */
} lb_isa;

LB_API const char *lb_isa_name(lb_isa isa);

/* The best instruction set this CPU (and this build) supports. */
LB_API lb_isa lb_isa_detected(void);

/* The instruction set the bulk kernels use now. */
LB_API lb_isa lb_isa_active(void);

/* Caps the kernels at an instruction set (tests and benchmarks compare
 * paths this way). LB_ERR_UNSUPPORTED if the CPU lacks it (avx2/avx512
 * exist only on x86-64, neon only on aarch64). The environment variable
 * LOWBIT_ISA=scalar|avx2|avx512|neon sets the same cap at start-up (a set
 * the CPU lacks is ignored). */
LB_API lb_status lb_isa_set(lb_isa isa);

#ifdef __cplusplus
}
#endif

#endif /* LOWBIT_H */
