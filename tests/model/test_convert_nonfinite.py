"""convert refuses NaN/Inf weights by default (as inspect does) and copies them with --allow-nonfinite
(issue 12 item 9)."""
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import model_lib as ml  # noqa: E402


def lowbit(*args):
    return subprocess.run([ml.LOWBIT, *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def bad_model(tmp_path):
    blob = bytearray(ml.STORIES.read_bytes())
    # llama2.c: a 28-byte header, then the embedding (vocab 512 x dim 64) as f32
    blob[28 + 4 * 7:28 + 4 * 8] = struct.pack("<f", float("inf"))
    blob[28 + 4 * 9:28 + 4 * 10] = struct.pack("<f", float("nan"))
    path = tmp_path / "bad.bin"
    path.write_bytes(bytes(blob))
    return path


@pytest.mark.parametrize("out,dtype", [("o.safetensors", "f32"), ("o.gguf", None), ("o.safetensors", "bf16"),
                                       ("o.gguf", "f16")])
def test_nonfinite_weights_are_refused_naming_tensor_and_index(tmp_path, bad_model, out, dtype):
    dest = tmp_path / out
    p = lowbit("convert", bad_model, dest, *(["--dtype", dtype] if dtype else []))
    assert p.returncode == 1, p.stdout
    assert "tok_embeddings" in p.stderr or "embed_tokens" in p.stderr, p.stderr
    assert "element 7 is infinite" in p.stderr and "--allow-nonfinite" in p.stderr, p.stderr
    assert not dest.exists() and sorted(os.listdir(tmp_path)) == ["bad.bin"]  # nothing left behind


def test_allow_nonfinite_copies_them(tmp_path, bad_model):
    dest = tmp_path / "o.safetensors"
    p = lowbit("convert", bad_model, dest, "--dtype", "f32", "--allow-nonfinite")
    assert p.returncode == 0, p.stderr
    from safetensors.numpy import load_file
    emb = load_file(str(dest))["model.embed_tokens.weight"].reshape(-1)
    assert np.isposinf(emb[7]) and np.isnan(emb[9]) and np.isfinite(emb[:7]).all()


def test_usage_names_the_option():
    p = lowbit("convert", "--help")
    assert "--allow-nonfinite" in p.stdout + p.stderr
