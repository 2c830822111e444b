"""lowbit applies the activation scales of checkpoints the compressed-tensors
package writes itself (lb_qmodel_from_checkpoint).

A tiny Llama is quantized by the package (ct_checkpoints.py: its own
apply_quantization_config, calculate_qparams, ModelCompressor); each
module's static input scale is the package's calculate_qparams of a
different activation range (what its static_minmax observer would have
seen), NVFP4's input_global_scale its generate_gparam. lowbit must read
them back as the calibrated ranges the runner uses: for FP8 and INT8
static inputs input_amax = input_scale x 448 (x 127), exactly (the scale
is the package's dequantization step: x_hat = q * scale); for NVFP4 the
global scale is a divisor, 448 x 6 / amax, so amax = 448 x 6 / scale
(within float rounding). Dynamic inputs (W8A8 INT8 per token) carry no
scale and become per-token activations. With LB_CKPT_WEIGHTS_ONLY no
module has activation quantization.

Run with the interop environment (make test-interop)."""
import pathlib
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

torch = pytest.importorskip("torch")
pytest.importorskip("compressed_tensors")
pytest.importorskip("transformers")

import ct_checkpoints as ct  # noqa: E402
import lowbit_ctypes as lbc  # noqa: E402
from compressed_tensors.compressors import ModelCompressor  # noqa: E402
from compressed_tensors.quantization import (  # noqa: E402
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    apply_quantization_config,
    preset_name_to_scheme,
)
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

LB_ACT_NONE, LB_ACT_DYNAMIC, LB_ACT_STATIC, LB_ACT_LOCAL = 0, 1, 2, 3
LB_GRAN_TOKEN = 2


def int8_static_scheme():
    w = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel")
    a = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="tensor", dynamic=False)
    return QuantizationScheme(targets=["Linear"], weights=w, input_activations=a)


SCHEMES = {"fp8-static": (lambda: preset_name_to_scheme("FP8", ["Linear"]), torch.bfloat16),
           "int8-static": (int8_static_scheme, torch.bfloat16),
           "nvfp4": (lambda: preset_name_to_scheme("NVFP4", ["Linear"]), torch.bfloat16),
           "int8-dynamic": (lambda: preset_name_to_scheme("W8A8", ["Linear"]), torch.bfloat16)}


def write(case, out_dir):
    """The package's checkpoint; {module: activation range} it calibrated."""
    make, dtype = SCHEMES[case]
    model = ct.tiny_llama(dtype, seed=1)
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": make()}, ignore=["lm_head"]))
    ct.calibrate_weights(model)
    rng = np.random.default_rng(7)
    ranges = {}
    for name, m in model.named_modules():
        scheme = getattr(m, "quantization_scheme", None)
        if scheme is None or scheme.input_activations is None or scheme.input_activations.dynamic is True:
            continue
        amax = torch.tensor([float(rng.uniform(0.5, 40.0))])
        ranges[name] = amax.item()
        if hasattr(m, "input_global_scale"):
            m.input_global_scale.data.copy_(generate_gparam(-amax, amax).reshape(m.input_global_scale.shape))
        else:
            scale, _ = calculate_qparams(-amax, amax, scheme.input_activations)
            m.input_scale.data.copy_(scale.reshape(m.input_scale.shape).to(m.input_scale.dtype))
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    model.save_pretrained(out_dir)
    compressor.update_config(out_dir)
    return ranges


def stored(out_dir):
    """{name: fp32 numpy array} of the files, as the package wrote them."""
    sd = {}
    for f in sorted(pathlib.Path(out_dir).glob("*.safetensors")):
        sd.update({k: v.float().numpy() for k, v in load_file(str(f)).items() if "scale" in k})
    return sd


def entries(path, flags=0):
    with lbc.QModel(path, checkpoint_flags=flags) as q:
        out = {}
        for i in range(len(q)):
            e = q.entry(i)
            name = e.tensor.contents.name.decode()
            if name.endswith(".weight") and e.state == 2:  # QUANTIZED: the file's codes
                out[name[:-len(".weight")]] = (e.act.mode, e.act.spec.granularity, e.input_amax)
        return out


@pytest.mark.parametrize("case,qmax", [("fp8-static", 448.0), ("int8-static", 127.0)])
def test_static_input_scale_is_the_dequant_step(tmp_path, case, qmax):
    ranges = write(case, tmp_path)
    sd = stored(tmp_path)
    got = entries(tmp_path)
    assert set(got) == set(ranges) and ranges
    for mod, (mode, _, amax) in got.items():
        s = np.float32(sd[mod + ".input_scale"].reshape(-1)[0])
        assert mode == LB_ACT_STATIC, mod
        assert np.float32(amax) == np.float32(s * np.float32(qmax)), (mod, amax, s)
        # and that is the range the package calibrated from, to the scale's bf16 rounding
        assert abs(amax / ranges[mod] - 1) < 2 ** -7, (mod, amax, ranges[mod])
    assert all(m == LB_ACT_NONE for m, _, _ in entries(tmp_path, flags=1).values())


def test_nvfp4_input_global_scale_is_a_divisor(tmp_path):
    ranges = write("nvfp4", tmp_path)
    sd = stored(tmp_path)
    got = entries(tmp_path)
    assert set(got) == set(ranges) and ranges
    for mod, (mode, _, amax) in got.items():
        g = float(sd[mod + ".input_global_scale"].reshape(-1)[0])
        assert mode == LB_ACT_LOCAL, mod
        assert abs(amax / (448.0 * 6.0 / g) - 1) < 1e-6, (mod, amax, g)
        assert abs(amax / ranges[mod] - 1) < 1e-6, (mod, amax, ranges[mod])


def test_dynamic_int8_is_per_token(tmp_path):
    write("int8-dynamic", tmp_path)
    got = entries(tmp_path)
    assert got and all(m == LB_ACT_DYNAMIC and g == LB_GRAN_TOKEN and a == 0 for m, g, a in got.values()), got
