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
