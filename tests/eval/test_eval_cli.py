"""lowbit ppl, kld, generate and compare end to end on stories260K: the
perplexity equals one computed here from the numpy reference model with
llama.cpp's windowing; KL divergence and its saved-base file; sampling is
reproducible; bad usage."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "model"))
import model_lib as ml  # noqa: E402
import reference_llama as ref  # noqa: E402

TEXT = ml.ROOT / "models/tinystories-valid-excerpt.txt"
TOK = ml.ROOT / "models/tok512.bin"


def lowbit(*args, check=True):
    p = subprocess.run([ml.LOWBIT, *map(str, args)], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def tokens_of(text):
    """lowbit's tokens of the text, through a tiny C-free route: ctypes on the tokenizer."""
    import ctypes
    lib = ml.lib
    lib.lb_tokenizer_from_file.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_void_p)]
    lib.lb_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)), ctypes.POINTER(ctypes.c_size_t)]
    lib.lb_tokenizer_free.argtypes = [ctypes.c_void_p]
    t = ctypes.c_void_p()
    assert lib.lb_tokenizer_from_file(str(TOK).encode(), 512, ctypes.byref(t)) == 0
    ids, n = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
    data = text.encode()
    assert lib.lb_tokenize(t, data, len(data), 1, ctypes.byref(ids), ctypes.byref(n)) == 0
    out = [ids[i] for i in range(n.value)]
    lib.lb_tokenizer_free(t)
    return out


def reference_nlls(ctx, chunks):
    """llama.cpp's windows, computed here from the numpy reference (float64)."""
    ids = tokens_of(TEXT.read_text())
    model = ref.Transformer(ref.load_llama2c(str(ml.STORIES)))
    nlls = []
    for c in range(chunks):
        window = list(ids[c * ctx:(c + 1) * ctx])
        window[0] = 1  # BOS
        model.reset()
        logits = model.forward(window)
        for j in range(ctx // 2, ctx - 1):
            row = logits[j]
            lse = np.log(np.exp(row - row.max()).sum()) + row.max()
            nlls.append(lse - row[window[j + 1]])
    return np.array(nlls)


def test_perplexity_equals_the_reference_windows():
    ctx, chunks = 64, 3
    out = json.loads(lowbit("ppl", ml.STORIES, "--text", TEXT, "--ctx", ctx, "--chunks", chunks, "--json").stdout)
    assert out["chunks"] == chunks and out["scored_tokens"] == chunks * (ctx - 1 - ctx // 2)
    nlls = reference_nlls(ctx, chunks)
    ppl = math.exp(nlls.mean())
    err = ppl * nlls.std() / math.sqrt(len(nlls) - 1)
    assert out["ppl"] == pytest.approx(ppl, rel=1e-5)
    assert out["ppl_err"] == pytest.approx(err, rel=1e-4)


def test_kld_saved_base_gives_the_same_answer(tmp_path):
    args = ["--text", TEXT, "--ctx", 128, "--chunks", 4, "--json"]
    base = tmp_path / "base.kld"
    a = json.loads(lowbit("kld", ml.STORIES, "--spec", "int4:g32", *args, "--save-base", base).stdout)
    b = json.loads(lowbit("kld", ml.STORIES, "--spec", "int4:g32", *args, "--base", base).stdout)
    assert base.stat().st_size == 32 + 4 * (128 - 1 - 64) * (8 + 2 * 512)
    assert a["scored_tokens"] == b["scored_tokens"] == 4 * 63
    assert 0 < a["kld_mean"] < 1 and a["kld_median"] <= a["kld_p99"] <= a["kld_max"]
    assert 0.5 < a["top1_agreement"] <= 1
    # the file keeps log-probabilities to 16 bits: KLD within that rounding
    assert b["kld_mean"] == pytest.approx(a["kld_mean"], abs=2e-3)
    assert b["ppl_base"] == pytest.approx(a["ppl_base"], rel=1e-3) and b["ppl"] == a["ppl"]
    assert a["dppl"] == pytest.approx(a["ppl"] - a["ppl_base"])
    # another text or window length is refused
    p = lowbit("kld", ml.STORIES, "--spec", "int4:g32", "--text", TEXT, "--ctx", 64, "--chunks", 4, "--base", base,
               check=False)
    assert p.returncode == 2 and "was saved for" in p.stderr
    other = tmp_path / "other.txt"
    other.write_text(TEXT.read_text()[5000:])
    p = lowbit("kld", ml.STORIES, "--spec", "int4:g32", "--text", other, *args[2:], "--base", base, check=False)
    assert p.returncode == 2 and "other text" in p.stdout  # --json: the error object on stdout


def test_kld_save_tokens_lists_every_scored_token(tmp_path):
    ctx, chunks = 64, 3
    path = tmp_path / "tokens.tsv"
    args = ["--spec", "int4:g32", "--text", TEXT, "--ctx", ctx, "--chunks", chunks]
    out = json.loads(lowbit("kld", ml.STORIES, *args, "--save-tokens", path, "--json").stdout)
    lines = path.read_text().splitlines()
    assert lines[0] == "# window\tposition\tkld\tnll_base\tnll_quant"
    t = np.loadtxt(path, comments="#", delimiter="\t", ndmin=2)
    assert t.shape == (out["scored_tokens"], 5)
    assert [(int(w), int(p)) for w, p in t[:, :2]] == [(c, j) for c in range(chunks) for j in range(ctx // 2, ctx - 1)]
    # the base NLLs are the reference model's, token by token
    assert t[:, 3] == pytest.approx(reference_nlls(ctx, chunks), rel=1e-4, abs=1e-4)
    # and the summary is these tokens' (17 digits: the same doubles)
    assert (t[:, 2] >= 0).all() and t[:, 2].mean() == pytest.approx(out["kld_mean"], rel=1e-12)
    assert np.median(t[:, 2]) == pytest.approx(out["kld_median"], rel=1e-12)
    assert math.exp(t[:, 4].mean()) == pytest.approx(out["ppl"], rel=1e-12)
    assert math.exp(t[:, 3].mean()) == pytest.approx(out["ppl_base"], rel=1e-12)
    # the output rule: an existing file without --force, or the --save-base file, is refused, and left as it was
    before = path.read_bytes()
    p = lowbit("kld", ml.STORIES, *args, "--save-tokens", path, check=False)
    assert p.returncode == 2 and path.read_bytes() == before
    other = tmp_path / "same"
    p = lowbit("kld", ml.STORIES, *args, "--save-tokens", other, "--save-base", other, check=False)
    assert p.returncode == 2 and "same file" in p.stderr and not other.exists()


def test_kld_of_bf16_rounding_is_tiny():
    out = json.loads(lowbit("kld", ml.STORIES, "--spec", "bf16", "--text", TEXT, "--ctx", 128, "--chunks", 4,
                            "--json").stdout)
    assert out["kld_mean"] < 1e-3 and out["top1_agreement"] > 0.98


def test_generation_is_greedy_or_seeded():
    greedy = lowbit("generate", ml.STORIES, "-p", "Once upon a time", "-n", 30).stdout
    assert greedy.startswith("Once upon a time, there was a little girl named Lily. She loved to play outside")
    a = lowbit("generate", ml.STORIES, "-p", "Once upon a time", "-n", 30, "--temp", "0.9", "--seed", 7).stdout
    b = lowbit("generate", ml.STORIES, "-p", "Once upon a time", "-n", 30, "--temp", "0.9", "--seed", 7).stdout
    c = lowbit("generate", ml.STORIES, "-p", "Once upon a time", "-n", 30, "--temp", "0.9", "--seed", 8).stdout
    assert a == b and a != c


def test_compare_rows():
    out = json.loads(lowbit("compare", ml.STORIES, "--text", TEXT, "--ctx", 128, "--chunks", 4,
                            "--spec", "bf16,int8:channel,int4:g32", "--json").stdout)
    rows = {r["spec"]: r for r in out["specs"]}
    assert rows["bf16"]["bits_per_weight"] == 16
    assert rows["int8:channel"]["sqnr_db"] > rows["int4:g32"]["sqnr_db"]
    assert rows["int4:g32"]["kld_mean"] > rows["int8:channel"]["kld_mean"] > rows["bf16"]["kld_mean"]
    assert out["size_bytes"] == ml.STORIES.stat().st_size - 28 - 2 * 512 * 4 * 4  # tensors, without header and rope tables


@pytest.mark.parametrize("args", [
    ["ppl", "models/stories260K.bin"],                                     # no --text
    ["ppl", "models/stories260K.bin", "--text", "models/tinystories-valid-excerpt.txt", "--ctx", "0"],
    ["ppl", "models/stories260K.bin", "--text", "models/tinystories-valid-excerpt.txt", "--spec", "int9"],
    ["kld", "models/stories260K.bin", "--text", "models/tinystories-valid-excerpt.txt"],  # nothing to compare
    ["generate", "models/stories260K.bin"],                                # no prompt
    ["compare", "models/stories260K.bin", "--text", "models/tinystories-valid-excerpt.txt"],  # no --spec
])
def test_bad_usage_exits_2(args):
    p = subprocess.run([ml.LOWBIT, *args], capture_output=True, text=True, cwd=ml.ROOT)
    assert p.returncode == 2 and p.stdout in ("", "\n")


def test_text_shorter_than_a_window(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("Once upon a time")
    p = lowbit("ppl", ml.STORIES, "--text", short, check=False)
    assert p.returncode == 2 and "fewer than one window" in p.stderr


def test_nan_weights_are_an_error_not_a_perfect_score(tmp_path):
    import struct as st
    blob = bytearray(ml.STORIES.read_bytes())
    blob[28:32] = st.pack("<f", float("nan"))  # the first embedding weight
    bad = tmp_path / "nan.bin"
    bad.write_bytes(bytes(blob))
    (tmp_path / "tok512.bin").write_bytes(TOK.read_bytes())
    for cmd in [["ppl", bad], ["kld", bad, "--spec", "int8:channel"]]:
        p = lowbit(*cmd, "--text", TEXT, "--ctx", 64, "--chunks", 2, check=False)
        assert p.returncode == 1 and "not finite" in p.stderr, (cmd, p.stderr)


def test_a_damaged_base_file_is_refused(tmp_path):
    args = ["--spec", "int4:g32", "--text", TEXT, "--ctx", 64, "--chunks", 2]
    base = tmp_path / "b.kld"
    lowbit("kld", ml.STORIES, *args, "--save-base", base)
    data = bytearray(base.read_bytes())
    nan_file, long_file = tmp_path / "nan.kld", tmp_path / "long.kld"
    data2 = bytearray(data)
    data2[32:36] = b"\x00\x00\xc0\x7f"  # the first position's range: NaN
    nan_file.write_bytes(bytes(data2))
    long_file.write_bytes(bytes(data) + b"\0")
    p = lowbit("kld", ml.STORIES, *args, "--base", nan_file, check=False)
    assert p.returncode == 1 and "not valid" in p.stderr
    p = lowbit("kld", ml.STORIES, *args, "--base", long_file, check=False)
    assert p.returncode == 1 and "its header says" in p.stderr


def test_a_tokenizer_bigger_than_the_vocabulary_is_refused():
    p = lowbit("ppl", ml.STORIES, "--text", TEXT, "--tokenizer", ml.SMOLLM2, check=False)
    if not ml.SMOLLM2.exists():
        pytest.skip("SmolLM2 not fetched")
    assert p.returncode == 2 and "do not belong together" in p.stderr


def test_a_directory_is_not_a_text(tmp_path):
    p = lowbit("ppl", ml.STORIES, "--text", tmp_path, check=False)
    assert p.returncode == 1 and "cannot read" in p.stderr


def test_generation_stops_at_the_context():
    p = lowbit("generate", ml.STORIES, "-p", "Once upon", "-n", 2000)
    assert "context holds 512 tokens" in p.stderr


def test_windows_longer_than_training_get_a_warning():
    p = lowbit("ppl", ml.STORIES, "--text", TEXT, "--ctx", 1024, "--chunks", 1)
    assert "longer than the 512 the model was trained on" in p.stderr


def test_spec_per_tensor_class():
    args = ["--text", TEXT, "--ctx", 128, "--chunks", 4, "--json"]
    kld = {}
    for opt in ["--spec", "--spec-attn", "--spec-mlp"]:
        kld[opt] = json.loads(lowbit("kld", ml.STORIES, opt, "int4:g32", *args).stdout)["kld_mean"]
    assert 0 < kld["--spec-attn"] < kld["--spec"] and 0 < kld["--spec-mlp"] < kld["--spec"]
    assert kld["--spec-attn"] != kld["--spec-mlp"]
