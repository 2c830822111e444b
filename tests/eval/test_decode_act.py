"""The int8 decode mode (lb_runner_options.decode_act, --decode-act int8; kernel/qdot8.h): which matrices it
reaches, that it changes the numbers a little and the same way for a prompt run whole or token by token, that
kld --base-exact measures it against the same model computed exactly, and its usage errors. The kernels' own
bits are checked in tests/unit/test_qdot8.c."""
import ctypes
import functools
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "model"))
import model_lib as ml  # noqa: E402
import test_forward_reference as tf  # noqa: E402
from test_eval_cli import lowbit, TEXT, TOK  # noqa: E402
from test_packed import PROMPT  # noqa: E402

LB_FMT_INT8 = 12  # lb_format


def test_lb_fmt_int8_is_the_header_value():
    L = ml.lib
    L.lb_format_by_name.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
    f = ctypes.c_int(-1)
    assert L.lb_format_by_name(b"int8", ctypes.byref(f)) == 0 and f.value == LB_FMT_INT8


def ppl(*extra):
    out = lowbit("ppl", ml.STORIES, "--tokenizer", TOK, "--text", TEXT, "--ctx", 64, "--chunks", 4, "--json", *extra)
    return json.loads(out.stdout)


@functools.lru_cache(maxsize=None)
def int8_kernels():
    """The int8 mode's kernel set on this CPU (and LOWBIT_ISA), as the report names it (asked once)."""
    return ppl("--spec", "int4:g32", "--decode-act", "int8")["memory"]["int8_kernels"]


# which sets take fp6 e2m3 and fp8 (kernel/qdot8.h: the scalar reference takes both, the VBMI sets fp6, the BF16
# set fp8 too; AVX2, NEON and plain VNNI neither)
SIX = {"scalar", "avx512-vnni-vbmi", "avx512-vnni-vbmi-bf16"}
FP8 = {"scalar", "avx512-vnni-vbmi-bf16"}


def test_the_report_names_a_kernel_set_of_this_build():
    k = int8_kernels()
    assert k in ("scalar", "avx2", "avx2-vnni", "avx512-vnni", "avx512-vnni-vbmi", "avx512-vnni-vbmi-bf16", "neon"), k
    if os.environ.get("LOWBIT_ISA") == "scalar":
        assert k == "scalar"


@pytest.mark.parametrize("spec,reached", [("int4:g32", 36), ("nvfp4", 36), ("mxfp4", 36), ("int8:channel", 36),
                                          ("int4:g128:affine", 36), ("uint4:g32:affine", 36), ("int4:channel", 36),
                                          ("fp8_e4m3:channel", "fp8"), ("fp8_e5m2:channel", "fp8"),
                                          ("mxfp8_e4m3", "fp8"), ("fp8_e4m3:g8", 0), ("fp8_e4m3fnuz:channel", 0),
                                          ("mxfp6_e2m3", "six"), ("mxfp6_e3m2", 0), ("int4:g48", 0)])
def test_the_mode_reaches_the_formats_its_kernels_take(spec, reached):
    if reached in ("six", "fp8"):
        reached = 36 if int8_kernels() in (SIX if reached == "six" else FP8) else 0
    exact = ppl("--spec", spec, "--spec-embed", spec)
    int8 = ppl("--spec", spec, "--spec-embed", spec, "--decode-act", "int8")
    m = int8["memory"]
    assert m["decode_act"] == "int8" and m["int8_act_matrices"] == reached, m
    assert exact["memory"]["decode_act"] == "exact" and exact["memory"]["int8_act_matrices"] == 0
    if reached:  # rounded activations: a different, close perplexity
        assert int8["ppl"] != exact["ppl"]
        assert abs(int8["ppl"] - exact["ppl"]) <= 0.02 * exact["ppl"], (int8["ppl"], exact["ppl"])
    else:  # nothing reached: the exact numbers
        assert int8["ppl"] == exact["ppl"]


# ggml types the mode reaches on SmolLM2: copied into lowbit's layout, the same bytes (qmat_repack.c: Q8_0, MXFP4)
# or read in place (the K-quants, IQ4_XS, Q4_0, Q5_0, and IQ4_NL, also in rows of 576 = 4.5 groups of 128: IQ4_XS's
# fallback there; Q5_0 is most of SmolLM2's Q4_K_M)
REACHED_GGML = {"q4_0", "q8_0", "q5_0", "mxfp4", "q6_k", "q4_k", "q5_k", "iq4_xs", "iq4_nl"}


# IQ4_XS: quantizing SmolLM2 takes 90 s under the sanitizers, so `make asan` leaves this case to asan-full (its
# kernels still run there in test_qdot8k, its quantizer in test_ggml_quants)
@pytest.mark.parametrize("mix,k_type", [("Q4_K_M", "q4_k"), ("Q5_K_M", "q5_k"),
                                        pytest.param("IQ4_XS", "iq4_xs", marks=pytest.mark.scale)])
def test_the_mode_reads_k_quants_and_iq4_xs_in_place(tmp_path, mix, k_type):
    f = tmp_path / "m.gguf"
    lowbit("quantize", ml.SMOLLM2, "-o", f, "--format", "gguf", "--type", mix, "--quiet")
    tensors = json.loads(lowbit("inspect", f, "--json").stdout)["tensors"]
    types = [t["dtype"] for t in tensors if t["dtype"] != "f32"]
    assert types.count(k_type) >= 8, types  # SmolLM2's 1536-wide down projections
    common = ["ppl", f, "--text", TEXT, "--ctx", 128, "--chunks", 2, "--json"]
    exact = json.loads(lowbit(*common).stdout)
    int8 = json.loads(lowbit(*common, "--decode-act", "int8").stdout)
    assert int8["memory"]["int8_act_matrices"] == sum(t in REACHED_GGML for t in types), (types, int8["memory"])
    # and holds the file's bytes: nothing copied into a larger layout (Q5_0 was, as int8:g32 at 1.55x)
    assert int8["memory"]["weights_bytes"] == exact["memory"]["weights_bytes"], (int8["memory"], exact["memory"])
    # 2 windows of 128 tokens: the IQ4_XS file, every matrix in the mode, moves by 1.5% here (by 0.4% on 4
    # windows of 512, KLD 0.0031 against its exact run, as Q4_K_M's 0.0033)
    assert int8["ppl"] != exact["ppl"] and abs(int8["ppl"] - exact["ppl"]) <= 0.02 * exact["ppl"]


def test_the_text_report_says_what_the_mode_reached():
    p = lowbit("ppl", ml.STORIES, "--tokenizer", TOK, "--text", TEXT, "--ctx", 64, "--chunks", 1, "--spec", "int4:g32",
               "--decode-act", "int8")
    assert "decode activations: int8 on 35 of 36 matrices" in p.stdout, p.stdout  # the embedding stays fp32 here


class Int8Runner(tf.Runner):
    """tf.Runner with a spec on every matrix and int8 decode activations."""

    def __init__(self, spec, decode_act, threads=2):
        L = tf.runner_lib()
        L.lb_qspec_parse.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        self.spec = ctypes.create_string_buffer(256)
        assert L.lb_qspec_parse(spec.encode(), self.spec) == 0
        self.model = ctypes.c_void_p()
        assert L.lb_model_open(str(ml.STORIES).encode(), ctypes.byref(self.model)) == 0
        p = ctypes.cast(self.spec, ctypes.c_void_p)
        opts = tf.RunnerOptions(threads=threads, attn=p, mlp=p, embed=p, head=p, decode_act=decode_act)
        self.h = ctypes.c_void_p()
        st = L.lb_runner_new(self.model, ctypes.byref(opts), ctypes.byref(self.h))
        assert st == 0, L.lb_last_error().decode()
        self.vocab = L.lb_runner_vocab_size(self.h)


@pytest.mark.parametrize("spec", ["int4:g32", "nvfp4", "int8:channel"])
def test_a_prompt_whole_or_token_by_token_gives_the_same_bits(spec):
    """The int8 kernels run every token alone (up to 4 per pass over the
    weights, each with its own activation scales), so prefill and decode
    agree exactly, whatever the thread count; unlike the exact mode, whose
    prefill sums in another order."""
    outs = []
    for threads in (1, 2):
        with Int8Runner(spec, LB_FMT_INT8, threads) as r:
            r.reset()
            pre = r.forward(PROMPT)
            r.reset()
            dec = np.array([r.forward([t], last_only=True) for t in PROMPT])
        assert np.array_equal(pre, dec)
        outs.append(pre)
    assert np.array_equal(outs[0], outs[1])
    with Int8Runner(spec, 0) as r:
        r.reset()
        exact = r.forward(PROMPT)
    span = float(exact.max() - exact.min())
    assert 0 < float(np.abs(exact - outs[0]).max()) <= 0.1 * span


def test_kld_base_exact_measures_the_mode_alone():
    args = ["kld", ml.STORIES, "--tokenizer", TOK, "--text", TEXT, "--ctx", 64, "--chunks", 4, "--spec", "int4:g32",
            "--json"]
    alone = json.loads(lowbit(*args, "--decode-act", "int8", "--base-exact").stdout)
    vs_model = json.loads(lowbit(*args, "--decode-act", "int8").stdout)
    exact_vs_model = json.loads(lowbit(*args).stdout)
    assert 0 < alone["kld_mean"] < exact_vs_model["kld_mean"]
    # the base of --base-exact is the quantized model: its perplexity is the exact run's
    assert alone["ppl_base"] == exact_vs_model["ppl"] and alone["ppl"] == vs_model["ppl"]


@pytest.mark.parametrize("args,msg", [
    (["--spec", "int4:g32", "--decode-act", "fast"], "--decode-act takes int8"),
    (["--spec", "int4:g32", "--decode-act"], "--decode-act takes int8"),
    (["--spec", "int8:channel", "--act", "int8", "--decode-act", "int8"], "exclude each other"),
    (["--spec", "int4:g32", "--fake", "--decode-act", "int8"], "fake"),
])
def test_bad_decode_act_options_are_usage_errors(args, msg):
    p = lowbit("ppl", ml.STORIES, "--tokenizer", TOK, "--text", TEXT, "--ctx", 64, "--chunks", 1, *args, check=False)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert msg in p.stderr and p.stdout == ""


def test_kld_base_exact_needs_the_mode():
    p = lowbit("kld", ml.STORIES, "--tokenizer", TOK, "--text", TEXT, "--ctx", 64, "--chunks", 1, "--spec", "int4:g32",
               "--base-exact", check=False)
    assert p.returncode == 2 and "--base-exact" in p.stderr


def test_generate_and_bench_take_the_mode():
    p = lowbit("generate", ml.STORIES, "--tokenizer", TOK, "-p", "Once upon a time", "-n", 12, "--spec", "int4:g32",
               "--decode-act", "int8")
    assert p.stdout.startswith("Once upon a time") and "int8 on 35 of 36" in p.stderr
    b = json.loads(lowbit("bench", "--quick", "--json", "--specs", "int4:g32", "--model", ml.STORIES, "--decode-specs",
                          "int4:g32,int4:g32+decode-act=int8", "--kv", "fp32").stdout)
    names = [row["spec"] for row in b["model"]["decode"]]
    assert "int4:g32+decode-act=int8" in names, names
    assert any(row["spec"] == "int4:g32 +act int8" for row in b["matvec"]["rows"]), b["matvec"]["rows"]
    bad = lowbit("bench", "--quick", "--no-model", "--specs", "int4:g32+decode-act=int8", check=False)
    assert bad.returncode == 2 and "only in --decode-specs" in bad.stderr
