"""The forward pass on packed weights (lowbit.h, lb_runner_options): prefill
on packed weights equals the fake-quantized path bit for bit (both run the
same fp32 kernels on the same dequantized values); decode reads the packed
codes with the row kernels, whose sums run in another order (bounded
below); the runner holds the packed bytes, not fp32 copies; W8A8 with
dynamic and static activation scales; bad combinations are usage errors."""
import ctypes
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

# every storage spec family the kernels serve (stories260K: dim 64, hidden 172)
SPECS = ["fp32", "bf16", "fp16", "fp8_e4m3:channel", "fp8_e5m2:g32", "fp8_e4m3:tensor", "int8:channel",
         "int8:g32:affine", "uint8:g16:affine", "int4:g32", "int4:g128:affine", "int4:channel", "uint4:g32:affine",
         "fp16:g64", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "nvfp4", "mxint8",
         "int4:g3", "fp4_e2m1:g16:scale=bf16"]


def ppl(*extra):
    out = lowbit("ppl", ml.STORIES, "--tokenizer", TOK, "--text", TEXT, "--ctx", 64, "--chunks", 4, "--json", *extra)
    return json.loads(out.stdout)


@pytest.mark.parametrize("spec", SPECS)
def test_packed_prefill_equals_fake_quantization(spec):
    packed = ppl("--spec", spec, "--spec-embed", spec)
    fake = ppl("--spec", spec, "--spec-embed", spec, "--fake")
    assert packed["ppl"] == fake["ppl"] and packed["ppl_err"] == fake["ppl_err"], (packed, fake)
    m = packed["memory"]
    assert m["packed_matrices"] == 36 and m["fp32_matrices"] == 0  # 5 layers x 7 + the tied head
    assert fake["memory"]["packed_matrices"] == 0


def bits_per_value(spec, rows, cols):
    L = ml.lib
    L.lb_qspec_parse.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    L.lb_qspec_bits_per_value.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]
    L.lb_qspec_bits_per_value.restype = ctypes.c_double
    buf = ctypes.create_string_buffer(256)
    assert L.lb_qspec_parse(spec.encode(), buf) == 0
    return L.lb_qspec_bits_per_value(buf, rows, cols)


@pytest.mark.parametrize("spec", ["int4:g32", "int8:channel", "nvfp4", "mxfp6_e3m2", "int4:g128:affine"])
def test_the_runner_holds_the_packed_bytes(spec):
    out = ppl("--spec", spec, "--spec-embed", spec)
    m = out["memory"]
    info = json.loads(lowbit("inspect", ml.STORIES, "--json").stdout)
    shapes = [t["shape"] for t in info["tensors"] if len(t["shape"]) == 2]
    assert len(shapes) == 36
    expect = sum(bits_per_value(spec, r, c) * r * c / 8 for r, c in shapes)
    assert m["weights_fp32_bytes"] == sum(4 * r * c for r, c in shapes)
    # the same bits lb_qstats reports, as bytes: every row starts on a byte, so allow a byte per row
    slack = sum(r for r, _ in shapes)
    assert expect - 1 <= m["weights_bytes"] <= expect + slack, (m["weights_bytes"], expect)


class PackedRunner(tf.Runner):
    """tf.Runner with a spec on every matrix (packed unless fake)."""

    def __init__(self, path, spec, fake=0, act=0, threads=2):
        L = tf.runner_lib()
        L.lb_qspec_parse.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        self.spec = ctypes.create_string_buffer(256)
        plain = {"fp32": 0, "fp16": 1, "bf16": 2}  # lb_format ids: element only, tensor granularity, no options
        if spec in plain:
            ctypes.memmove(self.spec, ctypes.byref(ctypes.c_int(plain[spec])), ctypes.sizeof(ctypes.c_int))
        else:
            assert L.lb_qspec_parse(spec.encode(), self.spec) == 0
        self.model = ctypes.c_void_p()
        assert L.lb_model_open(str(path).encode(), ctypes.byref(self.model)) == 0
        p = ctypes.cast(self.spec, ctypes.c_void_p)
        opts = tf.RunnerOptions(threads=threads, attn=p, mlp=p, embed=p, head=p, max_ctx=0, fake=fake, act=act)
        self.h = ctypes.c_void_p()
        st = L.lb_runner_new(self.model, ctypes.byref(opts), ctypes.byref(self.h))
        assert st == 0, L.lb_last_error().decode()
        self.vocab = L.lb_runner_vocab_size(self.h)


PROMPT = [1, 403, 407, 261, 378, 429, 290, 415, 268, 335, 266, 289, 442, 278, 317, 404, 411, 265, 273, 450,
          296, 260, 337, 416, 423, 290, 261, 280, 319, 276]


@pytest.mark.parametrize("spec", ["int4:g32", "nvfp4", "fp8_e4m3:channel", "bf16"])
def test_decode_on_packed_weights_matches_prefill(spec):
    """Prefill (30 tokens >= LB__QMAT_PANEL_MIN_N: dequantized panels, sums
    in k order) and decode (row kernels: 16 fused partial sums) add the same
    fp32 products in different orders. Each dot's rounding error is at most
    about cols * 2^-24 * sum|x w| (cols <= 172 here: ~1e-5 relative); through
    5 layers and the head such errors stay far below 1e-4 of the logit range,
    the bound checked. The fake path keeps prefill == decode exactly."""
    with PackedRunner(ml.STORIES, spec) as r:
        r.reset()
        pre = r.forward(PROMPT)
        r.reset()
        dec = np.array([r.forward([t], last_only=True) for t in PROMPT])
    span = float(pre.max() - pre.min())
    diff = float(np.abs(pre - dec).max())
    assert diff <= 1e-4 * span, (diff, span)
    with PackedRunner(ml.STORIES, spec, fake=1) as r:
        r.reset()
        pre_f = r.forward(PROMPT)
        r.reset()
        dec_f = np.array([r.forward([t], last_only=True) for t in PROMPT])
    assert np.array_equal(pre_f, dec_f)
    assert np.array_equal(pre, pre_f)  # packed prefill == fake prefill


def test_thread_count_does_not_change_packed_logits():
    outs = []
    for threads in (1, 2, 3):
        with PackedRunner(ml.STORIES, "int4:g32", threads=threads) as r:
            r.reset()
            a = r.forward(PROMPT)
            r.reset()
            b = np.array([r.forward([t], last_only=True) for t in PROMPT])
            outs.append((a, b))
    for a, b in outs[1:]:
        assert np.array_equal(a, outs[0][0]) and np.array_equal(b, outs[0][1])


@pytest.mark.parametrize("act,spec,tol", [("int8", "int8:channel", 0.02), ("fp8_e4m3", "fp8_e4m3:channel", 0.03),
                                          ("int8", "int8:tensor", 0.03)])
def test_w8a8_stays_close_to_weight_only(act, spec, tol):
    """Per-token 8-bit activations on top of 8-bit weights: the perplexity
    moves by at most tol (relative) from the weight-only run here."""
    w = ppl("--spec", spec)
    a = ppl("--spec", spec, "--act", act)
    assert a["ppl"] != w["ppl"]  # the activations really were quantized
    assert abs(a["ppl"] - w["ppl"]) <= tol * w["ppl"], (a["ppl"], w["ppl"])
    s = ppl("--spec", spec, "--act", act, "--calib", TEXT, "--calib-tokens", 64)
    assert s["ppl"] != a["ppl"]  # static scales differ from per-token ones
    assert abs(s["ppl"] - w["ppl"]) <= 3 * tol * w["ppl"], (s["ppl"], w["ppl"])


@pytest.mark.parametrize("args,msg", [
    (["--spec", "int4:g32", "--act", "int8"], "int8"),
    (["--act", "int8"], "packed"),
    (["--spec", "int8:channel", "--act", "int8", "--fake"], "--fake"),
    (["--spec", "int8:channel", "--calib", str(TEXT)], "--act"),
    (["--spec", "int8:channel", "--act", "int4"], "--act takes"),
    (["--kv", "fp6_e2m3"], "--kv takes"),
    (["--spec", "int8:g32", "--act", "int8"], "channel"),
])
def test_bad_runner_options_are_usage_errors(args, msg):
    p = lowbit("ppl", ml.STORIES, "--tokenizer", TOK, "--text", TEXT, "--ctx", 64, "--chunks", 1, *args, check=False)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert msg in p.stderr and p.stdout == ""


def test_generate_reports_speed_and_memory():
    p = lowbit("generate", ml.STORIES, "--tokenizer", TOK, "-p", "Once upon a time", "-n", 20, "--spec", "int4:g32")
    assert p.stdout.startswith("Once upon a time")
    assert "tokens/s" in p.stderr and "memory: weight matrices" in p.stderr and "35 packed" in p.stderr


KV_BITS = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8_e4m3": 8, "fp8_e5m2": 8, "int8": 8, "int4": 4}


def test_kv_cache_formats_change_little_and_hold_fewer_bytes():
    """--kv on ppl: the cache's bytes follow the format (plus one fp32 scale
    per token, head and K/V for the scaled ones; stories260K has head_dim 8,
    so scales weigh a lot here), and perplexity moves least for the 16-bit
    formats and most for int4."""
    base = ppl("--ctx", 64)
    out = {kv: ppl("--kv", kv) for kv in KV_BITS}
    assert out["fp32"]["ppl"] == base["ppl"]
    layers, kv_heads, head_dim, ctx = 5, 4, 8, 64  # stories260K at --ctx 64
    elements = 2 * layers * kv_heads * ctx * head_dim
    for kv, bits in KV_BITS.items():
        scaled = kv not in ("fp32", "bf16", "fp16")
        expect = elements * bits / 8 + (elements / head_dim * 4 if scaled else 0)
        if kv == "fp32":  # attention's panels (kvcache.h): V's 8 values per head padded to a panel of 32
            expect = layers * kv_heads * 4 * (ctx * head_dim + 32 * ctx)
        got = out[kv]["memory"]["kv_cache_bytes"]
        assert got == expect, (kv, got, expect)
    d = {kv: abs(r["ppl"] - base["ppl"]) / base["ppl"] for kv, r in out.items()}
    assert d["fp16"] < 1e-3 and d["bf16"] < 2e-3
    assert d["int8"] < 0.01 and d["fp8_e4m3"] < 0.03
    # int4 with 8-value heads (this tiny model) is coarse: worst of all, still a finite model
    assert d["int4"] > max(v for k, v in d.items() if k != "int4") and out["int4"]["ppl"] < 100


def test_kv_format_on_generate_and_kld():
    p = lowbit("generate", ml.STORIES, "--tokenizer", TOK, "-p", "Once upon a time", "-n", 10, "--kv", "int8")
    assert p.stdout.startswith("Once upon a time")
    out = json.loads(lowbit("kld", ml.STORIES, "--tokenizer", TOK, "--text", TEXT, "--ctx", 64, "--chunks", 2, "--kv",
                            "fp8_e4m3", "--json").stdout)
    assert 0 < out["kld_mean"] < 0.05


@pytest.mark.skipif(os.environ.get("LOWBIT_SANITIZED") == "1",
                    reason="AddressSanitizer's shadow memory and quarantine make resident memory meaningless")
def test_resident_memory_follows_the_packed_size():
    """SmolLM2 with every matrix in int4:g32: the process's resident memory
    after the run is the bytes the runner holds plus a bounded rest (code,
    tokenizer, activations, allocator: 80 MiB allowed; measured ~37), and
    the simulated path holds about the fp32 size more."""
    args = ["ppl", ml.SMOLLM2, "--text", ml.ROOT / "data/wikitext-2-raw/wiki.test.raw", "--chunks", 1, "--ctx", 128,
            "--json", "--spec", "int4:g32", "--spec-embed", "int4:g32"]
    packed = json.loads(lowbit(*args).stdout)["memory"]
    fake = json.loads(lowbit(*args, "--fake").stdout)["memory"]
    held = packed["weights_bytes"] + packed["other_bytes"] + packed["kv_cache_bytes"]
    assert packed["packed_matrices"] == 211 and packed["weights_bytes"] < packed["weights_fp32_bytes"] / 6
    assert packed["rss_bytes"] <= held + (80 << 20), (packed, held)
    assert fake["rss_bytes"] - packed["rss_bytes"] >= 0.8 * (fake["weights_bytes"] - packed["weights_bytes"])


def test_calibration_longer_than_the_context_runs_in_windows():
    """lb_runner_calibrate cuts its tokens into windows of the runner's
    context: 300 calibration tokens with a 64-token context record more
    than the first 64 do (the maxima can only grow)."""
    short = ppl("--spec", "int8:channel", "--act", "int8", "--calib", TEXT, "--calib-tokens", 64)
    long_ = ppl("--spec", "int8:channel", "--act", "int8", "--calib", TEXT, "--calib-tokens", 300)
    assert short["ppl"] != long_["ppl"] and short["calib"] == str(TEXT)
