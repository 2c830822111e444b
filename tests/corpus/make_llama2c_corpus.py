"""Writes the malformed llama2.c checkpoints of tests/corpus/llama2c/ (run
from anywhere; deterministic). Each file breaks one rule of the reader;
EXPECTED.tsv holds the message each must produce."""
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent / "llama2c"


def model(dim=8, hidden=12, layers=2, heads=2, kv=1, vocab=16, seq=4, extra=0):
    v = abs(vocab)
    hs = dim // heads if heads else 1
    floats = (v * dim + layers * dim + layers * dim * dim + 2 * layers * dim * kv * hs + layers * dim * dim
              + layers * dim + 3 * layers * hidden * dim + dim + 2 * seq * hs // 2 + (v * dim if vocab < 0 else 0))
    return struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq) + bytes(4 * (floats + extra))


CASES = {
    "truncated_header.bin": (model()[:20], "shorter than a llama2.c header"),
    "zero_dim.bin": (struct.pack("<7i", 0, 12, 2, 2, 1, 16, 4) + bytes(64), "field dim = 0"),
    "huge_layers.bin": (struct.pack("<7i", 8, 12, 1 << 30, 2, 1, 16, 4) + bytes(64), "field n_layers"),
    "heads_not_dividing_dim.bin": (struct.pack("<7i", 8, 12, 2, 3, 1, 16, 4) + bytes(64), "not a multiple of n_heads"),
    "kv_heads_not_dividing.bin": (struct.pack("<7i", 8, 12, 2, 4, 3, 16, 4) + bytes(64), "not a multiple of n_kv_heads"),
    "weights_truncated.bin": (model()[:-4], "needs exactly"),
    "trailing_bytes.bin": (model(extra=1), "needs exactly"),
    "version1_magic.bin": (b"ak42" + struct.pack("<i", 1) + bytes(256), "version 1 files are not supported"),
}

if __name__ == "__main__":
    HERE.mkdir(exist_ok=True)
    lines = []
    for name, (blob, expect) in sorted(CASES.items()):
        (HERE / name).write_bytes(blob)
        lines.append(f"{name}\t{expect}\n")
    (HERE / "EXPECTED.tsv").write_text("".join(lines))
