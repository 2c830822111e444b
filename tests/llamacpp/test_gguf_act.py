"""`--act ggml`: lowbit computing a GGUF as llama.cpp's CPU backend does.

ggml's CPU matmul converts each input row to the weight type's vec_dot type
(Q8_0, Q8_1, Q8_K, f16, bf16) before its dot products; lowbit's runner keeps
fp32 activations unless `--act ggml` rounds them the same way
(src/model/ggml_act.c). Checked here:
  - the rounding itself, value for value, against libggml-cpu's own
    from_float of each vec_dot type (the x86 code the tools run), and the
    weight -> vec_dot type table against ggml_get_type_traits_cpu;
  - llama-perplexity vs lowbit ppl on the same GGUF files, 8 windows of 512
    of wiki.test.raw. fp32 activations leave gaps of -0.35% (Q8_0) to -0.83%
    (Q6_K), all one way: llama.cpp's rounding costs perplexity. --act ggml
    removes that bias: the gaps measured -0.18% (Q8_0), -0.05% (Q4_0), -0.03%
    (Q4_1), +0.34% (Q4_K_M), -0.26% (Q6_K), -0.06% (IQ4_XS), scattered around
    zero. What scatters them: once activations are rounded, a last-bit
    difference upstream (summation order) flips codes, and over 2040 scored
    tokens that moves PPL by about 0.2% either way -- storing the KV cache in
    fp16 (llama-perplexity's default; --kv fp16) is such a perturbation and
    moved every type's PPL by 0.07-0.21%. So the bounds are the measured
    spread, not bit agreement (the KLD from F32 is the steadier measure:
    Q8_0 0.00397 llama.cpp, 0.00381 lowbit --act ggml --kv fp16, 0.00112
    lowbit fp32 activations)."""
import ctypes
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import internal_lib  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
LOWBIT = str(BUILD / "lowbit")
SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WIKI = ROOT / "data/wikitext-2-raw/wiki.test.raw"

# lb__ggml_act (ggml_act.h) -> (ggml type id, block, bytes per block)
ACT = {"f32": (0, 0, 1, 4), "f16": (1, 1, 1, 2), "bf16": (2, 30, 1, 2), "q8_0": (3, 8, 32, 34),
       "q8_1": (4, 9, 32, 36), "q8_k": (5, 15, 256, 292)}


@pytest.fixture(scope="module")
def ggml_cpu(llamacpp_bin):
    ctypes.CDLL(str(llamacpp_bin / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    dll = ctypes.CDLL(str(llamacpp_bin / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    dll.ggml_cpu_init()
    dll.ggml_get_type_traits_cpu.restype = ctypes.c_void_p
    dll.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
    return dll


def traits(dll, ggml_type):
    """(from_float, vec_dot_type) of ggml's CPU type traits."""
    p = dll.ggml_get_type_traits_cpu(ggml_type)
    words = (ctypes.c_void_p * 2).from_address(p)
    vdt = ctypes.c_int.from_address(p + 2 * ctypes.sizeof(ctypes.c_void_p)).value
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(words[0])
    return fn, vdt


def ggml_round(dll, name, x):
    """x rounded by ggml's from_float for vec_dot type `name`, decoded here."""
    _, gtype, block, nbytes = ACT[name]
    fn, _ = traits(dll, gtype)
    x = np.ascontiguousarray(x, np.float32)
    out = np.zeros(x.size // block * nbytes, np.uint8)
    fn(x.ctypes.data, out.ctypes.data, x.size)
    if name == "f16":
        return out.view(np.float16).astype(np.float32)
    if name == "bf16":
        return (out.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    b = out.reshape(-1, nbytes)
    if name == "q8_k":
        d = b[:, :4].copy().view(np.float32)
        q = b[:, 4:260].copy().view(np.int8).astype(np.float32)
    else:
        d = b[:, :2].copy().view(np.float16).astype(np.float32)
        q = b[:, nbytes - 32:].copy().view(np.int8).astype(np.float32)
    return (d * q).astype(np.float32).ravel()  # fp32 products, as lowbit's decode


def lowbit_round(name, x):
    lib = internal_lib.load()
    f = lib.lb__ggml_act_round
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    x = np.ascontiguousarray(x, np.float32)
    y = np.full_like(x, np.nan)
    assert f(ACT[name][0], x.ctypes.data, x.size, y.ctypes.data) == 0
    return y


def inputs():
    rng = np.random.default_rng(14)
    parts = [rng.standard_normal(4096) * s for s in (1e-6, 0.02, 1.0, 300.0)]
    parts.append(rng.standard_t(2, 4096))  # heavy tails: one outlier sets a block's scale
    ties = np.tile(np.arange(-128, 128, dtype=np.float32) + 0.5, 4)  # x * 127/amax lands on halves
    ties[::256] = 127.0
    parts += [ties, np.clip(ties, -127, 127), -np.clip(ties, -127, 127), np.zeros(512)]
    parts.append(np.where(rng.random(4096) < 0.5, 0.0, rng.standard_normal(4096)))
    return np.concatenate(parts).astype(np.float32)


@pytest.mark.parametrize("name", ["q8_0", "q8_1", "q8_k", "f16", "bf16"])
def test_rounding_matches_ggml_cpu(ggml_cpu, name):
    x = inputs()
    want, got = ggml_round(ggml_cpu, name, x), lowbit_round(name, x)
    bad = np.flatnonzero(want.view(np.uint32) != got.view(np.uint32))
    assert bad.size == 0, f"{name}: {bad.size} of {x.size} differ, first at {bad[0]}: x={x[bad[0]]!r} " \
                          f"ggml {want[bad[0]]!r} lowbit {got[bad[0]]!r}"


def test_vec_dot_types_match_ggml_cpu(ggml_cpu):
    lib = internal_lib.load()
    lib.lb_dtype_by_name.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
    f = lib.lb__ggml_act_type
    f.restype, f.argtypes = ctypes.c_int, [ctypes.c_int]
    by_ggml = {v[1]: k for k, v in ACT.items()}
    names = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "q2_k": 10, "q3_k": 11,
             "q4_k": 12, "q5_k": 13, "q6_k": 14, "iq4_nl": 20, "iq4_xs": 23, "bf16": 30, "mxfp4": 39, "nvfp4": 40}
    for name, gtype in names.items():
        dt = ctypes.c_int(-1)
        assert lib.lb_dtype_by_name(name.encode(), ctypes.byref(dt)) == 0, name
        _, vdt = traits(ggml_cpu, gtype)
        assert ACT[by_ggml[vdt]][0] == f(dt.value), (name, by_ggml[vdt], f(dt.value))


# ---- whole-model agreement ----

# two types here (tests/llamacpp/test_gguf_eval.py holds every type to the
# issue's 0.5% with --act ggml); measured on six: BENCHMARKS.md, "GGUF"
TYPES = ["Q4_0", "Q4_K_M"]
LOOSE = 0.01    # fp32 activations: the gaps measured without the mode reach 0.83% (Q6_K)
TIGHT = 0.004   # --act ggml: measured at most 0.34% (Q4_K_M)
KV16 = 0.006    # --act ggml --kv fp16: measured at most 0.48% (Q6_K)


def run(args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    assert r.returncode == 0, f"{args[0]} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def f32_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf_act")
    f32 = d / "f32.gguf"
    run([LOWBIT, "convert", SMOLLM2, f32, "--dtype", "f32", "--quiet"])
    return f32


def lowbit_ppl(model, *extra):
    out = run([LOWBIT, "ppl", model, "--text", WIKI, "--ctx", 512, "--chunks", 8, "--threads", 2, "--quiet", *extra])
    return float(re.search(r"PPL = ([0-9.]+)", out).group(1))


def llama_ppl(bin_dir, model):
    out = run([bin_dir / "llama-perplexity", "-m", model, "-f", WIKI, "-c", 512, "--chunks", 8, "-t", 2])
    return float(re.search(r"Final estimate: PPL = ([0-9.]+)", out).group(1))


@pytest.mark.parametrize("gtype", TYPES)
def test_ppl_meets_llama_perplexity(llamacpp_bin, f32_model, gtype):
    q = f32_model.parent / f"{gtype}.gguf"
    run([LOWBIT, "quantize", f32_model, "-o", q, "--type", gtype, "--quiet"])
    llama = llama_ppl(llamacpp_bin, q)
    plain = lowbit_ppl(q)
    ggml = lowbit_ppl(q, "--act", "ggml")
    kv16 = lowbit_ppl(q, "--act", "ggml", "--kv", "fp16")
    gap_plain, gap_ggml, gap_kv16 = plain / llama - 1, ggml / llama - 1, kv16 / llama - 1
    print(f"{gtype}: llama.cpp {llama:.4f}  lowbit fp32 act {plain:.4f} ({gap_plain:+.3%})  "
          f"--act ggml {ggml:.4f} ({gap_ggml:+.3%})  --act ggml --kv fp16 {kv16:.4f} ({gap_kv16:+.3%})")
    assert abs(gap_plain) < LOOSE
    assert abs(gap_ggml) < TIGHT, f"{gtype}: --act ggml is {gap_ggml:+.3%} from llama-perplexity"
    assert abs(gap_ggml) < abs(gap_plain), f"{gtype}: --act ggml is no closer to llama-perplexity"
    assert abs(gap_kv16) < KV16, f"{gtype}: --act ggml --kv fp16 is {gap_kv16:+.3%} from llama-perplexity"
