"""lowbit plan: every figure against arithmetic written out here."""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "model"))
import model_lib as ml  # noqa: E402

GIB = 2**30


def plan(*args, check=True):
    p = subprocess.run([ml.LOWBIT, "plan", *map(str, args), "--json"], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)
    return p


def write_config(tmp_path, **fields):
    base = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}
    base.update(fields)
    base = {k: v for k, v in base.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(base))
    return path


# Parameter counts written out (d: hidden, L: layers, h/kv: heads, hd: head_dim, f: MLP width, V: vocab):
# attention per layer = d*h*hd (q) + 2*d*kv*hd (k, v) + h*hd*d (o); MLP = 3*d*f; norms = 2*d per layer + d.
LLAMA3_8B = 32 * (4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096) + 4096 + 2 * 128256 * 4096
LLAMA3_70B = 80 * (8192 * 8192 + 2 * 8192 * 1024 + 8192 * 8192 + 3 * 8192 * 28672 + 2 * 8192) + 8192 + 2 * 128256 * 8192
# DeepSeek-V3 (MLA + MoE): per layer q_a 7168x1536 + norm 1536 + q_b 1536x(128x192); kv_a 7168x(512+64) + norm 512
# + kv_b 512x(128x256); o 128x128x7168. 3 dense layers (MLP 18432), 58 MoE layers: router 7168x256, 256 routed and
# 1 shared expert of 3x7168x2048.
DS_ATTN = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168
DS_EXPERT = 3 * 7168 * 2048
DEEPSEEK_V3 = (61 * DS_ATTN + 3 * 3 * 7168 * 18432 + 58 * (7168 * 256 + 257 * DS_EXPERT) + 61 * 2 * 7168 + 7168
               + 2 * 129280 * 7168)


@pytest.mark.parametrize("preset,params", [("llama-3-8b", LLAMA3_8B), ("llama-3-70b", LLAMA3_70B),
                                           ("deepseek-v3", DEEPSEEK_V3)])
def test_parameter_counts(preset, params):
    assert plan(preset)["parameters"]["total"] == params
    assert params == {"llama-3-8b": 8_030_261_248, "llama-3-70b": 70_553_706_496,
                      "deepseek-v3": 671_026_404_352}[preset]


@pytest.mark.parametrize("preset,params,norms", [
    ("llama-3-8b", LLAMA3_8B, 32 * 2 * 4096 + 4096),
    ("llama-3-70b", LLAMA3_70B, 80 * 2 * 8192 + 8192),
    ("deepseek-v3", DEEPSEEK_V3, 61 * 2 * 7168 + 7168 + 61 * (1536 + 512) + 58 * 7168 * 256),  # + MLA norms, routers
])
@pytest.mark.parametrize("spec,bits", [("bf16", 16), ("int8:tensor", 8), ("int4:tensor", 4)])
def test_weight_memory_at_16_8_4_bits(preset, params, norms, spec, bits):
    # every matrix (embedding and head too) at `bits`; norms and routers stay 16-bit; a per-tensor scale is
    # 4 bytes per matrix, which is below the tolerance
    want = (params - norms) * bits / 8 + norms * 2
    got = plan(preset, "--weights", spec, "--quantize-embeddings", "--gpu", "b200", "--gpus", 8)["weights"]["bytes"]
    assert got == pytest.approx(want, rel=1e-6)
    # the rule of thumb: GB ~ billions x bits / 8 (within the 16-bit norms' share)
    assert got / 1e9 == pytest.approx(params / 1e9 * bits / 8, rel=3e-3)


def test_weight_table_counts_scales():
    w = plan("llama-3-8b")["weights"]["table"]
    by = {r["spec"]: r for r in w}
    assert by["bf16"]["bits_per_weight"] == 16
    assert by["int4:g128:scale=fp16"]["bits_per_weight"] == pytest.approx(4 + 16 / 128)   # 4.125
    assert by["int4:g32:scale=fp16"]["bits_per_weight"] == pytest.approx(4 + 16 / 32)     # 4.5
    assert by["mxfp4"]["bits_per_weight"] == pytest.approx(4 + 8 / 32)                    # 4.25
    assert by["nvfp4"]["bits_per_weight"] == pytest.approx(4 + 8 / 16, rel=1e-6)          # 4.5 + a tensor scale
    # per-channel fp32 scales: 32 bits per row of 4096 or 14336 inputs
    assert 8 < by["int8:channel"]["bits_per_weight"] < 8 + 32 / 4096 + 1e-9


@pytest.mark.parametrize("kv,bytes_per_elem", [("bf16", 2), ("fp8_e4m3", 1)])
def test_kv_bytes_per_token_llama3_8b(kv, bytes_per_elem):
    # 2 (K and V) x 32 layers x 8 KV heads x head_dim 128 x bytes
    out = plan("llama-3-8b", "--kv", kv, "--ctx", 8192)["kv"]
    assert out["bytes_per_token"] == 2 * 32 * 8 * 128 * bytes_per_elem  # 131072 and 65536
    assert out["bytes_per_sequence"] == 2 * 32 * 8 * 128 * bytes_per_elem * 8192


def test_kv_int8_per_head_scales():
    # int8 with one fp16 scale per token and head: (8 x 128 + 16) / 128 bits per element
    out = plan("llama-3-8b", "--kv", "int8")["kv"]
    assert out["bits_per_element"] == pytest.approx((8 * 128 + 16) / 128)
    assert out["bytes_per_token"] == pytest.approx(2 * 32 * 8 * (128 + 2))


def test_concurrency_on_h100():
    # H100 SXM: 80 GiB. 10% reserve. Llama-3-8B in bf16: 2 bytes per parameter.
    # KV in bf16 at 8192 tokens: 131072 x 8192 = 1 GiB per sequence.
    out = plan("llama-3-8b", "--gpu", "h100-sxm", "--ctx", 8192)
    mem = 80 * GIB
    free = mem - 0.1 * mem - 2 * LLAMA3_8B           # 61,248,888,832 bytes
    assert out["memory"]["for_kv"] == pytest.approx(free)
    assert out["memory"]["max_batch"] == int(free // GIB) == 57


def test_decode_and_prefill_bounds():
    # batch 1, bf16, H100 SXM (3.35 TB/s): a step reads every matrix and the untied head (the embedding only one
    # row), the norms, and one sequence's KV; tokens/s <= bandwidth / bytes.
    out = plan("llama-3-8b", "--gpu", "h100-sxm", "--ctx", 4096)
    emb = 128256 * 4096
    step = 2 * (LLAMA3_8B - emb) + 2 * 4096 + 131072 * 4096
    d = out["decode"]["batch_1"]
    assert d["bytes"] == pytest.approx(step)
    assert d["tokens_per_s"] == pytest.approx(3.35e12 / step)
    assert d["bound"] == "memory"
    # prefill: 2 x (params - embedding) x tokens + attention 2 x heads x (qk + v dims) x layers x t(t+1)/2
    p = out["prefill"]
    flops = 2 * (LLAMA3_8B - emb) * 4096 + 2 * 32 * (128 + 128) * 32 * 4096 * 4097 / 2
    assert p["flops"] == pytest.approx(flops)
    assert p["compute_s"] == pytest.approx(flops / 989.4e12)
    assert p["bound"] == "compute"
    # FP8 tensor cores halve the compute time
    p8 = plan("llama-3-8b", "--gpu", "h100-sxm", "--ctx", 4096, "--compute", "fp8")["prefill"]
    assert p8["compute_s"] == pytest.approx(flops / 1978.9e12)


def test_moe_active_parameters_mixtral():
    # 32 layers x (8 - 2) idle experts x 3 x 4096 x 14336 are not used per token
    out = plan("mixtral-8x7b")["parameters"]
    assert out["total"] == 46_702_792_704
    assert out["active"] == 46_702_792_704 - 32 * 6 * 3 * 4096 * 14336 == 12_879_925_248


def test_moe_config_fields(tmp_path):
    cfg = write_config(tmp_path, model_type="qwen3_moe", num_experts=128, num_experts_per_tok=8,
                       moe_intermediate_size=768, intermediate_size=6144, hidden_size=2048, num_hidden_layers=48,
                       num_attention_heads=32, num_key_value_heads=4, head_dim=128, vocab_size=151936)
    out = plan(cfg)["parameters"]
    attn = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128  # q, k, v, o, q/k norms
    per_layer = attn + 2048 * 128 + 128 * 3 * 2048 * 768 + 2 * 2048
    assert out["total"] == 48 * per_layer + 2048 + 2 * 151936 * 2048
    assert out["active"] == out["total"] - 48 * 120 * 3 * 2048 * 768


@pytest.mark.parametrize("fields", [{"full_attention_interval": 4},
                                    {"layer_types": ["linear_attention"] * 3 * 8 + ["full_attention"] * 8}])
def test_hybrid_quarter_of_layers_hold_kv(tmp_path, fields):
    out = plan(write_config(tmp_path, **fields), "--ctx", 1000)
    assert out["shape"]["full_attention_layers"] == 8
    assert out["kv"]["bytes_per_token"] == 2 * 8 * 8 * 128 * 2 == 2 * 32 * 8 * 128 * 2 / 4


def test_sliding_window_layers_hold_at_most_their_window(tmp_path):
    types = ["sliding_attention", "full_attention"] * 16
    out = plan(write_config(tmp_path, layer_types=types, sliding_window=1024), "--ctx", 8192)["kv"]
    per_layer_token = 2 * 8 * 128 * 2
    assert out["bytes_per_sequence"] == per_layer_token * (16 * 8192 + 16 * 1024)


def test_checkpoint_count_matches_formula():
    out = plan(ml.SMOLLM2)
    assert out["parameters"]["total"] == out["parameters"]["counted_in_checkpoint"] == 134_515_008


def test_missing_field_is_named(tmp_path):
    p = plan(write_config(tmp_path, num_attention_heads=None), check=False)
    assert p.returncode == 1 and "num_attention_heads" in json.loads(p.stdout)["error"]["message"]
    p = subprocess.run([ml.LOWBIT, "plan", write_config(tmp_path, intermediate_size=None)], capture_output=True, text=True)
    assert p.returncode == 1 and '"intermediate_size" is missing' in p.stderr


def test_unknown_gpu_lists_known_ones():
    p = subprocess.run([ml.LOWBIT, "plan", "llama-3-8b", "--gpu", "h1000"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown GPU 'h1000'" in p.stderr and "h100-sxm" in p.stderr and "mi300x" in p.stderr


def test_model_that_does_not_fit_says_so():
    p = subprocess.run([ml.LOWBIT, "plan", "llama-3-70b", "--gpu", "rtx-4090"], capture_output=True, text=True)
    assert p.returncode == 0 and "DOES NOT FIT" in p.stdout and "concurrent sequences" not in p.stdout
    out = plan("llama-3-70b", "--gpu", "rtx-4090")
    assert out["memory"]["fits"] is False and out["memory"]["max_batch"] == 0
    assert out["decode"]["batch"] == 0


def test_overrides_and_bad_usage():
    out = plan("llama-3-8b", "--gpu-mem", "100", "--gpu-bw", "2", "--gpu-tflops", "500")
    assert out["gpu"]["memory_bytes"] == 100e9 and out["gpu"]["bandwidth_bytes_s"] == 2e12
    assert out["gpu"]["peak_flops"] == 500e12
    for args in [["llama-3-8b", "--ctx", "0"], ["llama-3-8b", "--gpus", "x"], ["llama-3-8b", "--weights", "int9"],
                 ["llama-3-8b", "--compute", "fp16"], ["no-such-model"], []]:
        p = subprocess.run([ml.LOWBIT, "plan", *args], capture_output=True, text=True)
        assert p.returncode == 2, args
    # a precision the GPU has no tensor cores for
    p = subprocess.run([ml.LOWBIT, "plan", "llama-3-8b", "--gpu", "a100-80gb-sxm", "--compute", "fp8"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "no dense FP8" in p.stderr


def test_gpu_table_is_dense_and_complete():
    gpus = {g["name"]: g for g in json.loads(subprocess.run([ml.LOWBIT, "plan", "--list", "--json"],
                                                            capture_output=True, text=True).stdout)["gpus"]}
    for name in ["a100-80gb-sxm", "h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "b200", "l40s", "mi300x", "rtx-4090"]:
        assert name in gpus
    h100 = gpus["h100-sxm"]
    assert h100["memory_bytes"] == 80 * GIB and h100["bandwidth_bytes_s"] == 3.35e12
    assert h100["bf16_flops"] == 989.4e12 and h100["fp8_flops"] == 1978.9e12  # dense: half the datasheet's sparse
