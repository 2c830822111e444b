"""lowbit reads checkpoints written by the quantizers' own packages.

compressed-tensors: a tiny random Llama (transformers, CPU) is quantized and
compressed by the compressed-tensors package itself (ct_checkpoints.py:
apply_quantization_config, its calculate_qparams / generate_gparam,
ModelCompressor.compress_model, save_pretrained) in every format it writes:
float-quantized (FP8 per channel, per tensor, 128x128 blocks, whole and with
partial blocks at the edges),
int-quantized (INT8), pack-quantized (W4A16 symmetric and asymmetric, group
32 and 128, 3-bit and 8-bit), naive-quantized (FP8 weight-only),
nvfp4-pack-quantized (NVFP4, NVFP4A16), mxfp4-pack-quantized and
mxfp8-quantized. lowbit opens each directory (lb_model_open) and every
quantized weight must equal, bit for bit in fp32, the package's own
decompression of the stored tensors (BaseCompressor.decompress).

Then a forward pass: transformers runs the dense tiny Llama in fp32 with the
package's decompressed weights, lowbit's runner (lb_runner_new) runs the
checkpoint; their logits must agree within 1e-4 of each position's logit
range, the tolerance test_forward_reference.py holds lowbit's fp32 forward
pass to against its fp64 reference on stories260K (both sides here are fp32
over identical weights: what differs is only summation order).

ModelOpt: nvidia-modelopt quantizes the same tiny model on CPU (mtq.quantize
with FP8, NVFP4 and MXFP8 configs, a calibration forward) and exports it
(export_hf_checkpoint); lowbit's weights must equal the package's own
FP8QTensor / NVFP4QTensor / MXFP8QTensor dequantization in fp32.

Run with the interop environment (make test-interop):
  ~/.cache/lowbit/interop-*/bin/python -m pytest tests/interop/test_read_compressed_tensors.py
"""
import ctypes
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "model"))

torch = pytest.importorskip("torch")
pytest.importorskip("compressed_tensors")
pytest.importorskip("transformers")

import ct_checkpoints as ct  # noqa: E402
import model_lib as ml  # noqa: E402
from test_forward_reference import STORIES_TOL, Runner, assert_close  # noqa: E402

CASES = sorted(ct.CASES)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """case -> (directory, the dense model's state dict before quantization)"""
    root = tmp_path_factory.mktemp("ct")
    cache = {}

    def get(case):
        if case not in cache:
            d = root / case
            cache[case] = (d, ct.write(case, str(d)))
        return cache[case]

    return get


def lowbit_weights(path):
    with ml.Model(path) as m:
        return {t.name.decode(): (t.dtype, ml.shape(t), m.values(t)) for t in m.tensors()}


@pytest.mark.parametrize("case", CASES)
def test_weights_equal_the_packages_decompression(written, case):
    d, dense = written(case)
    ref = ct.decompressed(str(d))
    got = lowbit_weights(d)
    quantized = ml.DTYPES.index("quantized")
    assert ref, "the package wrote no quantized module"
    for name, w in ref.items():
        assert name in got, f"{case}: lowbit does not list {name}"
        dtype, shape, v = got[name]
        assert dtype == quantized, f"{case}: {name} is dtype {ml.DTYPES[dtype]}"
        assert shape == tuple(w.shape)
        want = w.numpy()
        diff = np.flatnonzero(v != want)
        assert diff.size == 0, (f"{case}: {name}: {diff.size} of {v.size} values differ, first at {diff[0]}: "
                                f"lowbit {v.flat[diff[0]]!r}, compressed-tensors {want.flat[diff[0]]!r}")
    # the components are not in the list; the dense tensors are, as stored
    for name in got:
        assert not name.endswith(("_scale", "_zero_point", "_shape", "_packed", "_scale_2")), name
    for name, t in dense.items():
        if name not in ref:
            assert np.array_equal(got[name][2], t.float().numpy()), name
    # and the quantization really happened: the weights moved from the dense ones
    some = next(iter(ref))
    assert not np.array_equal(got[some][2], dense[some].float().numpy())


def test_sharded_checkpoint(tmp_path):
    """save_pretrained in shards: a module's components may sit in different files"""
    ct.write("w4a16-asym-g32", str(tmp_path), max_shard_size="300KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    ref = ct.decompressed(str(tmp_path))
    got = lowbit_weights(tmp_path)
    for name, w in ref.items():
        assert np.array_equal(got[name][2], w.numpy()), name


def test_inspect_shows_the_quantization(written):
    d, _ = written("w4a16-asym-g32")
    out = subprocess.run([ml.LOWBIT, "inspect", "--json", str(d)], capture_output=True, text=True, check=True)
    q = json.loads(out.stdout)["quantization"]
    assert q["method"] == "compressed-tensors" and q["format"] == "pack-quantized"
    assert q["quantized"] == 14 and q["hidden"] == 14 * 3  # weight_scale, weight_shape, weight_zero_point
    g = q["groups"][0]
    assert g["weights"] == "int4 group 32 asymmetric" and g["input"] == "none" and g["modules"] == 14


def dense_reference_logits(d, ref, tokens):
    """transformers' fp32 forward of the tiny Llama whose linear weights are
    the package's decompressed ones (the rest as saved)."""
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig.from_pretrained(str(d))
    cfg.quantization_config = None
    model = LlamaForCausalLM(cfg).float().eval()
    sd = {k: v.float() for k, v in load_file(os.path.join(d, "model.safetensors")).items()
          if k in model.state_dict()}
    sd.update(ref)
    missing, _ = model.load_state_dict(sd, strict=False)
    assert not [k for k in missing if "rotary" not in k], missing
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].double().numpy()


@pytest.mark.parametrize("case", ["w4a16-asym-g32", "nvfp4", "fp8-block", "fp8-block-partial", "int8"])
def test_logits_match_transformers(written, case):
    d, _ = written(case)
    ref = ct.decompressed(str(d))
    tokens = list(np.random.default_rng(7).integers(0, 320, 48))
    want = dense_reference_logits(d, ref, tokens)
    with Runner(d) as r:
        got = r.forward(tokens)
    assert_close(got, want, STORIES_TOL, f"{case}: lowbit vs transformers on the decompressed weights")


# ------------------------------------------------------------------ ModelOpt

MODELOPT = ["FP8_DEFAULT_CFG", "NVFP4_DEFAULT_CFG", "MXFP8_DEFAULT_CFG"]


@pytest.mark.parametrize("cfg_name", MODELOPT)
def test_modelopt_export_read(tmp_path, cfg_name):
    mtq = pytest.importorskip("modelopt.torch.quantization")
    from modelopt.torch.export import export_hf_checkpoint
    from modelopt.torch.quantization.qtensor import FP8QTensor, MXFP8QTensor, NVFP4QTensor
    from safetensors.torch import load_file

    model = ct.tiny_llama(torch.bfloat16)
    ids = torch.randint(0, 320, (2, 16), generator=torch.Generator().manual_seed(1))

    def loop(m):
        with torch.no_grad():
            m(ids)

    model = mtq.quantize(model, getattr(mtq, cfg_name), loop)
    export_hf_checkpoint(model, export_dir=str(tmp_path))
    assert (tmp_path / "hf_quant_config.json").exists()
    sd = load_file(str(tmp_path / "model.safetensors"))
    ref = {}
    for k, w in sd.items():
        m = k[: -len(".weight")]
        if not k.endswith(".weight") or m + ".weight_scale" not in sd:
            continue
        s = sd[m + ".weight_scale"]
        if w.dtype == torch.uint8:  # NVFP4: weight_scale_2 multiplies
            shape = torch.Size([w.shape[0], 2 * w.shape[1]])
            r = NVFP4QTensor(shape, torch.float32, w).dequantize(
                torch.float32, scale=s, double_scale=sd[m + ".weight_scale_2"], block_sizes={-1: 16})
        elif s.dtype == torch.uint8:
            r = MXFP8QTensor(w.shape, torch.float32, w).dequantize(torch.float32, scale=s)
        else:
            r = FP8QTensor(w.shape, torch.float32, w).dequantize(torch.float32, scale=s)
        ref[k] = r.float().numpy()
    assert len(ref) == 14
    got = lowbit_weights(tmp_path)
    for k, want in ref.items():
        v = got[k][2]
        diff = np.flatnonzero(v != want)
        assert diff.size == 0, f"{cfg_name}: {k}: {diff.size} values differ from modelopt's dequantize"
    with ml.Model(tmp_path) as m:
        lib = ml.lib
        lib.lb_model_quantization.restype = ctypes.c_void_p
        assert lib.lb_model_quantization(m.h)
