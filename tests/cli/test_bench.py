"""lowbit bench: the JSON report is complete and self-consistent, the text
report prints its tables, and bad options are usage errors. No timing is
judged (the machine is shared): only that figures exist, are positive and
agree with one another."""
import json
import math
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
STORIES = ROOT / "models/stories260K.bin"
DEFAULT_SPECS = ["fp32", "bf16", "fp16", "fp8_e4m3:channel", "fp8_e5m2:channel", "fp8_e4m3:g32", "int8:channel",
                 "int8:g32", "int4:channel", "int4:g32", "int4:g128:affine", "mxfp8_e4m3", "mxfp6_e2m3", "mxfp4",
                 "nvfp4"]
DECODE_SPECS = ["fp32", "bf16", "fp8_e4m3:channel", "int8:channel", "int4:g32", "mxfp4", "nvfp4",
                "int8:channel+act=int8", "fp8_e4m3:channel+act=fp8_e4m3", "int8:channel+decode-act=int8",
                "int4:g32+decode-act=int8", "mxfp4+decode-act=int8", "nvfp4+decode-act=int8"]
KV = ["fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8", "int4"]
# Ratios printed with 17 significant digits are recomputed here from the
# fields they came from: both sides are the same double operations, so the
# only difference is the round trip through JSON's shortest decimal (exact).
# A relative 1e-12 still leaves room for a compiler contracting the division.
REL = 1e-12


def run(*args, timeout=300):
    return subprocess.run([LOWBIT, "bench", *map(str, args)], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def quick_json():
    r = run("--quick", "--json", "--no-model")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def check_rows(rows, read=None):
    f32 = next(r for r in rows if r["spec"] == "fp32")
    bf16 = next(r for r in rows if r["spec"] == "bf16")
    for r in rows:
        assert r["bytes"] > 0 and r["rows"] > 0 and r["cols"] == 4096 and r["seconds"] > 0, r
        assert r["gbps"] == pytest.approx(r["bytes"] / r["seconds"] / 1e9, rel=REL)
        assert r["gweights_per_s"] == pytest.approx(r["rows"] * r["cols"] / r["seconds"] / 1e9, rel=REL)
        assert r["speedup_vs_fp32"] == pytest.approx(r["gweights_per_s"] / f32["gweights_per_s"], rel=REL)
        assert r["speedup_vs_bf16"] == pytest.approx(r["gweights_per_s"] / bf16["gweights_per_s"], rel=REL)
        assert r["bits_per_weight"] == pytest.approx(8 * r["bytes"] / (r["rows"] * r["cols"]), rel=REL)
        if read is not None:
            assert r["fraction_of_read"] == pytest.approx(r["gbps"] / read["gbps"], rel=REL)
            assert r["fraction_of_read_1t"] == pytest.approx(r["gbps_1t"] / read["gbps_1t"], rel=REL)
            assert r["gbps_1t"] > 0
    assert f32["speedup_vs_fp32"] == 1 and bf16["speedup_vs_bf16"] == 1


def test_quick_json_has_every_spec_and_consistent_figures(quick_json):
    d = quick_json
    m = d["machine"]
    assert m["isa"] in ("scalar", "avx2", "avx512") and m["threads"] >= 1 and m["cpu"]
    assert m["int8_kernels"] in ("scalar", "avx2", "avx2-vnni", "avx512-vnni", "avx512-vnni-vbmi", "avx512-vnni-vbmi-bf16", "neon")
    # fp6 e2m3 in the int8 mode: the sets that unpack 6-bit codes; fp8: those with bf16 pair products (kernel/qdot8.h)
    fp6 = m["int8_kernels"] in ("scalar", "avx512-vnni-vbmi", "avx512-vnni-vbmi-bf16")
    fp8 = m["int8_kernels"] in ("scalar", "avx512-vnni-vbmi-bf16")
    read = d["read"]
    assert read["gbps"] > 0 and read["gbps_1t"] > 0 and read["bytes"] >= 64 << 20 and read["method"]
    mem, l3 = d["matvec"]["rows"], d["matvec_l3"]["rows"]
    # every default spec, in order, plus the W8A8 rows after their weights,
    # then the int8-activation decode row of each spec its kernels take
    expect = []
    for s in DEFAULT_SPECS:
        expect.append(s)
        if s == "int8:channel":
            expect.append("w8a8 int8 (int8:channel)")
        if s == "fp8_e4m3:channel":
            expect.append("w8a8 fp8 (fp8_e4m3:channel)")
        if s in ("int8:channel", "int8:g32", "int4:channel", "int4:g32", "int4:g128:affine", "mxfp4", "nvfp4") or \
                (s == "mxfp6_e2m3" and fp6) or \
                (s in ("fp8_e4m3:channel", "fp8_e5m2:channel", "fp8_e4m3:g32", "mxfp8_e4m3") and fp8):
            expect.append(s + " +act int8")
    assert [r["spec"] for r in mem] == expect and [r["spec"] for r in l3] == expect
    check_rows(mem, read)
    check_rows(l3)
    # the bytes counted follow the formats (exact in binary): fp32 4 bytes a
    # weight, bf16 2, int8:channel 1 plus one fp32 scale per 4096-weight row,
    # int4:g32 half a byte plus an fp32 scale per 32, mxfp4 half a byte plus
    # an e8m0 byte per 32
    bits = {r["spec"]: r["bits_per_weight"] for r in mem}
    assert bits["fp32"] == 32 and bits["bf16"] == 16 and bits["fp16"] == 16
    assert bits["int8:channel"] == 8 + 32 / 4096 and bits["int4:g32"] == 5 and bits["mxfp4"] == 4.25
    # beyond L3 means at least the 64 MiB --quick asks for (or fewer rows of a slow kernel, flagged)
    for r in mem:
        assert r["bytes"] >= 64 << 20 or r["shortened"], r
    assert d["model"]["skipped"] and d["model"]["decode"] == [] and d["model"]["kv"]["rows"] == []


def test_quick_text_prints_the_tables():
    r = run("--quick", "--no-model", "--specs", "int4:g32,int8:channel", "--threads", "1")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("lowbit bench") and "machine:" in out and "Read bandwidth" in out
    lines = out.splitlines()
    heads = [i for i, l in enumerate(lines) if l.startswith("spec ")]
    assert len(heads) == 2, out
    for h in heads:  # fp32 and bf16 baselines first, then the specs asked for, W8A8, int8 activations
        names = [" ".join(l.split()[:2]) for l in lines[h + 1:h + 8]]
        assert [n.split()[0] for n in names] == ["fp32", "bf16", "int4:g32", "int4:g32", "int8:channel", "w8a8",
                                                 "int8:channel"], names
        assert names[3] == "int4:g32 +act" and names[6] == "int8:channel +act", names
    assert "cache, not" in out and "Model: skipped" in out


@pytest.mark.parametrize("args, words", [
    (["--bogus"], "unknown option"),
    (["--threads", "65"], "--threads takes 0..64 (0: one per CPU), not '65'"),
    (["--threads"], "missing value"),
    (["--gib", "x"], "--gib"),
    (["--gib", "0"], "--gib"),
    (["--specs", "int4:g0"], ""),
    (["--specs", "fp32,,int4"], "empty"),
    (["--decode-specs", "int4:g32+act=int4"], "+act="),
    (["--specs", "int8:channel+act=int8"], "+act="),
    (["--kv", "fp6_e2m3"], "--kv"),
    (["--decode-tokens", "-1"], "--decode-tokens"),
    (["--model", "x", "--no-model"], "contradict"),
    (["extra"], "unknown option"),
])
def test_bad_options_are_usage_errors(args, words):
    r = run(*args)
    assert r.returncode == 2 and r.stdout == "" and "lowbit bench" in r.stderr and words in r.stderr, (args, r)


def test_missing_model_named_is_a_runtime_failure():
    r = run("--quick", "--specs", "fp32", "--model", ROOT / "no-such-model.bin")
    assert r.returncode == 1 and r.stdout.startswith("lowbit bench") and "no-such-model" in r.stderr


def test_help():
    r = subprocess.run([LOWBIT, "bench", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("usage: lowbit bench")


@pytest.mark.skipif(not STORIES.exists(), reason="models/stories260K.bin missing")
def test_model_rows_on_stories260k():
    r = run("--quick", "--json", "--specs", "int8:channel", "--model", STORIES)
    assert r.returncode == 0, r.stderr
    md = json.loads(r.stdout)["model"]
    assert md["skipped"] is None and md["vocab"] == 512
    assert [d["spec"] for d in md["decode"]] == DECODE_SPECS
    bf16 = next(d for d in md["decode"] if d["spec"] == "bf16")
    f32 = next(d for d in md["decode"] if d["spec"] == "fp32")
    # fp32 weights are twice bf16's bytes: the same matrices, 4 bytes a weight against 2
    assert f32["weights_bytes"] == 2 * bf16["weights_bytes"]
    for d in md["decode"]:
        assert d["weights_bytes"] > 0 and d["decode_tokens_per_s"] > 0 and d["prefill_tokens_per_s"] > 0, d
        assert 4 <= d["decode_tokens_timed"] <= md["decode_tokens"]
        assert d["byte_ratio_bf16"] == pytest.approx(bf16["weights_bytes"] / d["weights_bytes"], rel=REL)
        assert d["goal_speedup"] == pytest.approx(0.8 * d["byte_ratio_bf16"], rel=REL)
        assert d["decode_speedup_vs_bf16"] == pytest.approx(d["decode_tokens_per_s"] / bf16["decode_tokens_per_s"], rel=REL)
        assert d["meets_goal"] == (d["decode_speedup_vs_bf16"] >= d["goal_speedup"])
    # the 4-bit specs hold fewer bytes than the 8-bit ones, which hold fewer than bf16
    w = {d["spec"]: d["weights_bytes"] for d in md["decode"]}
    assert w["int4:g32"] < w["int8:channel"] < w["bf16"] and w["mxfp4"] < w["fp8_e4m3:channel"]
    kv = md["kv"]
    assert kv["spec"] == "int4:g32" and [k["kv"] for k in kv["rows"]] == KV
    # a runner built without some cache format refuses it: the row says so
    # and carries no figures; fp32 (the default cache) is always measured
    assert kv["rows"][0]["refused"] is None
    for k in kv["rows"]:
        if k["refused"] is not None:
            assert k["refused"] and "decode_tokens_per_s" not in k
            continue
        assert k["decode_tokens_per_s"] > 0 and k["cache_bytes"] > 0
        assert k["speedup_vs_first"] == pytest.approx(k["decode_tokens_per_s"] / kv["rows"][0]["decode_tokens_per_s"], rel=REL)
        assert k["prefill_tokens_per_s"] > 0
        assert k["prefill_vs_first"] == pytest.approx(k["prefill_tokens_per_s"] / kv["rows"][0]["prefill_tokens_per_s"], rel=REL)
    assert kv["rows"][0]["speedup_vs_first"] == 1 and kv["rows"][0]["prefill_vs_first"] == 1


@pytest.mark.skipif(not STORIES.exists(), reason="models/stories260K.bin missing")
def test_model_text_on_stories260k():
    r = run("--quick", "--specs", "fp32", "--decode-specs", "int4:g32", "--kv", "fp32,int8", "--model", STORIES)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    i = next(i for i, l in enumerate(lines) if l.startswith("3. Model"))
    rows = [l.split() for l in lines[i:] if l.split() and l.split()[0] in ("bf16", "int4:g32", "fp32", "int8")]
    assert [w[0] for w in rows] == ["bf16", "int4:g32", "fp32", "int8"], r.stdout
    # decode tok/s: the third column of the model rows and of the KV rows
    # (an int8 cache the runner refuses gets a line that says so instead)
    for w in rows:
        if w[0] == "int8" and w[1] == "refused":
            continue
        assert math.isfinite(float(w[2])) and float(w[2]) > 0, w


SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.skipif(not SMOLLM2.exists(), reason=f"{SMOLLM2} absent (make test fetches it)")
def test_stored_rows_hold_the_files_blocks():
    """--decode-specs stored: the GGUF's Q4_1/Q8_0 matrices held as the file's
    bytes; stored-fp32: the same values as fp32 copies (4 bytes a weight)."""
    import gguf
    r = run("--quick", "--json", "--specs", "fp32", "--decode-specs", "stored,stored-fp32", "--kv", "fp32",
            "--model", SMOLLM2)
    assert r.returncode == 0, r.stderr
    rows = {d["spec"]: d for d in json.loads(r.stdout)["model"]["decode"]}
    mats = [t for t in gguf.GGUFReader(str(SMOLLM2)).tensors if len(t.shape) == 2]
    assert rows["stored"]["weights_bytes"] == sum(int(t.n_bytes) for t in mats)
    assert rows["stored-fp32"]["weights_bytes"] == sum(4 * int(t.n_elements) for t in mats)
    for d in rows.values():
        assert d["decode_tokens_per_s"] > 0 and d["prefill_tokens_per_s"] > 0, d
