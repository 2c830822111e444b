"""--keep-sensitive N (lb_qmodel_keep_sensitive) on the embedded stories260K:

* the per-layer KLD ranking equals a brute-force loop of `lowbit kld` runs,
  each quantizing one layer alone by --rule, on the same calibration
  windows (the model in bf16 first, so that the 16-bit default of the other
  weights changes nothing and both sides measure the same model);
* quantize writes the N top-ranked layers in 16-bit and the others packed;
* the ranking is printed (text and --json) and the bits per weight count
  the kept layers;
* the refusals."""
import json
import pathlib
import struct

import pytest

from cli_lib import lowbit, stories_bf16

ROOT = pathlib.Path(__file__).resolve().parents[2]
STORIES = ROOT / "models/stories260K.bin"
CALIB = ROOT / "models/tinystories-valid-excerpt.txt"  # calibration; the evaluation text is another
EVAL = ROOT / "data/wikitext-2-raw/wiki.test.raw"
SPEC = "int4:g32:scale=bf16"
N_LAYERS = 5




@pytest.fixture(scope="module")
def bf16_model(tmp_path_factory):
    return stories_bf16(tmp_path_factory)


def header(path):
    b = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    return json.loads(b[8:8 + n])


def recipe(tmp_path, pattern, act):
    """a recipe file quantizing the weights matching pattern: SPEC weight-only, or W8A8 (int8 per channel,
    int8 per-token activations) with act"""
    rule = {"match": pattern, "weights": "int8:channel:scale=bf16" if act else SPEC}
    if act:
        rule["input_activations"] = {"spec": "int8:token", "mode": "dynamic"}
    path = tmp_path / f"recipe-{abs(hash((pattern, act)))}.json"
    path.write_text(json.dumps({"lowbit_recipe": 1, "rules": [rule]}))
    return path


@pytest.mark.parametrize("act", [False, True], ids=["w4-weight-only", "w8a8-dynamic"])
def test_ranking_equals_a_brute_force_loop_of_kld_runs(bf16_model, tmp_path, act):
    r = lowbit("kld", bf16_model, "--text", EVAL, "--chunks", 1, "--recipe", recipe(tmp_path, "model.layers.*", act),
               "--keep-sensitive", 2, "--calib", CALIB, "--calib-tokens", 1024, "--threads", 2, "--json", "--quiet")
    s = json.loads(r.stdout)
    sens = s["sensitivity"]
    assert sens["windows"] == 2 and sens["ctx"] == 512 and sens["keep"] == 2
    got = {e["layer"]: e for e in sens["layers"]}
    assert sorted(got) == list(range(N_LAYERS)) and all(e["measured"] for e in got.values())
    # brute force: the calibration text's first two windows of 512, one layer quantized per run
    want = {}
    for layer in range(N_LAYERS):
        b = json.loads(lowbit("kld", bf16_model, "--text", CALIB, "--ctx", 512, "--chunks", 2, "--recipe",
                              recipe(tmp_path, f"model.layers.{layer}.*", act), "--threads", 2, "--json",
                              "--quiet").stdout)
        want[layer] = b
    for layer in range(N_LAYERS):
        assert got[layer]["kld"] == pytest.approx(want[layer]["kld_mean"], rel=1e-9, abs=0), layer
        assert got[layer]["kld_err"] == pytest.approx(want[layer]["kld_err"], rel=1e-6), layer
    order = [e["layer"] for e in sens["layers"]]
    assert order == sorted(range(N_LAYERS), key=lambda k: -want[k]["kld_mean"])
    assert [e["kept"] for e in sens["layers"]] == [True, True, False, False, False]
    # the model measured keeps those two layers: 16 bits per weight there, more bits than without them
    rtn = json.loads(lowbit("kld", bf16_model, "--text", EVAL, "--chunks", 1, "--recipe",
                            recipe(tmp_path, "model.layers.*", act), "--threads", 2, "--json", "--quiet").stdout)
    assert s["layer_bits_per_weight"] > rtn["layer_bits_per_weight"] > 4
    assert s["kld_mean"] < rtn["kld_mean"]


def test_quantize_writes_the_kept_layers_in_16bit(tmp_path):
    out = tmp_path / "q"
    r = lowbit("quantize", STORIES, "-o", out, "--scheme", "W8A8-INT8", "--keep-sensitive", 2, "--calib", CALIB,
               "--calib-tokens", 1024, "--threads", 2, "--json", "--quiet")
    s = json.loads(r.stdout)
    ranking = s["sensitivity"]["layers"]
    kept = {e["layer"] for e in ranking if e["kept"]}
    assert len(kept) == 2 and kept == {e["layer"] for e in ranking[:2]}
    assert ranking[0]["kld"] >= ranking[1]["kld"] >= ranking[2]["kld"] > 0
    h = header(out / "model.safetensors")
    for layer in range(N_LAYERS):
        for p in ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj"):
            name = f"model.layers.{layer}.{p}"
            if layer in kept:
                assert h[name + ".weight"]["dtype"] == "BF16" and name + ".weight_packed" not in h, name
            else:
                assert h[name + ".weight"]["dtype"] == "I8" and name + ".weight_scale" in h, name
    assert s["quantized"] == 7 * (N_LAYERS - 2)
    cfg = json.loads((out / "config.json").read_text())
    ignored = set(cfg["quantization_config"]["ignore"])
    assert {f"model.layers.{k}.mlp.down_proj" for k in kept} <= ignored
    assert not {f"model.layers.{k}.mlp.down_proj" for k in range(N_LAYERS) if k not in kept} & ignored
    # the text output prints the ranking before the summary
    t = lowbit("quantize", STORIES, "-o", tmp_path / "q2", "--scheme", "W8A8-INT8", "--keep-sensitive", 2, "--calib",
               CALIB, "--calib-tokens", 1024, "--threads", 2, "--quiet").stdout
    lines = t.splitlines()
    assert lines[0].startswith("layer sensitivity") and "2 windows of 512" in lines[0]
    rows = [ln.split() for ln in lines[2:2 + N_LAYERS]]
    assert [int(x[1]) for x in rows] == [e["layer"] for e in ranking]
    assert [x[-1] == "kept" for x in rows] == [e["kept"] for e in ranking]
    assert lines[-1].startswith("wrote ")


@pytest.mark.parametrize("args,needle", [
    (["--keep-sensitive", "2"], "--calib"),
    (["--keep-sensitive", "6", "--calib", CALIB], "5 layers"),
    (["--keep-sensitive", "0", "--calib", CALIB], "1..1024"),
    (["--keep-sensitive", "2", "--calib", CALIB, "--calib-tokens", "100"], "whole windows"),
])
def test_refusals(tmp_path, args, needle):
    out = tmp_path / "q"
    r = lowbit("quantize", STORIES, "-o", out, "--scheme", "W8A8-INT8", *args, "--quiet", check=False)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert not out.exists()


def test_other_commands_refuse_or_need_a_recipe():
    r = lowbit("compare", STORIES, "--text", EVAL, "--spec", "int8:channel", "--keep-sensitive", 2, check=False)
    assert r.returncode == 2 and "--keep-sensitive" in r.stderr
    r = lowbit("kld", STORIES, "--text", EVAL, "--keep-sensitive", 2, "--calib", CALIB, check=False)
    assert r.returncode == 2 and "nothing to compare" in r.stderr
    r = lowbit("quantize", STORIES, "-o", "x.gguf", "--type", "Q8_0", "--keep-sensitive", 2, check=False)
    assert r.returncode == 2 and "--keep-sensitive" in r.stderr
