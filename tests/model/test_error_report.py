"""lowbit error: per-tensor numbers equal quantizing that tensor alone;
model-wide figures are the stated sums."""
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lowbit_ctypes as lb  # noqa: E402
import model_lib as ml  # noqa: E402

SPECS = ["int8:channel", "int4:g32", "mxfp4", "nvfp4"]


@pytest.fixture(scope="module")
def report():
    return ml.run_json("error", ml.STORIES, "--spec", ",".join(SPECS), "--json", "--threads", "2")


def test_each_tensor_as_if_quantized_alone(report):
    with ml.Model(ml.STORIES) as m:
        tensors = {t.name.decode(): m.values(t) for t in m.tensors()}
    rows = report["tensors"]
    weights = [n for n, v in tensors.items() if v.ndim == 2]
    assert [r["name"] for r in rows] == [n for n in tensors if n in weights]  # norms are not weights
    signal = {s: 0.0 for s in SPECS}
    noise = {s: 0.0 for s in SPECS}
    bits = {s: 0.0 for s in SPECS}
    for r in rows:
        x = tensors[r["name"]]
        for k, spec in enumerate(SPECS):
            st, q = lb.quantize(spec, x)
            assert st == lb.LB_OK
            assert r["sqnr_db"][k] == pytest.approx(q.stats.sqnr_db, rel=1e-12)
            assert r["mse"][k] == pytest.approx(q.stats.mse, rel=1e-12)
            signal[spec] += float((x.astype(np.float64) ** 2).sum())
            noise[spec] += q.stats.mse * x.size
            bits[spec] += q.stats.bits_per_value * x.size
    n_weights = sum(tensors[n].size for n in weights)
    other = sum(tensors[n].size * 4 for n in tensors if n not in weights)
    assert report["weights"] == n_weights and report["other_bytes"] == other
    for k, spec in enumerate(SPECS):
        s = report["specs"][k]
        assert s["spec"] == spec
        assert s["sqnr_db"] == pytest.approx(10 * math.log10(signal[spec] / noise[spec]), rel=1e-9)
        assert s["bits_per_weight"] == pytest.approx(bits[spec] / n_weights, rel=1e-12)
        assert s["size_bytes"] == pytest.approx(bits[spec] / 8 + other, rel=1e-12)
        worst = sorted(rows, key=lambda r: r["sqnr_db"][k])[:3]
        assert s["worst"] == [r["name"] for r in worst]


def test_int8_channel_bits_count_one_fp32_scale_per_row(report):
    # 64-column matrices carry 8 + 32/64 bits per weight; the others 8 + 32/cols
    with ml.Model(ml.STORIES) as m:
        mats = [ml.shape(t) for t in m.tensors() if t.n_dims == 2]
    n = sum(r * c for r, c in mats)
    want = sum(r * c * (8 + 32 / c) for r, c in mats) / n
    assert report["specs"][0]["bits_per_weight"] == pytest.approx(want, rel=1e-12)


def test_text_report_has_every_spec_and_a_summary():
    code, out, _ = ml.run("error", ml.STORIES, "--spec", "int8:channel,mxfp4")
    assert "model.layers.4.mlp.down_proj.weight" in out
    summary = out.split("worst tensors")[1].splitlines()
    assert summary[1].startswith("int8:channel") and summary[2].startswith("mxfp4")


def test_nan_in_a_weight_names_the_tensor(tmp_path):
    blob = bytearray(ml.STORIES.read_bytes())
    blob[28 + 4 * 100:28 + 4 * 101] = np.float32(np.nan).tobytes()  # inside the embedding
    bad = tmp_path / "nan.bin"
    bad.write_bytes(bytes(blob))
    code, out, err = ml.run("error", bad, "--spec", "int8:channel", check=False)
    assert code == 1 and out == ""
    assert "model.embed_tokens.weight" in err and "NaN" in err
    code, out, err = ml.run("inspect", bad, check=False)
    assert code == 1 and "model.embed_tokens.weight" in err and "element 100" in err
