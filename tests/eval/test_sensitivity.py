"""lowbit sensitivity (lb_sensitivity, lb_unit_proxy, lb_rank_correlation) on the embedded stories260K:

* each unit's KLD equals `lowbit kld` on a recipe quantizing that unit alone (tensor, layer and class
  units, the KV cache and the activations alone), and its perplexity that run's;
* a planted weak layer (one layer's weights given outliers in the stored model) ranks first, and the
  proxy's rank correlation with the measurement is computed (checked against scipy's spearmanr);
* the proxy equals an independent numpy sum of E[x^2]-weighted squared weight errors;
* --plot, --json, the refusals."""
import json
import pathlib

import ml_dtypes  # noqa: F401  (registers bfloat16 for safetensors.numpy)
import numpy as np
import pytest

from cli_lib import lowbit, stories_bf16
from safetensors.numpy import load_file, save_file
from scipy.stats import spearmanr

ROOT = pathlib.Path(__file__).resolve().parents[2]
STORIES = ROOT / "models/stories260K.bin"
EVAL = ROOT / "models/tinystories-valid-excerpt.txt"
CALIB = ROOT / "data/tinystories/calib-excerpt.txt"
W4 = "int4:g32:scale=bf16:range=full"  # the weights of W4A16:g32
WINDOW = ["--ctx", 128, "--chunks", 3, "--threads", 2, "--quiet"]




@pytest.fixture(scope="module")
def bf16_model(tmp_path_factory):
    return stories_bf16(tmp_path_factory)


def sensitivity(model, *args):
    return json.loads(lowbit("sensitivity", model, "--text", EVAL, *WINDOW, "--json", *args).stdout)


def kld(model, *args):
    return json.loads(lowbit("kld", model, "--text", EVAL, *WINDOW, "--json", *args).stdout)


def unit(s, kind, name):
    (u,) = [u for u in s["units"] if u["kind"] == kind and u["name"] == name]
    return u


@pytest.mark.parametrize("kind,name,rule", [
    ("tensor", "model.layers.2.mlp.down_proj.weight", "model.layers.2.mlp.down_proj.weight=" + W4),
    ("layer", "layer 3", "model.layers.3.*=" + W4),
    ("class", "mlp", "model.layers.*.mlp.*=" + W4),
    ("class", "attn", "model.layers.*.self_attn.*=" + W4),
])
def test_unit_kld_equals_kld_of_that_unit_alone(bf16_model, kind, name, rule):
    s = sensitivity(bf16_model, "--scheme", "W4A16:g32", "--unit", kind)
    u = unit(s, kind, name)
    k = kld(bf16_model, "--rule", rule)
    assert u["kld"] == pytest.approx(k["kld_mean"], rel=1e-9, abs=0)
    assert u["kld_err"] == pytest.approx(k["kld_err"], rel=1e-6)
    assert u["ppl"] == pytest.approx(k["ppl"], rel=1e-9)
    assert s["ppl_base"] == pytest.approx(k["ppl_base"], rel=1e-9)
    assert u["dppl"] == pytest.approx(k["ppl"] - k["ppl_base"], rel=1e-6, abs=1e-12)
    # the bits: int4 codes and a bf16 scale per group of 32 (a short last group too), against bf16's 16
    prefix = {"tensor": name, "layer": "model.layers.3.", "class": None}[kind]
    weights = load_file(pathlib.Path(bf16_model) / "model.safetensors")
    members = [t for n, t in weights.items() if t.ndim == 2 and n.startswith("model.layers.") and
               (n.startswith(prefix) if prefix else f".{name}.".replace("attn", "self_attn") in n)]
    assert u["params"] == sum(t.size for t in members)
    assert u["bits"] == sum(4 * t.size + 16 * t.shape[0] * -(-t.shape[1] // 32) for t in members)
    assert u["bits_stored"] == 16 * u["params"]


def test_kv_and_activation_classes_equal_kld_of_each_alone(bf16_model):
    s = sensitivity(bf16_model, "--scheme", "W8A8-INT8", "--kv", "fp8", "--calib", CALIB, "--unit", "class")
    names = {u["name"] for u in s["units"]}
    assert names == {"attn", "mlp", "kv", "act"}
    kv_only = pathlib.Path(bf16_model).parent / "kv-only.json"  # the KV cache alone, calibrated the same way
    kv_only.write_text(json.dumps({"lowbit_recipe": 1, "kv_cache": "fp8",
                                   "rules": [{"match": "model.layers.*", "keep": True}]}))
    kv = kld(bf16_model, "--recipe", kv_only, "--calib", CALIB)
    # the KV cache's static scales are calibrated on the model as the recipe makes it: the same recipe here
    alone = sensitivity(bf16_model, "--recipe", kv_only, "--calib", CALIB, "--unit", "class")
    assert [u["name"] for u in alone["units"]] == ["kv"]
    assert alone["units"][0]["kld"] == pytest.approx(kv["kld_mean"], rel=1e-9)
    assert 0 < unit(s, "class", "kv")["kld"]
    # the activations alone: no recipe can say "weights 16-bit, inputs int8", so no kld run is the oracle;
    # what must hold: the weights stay as stored (the same act KLD whatever the recipe does to them), it
    # costs something, and it saves no weight bits
    other = pathlib.Path(bf16_model).parent / "w4-act8.json"
    other.write_text(json.dumps({"lowbit_recipe": 1, "rules": [
        {"match": "model.layers.*", "weights": "int8:g32:scale=bf16",
         "input_activations": {"spec": "int8:token", "mode": "dynamic"}}]}))
    s2 = sensitivity(bf16_model, "--recipe", other, "--unit", "class")
    a = unit(s, "class", "act")
    assert unit(s2, "class", "act")["kld"] == a["kld"] > 0
    assert unit(s2, "class", "mlp")["kld"] != unit(s, "class", "mlp")["kld"]
    assert a["bits"] == a["bits_stored"]


@pytest.fixture(scope="module")
def planted(tmp_path_factory, bf16_model):
    """layer 1's weights given outliers: 2% of each projection's entries times 40"""
    out = tmp_path_factory.mktemp("planted") / "stories-planted"
    out.mkdir()
    src = pathlib.Path(bf16_model)
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            (out / f.name).write_bytes(f.read_bytes())
    import ml_dtypes
    tensors = load_file(src / "model.safetensors")
    rng = np.random.default_rng(7)
    for name, t in tensors.items():
        if name.startswith("model.layers.1.") and name.endswith("proj.weight"):
            w = t.astype(np.float32)
            idx = rng.random(w.shape) < 0.02
            w[idx] *= 40
            tensors[name] = w.astype(ml_dtypes.bfloat16)
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    return out


def test_planted_weak_layer_ranks_first_and_proxy_correlation_is_reported(planted):
    s = sensitivity(planted, "--scheme", "W4A16:g32", "--unit", "layer,tensor", "--proxy-text", CALIB)
    layers = [u for u in s["units"] if u["kind"] == "layer"]
    assert layers[0]["name"] == "layer 1"
    assert [u["rank"] for u in layers] == list(range(1, len(layers) + 1))
    assert all(a["kld"] >= b["kld"] for a, b in zip(layers, layers[1:]))
    tensors = [u for u in s["units"] if u["kind"] == "tensor"]
    assert tensors[0]["name"].startswith("model.layers.1."), tensors[0]
    for kind, units in (("layer", layers), ("tensor", tensors)):
        proxy = [u["proxy"] for u in units]
        assert all(p is not None and p > 0 for p in proxy)
        rho = spearmanr(proxy, [u["kld"] for u in units]).statistic
        assert s["rank_correlation"][kind] == pytest.approx(rho, abs=1e-12)
    # the planted layer is what the proxy sees too: its tensors lead the proxy's ranking
    assert max(layers, key=lambda u: u["proxy"])["name"] == "layer 1"
    text = lowbit("sensitivity", planted, "--text", EVAL, *WINDOW, "--scheme", "W4A16:g32", "--unit", "layer",
                  "--proxy-text", CALIB, "--plot").stdout
    assert "Spearman rank correlation" in text and "KLD per layer unit" in text
    bars = [l for l in text.splitlines() if l.strip().startswith("layer ") and "|" in l]
    assert len(bars) == len(layers) and bars[0].split("|")[1].count("#") == 40


def test_proxy_equals_numpy(bf16_model, tmp_path):
    """the proxy of one tensor: sum_j E[x_j^2] sum_r (W - Q(W))^2, with E[x^2] from lowbit's imatrix (checked
    against llama.cpp elsewhere) and Q(W) from the quantized checkpoint's weights read back by numpy"""
    name = "model.layers.2.mlp.up_proj.weight"
    s = sensitivity(bf16_model, "--rule", f"{name}=fp8_e4m3:channel:scale=fp32", "--unit", "tensor", "--proxy-text", CALIB)
    (u,) = s["units"]
    im = tmp_path / "im.gguf"
    lowbit("imatrix", bf16_model, "--text", CALIB, "-o", im, "--ctx", 128, "--process-output", "--quiet")
    from gguf import GGUFReader
    r = GGUFReader(str(im))
    t = {x.name: x for x in r.tensors}
    sums = np.asarray(t["blk.2.ffn_up.weight.in_sum2"].data, dtype=np.float64).ravel()
    counts = np.asarray(t["blk.2.ffn_up.weight.counts"].data, dtype=np.float64).ravel()
    ex2 = sums / counts[0]
    import ml_dtypes
    w = load_file(pathlib.Path(bf16_model) / "model.safetensors")[name].astype(np.float32)
    scale = np.abs(w).max(axis=1, keepdims=True) / np.float32(448)  # fp8 e4m3 per output channel, fp32 scale
    q = (w / scale).astype(ml_dtypes.float8_e4m3fn).astype(np.float32).astype(np.float64) * scale
    w = w.astype(np.float64)
    want = float(((w - q) ** 2 * ex2[None, :]).sum())
    assert u["proxy"] == pytest.approx(want, rel=1e-3)


def test_refusals(bf16_model, tmp_path):
    r = lowbit("sensitivity", bf16_model, "--text", EVAL, check=False)
    assert r.returncode == 2 and "say how to quantize" in r.stderr
    r = lowbit("sensitivity", bf16_model, "--text", EVAL, "--spec", "int4", "--unit", "bogus", check=False)
    assert r.returncode == 2 and "--unit takes" in r.stderr
    r = lowbit("sensitivity", bf16_model, "--text", EVAL, "--spec", "int4", "--proxy-text", EVAL, check=False)
    assert r.returncode == 2 and "calibrate on other text" in r.stderr
    r = lowbit("sensitivity", bf16_model, "--text", EVAL, "--scheme", "W4A16", "--method", "awq", "--calib", CALIB,
               "--calib-seqs", 2, "--calib-len", 64, "--unit", "tensor", *WINDOW, check=False)
    assert r.returncode == 2 and "measure layers or classes" in r.stderr


def test_compare_plot_draws_every_row(bf16_model):
    specs = ["int4:g32", "int8:channel", "mxfp4"]
    out = lowbit("compare", bf16_model, "--text", EVAL, *WINDOW, "--spec", ",".join(specs), "--plot").stdout
    chart = out[out.index("KLD against bits per weight"):]
    grid = [l.split("|", 1)[1] for l in chart.splitlines()[1:15]]
    assert sorted(c for row in grid for c in row if c.isalpha()) == ["A", "B", "C"]
    for mark, spec in zip("ABC", specs):
        assert f"  {mark} {spec} (" in chart
    bars = [l for l in chart.splitlines() if "|" in l and l.strip().split()[0] in specs]
    assert len(bars) == 3 and max(b.count("#") for b in bars) == 40
