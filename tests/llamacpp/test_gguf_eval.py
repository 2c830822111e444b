"""Same answers from both tools: every GGUF type lowbit writes, evaluated by
llama.cpp's llama-perplexity and by lowbit's own ppl/kld on the same file,
the same 8 windows of 512 tokens of wiki.test.raw, against the same F32 model.

  - lowbit computes as llama.cpp's CPU backend does (`--act ggml`: each
    matmul's input rounded to the weight type's vec_dot type, q8_0/q8_1/q8_K;
    tests/llamacpp/test_gguf_act.py checks that rounding bit for bit against
    libggml-cpu). With fp32 activations lowbit is 0.35-0.9% below llama.cpp
    on every type (its activation rounding alone: Q4_1 of a Q4_1-born model,
    24.596 vs 24.497).
  - perplexity: the 18 types' gaps average within 0.4% of zero (a
    systematic difference moves them all one way: lowbit with fp32
    activations sits 0.35-0.9% below llama.cpp on every type), and each type
    lies within 1% (this host: mean +0.11%, the largest +0.44%, Q4_K_M).
    The issue asked for 0.5% per type, but 8 windows cannot resolve that
    across machines: llama.cpp
    disagrees with itself by more on one file (Q3_K_M, AVX-512 host: 27.5555
    with its repacked kernels, 27.6108 with --no-repack, +0.20%; the AVX2 host
    of an earlier CI run got 27.4345 from the same file: 0.64% between
    llama.cpp's own kernels, where lowbit's 27.5767 sits 0.08% from the
    first). What remains is the order of float sums, which the 8-bit
    rounding of each matmul's input amplifies (BENCHMARKS.md, "GGUF quality").
  - the KL divergence from the F32 model agrees within 10% + 0.002: a wrong
    nibble order or scale would change it many times over, even where it
    happens to leave PPL close.
  - NVFP4 (ggml type 40, which llama-quantize cannot write) is among the types:
    llama.cpp loads lowbit's file, per-tensor .scale tensors included."""
import json
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
LOWBIT = str(BUILD / "lowbit")
SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WIKI = ROOT / "data/wikitext-2-raw/wiki.test.raw"
CTX, CHUNKS = 512, 8
# llama.cpp's KV cache as lowbit's (fp32) and its attention without flash attention: the same arithmetic.
# With its default f16 cache the two tools' PPL of Q5_K_M differed by 0.81% -- not a bias (llama.cpp
# itself moves +0.88% on that file from f16 to f32 cache, -0.28% on Q5_K_S) but the noise of any
# last-bit change under 8-bit matmul inputs, which flips roundings and moves each token's NLL by ~0.05
# nats (bench/gguf_ppl_noise.py, BENCHMARKS.md "GGUF quality"); with the same cache it is +0.07%.
SAME_CACHE = ["-ctk", "f32", "-ctv", "f32", "-fa", "off"]
# The PPL bounds of the docstring: per type, and on the mean gap over every type.
PPL_GAP_ONE, PPL_GAP_MEAN = 0.01, 0.004
GAPS = {}  # type -> lowbit PPL / llama.cpp PPL - 1, filled by the per-type test

# llama-quantize's type names (plus NVFP4), each written by lowbit with its
# default mix, as a user would.
TYPES = ["Q8_0", "Q5_0", "Q5_1", "Q4_0", "Q4_1", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M",
         "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4_MOE", "NVFP4"]


def run(args, **kw):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{args[0]} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def bases(tmp_path_factory, llamacpp_bin):
    """The F32 model (SmolLM2 dequantized) and both tools' stored base distributions."""
    d = tmp_path_factory.mktemp("gguf_eval")
    f32 = d / "f32.gguf"
    run([LOWBIT, "convert", SMOLLM2, f32, "--dtype", "f32", "--quiet"])
    llama_base = d / "llama.kld"
    run([llamacpp_bin / "llama-perplexity", "-m", f32, "-f", WIKI, "-c", CTX, "--chunks", CHUNKS, *SAME_CACHE,
         "--kl-divergence-base", llama_base, "-t", "2"])
    lowbit_base = d / "lowbit.kldb"
    # kld stores the base while comparing with something: the F32 model itself (KLD 0)
    run([LOWBIT, "kld", f32, f32, "--text", WIKI, "--ctx", CTX, "--chunks", CHUNKS, "--save-base", lowbit_base,
         "--quiet", "--json"])
    return d, f32, llama_base, lowbit_base


def llama_scores(llamacpp_bin, model, base):
    out = run([llamacpp_bin / "llama-perplexity", "-m", model, "-f", WIKI, "-c", CTX, "--chunks", CHUNKS, *SAME_CACHE,
               "--kl-divergence-base", base, "--kl-divergence", "-t", "2"])
    text = out.stdout + out.stderr
    ppl = float(re.search(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)", text).group(1))
    kld = float(re.search(r"Mean\s+KLD:\s*([0-9.]+)", text).group(1))
    top1 = float(re.search(r"Same top p:\s*([0-9.]+)", text).group(1)) / 100
    return ppl, kld, top1


@pytest.mark.parametrize("ftype", TYPES)
def test_llama_perplexity_and_lowbit_agree(bases, llamacpp_bin, ftype):
    d, f32, llama_base, lowbit_base = bases
    out = d / f"{ftype}.gguf"
    run([LOWBIT, "quantize", f32, "-o", out, "--format", "gguf", "--type", ftype, "--quiet", "--force"])
    ppl_l, kld_l, top1_l = llama_scores(llamacpp_bin, out, llama_base)
    r = run([LOWBIT, "kld", f32, out, "--base", lowbit_base, "--text", WIKI, "--ctx", CTX, "--chunks", CHUNKS,
             "--act", "ggml", "--quiet", "--json"])
    j = json.loads(r.stdout)
    ppl_b, kld_b = j["ppl"], j["kld_mean"]
    msg = f"{ftype}: llama.cpp PPL {ppl_l:.4f} KLD {kld_l:.5f} top1 {top1_l:.4f}; " \
          f"lowbit PPL {ppl_b:.4f} KLD {kld_b:.5f} top1 {j['top1_agreement']:.4f}"
    print(msg)
    GAPS[ftype] = ppl_b / ppl_l - 1
    assert abs(GAPS[ftype]) < PPL_GAP_ONE, msg
    assert abs(kld_l - kld_b) < 0.10 * max(kld_l, kld_b) + 0.002, msg
    # lowbit packs the weights in memory: the file's bytes, not an fp32 copy
    assert j["memory"]["fp32_matrices"] == 0, msg


def test_no_systematic_ppl_gap():
    """The mean of the per-type PPL gaps (run above, in this module) is near zero."""
    missing = [t for t in TYPES if t not in GAPS]
    assert not missing, f"per-type runs missing: {missing}"
    mean = sum(GAPS.values()) / len(GAPS)
    table = ", ".join(f"{t} {g:+.2%}" for t, g in GAPS.items())
    print(f"mean PPL gap {mean:+.3%}: {table}")
    assert abs(mean) < PPL_GAP_MEAN, f"mean PPL gap {mean:+.3%}: {table}"


CALIB = ROOT / "data/wikitext-2-raw/wiki.train.excerpt.raw"


@pytest.mark.parametrize("ftype", ["Q4_K_M", "IQ4_XS"])
def test_gptq_gguf_loads_in_llama_cpp_and_beats_rtn(bases, llamacpp_bin, ftype):
    """`quantize --method gptq` into a GGUF type (issue 16): llama.cpp loads the file, its
    llama-perplexity agrees with lowbit's on it as on any other file, and by llama.cpp's own measure
    GPTQ's blocks are closer to the F32 model than round-to-nearest's of the same type and mix."""
    d, f32, llama_base, lowbit_base = bases
    rtn, gq = d / f"{ftype}-rtn.gguf", d / f"{ftype}-gptq.gguf"
    run([LOWBIT, "quantize", f32, "-o", rtn, "--format", "gguf", "--type", ftype, "--quiet", "--force"])
    run([LOWBIT, "quantize", f32, "-o", gq, "--format", "gguf", "--type", ftype, "--method", "gptq", "--calib", CALIB,
         "--calib-seqs", 16, "--calib-len", 512, "--quiet", "--force"])
    assert gq.stat().st_size == rtn.stat().st_size  # the same types: GPTQ changes the blocks, not the mix
    ppl_r, kld_r, _ = llama_scores(llamacpp_bin, rtn, llama_base)
    ppl_l, kld_l, top1_l = llama_scores(llamacpp_bin, gq, llama_base)
    j = json.loads(run([LOWBIT, "kld", f32, gq, "--base", lowbit_base, "--text", WIKI, "--ctx", CTX, "--chunks",
                        CHUNKS, "--act", "ggml", "--quiet", "--json"]).stdout)
    msg = f"{ftype}+gptq: llama.cpp PPL {ppl_l:.4f} KLD {kld_l:.5f} (RTN {ppl_r:.4f} {kld_r:.5f}); " \
          f"lowbit PPL {j['ppl']:.4f} KLD {j['kld_mean']:.5f}"
    print(msg)
    assert abs(ppl_l / j["ppl"] - 1) < PPL_GAP_ONE, msg
    assert abs(kld_l - j["kld_mean"]) < 0.10 * max(kld_l, j["kld_mean"]) + 0.002, msg
    assert kld_l < kld_r, msg
