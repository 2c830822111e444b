"""Reference checkpoints written by nvidia-modelopt itself on CPU: a tiny
Llama (bf16, seeded) quantized with mtq.quantize under one of ModelOpt's
configs (FP8 KV cache added), then export_hf_checkpoint. What lowbit's
modelopt writer must match is read from these: file set, config keys,
tensor names, dtypes, shapes and (for the same weights) bytes.

Returned per config: the export directory, the original bf16 weights
(before quantization, as fp32 numpy) and each quantized module's
calibrated input amax."""
import contextlib
import copy
import io
import warnings

import numpy as np

CONFIGS = {
    "FP8": "FP8_DEFAULT_CFG",
    "FP8_PER_CHANNEL_PER_TOKEN": "FP8_PER_CHANNEL_PER_TOKEN_CFG",
    "NVFP4": "NVFP4_DEFAULT_CFG",
    "W4A16_NVFP4": "W4A16_NVFP4_CFG",
    "MXFP8": "MXFP8_DEFAULT_CFG",
    "MIXED_PRECISION": None,  # FP8 attention, NVFP4 MLP
}

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, max_position_embeddings=64)


def tiny_llama(seed=0, dtype="bfloat16"):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    c = LlamaConfig(**TINY, architectures=["LlamaForCausalLM"], tie_word_embeddings=False)
    return LlamaForCausalLM(c).to(getattr(torch, dtype))


def _config(algo):
    import modelopt.torch.quantization as mtq

    if algo == "MIXED_PRECISION":
        qc = copy.deepcopy(mtq.FP8_DEFAULT_CFG)
        for e in mtq.NVFP4_DEFAULT_CFG["quant_cfg"]:
            if e.get("quantizer_name") in ("*weight_quantizer", "*input_quantizer"):
                e = copy.deepcopy(e)
                e["quantizer_name"] = "*mlp*" + e["quantizer_name"][1:]
                qc["quant_cfg"].append(e)
    else:
        qc = copy.deepcopy(getattr(mtq, CONFIGS[algo]))
    # FP8 KV cache, but not with MXFP8: ModelOpt 0.47's MXFP8 config leaves
    # the k/v quantizers without a range, and its checkpoint then says
    # kv_cache_quant_algo FP8 with no k_scale/v_scale tensors at all
    if algo != "MXFP8":
        qc["quant_cfg"] = list(qc["quant_cfg"]) + copy.deepcopy(mtq.FP8_KV_CFG["quant_cfg"])
    return qc


def export(algo, out_dir, seed=0, dtype="bfloat16", original_dir=None):
    """Writes ModelOpt's checkpoint of the tiny Llama (in dtype) under
    `algo` to out_dir (and the model before quantization to
    original_dir); returns (weights, input_amax, kv_amax). The bytes
    of quantized weights are comparable only for an fp32 model: for a bf16
    one ModelOpt divides by the FP8 scale in bf16 (the weight's dtype), a
    double rounding lowbit does not do (it divides in fp32)."""
    import torch
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint

    if original_dir is not None:  # the model before quantization (the same seed), for lowbit to quantize
        tiny_llama(seed, dtype).save_pretrained(str(original_dir))
    m = tiny_llama(seed, dtype)
    weights = {k: v.float().numpy().copy() for k, v in m.state_dict().items()}
    gen = torch.Generator().manual_seed(seed + 1)

    def forward(model):
        for _ in range(2):
            model(torch.randint(0, TINY["vocab_size"], (1, 16), generator=gen))

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        mtq.quantize(m, _config(algo), forward)
        input_amax, kv_amax = {}, {}
        for name, mod in m.named_modules():
            q = getattr(mod, "input_quantizer", None)
            if q is not None and q.is_enabled and getattr(q, "amax", None) is not None:
                input_amax[name] = float(q.amax.float().max())
            for kv in ("k_bmm_quantizer", "v_bmm_quantizer"):
                q = getattr(mod, kv, None)
                if q is not None and q.is_enabled and getattr(q, "amax", None) is not None:
                    kv_amax[f"{name}.{kv[0]}"] = float(q.amax.float().max())
        export_hf_checkpoint(m, export_dir=str(out_dir))
    return weights, input_amax, kv_amax


def read_tensors(path):
    """name -> torch tensor of every tensor of a safetensors file."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def as_numpy_bytes(t):
    """The raw little-endian bytes of a torch tensor (fp8 included)."""
    import torch

    if t.dtype == torch.float8_e4m3fn:
        t = t.view(torch.uint8)
    return np.frombuffer(t.contiguous().numpy().tobytes(), dtype=np.uint8)


def torch_bytes(t):
    """A torch tensor's raw bytes as a uint8 tensor (for exact comparison)."""
    import torch

    return t.contiguous().view(torch.uint8).reshape(-1) if t.dim() else t.reshape(1).view(torch.uint8)
