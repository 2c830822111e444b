#!/usr/bin/env python3
"""Regenerates tests/corpus/gguf: small malformed GGUF files, one broken
rule each, and EXPECTED.tsv (file name, then a substring the reader's
message must contain). Deterministic: the same bytes on every run.

    python3 tests/corpus/make_gguf_corpus.py [OUTPUT_DIR]

Each file starts from the same valid little model (a few KVs, two tensors)
and breaks one thing, so the rest of the file is plausible and the reader
has to find the fault where it is."""
import pathlib
import struct
import sys

U32, I32, BOOL, STRING, ARRAY, U64 = 4, 5, 7, 8, 9, 10
F32, Q8_0 = 0, 8


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def string(s):
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b)) + b


def kv(key, vtype, payload):
    return string(key) + u32(vtype) + payload


def tensor_info(name, ne, gtype, offset, n_dims=None):
    n = len(ne) if n_dims is None else n_dims
    return string(name) + u32(n) + b"".join(u64(d) for d in ne) + u32(gtype) + u64(offset)


def pad(b, align=32):
    return b + b"\0" * (-len(b) % align)


BASE_KVS = [kv("general.architecture", STRING, string("llama")), kv("llama.block_count", U32, u32(1))]


def model(kvs=None, tensors=None, data=None, version=3, magic=b"GGUF", n_tensors=None, n_kv=None, align=32):
    """A file: header, KVs, tensor infos, padding, data."""
    kvs = BASE_KVS if kvs is None else kvs
    if tensors is None:
        tensors = [tensor_info("token_embd.weight", (8, 2), F32, 0), tensor_info("blk.0.ffn.weight", (32, 1), Q8_0, 64)]
    if data is None:
        data = bytes(range(64)) + bytes(34)
    head = magic + u32(version) + u64(len(tensors) if n_tensors is None else n_tensors)
    head += u64(len(kvs) if n_kv is None else n_kv)
    return pad(head + b"".join(kvs) + b"".join(tensors), align) + data


CASES = {
    # name: (bytes, message substring)
    "bad_magic.gguf": (model(magic=b"GGML"), "bad magic 'GGML'"),
    "truncated_header.gguf": (model()[:20], "shorter than the 24-byte GGUF header"),
    "version_2.gguf": (model(version=2), "GGUF version 2 is not supported"),
    "version_1.gguf": (model(version=1), "GGUF version 1 is not supported"),
    "version_byteswapped.gguf": (model(version=0x03000000), "big-endian GGUF is not supported"),
    "tensor_count_absurd.gguf": (model(n_tensors=2**64 - 1), "tensor count 18446744073709551615 is absurd"),
    "kv_count_absurd.gguf": (model(n_kv=2**63), "KV count 9223372036854775808 is absurd"),
    "string_length_beyond_file.gguf": (
        model(kvs=[kv("general.name", STRING, u64(2**63) + b"SmolLM")]),
        "string value length 9223372036854775808 runs past the end of the file"),
    "key_length_wraps.gguf": (model(kvs=[u64(2**64 - 1) + b"general.name"]), "key length 18446744073709551615"),
    "duplicate_key.gguf": (model(kvs=BASE_KVS + [kv("llama.block_count", U32, u32(2))]),
                           "duplicate key 'llama.block_count'"),
    "unknown_value_type.gguf": (model(kvs=[kv("general.weird", 13, u32(0))]), "unknown value type 13"),
    "array_of_arrays.gguf": (model(kvs=[kv("general.nested", ARRAY, u32(ARRAY) + u64(1) + u32(U32) + u64(0))]),
                             "arrays of arrays are not supported"),
    "array_count_beyond_file.gguf": (model(kvs=[kv("tokenizer.ggml.scores", ARRAY, u32(6) + u64(2**62))]),
                                     "array count 4611686018427387904 of f32 runs past"),
    "bool_not_0_or_1.gguf": (model(kvs=[kv("general.flag", BOOL, b"\x02")]), "bool value 2 is neither 0 nor 1"),
    "alignment_not_power_of_two.gguf": (model(kvs=[kv("general.alignment", U32, u32(48))], align=48),
                                        "alignment 48 is not a power of two"),
    "alignment_zero.gguf": (model(kvs=[kv("general.alignment", U32, u32(0))]), "alignment 0 is not a power of two"),
    "alignment_too_large.gguf": (model(kvs=[kv("general.alignment", U32, u32(1 << 30))]), "larger than lowbit's cap"),
    "alignment_wrong_type.gguf": (model(kvs=[kv("general.alignment", U64, u64(32))]), "the alignment is a u64"),
    "tensor_name_empty.gguf": (model(tensors=[tensor_info("", (8, 2), F32, 0)]), "the name is empty"),
    "tensor_name_too_long.gguf": (model(tensors=[tensor_info("x" * 64, (8, 2), F32, 0)]),
                                  "the name is 64 bytes, too long"),
    "n_dims_zero.gguf": (model(tensors=[tensor_info("t", (), F32, 0)]), "n_dims 0 is not in 1..4"),
    "n_dims_too_large.gguf": (model(tensors=[tensor_info("t", (1, 1, 1, 1, 16), F32, 0)]), "n_dims 5 is not in 1..4"),
    "dimension_negative.gguf": (model(tensors=[tensor_info("t", (2**64 - 16, 1), F32, 0)]), "beyond int64"),
    "shape_product_overflow.gguf": (model(tensors=[tensor_info("t", (2**63 - 1, 2, 1, 1), F32, 0)]),
                                    "product of the dimensions overflows int64"),
    "tensor_type_unknown.gguf": (model(tensors=[tensor_info("t", (8, 2), 77, 0)]), "unknown ggml tensor type 77"),
    "tensor_type_retired.gguf": (model(tensors=[tensor_info("t", (32, 2), 4, 0)]), "ggml type 4 (q4_2) was retired"),
    "row_not_whole_blocks.gguf": (model(tensors=[tensor_info("t", (48, 1), Q8_0, 0)]),
                                  "a row of 48 elements is not whole q8_0 blocks of 32"),
    "data_offset_unaligned.gguf": (
        model(tensors=[tensor_info("a", (8, 2), F32, 0), tensor_info("b", (32, 1), Q8_0, 72)], data=bytes(128)),
        "data offset 72 is not a multiple of the alignment 32"),
    "tensor_range_beyond_file.gguf": (model(data=bytes(64 + 33)), "run past the end of the file"),
    "tensor_offset_wraps.gguf": (
        model(tensors=[tensor_info("a", (8, 2), F32, 2**64 - 32), tensor_info("b", (32, 1), Q8_0, 64)]),
        "run past the end of the file"),
    "duplicate_tensor_name.gguf": (
        model(tensors=[tensor_info("w", (8, 2), F32, 0), tensor_info("w", (32, 1), Q8_0, 64)]),
        "duplicate tensor name 'w'"),
    "tensors_overlap.gguf": (
        model(tensors=[tensor_info("a", (8, 2), F32, 0), tensor_info("b", (32, 1), Q8_0, 32)]), "overlap"),
    "truncated_tensor_info.gguf": (model()[:130], "but the file ends"),
}


def main():
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent / "gguf"
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, (data, message) in sorted(CASES.items()):
        (out / name).write_bytes(data)
        lines.append(f"{name}\t{message}")
    (out / "EXPECTED.tsv").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
