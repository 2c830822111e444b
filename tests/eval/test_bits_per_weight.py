"""One bits-per-weight figure (issue 12, item 18): lb_qspec_bits_per_value
x weights / 8 is exactly the bytes lb_quantize stores and the bytes the
runner holds, for every spec family, on stories260K's matrices; and `error`
reports the same figure (before, affine specs counted a 4-bit zero point as
half a byte per group while a row's zero points start on a byte: 4.532 bits
reported against 4.581 held for int4:g128:affine)."""
import ctypes
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "model"))
import lowbit_ctypes as lb  # noqa: E402
import model_lib as ml  # noqa: E402
from test_eval_cli import lowbit  # noqa: E402
from test_packed import SPECS, ppl  # noqa: E402

L = lb.lib
L.lb_qspec_bytes.argtypes = [ctypes.POINTER(lb.QSpec), ctypes.c_uint64, ctypes.c_uint64]
L.lb_qspec_bytes.restype = ctypes.c_uint64
L.lb_qspec_bits_per_value.argtypes = [ctypes.POINTER(lb.QSpec), ctypes.c_uint64, ctypes.c_uint64]
L.lb_qspec_bits_per_value.restype = ctypes.c_double
PLAIN = {"fp32": 0, "fp16": 1, "bf16": 2}  # lb_format ids: element only, tensor granularity (what the runner keeps)


def spec_of(text):
    if text in PLAIN:
        s = lb.QSpec()
        s.element = PLAIN[text]
        return s
    st, s = lb.parse_spec(text)
    assert st == lb.LB_OK, text
    return s


def matrices():
    """stories260K's 2-D tensors: name, values [rows, cols]."""
    with ml.Model(ml.STORIES) as m:
        return [(t.name.decode(), m.values(t)) for t in m.tensors() if t.n_dims == 2]


MATS = None


def mats():
    global MATS
    if MATS is None:
        MATS = matrices()
    return MATS


def bytes_of(spec, rows, cols):
    return L.lb_qspec_bytes(ctypes.byref(spec), rows, cols)


def bits_of(spec, rows, cols):
    return L.lb_qspec_bits_per_value(ctypes.byref(spec), rows, cols)


@pytest.mark.parametrize("text", [s for s in SPECS if s not in PLAIN] + ["int4:g64:affine", "int8:tensor:affine"])
def test_bits_times_weights_is_what_quantize_stores(text):
    spec = spec_of(text)
    for name, x in mats():
        rows, cols = x.shape
        st, q = lb.quantize(text, x)
        assert st == lb.LB_OK, (text, name)
        stored = q.data.size + q.scales.size + (q.zero_point_bytes.size if q.zero_point_bytes is not None else 0)
        stored += 4 if spec.two_level else 0
        assert bytes_of(spec, rows, cols) == stored, (text, name, bytes_of(spec, rows, cols), stored)
        assert q.stats.bits_per_value * rows * cols / 8 == pytest.approx(stored, rel=1e-12), (text, name)
        assert bits_of(spec, rows, cols) == q.stats.bits_per_value


@pytest.mark.parametrize("text", SPECS)
def test_bits_times_weights_is_what_the_runner_holds(text):
    m = ppl("--spec", text, "--spec-embed", text)["memory"]
    assert m["packed_matrices"] == 36 and m["fp32_matrices"] == 0
    spec = spec_of(text)
    shapes = [x.shape for _, x in mats()]  # 5 layers x 7 and the embedding, held once as the tied head
    assert len(shapes) == 36
    assert m["weights_bytes"] == sum(bytes_of(spec, r, c) for r, c in shapes)
    bits = sum(bits_of(spec, r, c) * r * c for r, c in shapes) / sum(r * c for r, c in shapes)
    assert bits * sum(r * c for r, c in shapes) / 8 == pytest.approx(m["weights_bytes"], rel=1e-12)


@pytest.mark.parametrize("text", ["int4:g128:affine", "int4:g64:affine", "uint8:g16:affine", "int4:g32", "nvfp4",
                                  "mxfp6_e3m2", "fp8_e4m3:channel"])
def test_error_reports_the_bits_the_runner_holds(text):
    out = json.loads(lowbit("error", ml.STORIES, "--spec", text, "--json").stdout)
    (row,) = out["specs"]
    spec = spec_of(text)
    held = sum(bytes_of(spec, *x.shape) for _, x in mats())
    assert out["weights"] == sum(x.size for _, x in mats())
    assert row["bits_per_weight"] * out["weights"] / 8 == pytest.approx(held, rel=1e-12), (row, held)
    assert row["size_bytes"] == held + out["other_bytes"]


def test_affine_zero_points_start_each_row_on_a_byte():
    # int4:g128:affine on a 64-wide row: 32 bytes of codes, an fp32 scale, one 4-bit zero point in a whole byte
    spec = spec_of("int4:g128:affine")
    assert bytes_of(spec, 10, 64) == 10 * 32 + 10 * 4 + 10 * 1
    assert bits_of(spec, 10, 64) == 8 * 370 / 640
    assert bytes_of(spec_of("mxfp6_e3m2"), 3, 33) == 3 * 25 + 3 * 2  # 6-bit stream: 33 codes in 25 bytes
    assert bytes_of(spec_of("bf16"), 3, 5) == 30 and bits_of(spec_of("fp16"), 3, 5) == 16
    assert bytes_of(spec_of("nvfp4"), 2, 16) == 2 * 8 + 2 * 1 + 4
    bad = lb.QSpec()
    bad.element, bad.granularity = 14, 99  # int4, no such granularity
    assert bytes_of(bad, 4, 4) == 0 and bits_of(bad, 4, 4) == 0
    assert bytes_of(spec, 0, 64) == 0 and bytes_of(spec, 64, 0) == 0
    assert np.isfinite(bits_of(spec_of("int4:g32"), 1 << 40, 1 << 20))  # plan's sizes: no wrap-around
