"""Quantized checkpoints written by the compressed-tensors package itself.

A tiny random Llama is built with transformers, quantization is applied with
compressed-tensors' own lifecycle (apply_quantization_config), the weight
scales are computed with its own calculate_qparams / generate_gparam from a
min-max of each weight (what llm-compressor's memoryless_minmax observer
does), and the model is compressed and saved by ModelCompressor. Nothing in
these files is written by lowbit.

decompressed(dir) is the package's own decompression of each module
(BaseCompressor.decompress on the stored tensors), the oracle lowbit's
reader is compared against.
"""
import json
import math
import os

import torch
from compressed_tensors.compressors import BaseCompressor, ModelCompressor
from compressed_tensors.quantization import (
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    QuantizationStrategy,
    apply_quantization_config,
    preset_name_to_scheme,
)
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam
from safetensors.torch import load_file

# scheme name -> (preset or QuantizationScheme kwargs, model dtype)
CASES = {
    "fp8-channel": ("FP8_DYNAMIC", torch.bfloat16),     # float-quantized, weight scale [out, 1]
    "fp8-tensor": ("FP8", torch.float16),               # float-quantized, per-tensor + static input scale
    "fp8-block": ("FP8_BLOCK", torch.bfloat16),         # float-quantized, 128x128 blocks
    "fp8-block-partial": ("FP8_BLOCK", torch.float16),  # 320-wide MLP: partial blocks at the edges
    "int8": ("W8A8", torch.bfloat16),                   # int-quantized, per channel
    "w4a16-g32": ("W4A16", torch.bfloat16),             # pack-quantized sym, group 32 (group size replaced)
    "w4a16-g128": ("W4A16", torch.float32),             # pack-quantized sym, group 128
    "w4a16-asym-g32": ("W4A16_ASYM", torch.bfloat16),   # pack-quantized asym (packed zero points)
    "w3a16-g32": ("W3A16", torch.bfloat16),             # 3-bit dense bit stream (straddles words)
    "w8a16": ("W8A16", torch.bfloat16),
    "nvfp4": ("NVFP4", torch.bfloat16),
    "nvfp4a16": ("NVFP4A16", torch.bfloat16),
    "mxfp4": ("MXFP4A16", torch.bfloat16),
    "mxfp8": ("MXFP8A16", torch.bfloat16),
    "naive-fp8": ("naive", torch.bfloat16),             # FP8 weight-only: naive-quantized
}

# model shapes other than tiny_llama's defaults
SHAPES = {"fp8-block-partial": {"intermediate_size": 320}}

GROUP = {"w4a16-g32": 32, "w4a16-g128": 128, "w4a16-asym-g32": 32, "w3a16-g32": 32}


def tiny_llama(dtype, seed=0, intermediate_size=384):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=320, hidden_size=256, intermediate_size=intermediate_size, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rms_norm_eps=1e-5, tie_word_embeddings=False,
                      architectures=["LlamaForCausalLM"])
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # a spread of magnitudes per row, so scales differ
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.mul_(torch.exp(torch.randn(p.shape[0], 1) * 0.5))
    return model.to(dtype).eval()


def scheme_for(case):
    preset, _ = CASES[case]
    if preset == "naive":
        w = QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy="channel")
        return QuantizationScheme(targets=["Linear"], weights=w)
    s = preset_name_to_scheme(preset, ["Linear"])
    if case in GROUP:
        s.weights.group_size = GROUP[case]
    return s


def _minmax(w, args):
    s = args.strategy
    if s == QuantizationStrategy.TENSOR:
        return w.amin().reshape(1), w.amax().reshape(1)
    if s == QuantizationStrategy.CHANNEL:
        return w.amin(1, keepdim=True), w.amax(1, keepdim=True)
    if s in (QuantizationStrategy.GROUP, QuantizationStrategy.TENSOR_GROUP):
        g = w.reshape(w.shape[0], -1, args.group_size)
        return g.amin(-1), g.amax(-1)
    if s == QuantizationStrategy.BLOCK:
        bh, bw = args.block_structure
        r, c = math.ceil(w.shape[0] / bh), math.ceil(w.shape[1] / bw)
        p = torch.nn.functional.pad(w, (0, c * bw - w.shape[1], 0, r * bh - w.shape[0]))
        b = p.reshape(r, bh, c, bw).transpose(1, 2)
        return b.amin((-1, -2)), b.amax((-1, -2))
    raise ValueError(s)


def calibrate_weights(model):
    """Weight scales from each weight's min/max, with the package's own formulas."""
    for name, m in model.named_modules():
        scheme = getattr(m, "quantization_scheme", None)
        if scheme is None or scheme.weights is None:
            continue
        args = scheme.weights
        w = m.weight.data.float()
        lo, hi = _minmax(w, args)
        gs = None
        if args.strategy == QuantizationStrategy.TENSOR_GROUP:
            gs = generate_gparam(w.amin(), w.amax())
            m.weight_global_scale.data.copy_(gs)
        scale, zp = calculate_qparams(lo, hi, args, global_scale=gs)
        m.weight_scale.data.copy_(scale.reshape(m.weight_scale.shape).to(m.weight_scale.dtype))
        if hasattr(m, "weight_zero_point"):
            m.weight_zero_point.data.copy_(zp.reshape(m.weight_zero_point.shape).to(m.weight_zero_point.dtype))
        if hasattr(m, "input_scale") and m.input_scale.numel() == 1:  # static input scale: a plausible value
            m.input_scale.data.fill_(0.02)
        if hasattr(m, "input_global_scale"):
            m.input_global_scale.data.fill_(448.0 * 6.0 / 4.0)


def write(case, out_dir, seed=0, max_shard_size=None):
    """Writes the case's checkpoint; returns the dense model (before quantization)."""
    _, dtype = CASES[case]
    model = tiny_llama(dtype, seed, **SHAPES.get(case, {}))
    dense = {k: v.clone() for k, v in model.state_dict().items()}
    qcfg = QuantizationConfig(config_groups={"group_0": scheme_for(case)}, ignore=["lm_head"])
    apply_quantization_config(model, qcfg)
    calibrate_weights(model)
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    if max_shard_size:
        model.save_pretrained(out_dir, max_shard_size=max_shard_size)
    else:
        model.save_pretrained(out_dir)
    compressor.update_config(out_dir)
    return dense


def decompressed(out_dir):
    """{module.weight: fp32 tensor} as the package decompresses each module."""
    with open(os.path.join(out_dir, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    config = QuantizationConfig.model_validate(qc)
    sd = {}
    for f in sorted(os.listdir(out_dir)):
        if f.endswith(".safetensors"):
            sd.update(load_file(os.path.join(out_dir, f)))
    modules = sorted({k.rsplit(".", 1)[0] for k in sd if k.endswith(("weight_scale", "weight_packed"))})
    out = {}
    for mod in modules:
        group = next(g for g in config.config_groups.values()
                     if any(t == "Linear" or t == mod or (t.startswith("re:") and __import__("re").match(t[3:], mod))
                            for t in g.targets))
        fmt = group.format or config.format
        local = {k[len(mod) + 1:]: v for k, v in sd.items() if k.startswith(mod + ".") and "." not in k[len(mod) + 1:]}
        dec = BaseCompressor.get_value_from_registry(fmt).decompress(local, group)
        out[mod + ".weight"] = dec["weight"].float()
    return out
