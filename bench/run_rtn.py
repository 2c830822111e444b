"""Round-to-nearest grids on SmolLM2-135M (BENCHMARKS.md, "Round-to-nearest
grids"): weight MSE and KLD side by side for lowbit's symmetric int grids
(range=restricted, full and signed; --specs chooses others, e.g. clip=mse) and
llama.cpp's Q4_0 as lowbit's GGUF writer makes it (ggml's reference rule,
byte-identical to the gguf package's quantizer: tests/oracle/test_gguf.py).

usage: run_rtn.py BUILD_DIR [--chunks N] [--base FILE] [--jobs J] [--results DIR] [--specs S1,S2,...]

--base FILE reuses base distributions saved by `lowbit kld --save-base` for
the same model, text, ctx 512 and N windows (they depend on the model as
stored only); without it, or when FILE does not exist yet, they are computed
first (and saved there). --jobs J runs J kld
commands at once, one thread each (default 1 at a time, 2 threads each):
on a shared machine the total CPU time is the same either way. --results DIR
keeps each kld run's JSON there and reuses what is there (only for reruns of
the same build, model and text).

Reference: the GGUF as stored (Q4_1, dequantized to fp32). Every weight
matrix is quantized: attention, MLP and the embedding (which also serves the
tied output head), because `convert --dtype q4_0` quantizes the embedding
too; norms stay fp32 in both. KLD: `lowbit kld` over N windows of 512 tokens
of wiki.test.raw (default 40), the base distributions saved once and reused
(--base). Weight MSE: over all quantized weights, from `lowbit error`'s
per-tensor MSE (lowbit specs) or the gguf package's dequantization (Q4_0),
both against the stored weights dequantized."""
import json
import pathlib
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / (sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "build")


def option(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


CHUNKS = int(option("--chunks", 40))
BASE = option("--base", None)
JOBS = int(option("--jobs", 1))
RESULTS = option("--results", None)
SMOL = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = pathlib.Path("/work/shared/data/wikitext-2-raw/wiki.test.raw")
if not TEXT.exists():
    TEXT = ROOT / ".cache/data/wikitext-2-raw/wiki.test.raw"
LOWBIT = str(BUILD / "lowbit")

SPECS = option("--specs", "int4:g32:range=restricted,int4:g32:range=full,int4:g32:range=signed,"
               "int4:g32:scale=fp16:range=signed,int4:g128:range=full,int4:g128:range=signed").split(",")


def run(args):
    p = subprocess.run([LOWBIT, *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"lowbit {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    return json.loads(p.stdout)


def kld(base_file, model=None, spec=None):
    """One kld run's JSON; with --results DIR kept there, and taken from there when present (a rerun after
    an interruption redoes only the missing runs)."""
    keep = pathlib.Path(RESULTS) / ((spec or "q4_0").replace(":", "_") + ".json") if RESULTS else None
    if keep and keep.exists():
        return json.loads(keep.read_text())
    args = ["kld", str(SMOL)] + ([str(model)] if model else []) + ["--base", str(base_file), "--text", str(TEXT),
                                                                  "--ctx", "512", "--chunks", str(CHUNKS), "--json",
                                                                  "--quiet", "--threads", "1" if JOBS > 1 else "0"]
    if spec:
        args += ["--spec", spec, "--spec-embed", spec]
    out = run(args)
    if keep:
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_text(json.dumps(out))
    return out


def weights(path):
    """GGUF name -> fp32 values of every 2-D tensor (the weight matrices)."""
    r = GGUFReader(str(path))
    return {t.name: dequantize(t.data, t.tensor_type).astype(np.float32) for t in r.tensors if len(t.shape) == 2}


HF_TO_GGUF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down"}


def gguf_name(hf):
    """lowbit error's Hugging Face name -> the GGUF's."""
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")  # model.layers.N.<module>.<proj>.weight
    return f"blk.{parts[2]}.{HF_TO_GGUF['.'.join(parts[3:5])]}.weight"


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        q40 = tmp / "smollm2-q4_0.gguf"
        subprocess.run([LOWBIT, "convert", str(SMOL), str(q40), "--dtype", "q4_0", "--quiet"], check=True)
        base_file = pathlib.Path(BASE) if BASE else tmp / "base.bin"
        if not base_file.exists():  # the base distributions once; every run below reuses them
            out = run(["kld", str(SMOL), str(q40), "--save-base", str(base_file), "--text", str(TEXT), "--ctx", "512",
                       "--chunks", str(CHUNKS), "--json", "--quiet"])
            if RESULTS:  # Q4_0's result came with the base: kept, so kld() below does not redo it
                (pathlib.Path(RESULTS) / "q4_0.json").parent.mkdir(parents=True, exist_ok=True)
                (pathlib.Path(RESULTS) / "q4_0.json").write_text(json.dumps(out))
        with ThreadPoolExecutor(JOBS) as pool:
            runs = [pool.submit(kld, base_file, model=q40)] + [pool.submit(kld, base_file, spec=s) for s in SPECS]
            results = [r.result() for r in runs]
        first = results[0]
        ref, got = weights(SMOL), weights(q40)
        total = sum(v.size for v in ref.values())
        q40_mse = sum(float(np.sum((ref[k].astype(np.float64) - got[k]) ** 2)) for k in ref) / total
        err = run(["error", str(SMOL), "--spec", ",".join(SPECS), "--json", "--quiet"])
        if len(err["tensors"]) != len(ref) or err["weights"] != total:
            sys.exit(f"lowbit error saw {len(err['tensors'])} matrices / {err['weights']} weights, "
                     f"the GGUF {len(ref)} / {total}")
        rows = [("Q4_0 (`lowbit convert --dtype q4_0`)", 4.5, q40_mse, first)]
        for i, spec in enumerate(SPECS):
            mse = sum(t["mse"][i] * ref[gguf_name(t["name"])].size for t in err["tensors"]) / total
            rows.append((spec, err["specs"][i]["bits_per_weight"], mse, results[i + 1]))
    print(f"SmolLM2-135M ({SMOL.name} as stored is the reference), every weight matrix quantized (attention, MLP, "
          f"embedding = tied head); KLD over {first['chunks']} windows of 512 tokens of wiki.test.raw "
          f"({first['scored_tokens']} scored tokens)\n")
    print("| weights | bits/weight | weight MSE | MSE / Q4_0's | KLD mean | ± | top-1 % | PPL | ΔPPL | ± |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, bits, mse, k in rows:
        print(f"| {name} | {bits:.3f} | {mse:.4e} | {mse / q40_mse:.3f} | {k['kld_mean']:.4f} | {k['kld_err']:.4f} | "
              f"{100 * k['top1_agreement']:.2f} | {k['ppl']:.3f} | {k['dppl']:+.3f} | {k['dppl_err']:.3f} |",
              flush=True)


if __name__ == "__main__":
    main()
