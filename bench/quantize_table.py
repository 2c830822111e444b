"""Prints the BENCHMARKS.md tables of `make bench-quantize` from what bench/quantize_bench.sh left in its
scratch directory (res/: /usr/bin/time -v logs, lowbit kld --json, bench/hf_ppl.py --json; out/: the written
checkpoints). A measurement that is missing prints as "-", so a partial run still gives a true table.

Bits per weight are counted here from the written files, the same way for both tools: for every module with a
`weight_scale`, all bytes of its weight tensors (weight or weight_packed, weight_scale, weight_zero_point,
weight_global_scale, weight_shape) over its out x in weights; input activation scales are not weights.

usage: python bench/quantize_table.py SCRATCH_DIR CHUNKS
"""
import glob
import json
import os
import re
import struct
import sys

SCHEMES = [("W4A16:g32", "W4A16 (group 32)"), ("W4A16-ASYM:g32", "W4A16_ASYM (group 32)"), ("W8A8-FP8", "FP8_DYNAMIC"),
           ("W8A8-INT8", "W8A8"), ("NVFP4A16", "NVFP4A16"), ("NVFP4", "NVFP4"), ("MXFP4A16", "MXFP4A16"),
           ("MXFP4", "MXFP4")]
RTN = ["W4A16:g32", "W8A8-FP8", "W8A8-INT8", "NVFP4A16", "MXFP4A16"]
SIZES = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "U8": 1, "I8": 1, "I32": 4, "I64": 8}


def tag(s):
    return s.replace(":", "_")


def gnu_time(path):
    """(wall seconds, peak RSS bytes) from a /usr/bin/time -v log, or None."""
    try:
        text = open(path).read()
    except OSError:
        return None
    m = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    st = re.search(r"Exit status: (\d+)", text)
    if not m or not rss or (st and st.group(1) != "0"):
        return None
    wall = int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
    return wall, int(rss.group(1)) * 1024


def load_json(path):
    try:
        with open(path) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None


def headers(d):
    """name -> header entry (+ "_file", "_start": where its bytes are) over every shard of a directory."""
    out = {}
    for f in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            h = json.loads(fh.read(n))
        h.pop("__metadata__", None)
        for v in h.values():
            v["_file"], v["_start"] = f, 8 + n
        out.update(h)
    return out


def weight_shape(h, name):
    """The [out, in] I64 values of a pack-quantized `weight_shape` tensor."""
    e = h[name]
    with open(e["_file"], "rb") as fh:
        fh.seek(e["_start"] + e["data_offsets"][0])
        return struct.unpack("<2q", fh.read(16))


def bits_per_weight(d):
    """(bits per quantized weight, total bytes of the safetensors files) or (None, None)."""
    if not os.path.isdir(d):
        return None, None
    h = headers(d)
    size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(d, "*.safetensors")))
    nbytes = lambda t: SIZES[h[t]["dtype"]] * eval_prod(h[t]["shape"])
    bits = weights = 0
    for name in h:
        if not name.endswith(".weight_scale"):
            continue
        m = name[: -len(".weight_scale")]
        if m + ".weight_shape" in h:  # pack-quantized int: the true shape is stored beside the packed words
            w = m + ".weight_packed"
            out, inn = weight_shape(h, m + ".weight_shape")
        elif m + ".weight_packed" in h:  # NVFP4 / MXFP4: two E2M1 codes per byte
            w = m + ".weight_packed"
            out, inn = h[w]["shape"][0], 2 * h[w]["shape"][1]
        else:  # FP8 / INT8 / MXFP8: one byte per weight
            w = m + ".weight"
            out, inn = h[w]["shape"]
        parts = [w] + [m + s for s in (".weight_scale", ".weight_zero_point", ".weight_global_scale", ".weight_shape")
                       if m + s in h]
        bits += 8 * sum(nbytes(t) for t in parts)
        weights += out * inn
    return (bits / weights if weights else None), size


def eval_prod(shape):
    p = 1
    for s in shape:
        p *= s
    return p


def fmt(x, f="{:.4f}"):
    return "-" if x is None else f.format(x)


def main():
    b, n = sys.argv[1], sys.argv[2]
    r, o = os.path.join(b, "res"), os.path.join(b, "out")
    base = load_json(os.path.join(r, "bf16.kld.json"))
    hfb = load_json(os.path.join(r, "bf16.hfppl.json"))
    print(f"SmolLM2-135M-Instruct (from the Q4_1 GGUF; input to both tools: lowbit's bf16 Hugging Face directory). "
          f"Reference: the dequantized GGUF; {n} windows of 512 of wiki.test.raw, second half scored. "
          "KLD, top-1 and PPL by `lowbit kld` on the written directory; HF PPL by transformers (bench/hf_ppl.py, "
          "fp32 after dequantization) on the same directory.")
    print()
    print("| scheme | tool | bits/w | size MB | PPL | ΔPPL | KLD | top-1 % | HF PPL | time s | peak RSS MB | speed vs oneshot |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    if base:
        print(f"| GGUF Q4_1 (reference) | - | - | - | {base['ppl_base']:.4f} | - | - | - | - | - | - | - |")
        bpw, size = None, sum(os.path.getsize(f) for f in glob.glob(os.path.join(b, "smollm2-bf16", "*.safetensors")))
        print(f"| bf16 directory | lowbit convert | 16 | {size / 1e6:.1f} | {base['ppl']:.4f} | {base['dppl']:+.4f} | "
              f"{base['kld_mean']:.5f} | {100 * base['top1_agreement']:.2f} | {fmt(hfb and hfb['ppl'])} | - | - | - |")
    for s, p in SCHEMES:
        t = tag(s)
        lt = gnu_time(os.path.join(r, f"lb-{t}.time"))
        ct = gnu_time(os.path.join(r, f"llmc-{t}.time"))
        rows = (("lb", f"lowbit {s}", lt), ("lbs", f"lowbit {s}, in memory (kld --scheme, not written)", None),
                ("llmc", f"llm-compressor {p}", ct))
        for who, name, tm in rows:
            d = os.path.join(o, f"{who}-{t}")
            if who == "lbs" and not os.path.exists(os.path.join(r, f"lbs-{t}.kld.json")):
                continue
            if who != "lbs" and tm is None and not os.path.isdir(d):
                continue
            bpw, size = bits_per_weight(d)
            k = load_json(os.path.join(r, f"{who}-{t}.kld.json"))
            hf = load_json(os.path.join(r, f"{who}-{t}.hfppl.json"))
            speed = f"{ct[0] / lt[0]:.1f}x" if who == "lb" and lt and ct else "-"
            print(f"| {s} | {name} | {fmt(bpw, '{:.3f}')} | {fmt(size and size / 1e6, '{:.1f}')} | "
                  f"{fmt(k and k['ppl'])} | {fmt(k and k['dppl'], '{:+.4f}')} | {fmt(k and k['kld_mean'], '{:.5f}')} | "
                  f"{fmt(k and 100 * k['top1_agreement'], '{:.2f}')} | {fmt(hf and hf['ppl'])} | "
                  f"{fmt(tm and tm[0], '{:.1f}')} | {fmt(tm and tm[1] / 1e6, '{:.0f}')} | {speed} |")
    print()
    copy = gnu_time(os.path.join(r, "synth-copy.time"))
    try:
        nbytes = int(open(os.path.join(r, "synth-bytes.txt")).read())
    except (OSError, ValueError):
        nbytes = None
    if copy and nbytes:
        cfg = json.load(open(os.path.join(b, "synth-4g", "config.json")))
        largest = 4 * max(cfg["vocab_size"], cfg["intermediate_size"]) * cfg["hidden_size"]
        goal = 1.5 * largest + 200e6  # issue 13: 1.5x the largest tensor in fp32, plus 200 MB
        print(f"Synthetic Llama-shaped checkpoint: {nbytes / 2**30:.2f} GiB of bf16 ({cfg['num_hidden_layers']} layers, "
              f"hidden {cfg['hidden_size']}, intermediate {cfg['intermediate_size']}, vocab {cfg['vocab_size']}), "
              f"input in the page cache (read once before each run; see res/synth-cached.txt). Largest tensor "
              f"{largest / 1e6:.0f} MB as fp32; the memory goal is 1.5 x that + 200 MB = {goal / 1e6:.0f} MB.")
        print()
        print("| run | time s | MB/s of input | vs copy | peak RSS MB | vs RSS goal |")
        print("|---|---|---|---|---|---|")
        print(f"| read+write copy (cat, then sync) | {copy[0]:.1f} | {nbytes / 1e6 / copy[0]:.0f} | 1.00x | "
              f"{copy[1] / 1e6:.0f} | - |")
        for s in RTN:
            tm = gnu_time(os.path.join(r, f"synth-lb-{tag(s)}.time"))
            if tm:
                print(f"| lowbit quantize --scheme {s} (then sync) | {tm[0]:.1f} | {nbytes / 1e6 / tm[0]:.0f} | "
                      f"{copy[0] / tm[0]:.2f}x | {tm[1] / 1e6:.0f} | {tm[1] / goal:.2f}x |")
            else:
                print(f"| lowbit quantize --scheme {s} | - | - | - | - | - |")


if __name__ == "__main__":
    main()
