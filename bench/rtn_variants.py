"""Which int4:g32 round-to-nearest rule? A numpy simulation of candidate
grids on SmolLM2-135M, each written as an f32 GGUF (the stored model's
metadata and tokenizer, every 2-D weight replaced by its quantized values)
and measured with `lowbit kld` against saved base distributions.

usage: rtn_variants.py BUILD_DIR BASE_FILE CHUNKS [--tokens DIR] [VARIANT...]
  BASE_FILE: `lowbit kld MODEL OTHER --save-base BASE_FILE --chunks CHUNKS` output.

Variants (per block of 32, lo = min(x, 0), hi = max(x, 0), amax = max(-lo, hi)):
  ggml        d = (the signed value of largest magnitude) / -8, fp16, codes -8..7:
              ggml's Q4_0 rule, whose d is negative when that value is positive
  restricted  s = amax / 7, codes -7..7 (lowbit's range=restricted)
  full        s = max(-lo / 8, hi / 7), codes -8..7 (lowbit's range=full, up to
              the 1-ulp tie rule of lowbit.h)
  best6       per block, of six positive scales (full's, -lo/8, hi/7, amax/7.5,
              amax/8, hi/7.25), the one with the smallest squared error
  signed      lowbit's range=signed with scale=fp16: the value of largest magnitude
              m (the negative one on a tie), d = fp16(m / -8), codes rne(x / d)
  signed-halfup   the same d, codes floor(x / d + 0.5) (ggml's half-up rounding)
  signed-d32  codes rne(x * (1 / d32)) against the unrounded fp32 d, d stored fp16
  q4_0        ggml's quantize_row_q4_0_ref exactly: first value of largest
              magnitude, d32 = m / -8, codes min(15, trunc(x * (1 / d32) + 8.5)) - 8,
              d stored fp16 (the gguf package's quantizer, byte for byte)
  search5[-w] per block, the signed m and five scales d = m / (-8 + k/4), k = 0..4 (k = 0 is
              signed's), codes rne(x / fp16(d)); the one with the smallest squared error,
              weighted by x^2 with -w (llama.cpp's rmse_type 1 weighting), else unweighted
  qx-w        a make_qx_quants-like search: inverse scales -(8 + i/10) / m, i = -9..9, codes
              rne(x * iscale) clipped to -8..7, then the weighted (x^2) least-squares d for
              those codes, stored fp16, codes then rne(x / fp16(d)); the d of smallest
              weighted error
With --tokens DIR, each run also leaves DIR/VARIANT.tsv, `lowbit kld --save-tokens`'s per-token
file, for bench/kld_paired.py.
The GGUF keeps q/k rows in llama.cpp's order; a row permutation does not
change per-row blocks, so the simulation equals quantizing the HF layout."""
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize

ROOT = pathlib.Path(__file__).resolve().parent.parent
SMOL = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = pathlib.Path("/work/shared/data/wikitext-2-raw/wiki.test.raw")
F32 = np.float32


def q(x, s, lo=-8, hi=7):
    s = s[:, None].astype(F32)
    safe = np.where(s == 0, 1, s)
    return (np.clip(np.rint(x / safe), lo, hi) * s).astype(F32)


def quant(w, variant):
    x = w.reshape(-1, 32).astype(F32)
    lo, hi = np.minimum(x.min(1), 0), np.maximum(x.max(1), 0)
    amax = np.maximum(-lo, hi)
    if variant == "ggml":
        smax = x[np.arange(len(x)), np.argmax(np.abs(x), 1)]
        y = q(x, (smax / -8).astype(np.float16).astype(F32))
    elif variant == "restricted":
        y = q(x, amax / 7, -7, 7)
    elif variant == "full":
        y = q(x, np.maximum(-lo / 8, hi / 7))
    elif variant == "best6":
        cands = [np.maximum(-lo / 8, hi / 7), -lo / 8, hi / 7, amax / 7.5, amax / 8, hi / 7.25]
        qs = np.stack([q(x, c) for c in cands])
        y = qs[np.argmin(((qs - x[None]) ** 2).sum(2), 0), np.arange(len(x))]
    elif variant in ("signed", "signed-halfup", "signed-d32", "q4_0"):
        first = x[np.arange(len(x)), np.argmax(np.abs(x), 1)]
        m = first if variant == "q4_0" else np.where(-lo >= hi, lo, hi).astype(F32)
        d32 = (m / F32(-8)).astype(F32)
        d16 = d32.astype(np.float16).astype(F32)
        safe = lambda d: np.where(d == 0, 1, d)[:, None].astype(F32)  # noqa: E731
        if variant == "signed":
            c = np.rint(np.clip(x / safe(d16), -8, 7))
        elif variant == "signed-halfup":
            c = np.clip(np.floor(x / safe(d16) + F32(0.5)), -8, 7)
        elif variant == "signed-d32":
            c = np.clip(np.rint(x * (F32(1) / safe(d32))), -8, 7)
        else:
            c = np.minimum(15, np.trunc(x * (F32(1) / safe(d32)) + F32(8.5))) - 8
        y = (c * d16[:, None]).astype(F32)
    elif variant in ("search5", "search5-w"):
        m = np.where(-lo >= hi, lo, hi).astype(F32)
        wt = x * x if variant == "search5-w" else np.ones_like(x)
        cands = []
        for k in range(5):
            d16 = (m / F32(-8 + k / 4)).astype(np.float16).astype(F32)
            safe = np.where(d16 == 0, 1, d16)[:, None]
            cands.append((np.clip(np.rint(x / safe), -8, 7) * d16[:, None]).astype(F32))
        qs = np.stack(cands)
        err = (wt[None] * (qs - x[None]) ** 2).sum(2)
        y = qs[np.argmin(err, 0), np.arange(len(x))]  # argmin: the first (k = 0) on a tie
    elif variant == "qx-w":
        m = np.where(-lo >= hi, lo, hi).astype(np.float64)
        xd, wt = x.astype(np.float64), (x * x).astype(np.float64)
        safe_m = np.where(m == 0, 1, m)
        best_err, best_y = np.full(len(x), np.inf), np.zeros_like(xd)
        for i in range(-9, 10):
            l = np.clip(np.rint(xd * (-(8 + i / 10) / safe_m)[:, None]), -8, 7)
            sl2 = (wt * l * l).sum(1)
            d = np.where(sl2 > 0, (wt * xd * l).sum(1) / np.where(sl2 > 0, sl2, 1), 0)
            d16 = d.astype(np.float32).astype(np.float16).astype(np.float64)
            safe_d = np.where(d16 == 0, 1, d16)[:, None]
            yy = np.clip(np.rint(xd / safe_d), -8, 7) * d16[:, None]  # codes against the stored d
            e = (wt * (xd - yy) ** 2).sum(1)
            better = e < best_err
            best_err = np.where(better, e, best_err)
            best_y[better] = yy[better]
        y = best_y.astype(F32)
    else:
        raise SystemExit(f"unknown variant {variant}")
    return y.reshape(w.shape)


def write(variant, out):
    r = GGUFReader(str(SMOL))
    w = GGUFWriter(str(out), r.fields["general.architecture"].contents())
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = f.types[1] if f.types[0] == GGUFValueType.ARRAY and len(f.types) > 1 else None
        w.add_key_value(name, f.contents(), f.types[0], sub_type=sub)
    for t in r.tensors:
        x = dequantize(t.data, t.tensor_type).astype(F32)
        w.add_tensor(t.name, quant(x, variant) if len(t.shape) == 2 else x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    build, base, chunks = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    rest, tokens = sys.argv[4:], None
    if rest[:1] == ["--tokens"]:
        tokens, rest = pathlib.Path(rest[1]), rest[2:]
        tokens.mkdir(parents=True, exist_ok=True)
    for variant in rest or ["ggml", "restricted", "full", "best6"]:
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / f"smollm2-{variant}.gguf"
            write(variant, out)
            p = subprocess.run([str(ROOT / build / "lowbit"), "kld", str(SMOL), str(out), "--base", base, "--text",
                                str(TEXT), "--ctx", "512", "--chunks", chunks, "--json", "--quiet"]
                               + (["--force", "--save-tokens", str(tokens / f"{variant}.tsv")] if tokens else []),
                               check=True, capture_output=True, text=True)
            d = json.loads(p.stdout)
            print(f"{variant:12s} KLD {d['kld_mean']:.4f} +- {d['kld_err']:.4f}  top-1 {100 * d['top1_agreement']:.2f}%",
                  flush=True)


if __name__ == "__main__":
    main()
