"""The outlier-method options (cli/cli_method.c) on quantize, ppl, kld and
compare, on the embedded stories260K: bad values and combinations are
usage errors naming what is wrong (a method without --calib names the
shipped calibration texts), --method rtn is exactly no method, JSON says
the method, compare --method builds its rows as quantize does (an rtn row
equals the --spec row), and SmoothQuant/AWQ/GPTQ run end to end once
built (GPTQ's options reach the library; GGUF types get GPTQ's blocks)."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
STORIES = ROOT / "models/stories260K.bin"
TEXT = ROOT / "models/tinystories-valid-excerpt.txt"
CALIB = ROOT / "data/tinystories/calib-excerpt.txt"
WINDOWS = ["--text", TEXT, "--ctx", 64, "--chunks", 4]
RULE = ["--rule", "model.layers.*=int8:channel"]
SMALL = ["--calib", CALIB, "--calib-seqs", 4, "--calib-len", 64]


def run(*args):
    return subprocess.run([LOWBIT, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_the_shipped_calibration_text_is_not_the_evaluation_text():
    calib, evaluated = CALIB.read_bytes(), TEXT.read_bytes()
    assert len(calib) > 250000
    full = pathlib.Path("/work/shared/data/tinystories/valid-excerpt.txt")
    if full.exists():  # the provenance: the bytes right after the evaluation excerpt
        data = full.read_bytes()
        assert data[:len(evaluated)] == evaluated and data[len(evaluated) + 1:len(evaluated) + 1 + len(calib)] == calib
    # no paragraph of one is in the other
    paragraphs = [p for p in evaluated.split(b"\n\n") if len(p) > 200]
    assert paragraphs and not any(p in calib for p in paragraphs)


@pytest.mark.parametrize("args,message", [
    (["--method", "gptx"], "--method takes rtn, smoothquant, awq, gptq or awq+gptq, not 'gptx'"),
    (["--method", "gptq"], "data/tinystories/calib-excerpt.txt"),
    (["--method", "gptq", "--damp", "0", "--calib", CALIB], "--damp takes a number in (0, 1]"),
    (["--method", "gptq", "--damp", "1.5", "--calib", CALIB], "--damp takes a number in (0, 1]"),
    (["--method", "gptq", "--damp", "x", "--calib", CALIB], "not 'x'"),
    (["--method", "gptq", "--block", "0", "--calib", CALIB], "--block takes 1..65536, not '0'"),
    (["--method", "gptq", "--damp", "0.1", "--damp", "0.1", "--calib", CALIB], "--damp is given twice"),
    (["--method", "gptq", "--actorder", "--actorder", "--calib", CALIB], "--actorder is given after --actorder"),
    (["--method", "gptq", "--no-actorder", "--actorder", "--calib", CALIB], "--actorder is given after --no-actorder"),
    (["--method", "awq", "--damp", "0.1", "--calib", CALIB], "--damp is GPTQ's: it needs --method gptq or awq+gptq"),
    (["--block", "64"], "--block is GPTQ's"),
    (["--method", "rtn", "--actorder"], "--actorder is GPTQ's"),
    (["--method", "awq", "--no-actorder", "--calib", CALIB], "--no-actorder is GPTQ's"),
    (["--method", "gptq", "--true-sequential", "--no-true-sequential", "--calib", CALIB],
     "--no-true-sequential is given after --true-sequential"),
    (["--method", "awq", "--no-true-sequential", "--calib", CALIB], "--no-true-sequential is GPTQ's"),
    (["--true-sequential"], "--true-sequential is GPTQ's"),
    (["--method", "awq", "--gptq-scales", "minmax", "--calib", CALIB], "--gptq-scales is GPTQ's"),
    (["--method", "gptq", "--gptq-scales", "max", "--calib", CALIB], "--gptq-scales takes mse or minmax, not 'max'"),
    (["--method", "gptq", "--gptq-scales", "mse", "--gptq-scales", "mse", "--calib", CALIB],
     "--gptq-scales is given twice"),
    (["--method", "gptq", "--alpha", "0.5", "--calib", CALIB], "needs --method smoothquant"),
    (["--method", "awq"], "data/wikitext-2-raw/wiki.train.excerpt.raw"),
    (["--method", "awq"], "data/tinystories/calib-excerpt.txt"),
    (["--method", "awq", "--alpha", "0.5", "--calib", CALIB], "--alpha is SmoothQuant's migration strength"),
    (["--alpha", "0.5"], "needs --method smoothquant"),
    (["--method", "smoothquant", "--alpha", "1.5", "--calib", CALIB], "--alpha takes a number in [0, 1]"),
    (["--method", "smoothquant", "--alpha", "searching", "--calib", CALIB], "or 'search'"),
    (["--method", "awq", "--calib", CALIB, "--calib-seqs", "0"], "--calib-seqs takes 1..65536, not '0'"),
    (["--method", "awq", "--calib", CALIB, "--calib-len", "1"], "--calib-len takes 2..1048576, not '1'"),
    (["--method", "awq", "--method", "rtn"], "--method is given twice"),
])
def test_bad_method_options_are_usage_errors(args, message):
    p = run("ppl", STORIES, *WINDOWS, *RULE, *args)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr


def test_a_method_needs_a_quantized_model_not_spec():
    p = run("ppl", STORIES, *WINDOWS, "--spec", "int8:channel", "--method", "awq", "--calib", CALIB)
    assert p.returncode == 2 and "--rule 'model.layers.*=SPEC'" in p.stderr
    p = run("kld", STORIES, *WINDOWS, "--spec", "int8:channel", "--method", "smoothquant", "--calib", CALIB)
    assert p.returncode == 2 and "--rule" in p.stderr


def test_a_method_and_an_imatrix_exclude_each_other(tmp_path):
    p = run("quantize", STORIES, "-o", tmp_path / "x.gguf", "--type", "Q4_0", "--imatrix-from", CALIB,
            "--method", "awq", "--calib", CALIB)
    assert p.returncode == 2 and "imatrix" in p.stderr and not (tmp_path / "x.gguf").exists()
    p = run("ppl", STORIES, *WINDOWS, "--type", "Q4_0", "--imatrix-from", CALIB, "--method", "awq", "--calib", CALIB)
    assert p.returncode == 2 and "imatrix" in p.stderr


def ppl_json(*args):
    p = run("ppl", STORIES, *WINDOWS, *args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), p.stderr


def test_rtn_is_no_method_and_json_says_so():
    plain, _ = ppl_json(*RULE)
    rtn, err = ppl_json(*RULE, "--method", "rtn", "--calib-seqs", 8)
    assert rtn["ppl"] == plain["ppl"]
    assert rtn["method"] == plain["method"] == "rtn" and rtn["alpha"] is None and rtn["calib_seqs"] is None
    assert "--calib-seqs is unused" in err


def test_quantize_rtn_writes_the_same_checkpoint(tmp_path):
    outs = []
    for k, extra in enumerate([[], ["--method", "rtn"]]):
        out = tmp_path / f"q{k}"
        p = run("quantize", STORIES, "-o", out, "--scheme", "W8A8-INT8", *extra, "--json")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["method"] == "rtn"
        outs.append(out)
    files = sorted(f.name for f in outs[0].iterdir() if f.suffix == ".safetensors")
    assert files
    for f in files:
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes()


def compare_json(*args):
    p = run("compare", STORIES, *WINDOWS, *args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("specs,extra", [("int8:channel,int4:g32", []), ("int8:channel,int8:tensor", ["--act", "int8"])])
def test_compare_rtn_rows_equal_the_spec_rows(specs, extra):
    """compare --method builds each row as a quantized model (as quantize
    does); for specs without shared global scales its rtn row is the
    --spec row, bit for bit (dynamic W8A8 included)."""
    plain = compare_json("--spec", specs, *extra)
    rtn = compare_json("--spec", specs, *extra, "--method", "rtn")
    assert [r["spec"] for r in rtn["specs"]] == specs.split(",")
    for a, b in zip(plain["specs"], rtn["specs"]):
        assert b["method"] == a["method"] == "rtn"
        for key in ("kld_mean", "ppl", "top1_agreement", "bits_per_weight", "sqnr_db"):
            assert a[key] == b[key], key


def test_compare_method_errors():
    p = run("compare", STORIES, *WINDOWS, "--spec", "int8:channel", "--method", "rtn,rtn")
    assert p.returncode == 2 and "names rtn twice" in p.stderr
    p = run("compare", STORIES, *WINDOWS, "--spec", "int8:channel", "--method", "rtn,awq")
    assert p.returncode == 2 and "--calib FILE" in p.stderr
    p = run("compare", STORIES, *WINDOWS, "--spec", "int8:channel", "--method", "rtn,awq", "--alpha", "0.4",
            "--calib", CALIB)
    assert p.returncode == 2 and "needs --method smoothquant" in p.stderr
    p = run("compare", STORIES, *WINDOWS, "--spec", "bf16", "--method", "rtn")
    assert p.returncode == 2 and "plain float" in p.stderr


def test_a_method_with_nothing_to_work_on_is_refused(tmp_path):
    # SmoothQuant on weight-only layers, AWQ on W8A8 ones: an error naming the method to use, not a no-op
    p = run("quantize", STORIES, "-o", tmp_path / "sq", "--rule", "model.layers.*=int8:channel:scale=bf16",
            "--method", "smoothquant", *SMALL)
    assert p.returncode != 0 and "--method awq" in p.stderr and not (tmp_path / "sq").exists()
    p = run("quantize", STORIES, "-o", tmp_path / "awq", "--scheme", "W8A8-INT8", "--method", "awq", *SMALL)
    assert p.returncode != 0 and "--method smoothquant" in p.stderr and not (tmp_path / "awq").exists()


def test_smoothquant_runs_end_to_end_on_w8a8(tmp_path):
    out = tmp_path / "q"
    p = run("quantize", STORIES, "-o", out, "--scheme", "W8A8-INT8", "--method", "smoothquant", *SMALL, "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["method"] == "smoothquant" and d["alpha"] == 0.5
    e, _ = ppl_json("--scheme", "W8A8-INT8", "--method", "smoothquant", *SMALL)
    r, _ = ppl_json("--scheme", "W8A8-INT8")
    assert e["method"] == "smoothquant" and e["ppl"] != r["ppl"]  # the method changed the model


@pytest.mark.parametrize("method,rule", [("awq", "int4:channel:scale=bf16"), ("gptq", "int4:channel:scale=bf16"),
                                         ("awq+gptq", "int4:channel:scale=bf16")])
def test_a_method_runs_end_to_end(tmp_path, method, rule):
    out = tmp_path / "q"
    p = run("quantize", STORIES, "-o", out, "--rule", f"model.layers.*={rule}", "--method", method, *SMALL, "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["method"] == method and d["calib_seqs"] == 4 and d["calib_len"] == 64
    assert (d["alpha"] == 0.5) == (method == "smoothquant")
    e, _ = ppl_json("--rule", f"model.layers.*={rule}", "--method", method, *SMALL)
    r, _ = ppl_json("--rule", f"model.layers.*={rule}")
    assert e["method"] == method and e["ppl"] != r["ppl"]  # the method changed the model
    c = compare_json("--spec", rule, "--method", f"rtn,{method}", *SMALL)
    assert [s["method"] for s in c["specs"]] == ["rtn", method]
    assert c["specs"][1]["sqnr_db"] is None and c["specs"][0]["sqnr_db"] is not None
    assert c["specs"][0]["ppl"] == ppl_json("--spec", rule)[0]["ppl"]  # the rtn row: the --spec model


def test_gptq_options_reach_the_method():
    rule = "model.layers.*=int4:g32"
    base, _ = ppl_json("--rule", rule, "--method", "gptq", *SMALL)
    assert base["damp"] == 0.01 and base["block"] == 128 and base["actorder"] is True  # act order by default
    assert base["gptq_scales"] == "mse"
    mm, _ = ppl_json("--rule", rule, "--method", "gptq", "--gptq-scales", "minmax", *SMALL)
    assert mm["gptq_scales"] == "minmax" and mm["ppl"] != base["ppl"]  # the scales' rule reached GPTQ
    same, _ = ppl_json("--rule", rule, "--method", "gptq", "--block", 8, *SMALL)
    assert same["block"] == 8 and abs(same["ppl"] - base["ppl"]) < 1e-3 * base["ppl"]  # block: speed only
    damp, _ = ppl_json("--rule", rule, "--method", "gptq", "--damp", 0.5, *SMALL)
    act, _ = ppl_json("--rule", rule, "--method", "gptq", "--actorder", *SMALL)
    fil, _ = ppl_json("--rule", rule, "--method", "gptq", "--no-actorder", *SMALL)
    assert damp["damp"] == 0.5 and act["actorder"] is True and fil["actorder"] is False
    assert act["ppl"] == base["ppl"]  # the default, spelled out
    assert damp["ppl"] != base["ppl"] and fil["ppl"] != base["ppl"]
    assert base["true_sequential"] is True  # o_proj after the rounded q/k/v, down_proj after gate/up
    ts, _ = ppl_json("--rule", rule, "--method", "gptq", "--true-sequential", *SMALL)
    ls, _ = ppl_json("--rule", rule, "--method", "gptq", "--no-true-sequential", *SMALL)
    assert ts["ppl"] == base["ppl"] and ls["true_sequential"] is False and ls["ppl"] != base["ppl"]

    c = compare_json("--spec", "int4:g32", "--method", "rtn,gptq", "--damp", 0.5, *SMALL)
    d = compare_json("--spec", "int4:g32", "--method", "gptq", *SMALL)
    assert [s["method"] for s in c["specs"]] == ["rtn", "gptq"] and c["specs"][1]["damp"] == 0.5
    assert d["specs"][0]["damp"] == 0.01 and d["specs"][0]["ppl"] != c["specs"][1]["ppl"]  # --damp reached the row
    cs = compare_json("--spec", "int4:g32", "--method", "gptq", "--no-true-sequential", *SMALL)
    assert d["specs"][0]["true_sequential"] is True and cs["specs"][0]["true_sequential"] is False
    assert cs["specs"][0]["ppl"] != d["specs"][0]["ppl"]  # and it reached the row
    p = run("compare", STORIES, *WINDOWS, "--spec", "int4:g32", "--method", "rtn,awq", "--actorder", *SMALL)
    assert p.returncode == 2 and "--actorder is GPTQ's" in p.stderr


@pytest.mark.parametrize("gtype", ["Q4_0", "IQ4_NL"])
def test_gptq_writes_gguf_blocks_that_beat_rtn(tmp_path, gtype):
    """GPTQ onto a GGUF type: the decoder weights' blocks are GPTQ's (every one differs from what
    round-to-nearest writes, the rest of the file is the same), and the file's KL divergence from the
    unquantized model on held-out text is lower than RTN's file's."""
    import gguf
    calib = ["--calib", CALIB, "--calib-seqs", 32, "--calib-len", 256]
    rtn, gq = tmp_path / "rtn.gguf", tmp_path / "gptq.gguf"
    assert run("quantize", STORIES, "-o", rtn, "--type", gtype, "--quiet").returncode == 0
    p = run("quantize", STORIES, "-o", gq, "--type", gtype, "--method", "gptq", *calib)
    assert p.returncode == 0, p.stderr
    a, b = gguf.GGUFReader(str(rtn)), gguf.GGUFReader(str(gq))
    ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    assert ta.keys() == tb.keys()
    # the decoder weights in the asked type (ffn_down's 172-wide rows fit no 32-block: llama.cpp's fallback)
    decoder = [n for n in ta if n.startswith("blk.") and ta[n].tensor_type.name == gtype]
    assert len(decoder) == 30
    for n in ta:
        assert ta[n].tensor_type == tb[n].tensor_type, n
        same = np.array_equal(np.asarray(ta[n].data), np.asarray(tb[n].data))
        assert same == (n not in decoder), n
    klds = []
    for f in (rtn, gq):
        r = run("kld", STORIES, f, "--tokenizer", ROOT / "models/tok512.bin", "--text", TEXT, "--ctx", 256, "--json",
                "--quiet")
        assert r.returncode == 0, r.stderr
        klds.append(json.loads(r.stdout)["kld_mean"])
    assert klds[1] < 0.85 * klds[0], klds


def test_gptq_with_nothing_to_work_on_is_refused():
    p = run("ppl", STORIES, *WINDOWS, "--rule", "model.embed_tokens.weight=int8:channel", "--method", "gptq", *SMALL)
    assert p.returncode == 2 and "GPTQ rounds the decoder layers' weights" in p.stderr
