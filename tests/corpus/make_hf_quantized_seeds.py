"""Writes the libFuzzer seeds of fuzz_hf_quantized (`make fuzz`): a 4-byte
little-endian length, config.json, then model.safetensors. Each is a small
valid checkpoint whose activation and KV-cache scales
lb_qmodel_from_checkpoint reads: compressed-tensors FP8 static inputs with
an FP8 KV cache, compressed-tensors NVFP4 "local" inputs, ModelOpt FP8 with
kv_cache_quant_algo FP8. Run: python3 tests/corpus/make_hf_quantized_seeds.py"""
import json
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parents[1] / "fuzz/seeds/fuzz_hf_quantized"
ARCH = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 32,
        "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 32}
ONE = struct.pack("<e", 1.0)


def st(tensors):
    header, off, blob = {}, 0, b""
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blob += data
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def seed(name, qc, tensors):
    cfg = json.dumps(dict(ARCH, quantization_config=qc)).encode()
    (HERE / name).write_bytes(struct.pack("<I", len(cfg)) + cfg + st(tensors))


def f32(v):
    return struct.pack("<f", v)


ARGS8 = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor", "dynamic": False}
seed("ct_fp8_static_kv.bin",
     {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
      "kv_cache_scheme": ARGS8,
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": ARGS8, "input_activations": ARGS8}}},
     {"model.layers.0.mlp.up_proj.weight": ("F8_E4M3", [32, 32], bytes([0x38]) * 1024),
      "model.layers.0.mlp.up_proj.weight_scale": ("BF16", [1], struct.pack("<H", 0x3c00)),
      "model.layers.0.mlp.up_proj.input_scale": ("BF16", [1], struct.pack("<H", 0x3c00)),
      "model.layers.0.self_attn.k_scale": ("F32", [], f32(0.25)),
      "model.layers.0.self_attn.v_scale": ("F32", [], f32(0.5)),
      "model.norm.weight": ("F16", [32], ONE * 32)})
NV = {"num_bits": 4, "type": "float", "symmetric": True, "group_size": 16, "strategy": "tensor_group"}
seed("ct_nvfp4_local.bin",
     {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": dict(NV, dynamic=False),
                                    "input_activations": dict(NV, dynamic="local")}}},
     {"model.layers.0.mlp.up_proj.weight_packed": ("U8", [32, 16], bytes(range(256)) * 2),
      "model.layers.0.mlp.up_proj.weight_scale": ("F8_E4M3", [32, 2], bytes([0x38]) * 64),
      "model.layers.0.mlp.up_proj.weight_global_scale": ("F32", [1], f32(2688.0)),
      "model.layers.0.mlp.up_proj.input_global_scale": ("F32", [1], f32(672.0)),
      "model.norm.weight": ("F16", [32], ONE * 32)})
seed("modelopt_fp8_kv.bin",
     {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "ignore": ["lm_head"]},
     {"model.layers.0.mlp.up_proj.weight": ("F8_E4M3", [32, 32], bytes([0x30]) * 1024),
      "model.layers.0.mlp.up_proj.weight_scale": ("F32", [], f32(0.01)),
      "model.layers.0.mlp.up_proj.input_scale": ("F32", [], f32(0.02)),
      "model.layers.0.self_attn.k_proj.k_scale": ("F32", [], f32(0.1)),
      "model.layers.0.self_attn.v_proj.v_scale": ("F32", [], f32(0.1)),
      "model.norm.weight": ("F16", [32], ONE * 32)})
