"""lowbit quantize --format compressed-tensors, checked by the
compressed-tensors package itself (0.20.1):

  - config.json's quantization_config validates against the package's
    pydantic models (extra="forbid": a key they do not know fails);
  - for every quantized linear layer, the package's own compressor for the
    format (the one vLLM's loader mirrors) decompresses the written tensors,
    and the weights equal lowbit's dequantized weights (lb_qmodel_values_f32
    under the same spec) exactly, compared in fp32 (NVFP4: the package
    dequantizes in bf16 whatever it is given, so there lowbit's values
    rounded to bf16 are compared, see the test). The scales are cast to
    fp32 before decompressing: the package would otherwise multiply in the
    scale's bf16 and round once more (what a bf16 engine does anyway).
  - the model is SmolLM2-135M's GGUF (llama.cpp's adjacent rotary pairs; its
    576-wide layers take groups of 32 and 64, not 128): the q/k rows come out
    in Hugging Face's half-split order, so the comparison also checks the
    driver's row permutation.

Run: make test-interop (or LOWBIT_BUILD=build ~/.cache/lowbit/interop-*/bin/python -m pytest tests/interop)
"""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

torch = pytest.importorskip("torch")
pytest.importorskip("compressed_tensors")
from safetensors.torch import load_file  # noqa: E402
from compressed_tensors.compressors import BaseCompressor  # noqa: E402
from compressed_tensors.quantization import QuantizationConfig  # noqa: E402

from lowbit_ctypes import QModel  # noqa: E402

BUILD = pathlib.Path(os.environ.get("LOWBIT_BUILD", "build"))
LOWBIT = str(BUILD / "lowbit")
REPO = HERE.parent.parent
STORIES = REPO / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
RULE = r"re:.*_proj\.weight"

# spec text -> the format compressed-tensors must call it
CASES = [
    ("int4:g32:scale=bf16", "pack-quantized"),
    ("int4:g64:affine:scale=bf16", "pack-quantized"),
    ("int8:channel:scale=bf16", "pack-quantized"),
    # range=signed: negative scales (ggml's rule), which the package multiplies like any other
    ("int4:g32:scale=bf16:range=signed", "pack-quantized"),
    ("int8:channel:scale=bf16:range=signed", "pack-quantized"),
    ("fp8_e4m3:channel:scale=bf16", "naive-quantized"),
    ("nvfp4", "nvfp4-pack-quantized"),
    ("mxfp4:round=even", "mxfp4-pack-quantized"),
    ("mxfp8_e4m3", "mxfp8-quantized"),
    # 2-D blocks (strategy "block"): weight-only, and the FP8-BLOCK scheme
    # (dynamic group activations); SmolLM2's 576 inputs take 64-wide blocks
    ("fp8_e4m3:b64x64:scale=bf16", "naive-quantized"),
    ("FP8-BLOCK:g64", "float-quantized"),
]
SCHEMES = {"FP8-BLOCK:g64": "fp8_e4m3:b64x64:scale=bf16"}


def quantize(out, *args):
    return subprocess.run([LOWBIT, "quantize", str(STORIES), "-o", str(out), "--quiet", *args],
                          capture_output=True, text=True, timeout=600)


def half_split(w, heads):
    """Adjacent rotary rows -> Hugging Face's half-split ones."""
    rows = w.shape[0]
    hd = rows // heads
    idx = [h * hd + (2 * k if k < hd // 2 else 2 * (k - hd // 2) + 1) for h in range(heads) for k in range(hd)]
    return w[idx]


@pytest.mark.skipif(not STORIES.exists(), reason="SmolLM2 GGUF not present (make test fetches it)")
@pytest.mark.parametrize("spec,fmt", CASES)
def test_package_decompresses_to_lowbit_values(tmp_path, spec, fmt):
    out = tmp_path / "ct"
    if spec in SCHEMES:
        r = quantize(out, "--scheme", spec)
        spec = SCHEMES[spec]
    else:
        r = quantize(out, "--rule", f"{RULE}={spec}")
    assert r.returncode == 0, r.stderr
    cfg = json.loads((out / "config.json").read_text())
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    assert qc.format == fmt
    (group,) = qc.config_groups.values()
    tensors = load_file(str(out / "model.safetensors"))
    compressor = BaseCompressor.get_value_from_registry(fmt)
    heads = {"q_proj": cfg["num_attention_heads"], "k_proj": cfg["num_key_value_heads"]}
    checked = 0
    with QModel(STORIES) as q:
        # every spec first: q/k/v and gate/up share NVFP4's global scale
        layers = [i for i in range(len(q)) if q.name(i).endswith("_proj.weight")]
        for i in layers:
            q.set_spec(i, spec)
        for i in layers:
            name = q.name(i)
            want = q.values(i).reshape(q.shape(i))
            for k, h in heads.items():
                if f"self_attn.{k}." in name:
                    want = half_split(want, h)
            m = name[: -len(".weight")]
            sd = {k[len(m) + 1:]: v for k, v in tensors.items() if k.startswith(m + ".")}
            assert "weight" in sd or "weight_packed" in sd, sorted(sd)
            if ":b64x64" in spec:  # one scale per 64x64 block, partial rows allowed
                assert group.weights.strategy == "block" and group.weights.block_structure == [64, 64]
                assert tuple(sd["weight_scale"].shape) == (-(-want.shape[0] // 64), want.shape[1] // 64)
                assert sd["weight_scale"].dtype == torch.bfloat16
            if fmt not in ("mxfp4-pack-quantized", "mxfp8-quantized"):  # E8M0 codes stay uint8
                sd["weight_scale"] = sd["weight_scale"].to(torch.float32)
            if "range=signed" in spec:  # the checkpoint does hold negative scales
                assert (sd["weight_scale"] < 0).any() and (sd["weight_scale"] > 0).any(), name
            got = compressor.decompress(sd, group)["weight"].to(torch.float32).numpy()
            assert got.shape == want.shape
            if fmt == "nvfp4-pack-quantized":
                # the package unpacks FP4 into bf16 and dequantizes in bf16
                # (nvfp4/base.py: dtype=unpacked.dtype), whatever the scales'
                # dtype: compare with lowbit's values rounded to bf16, within
                # one bf16 step for the package's own intermediate roundings
                want_bf16 = torch.from_numpy(want).to(torch.bfloat16).to(torch.float32).numpy()
                step = np.abs(want_bf16) * 2.0 ** -7 + 1e-30
                bad = np.flatnonzero(np.abs(got.ravel() - want_bf16.ravel()) > step.ravel())
                exact = np.mean(got == want_bf16)
                assert exact > 0.9, f"{name}: only {exact:.4f} equal to bf16(lowbit)"  # 94.6% at worst on SmolLM2
            else:
                bad = np.flatnonzero(got.ravel() != want.ravel())
            assert bad.size == 0, f"{name}: {bad.size} of {want.size} differ, first {got.ravel()[bad[0]]} vs {want.ravel()[bad[0]]}"
            checked += 1
    assert checked > 0


@pytest.mark.skipif(not STORIES.exists(), reason="SmolLM2 GGUF not present (make test fetches it)")
def test_refused_spec_writes_nothing(tmp_path):
    out = tmp_path / "ct"
    r = quantize(out, "--rule", f"{RULE}=mxfp6_e2m3")
    assert r.returncode == 2, r.stderr
    assert "compressed-tensors cannot express it" in r.stderr and "_proj.weight" in r.stderr
    assert not out.exists()
    r = quantize(out, "--rule", f"{RULE}=int4:g16:scale=bf16")
    assert r.returncode == 2 and "Marlin" in r.stderr, r.stderr
    assert not out.exists()
    # 128x128 blocks: 128 does not divide SmolLM2's 576 inputs (vLLM needs whole blocks along them)
    r = quantize(out, "--scheme", "FP8-BLOCK")
    assert r.returncode == 2 and "FP8-BLOCK:g64" in r.stderr and "576 inputs" in r.stderr, r.stderr
    assert not out.exists()
    # 2-D blocks of other elements have no compressed-tensors format
    r = quantize(out, "--rule", f"{RULE}=int8:b64x64:scale=bf16")
    assert r.returncode == 2 and "FP8 block strategy only" in r.stderr, r.stderr
    assert not out.exists()
