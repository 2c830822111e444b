"""Numbers that must not pass silently (issue 12 items 6 and 7): crafted --base files, non-finite results,
saturation counts and empty calibration texts."""
import json
import math
import os
import struct
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "model"))
import model_lib as ml  # noqa: E402

TEXT = ml.ROOT / "models/tinystories-valid-excerpt.txt"
ARGS = ["--spec", "int4:g32", "--text", TEXT, "--ctx", 64, "--chunks", 2]
VOCAB, POS_BYTES = 512, 8 + 2 * 512


def lowbit(*args, check=True):
    p = subprocess.run([ml.LOWBIT, *map(str, args)], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def base_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("kld") / "base.kld"
    lowbit("kld", ml.STORIES, *ARGS, "--save-base", path)
    return path.read_bytes()


def crafted(tmp_path, data, position, lo, step, codes=None):
    """The base file with one scored position's range (and optionally its codes) replaced."""
    b = bytearray(data)
    at = 32 + position * POS_BYTES
    b[at:at + 8] = struct.pack("<ff", lo, step)
    if codes is not None:
        b[at + 8:at + POS_BYTES] = struct.pack("<%dH" % VOCAB, *codes)
    path = tmp_path / "crafted.kld"
    path.write_bytes(bytes(b))
    return path


@pytest.mark.parametrize("lo,step,codes", [
    (-3.0e38, 1.0e34, None),            # stored values up to 3e38: exp overflowed the sum (PPL -nan before)
    (100.0, 0.01, None),                # log-probabilities above 0
    (-1.0e6, 1.0, [0] * VOCAB),         # the most likely token at e^-1e6: not a distribution
    (-30.0, 1.0e-3, [65535] * VOCAB),   # every value at -30 + 65.5 > 0
])
def test_a_crafted_base_range_is_refused(tmp_path, base_file, lo, step, codes):
    path = crafted(tmp_path, base_file, 5, lo, step, codes)
    p = lowbit("kld", ml.STORIES, *ARGS, "--base", path, "--json", check=False)
    assert p.returncode == 1, p.stdout
    err = json.loads(p.stdout)["error"]
    assert "crafted.kld" in err["message"] and "scored position 5" in err["message"], err
    assert "nan" not in p.stdout.lower().replace("lb_err_nan", "")


def test_the_saved_base_still_reads(tmp_path, base_file):
    path = tmp_path / "ok.kld"
    path.write_bytes(base_file)
    out = json.loads(lowbit("kld", ml.STORIES, *ARGS, "--base", path, "--json").stdout)
    assert all(math.isfinite(out[k]) for k in ("kld_mean", "ppl", "ppl_base", "dppl"))


# ---- item 7: saturation counts, infinite perplexity, empty calibration ----

V, D, L, H, KV, HID = 512, 64, 5, 8, 4, 172  # stories260K
KV_DIM = D // H * KV
OFF_WK = V * D + L * D + L * D * D  # llama2.c layout, in floats after the 28-byte header
OFF_FINAL_NORM = OFF_WK + 2 * L * D * KV_DIM + L * D * D + L * D + 3 * L * HID * D


def scaled_model(tmp_path, name, start, count, factor):
    """stories260K with `count` floats from `start` multiplied by factor (the tokenizer beside it)."""
    import numpy as np
    raw = ml.STORIES.read_bytes()
    w = np.frombuffer(raw[28:], dtype="<f4").copy()
    w[start:start + count] *= factor
    path = tmp_path / name
    path.write_bytes(raw[:28] + w.tobytes())
    (tmp_path / "tok512.bin").write_bytes((ml.ROOT / "models/tok512.bin").read_bytes())
    return path


@pytest.fixture
def big_keys(tmp_path):
    return scaled_model(tmp_path, "bigk.bin", OFF_WK, L * D * KV_DIM, 3e4)  # keys ~1e5: beyond fp16


def test_fp16_kv_saturation_is_counted_and_warned(big_keys):
    args = ["--text", TEXT, "--ctx", 64, "--chunks", 2]
    p = lowbit("ppl", big_keys, *args, "--kv", "fp16", "--json")
    sat = json.loads(p.stdout)["saturation"]
    assert sat["kv_values"] == 2 * 2 * 64 * L * KV_DIM and 0 < sat["kv"] < sat["kv_values"], sat
    assert f"{sat['kv']} of {sat['kv_values']} KV cache values were beyond fp16's range" in p.stderr
    text = lowbit("ppl", big_keys, *args, "--kv", "fp16").stdout
    assert f"saturated: kv {sat['kv']} of {sat['kv_values']} values (fp16)" in text
    for kv in ("bf16", "int8", "fp8_e4m3", "int4"):  # a range as wide as fp32's, or a scale per vector
        p = lowbit("ppl", big_keys, *args, "--kv", kv, "--json")
        assert json.loads(p.stdout)["saturation"]["kv"] == 0 and "warning" not in p.stderr, kv
    out = json.loads(lowbit("kld", big_keys, *args, "--kv", "fp16", "--json").stdout)
    assert out["saturation"]["kv"] == sat["kv"]
    c = lowbit("compare", big_keys, *args, "--spec", "int8:channel", "--kv", "fp16", "--json")
    row = json.loads(c.stdout)["specs"][0]["saturation"]
    assert 0 < row["kv"] < row["kv_values"] == sat["kv_values"] and "beyond fp16's range" in c.stderr
    c = lowbit("compare", big_keys, *args, "--spec", "int8:channel", "--kv", "fp16")
    assert f"int8:channel saturated: kv {row['kv']} of {row['kv_values']} values (fp16)" in c.stderr
    g = lowbit("generate", big_keys, "-p", "Once upon a time", "-n", 8, "--kv", "fp16")
    assert "saturated: kv " in g.stderr and "(fp16)" in g.stderr and "beyond fp16's range" in g.stderr


def test_static_activation_scales_count_clipping(tmp_path):
    calib = tmp_path / "calib.txt"
    calib.write_text("Once upon a time")
    args = ["--text", TEXT, "--ctx", 64, "--chunks", 2, "--spec", "int8:channel", "--act", "int8"]
    p = lowbit("ppl", ml.STORIES, *args, "--calib", calib, "--json")
    sat = json.loads(p.stdout)["saturation"]
    assert sat["act_values"] > 0 and 0 < sat["act"] < sat["act_values"] and "clipped" in p.stderr
    per_token = json.loads(lowbit("ppl", ml.STORIES, *args, "--json").stdout)["saturation"]
    assert per_token["act"] == 0 and per_token["act_values"] == sat["act_values"]  # absmax per token: no clipping


@pytest.mark.parametrize("content", ["", None])
def test_empty_calibration_text_is_refused(tmp_path, content):
    calib = tmp_path / "calib.txt"
    calib.write_bytes(b"")
    p = lowbit("ppl", ml.STORIES, "--text", TEXT, "--ctx", 64, "--chunks", 2, "--spec", "int8:channel",
               "--act", "int8", "--calib", calib, *(["--json"] if content is None else []), check=False)
    assert p.returncode == 2
    assert "calib.txt is empty" in (p.stdout if content is None else p.stderr)


def test_an_overflowing_perplexity_is_an_error_naming_where(tmp_path):
    model = scaled_model(tmp_path, "bigfinal.bin", OFF_FINAL_NORM, D, 1e36)  # logits ~1e36: finite, NLL ~1e36
    args = ["--text", TEXT, "--ctx", 64, "--chunks", 2]
    p = lowbit("ppl", model, *args, check=False)
    assert p.returncode == 1 and "PPL" not in p.stdout, p.stdout
    assert "perplexity overflows" in p.stderr and "window 0, position" in p.stderr and "overflowed" in p.stderr
    p = lowbit("kld", model, *args, "--spec", "int8:channel", check=False)
    assert p.returncode == 1 and "not finite" in p.stderr and "KLD" not in p.stdout, p.stderr


def test_generate_from_nan_logits_is_an_error(tmp_path):
    model = scaled_model(tmp_path, "nan.bin", 0, V * D, float("nan"))  # every embedding weight NaN
    p = lowbit("generate", model, "-p", "Once upon", "-n", 5, check=False)
    assert p.returncode == 1 and "position 3: the model's logits are not finite" in p.stderr, p.stderr
    assert "<unk>" not in p.stdout
