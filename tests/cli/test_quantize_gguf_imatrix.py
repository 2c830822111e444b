"""lowbit quantize --type T --imatrix FILE | --imatrix-from TEXT on
stories260K: the importance matrix changes the quantized bytes, the file
records llama-quantize's quantize.imatrix.* keys, ppl --type T --imatrix
evaluates the file written, --imatrix-from TEXT is the imatrix lowbit
imatrix computes on TEXT, and the refusals (missing or malformed file, an
entry of the wrong length, options that exclude each other, a format other
than GGUF) write nothing. (Bytes against llama-quantize itself:
tests/llamacpp/test_gguf_imatrix.py.)"""
import json
import os
import pathlib
import struct
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
STORIES = ROOT / "models/stories260K.bin"
TEXT = ROOT / "models/tinystories-valid-excerpt.txt"
TOK = ROOT / "models/tok512.bin"


def lowbit(*args, cwd=None):
    return subprocess.run([LOWBIT, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def imatrix(tmp_path_factory):
    """lowbit imatrix with --imatrix-from's settings (windows of 512, all of the text)"""
    out = tmp_path_factory.mktemp("qim") / "im.gguf"
    r = lowbit("imatrix", STORIES, "--text", TEXT, "--tokenizer", TOK, "-o", out, "--ctx", 512, "--threads", 1,
               "--quiet")
    assert r.returncode == 0, r.stderr
    return out


def read(path):
    import gguf
    r = gguf.GGUFReader(str(path))
    kv = {k: r.fields[k] for k in r.fields if not k.startswith("GGUF.")}
    return kv, {t.name: bytes(t.data.tobytes()) for t in r.tensors}


def quantize(out, *args):
    r = lowbit("quantize", STORIES, "-o", out, "--type", "Q4_0", "--quiet", *args)
    assert r.returncode == 0, r.stderr
    return read(out)


def test_imatrix_changes_the_blocks_and_is_recorded(imatrix, tmp_path):
    import gguf
    kv, with_im = quantize(tmp_path / "a.gguf", "--imatrix", imatrix)
    _, without = quantize(tmp_path / "b.gguf")
    assert with_im.keys() == without.keys()
    assert with_im["blk.0.attn_q.weight"] != without["blk.0.attn_q.weight"]  # Q4_0 weighs by the imatrix
    assert with_im["blk.0.attn_norm.weight"] == without["blk.0.attn_norm.weight"]
    keys = list(kv)
    tail = ["general.quantization_version", "general.file_type", "quantize.imatrix.file",
            "quantize.imatrix.dataset", "quantize.imatrix.entries_count", "quantize.imatrix.chunks_count"]
    assert keys[-len(tail):] == tail, keys
    assert kv["quantize.imatrix.file"].contents() == str(imatrix)
    assert kv["quantize.imatrix.dataset"].contents() == str(TEXT)
    assert kv["quantize.imatrix.entries_count"].contents() == 35  # 7 weights x 5 layers
    chunks = kv["quantize.imatrix.chunks_count"]
    assert chunks.types == [gguf.GGUFValueType.UINT32] and chunks.contents() >= 2
    r = lowbit("quantize", STORIES, "-o", tmp_path / "j.gguf", "--type", "Q4_0", "--imatrix", imatrix, "--json",
               "--quiet")
    assert r.returncode == 0 and json.loads(r.stdout)["imatrix_tensors"] == 35, r.stdout + r.stderr
    # no entry kept: no imatrix at all, no keys (as llama-quantize)
    kv, none = quantize(tmp_path / "c.gguf", "--imatrix", imatrix, "--include-weights", "no_such_weight")
    assert none == without and not [k for k in kv if k.startswith("quantize.")]
    # only some entries
    kv, some = quantize(tmp_path / "d.gguf", "--imatrix", imatrix, "--exclude-weights", "attn_q")
    assert kv["quantize.imatrix.entries_count"].contents() == 30
    assert some["blk.0.attn_q.weight"] == without["blk.0.attn_q.weight"]
    assert some["blk.0.attn_k.weight"] == with_im["blk.0.attn_k.weight"]


def ppl(*args):
    r = lowbit("ppl", *args, "--text", TEXT, "--tokenizer", TOK, "--json", "--quiet", "--ctx", 128, "--chunks", 8)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["ppl"]


def test_ppl_with_imatrix_evaluates_the_file(imatrix, tmp_path):
    out = tmp_path / "s.gguf"
    quantize(out, "--imatrix", imatrix)
    file = ppl(out)
    assert ppl(STORIES, "--type", "Q4_0", "--imatrix", imatrix) == file
    assert ppl(STORIES, "--type", "Q4_0") != file
    # computed from the text: the imatrix lowbit imatrix computes on it
    assert ppl(STORIES, "--type", "Q4_0", "--imatrix-from", TEXT) == file


def test_imatrix_from_text_writes_the_same_blocks(imatrix, tmp_path):
    kv_file, a = quantize(tmp_path / "a.gguf", "--imatrix", imatrix)
    kv_text, b = quantize(tmp_path / "b.gguf", "--imatrix-from", TEXT, "--tokenizer", TOK)
    assert a == b
    assert "quantize.imatrix.file" not in kv_text  # no file to name
    for k in ("quantize.imatrix.dataset", "quantize.imatrix.entries_count", "quantize.imatrix.chunks_count"):
        assert kv_text[k].contents() == kv_file[k].contents(), k


def legacy(path, entries):
    """a legacy .dat: {name: values}, ncall 1"""
    b = struct.pack("<i", len(entries))
    for name, vals in entries.items():
        b += struct.pack("<i", len(name)) + name.encode() + struct.pack("<ii", 1, len(vals))
        b += struct.pack(f"<{len(vals)}f", *vals)
    path.write_bytes(b)
    return path


def test_entry_lengths(tmp_path):
    """an entry of another length is refused, but for token_embd (then none);
    a tensor without an entry is quantized without one"""
    bad = legacy(tmp_path / "bad.dat", {"blk.0.attn_q.weight": [1.0] * 10})
    r = lowbit("quantize", STORIES, "-o", tmp_path / "x.gguf", "--type", "Q4_0", "--imatrix", bad)
    assert r.returncode == 2 and "blk.0.attn_q.weight" in r.stderr and "10 values" in r.stderr, r.stderr
    assert not (tmp_path / "x.gguf").exists()
    ok = legacy(tmp_path / "ok.dat", {"token_embd.weight": [1.0] * 10, "blk.0.attn_q.weight": [2.0] * 64})
    _, a = quantize(tmp_path / "a.gguf", "--imatrix", ok)
    _, b = quantize(tmp_path / "b.gguf")
    assert a["token_embd.weight"] == b["token_embd.weight"] and a["blk.1.attn_q.weight"] == b["blk.1.attn_q.weight"]


def test_gguf_imatrix_without_its_keys_is_refused(tmp_path):
    import gguf
    import numpy as np
    path = tmp_path / "nometa.gguf"
    w = gguf.GGUFWriter(str(path), arch=None)
    w.add_tensor("blk.0.attn_q.weight.in_sum2", np.ones(64, np.float32))
    w.add_tensor("blk.0.attn_q.weight.counts", np.ones(1, np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    r = lowbit("quantize", STORIES, "-o", tmp_path / "x.gguf", "--type", "Q4_0", "--imatrix", path)
    assert r.returncode == 1 and "imatrix.chunk_count" in r.stderr, r.stderr
    assert not (tmp_path / "x.gguf").exists()


def test_gptq_chooses_its_block_scales_with_the_imatrix(imatrix, tmp_path):
    """GPTQ leaves the input channels as they are, so an imatrix of the model weighs its block scales as it
    weighs RTN's (gptq_grid_ggml.c); AWQ and SmoothQuant rescale the channels, so theirs is refused."""
    gptq = ["--method", "gptq", "--calib", ROOT / "data/tinystories/calib-excerpt.txt", "--calib-seqs", 4,
            "--calib-len", 64]
    _, with_im = quantize(tmp_path / "a.gguf", *gptq, "--imatrix", imatrix)
    _, without = quantize(tmp_path / "b.gguf", *gptq)
    _, rtn_im = quantize(tmp_path / "c.gguf", "--imatrix", imatrix)
    for name in ("blk.0.attn_q.weight", "blk.4.ffn_up.weight"):  # ffn_down (rows of 172) falls back to F16
        assert with_im[name] != without[name] and with_im[name] != rtn_im[name], name
    for method in ("awq", "awq+gptq", "smoothquant"):
        r = lowbit("quantize", STORIES, "-o", tmp_path / "x.gguf", "--type", "Q4_0", *gptq[2:], "--method", method,
                   "--imatrix", imatrix)
        assert r.returncode == 2 and f"--method {method} scales the weights' input channels" in r.stderr, r.stderr
        assert not (tmp_path / "x.gguf").exists()


@pytest.mark.parametrize("args, code, needle", [
    (["--type", "Q4_0", "--imatrix", "missing.gguf"], 1, "missing.gguf"),
    (["--type", "Q4_0", "--imatrix", "garbage.dat"], 1, "garbage.dat"),
    (["--type", "Q4_0", "--imatrix", "x.dat", "--imatrix-from", TEXT], 2, "not both"),
    (["--type", "Q4_0", "--imatrix", "x.dat", "--include-weights", "a", "--exclude-weights", "b"], 2,
     "cannot be used together"),
    (["--type", "Q4_0", "--include-weights", "attn"], 2, "give --imatrix"),
    (["--type", "Q4_0", "--tokenizer", TOK], 2, "--tokenizer is for --imatrix-from"),
    (["--format", "compressed-tensors", "--scheme", "W4A16", "--imatrix", "x.dat"], 2, "need --format gguf"),
    (["--type", "Q4_0", "--imatrix"], 2, "--imatrix needs a value"),
])
def test_refusals(tmp_path, args, code, needle):
    (tmp_path / "garbage.dat").write_bytes(b"\x05\x00\x00\x00not an imatrix")
    legacy(tmp_path / "x.dat", {"blk.0.attn_q.weight": [1.0] * 64})
    r = lowbit("quantize", STORIES, "-o", "out.gguf", *args, cwd=tmp_path)
    assert r.returncode == code and needle in r.stderr, r.stderr
    assert not (tmp_path / "out.gguf").exists()


def test_eval_refusals(tmp_path):
    r = lowbit("ppl", STORIES, "--text", TEXT, "--tokenizer", TOK, "--imatrix", tmp_path / "x.dat")
    assert r.returncode == 2 and "--type" in r.stderr, r.stderr
    r = lowbit("ppl", STORIES, "--text", TEXT, "--tokenizer", TOK, "--type", "Q4_0", "--imatrix", tmp_path / "no.dat")
    assert r.returncode == 1 and "no.dat" in r.stderr, r.stderr
