#!/usr/bin/env python3
"""Writes the malformed safetensors corpus (tests/corpus/safetensors/) and
its EXPECTED.tsv: one line per file, `name<TAB>words the error message must
contain`. Deterministic (no randomness, no timestamps): running it again
gives the same bytes, which tests/oracle/test_safetensors.py checks.

    python3 tests/corpus/make_safetensors_corpus.py [OUTPUT_DIR]

Each file breaks one rule and is otherwise valid, so the expected message
is the one for that rule. A few are legal for the reference reader
(REFERENCE_ACCEPTS below) but refused by lowbit on purpose."""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Files the `safetensors` package itself loads, with the reason lowbit does not.
REFERENCE_ACCEPTS = {
    "leading_whitespace.safetensors": "the spec says the header MUST begin with '{'",
    "too_many_dims.safetensors": "lowbit's tensors have at most 8 dimensions",
    "metadata_nul.safetensors": "metadata is handed out as C strings",
    "nul_in_name.safetensors": "names are handed out as C strings",
    "empty_name.safetensors": "an empty tensor name is refused",
    "extra_field.safetensors": "unknown fields could hide data a stricter reader ignores",
    "duplicate_metadata_key.safetensors": "the spec forbids duplicate keys; the package keeps one of them",
}


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def header_file(header, data=b"", length=None):
    """8-byte little-endian length (the header's own unless given), header, data."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    h = header.encode("utf-8") if isinstance(header, str) else header
    return struct.pack("<Q", len(h) if length is None else length) + h + data


def data(n):
    return bytes(i % 251 for i in range(n))


F32x2 = entry("F32", [2], 0, 8)

# (file name, bytes, substring of the message)
CASES = [
    ("empty_file.safetensors", b"", "0 bytes, shorter than the 8-byte header length"),
    ("truncated_length.safetensors", b"\x02\x00\x00\x00\x00", "5 bytes, shorter than the 8-byte header length"),
    ("header_length_beyond_file.safetensors", header_file('{"a":1}', length=1000),
     "header length 1000 (bytes 0-7) runs past the end of the file"),
    ("header_length_over_limit.safetensors", header_file("{}", length=100_000_001),
     "header length 100000001 (bytes 0-7) is over the 100000000-byte limit"),
    ("header_length_wraps.safetensors", header_file("{}", length=2**64 - 4),
     "header length 18446744073709551612 (bytes 0-7) is over"),
    ("header_truncated.safetensors", header_file({"a": F32x2}, data(8))[:30],
     "runs past the end of the file"),
    ("empty_header.safetensors", header_file(""), "the header (header length at bytes 0-7) is empty"),
    ("leading_whitespace.safetensors", header_file(" " + json.dumps({"a": F32x2}), data(8)),
     "must begin with '{' at byte 8, found byte 0x20 (leading whitespace)"),
    ("header_not_object.safetensors", header_file("[1,2]"), "must begin with '{' at byte 8, found byte 0x5b"),
    ("header_not_json.safetensors", header_file('{"a":{"dtype":"F32",}}'),
     "invalid JSON header (byte offsets from file byte 8): line 1, column 21 (byte 20)"),
    ("header_not_utf8.safetensors", header_file(b'{"\xff\xfe":{}}'), "invalid JSON header"),
    ("header_nul_padding.safetensors", header_file(b"{}\x00\x00\x00\x00\x00\x00"), "invalid JSON header"),
    ("duplicate_tensor_name.safetensors",
     header_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                 '"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}', data(16)),
     'duplicate key "a" in one object'),
    ("duplicate_metadata_key.safetensors", header_file('{"__metadata__":{"k":"1","k":"2"}}'),
     'duplicate key "k" in one object'),
    ("metadata_not_object.safetensors", header_file({"__metadata__": ["x"]}),
     "__metadata__ (byte 24) is an array, not an object of strings"),
    ("metadata_not_string.safetensors", header_file({"__metadata__": {"step": 100}}),
     "__metadata__ 'step' (byte 32) is 100, not a string"),
    ("metadata_nul.safetensors", header_file({"__metadata__": {"k": "a\u0000b"}}),
     "__metadata__ 'k' (byte 29) contains a NUL character"),
    ("entry_not_object.safetensors", header_file({"a": [0, 8]}, data(8)),
     "tensor 'a' (byte 13): entry is an array, not an object"),
    ("missing_field.safetensors", header_file({"a": {"dtype": "F32", "shape": [2]}}),
     "tensor 'a' (byte 13): missing field 'data_offsets'"),
    ("extra_field.safetensors", header_file({"a": dict(F32x2, offset=0)}, data(8)),
     "unexpected field 'offset'"),
    ("dtype_not_string.safetensors", header_file({"a": dict(F32x2, dtype=0)}, data(8)),
     "tensor 'a' (byte 22): dtype is 0, not a string"),
    ("unknown_dtype.safetensors", header_file({"a": entry("F7", [2], 0, 2)}, data(2)),
     "tensor 'a' (byte 22): unknown dtype 'F7'"),
    ("lowercase_dtype.safetensors", header_file({"a": entry("f32", [2], 0, 8)}, data(8)), "unknown dtype 'f32'"),
    ("negative_shape.safetensors", header_file({"a": entry("F32", [-2], 0, 8)}, data(8)),
     "shape[0] is -2, not a non-negative integer"),
    ("fractional_shape.safetensors", header_file({"a": entry("F32", [2.5], 0, 8)}, data(8)),
     "shape[0] is 2.5, not a non-negative integer"),
    ("too_many_dims.safetensors", header_file({"a": entry("U8", [1] * 9, 0, 1)}, data(1)),
     "shape has 9 dimensions, more than 8"),
    ("shape_overflow.safetensors", header_file({"a": entry("U8", [2, 2**64 - 2], 0, 4)}, data(4)),
     "the element count of shape [2, 18446744073709551614] overflows 64 bits"),
    ("byte_size_overflow.safetensors", header_file({"a": entry("F32", [2**62], 0, 0)}),
     "overflow a 64-bit byte count"),
    ("offsets_wrong_length.safetensors",
     header_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}}', data(8)),
     "data_offsets is an array of the wrong length"),
    ("offsets_not_integers.safetensors",
     header_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,"8"]}}', data(8)),
     "data_offsets[1] is the string '8'"),
    ("end_before_begin.safetensors", header_file({"a": entry("F32", [2], 8, 0)}, data(8)),
     "data_offsets [8, 0] end before they begin"),
    ("size_mismatch.safetensors", header_file({"a": entry("F32", [3], 0, 8)}, data(8)),
     "data_offsets [0, 8] hold 8 bytes, but shape [3] of F32 needs 12"),
    ("range_beyond_file.safetensors", header_file({"a": entry("F32", [4], 0, 16)}, data(8)),
     "data_offsets [0, 16] reach past the end of the file (the data section holds 8 bytes)"),
    ("overlapping_tensors.safetensors",
     header_file({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}, data(12)),
     "tensors 'a' [0, 8] and 'b' [4, 12] overlap"),
    ("ten_tensors_one_range.safetensors",
     header_file({f"t{i}": entry("F32", [4], 0, 16) for i in range(10)}, data(16)),
     "tensors 't0' [0, 16] and 't1' [0, 16] overlap"),
    ("gap_between_tensors.safetensors",
     header_file({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 12, 20)}, data(20)),
     "data bytes [8, 12) before tensor 'b' belong to no tensor"),
    ("trailing_bytes.safetensors", header_file({"a": F32x2}, data(8) + b"#!/bin/sh\n"),
     "10 trailing bytes after the last tensor"),
    ("empty_name.safetensors", header_file({"": F32x2}, data(8)), "a tensor (byte 12) has an empty name"),
    ("nul_in_name.safetensors", header_file({"a\u0000b": F32x2}, data(8)), "the name contains a NUL character"),
]


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    names = [c[0] for c in CASES]
    assert len(names) == len(set(names)), "duplicate corpus file name"
    for name, blob, want in CASES:
        assert "\t" not in want and "\n" not in want
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(blob)
    with open(os.path.join(out_dir, "EXPECTED.tsv"), "w", encoding="utf-8", newline="\n") as f:
        for name, _, want in CASES:
            f.write(f"{name}\t{want}\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "safetensors"))
