"""The forward pass runs only what it implements (src/io/arch_support.c):
llama, mistral, qwen2 (q/k/v biases) and qwen3 (q/k norms). Any other
general.architecture / model_type / architectures class, and any feature the
layer loop does not compute (experts, sliding windows, other activations or
norms, rope scalings, softcaps, scaled embeddings, parallel residuals,
tensors it would not read), makes `lowbit ppl` fail with a message naming it,
while inspect, error and convert still read the file. And lb_runner_new
bounds what it allocates by the tensors the file holds: huge metadata fails
fast, without a large allocation.

The models are stories260K's weights, written as a GGUF (llama.cpp names,
adjacent rotary pairs, as llama2.c has them) or as a Hugging Face directory
(lowbit convert), then relabelled."""
import json
import os
import subprocess
import sys

import gguf
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import model_lib as ml  # noqa: E402

TOK = ml.ROOT / "models/tok512.bin"
TEXT = ml.ROOT / "models/tinystories-valid-excerpt.txt"
SUPPORTED = "llama (tied or untied head, Llama-3 rope scaling, q/k/v biases), mistral (full attention), " \
            "qwen2 (q/k/v biases), qwen3 (q/k RMSNorm)"


def stories_arrays():
    with ml.Model(ml.STORIES) as m:
        a = m.arch
        meta = {"block_count": a.n_layers, "embedding_length": a.dim, "feed_forward_length": a.hidden_dim,
                "attention.head_count": a.n_heads, "attention.head_count_kv": a.n_kv_heads,
                "context_length": a.max_seq_len, "vocab_size": a.vocab_size, "rope.dimension_count": a.head_dim}
        return meta, {ml.name_to_gguf(t.name.decode())[0]: m.values(t).copy() for t in m.tensors()}


META, ARRAYS = stories_arrays()


def write_gguf(path, arch="llama", meta=None, extra_tensors=None, drop=()):
    """stories260K as a GGUF of architecture `arch` (its keys under that
    prefix); meta overrides or adds {arch}.* keys (a key with a dot-free
    prefix of its own, like general.x, is written as it is)."""
    w = gguf.GGUFWriter(str(path), arch)
    keys = {**META, **(meta or {})}
    for k, v in keys.items():
        key = k if k.startswith("general.") else f"{arch}.{k}"
        if isinstance(v, bool):
            w.add_bool(key, v)
        elif isinstance(v, int):
            w.add_uint64(key, v) if v >= 2**32 else w.add_uint32(key, v)
        elif isinstance(v, float):
            w.add_float32(key, v)
        else:
            w.add_string(key, v)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    for name, v in {**ARRAYS, **(extra_tensors or {})}.items():
        if name not in drop:
            w.add_tensor(name, np.ascontiguousarray(v, dtype=np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return path


@pytest.fixture(scope="module")
def hf_base(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf") / "stories"
    ml.run("convert", ml.STORIES, d)
    return d


def hf_copy(base, dst, extra_tensors=None, **config):
    """The converted directory with config.json members replaced (None removes one)."""
    from safetensors.numpy import load_file, save_file
    dst.mkdir()
    cfg = json.loads((base / "config.json").read_text())
    for k, v in config.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (dst / "config.json").write_text(json.dumps(cfg))
    tensors = load_file(str(base / "model.safetensors"))
    tensors.update(extra_tensors or {})
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def ppl(model, ctx=64, *extra):
    return ml.run("ppl", model, "--tokenizer", TOK, "--text", TEXT, "--ctx", ctx, "--chunks", 1, *extra, check=False)


def assert_refused(model, *phrases, ctx=64):
    code, out, err = ppl(model, ctx)
    assert code == 1 and out == "", (code, out, err)
    for p in phrases:
        assert p in err, err
    return err


def assert_still_read(model, tmp_path):
    """inspect, error and convert (quantizing too) do not run the model: any architecture is fine."""
    ml.run("inspect", model)
    ml.run("error", model, "--spec", "int8:channel")
    ml.run("convert", model, tmp_path / "copy.safetensors")
    ml.run("convert", model, tmp_path / "q8.gguf", "--dtype", "q8_0")
    with ml.Model(tmp_path / "q8.gguf") as q:
        assert any(t.dtype == ml.DTYPES.index("q8_0") for t in q.tensors())


# ------------------------------------------------------------- what runs

def test_the_stories_gguf_and_directory_run(tmp_path, hf_base):
    # the relabelled files below differ from these only in the label or key
    for model in [ml.STORIES, write_gguf(tmp_path / "llama.gguf"), hf_base]:
        code, out, err = ppl(model, 64, "--json")
        assert code == 0, err
        assert 1 < json.loads(out)["ppl"] < 100


@pytest.mark.skipif(not ml.SMOLLM2.exists(), reason="SmolLM2 absent (make test fetches it)")
def test_smollm2_runs_and_relabelled_gemma_is_refused(tmp_path):
    code, out, err = ml.run("ppl", ml.SMOLLM2, "--text", TEXT, "--ctx", 64, "--chunks", 1, "--json", check=False)
    assert code == 0 and 1 < json.loads(out)["ppl"] < 100, err
    # the issue's case: general.architecture and every llama.* key renamed
    # gemma (same length, so a byte patch of the header keeps the file valid)
    data = ml.SMOLLM2.read_bytes()
    header_end = 4 << 20
    head = data[:header_end].replace(b"\x05\x00\x00\x00\x00\x00\x00\x00llama", b"\x05\x00\x00\x00\x00\x00\x00\x00gemma")
    head = head.replace(b"\x00llama.", b"\x00gemma.")
    gemma = tmp_path / "gemma.gguf"
    gemma.write_bytes(head + data[header_end:])
    r = gguf.GGUFReader(str(gemma))
    assert bytes(r.fields["general.architecture"].parts[-1]) == b"gemma" and "gemma.block_count" in r.fields
    code, out, err = ml.run("ppl", gemma, "--text", TEXT, "--ctx", 64, "--chunks", 1, check=False)
    assert code == 1 and out == "" and "architecture 'gemma' is not one the forward pass implements" in err, err
    assert SUPPORTED in err
    ml.run("inspect", gemma)


# --------------------------------------------------- other architectures

@pytest.mark.parametrize("arch", ["gemma", "bert", "phi3", "mixtral", "qwen2moe", "llama4"])
def test_other_gguf_architectures_are_refused_but_still_read(arch, tmp_path):
    model = write_gguf(tmp_path / f"{arch}.gguf", arch)
    err = assert_refused(model, f"architecture '{arch}' is not one the forward pass implements", SUPPORTED)
    assert "inspect, error and convert read any architecture" in err
    assert_still_read(model, tmp_path)


@pytest.mark.parametrize("model_type,cls", [("gemma", "GemmaForCausalLM"), ("phi3", "Phi3ForCausalLM"),
                                            ("mixtral", "MixtralForCausalLM"), ("bert", "BertModel"),
                                            ("gemma2", None)])
def test_other_config_model_types_are_refused_but_still_read(model_type, cls, hf_base, tmp_path):
    model = hf_copy(hf_base, tmp_path / model_type, model_type=model_type, architectures=[cls] if cls else None)
    assert_refused(model, f"architecture '{model_type}' is not one the forward pass implements", SUPPORTED)
    assert_still_read(model, tmp_path)


def test_an_unknown_architectures_class_is_refused(hf_base, tmp_path):
    # model_type llama, but the class says something else runs these weights
    model = hf_copy(hf_base, tmp_path / "m", architectures=["LlamaForCausalLM", "MixtralForCausalLM"])
    assert_refused(model, "config.json architectures names 'MixtralForCausalLM'", SUPPORTED)
    model = hf_copy(hf_base, tmp_path / "cls", architectures=["LlavaForConditionalGeneration"])
    assert_refused(model, "'LlavaForConditionalGeneration'")


def test_a_config_without_model_type_is_refused(hf_base, tmp_path):
    model = hf_copy(hf_base, tmp_path / "m", model_type=None)
    assert_refused(model, "names no architecture (model_type)", SUPPORTED)


def test_qwen_labels_need_their_variant_tensors(hf_base, tmp_path):
    # stories260K has neither q/k/v biases nor q/k norms: as qwen2 or qwen3 it would run without them
    assert_refused(hf_copy(hf_base, tmp_path / "q2", model_type="qwen2", architectures=["Qwen2ForCausalLM"]),
                   "architecture qwen2 has q/k/v biases, and the model has no self_attn.q_proj.bias")
    assert_refused(write_gguf(tmp_path / "q3.gguf", "qwen3"),
                   "architecture qwen3 has q/k norms, and the model has no self_attn.q_norm.weight")


# ------------------------------------------------- unimplemented features

@pytest.mark.parametrize("key,value,phrase", [
    ("expert_count", 8, "mixture of experts (llama.expert_count = 8)"),
    ("expert_used_count", 2, "mixture of experts (llama.expert_used_count = 2)"),
    ("rope.scaling.type", "yarn", "rope scaling 'yarn' (llama.rope.scaling.type)"),
    ("rope.scaling.factor", 4.0, "linear rope scaling (llama.rope.scaling.factor = 4)"),
    ("attn_logit_softcapping", 50.0, "attention logit softcapping (llama.attn_logit_softcapping = 50)"),
    ("final_logit_softcapping", 30.0, "final logit softcapping"),
    ("embedding_scale", 12.0, "embedding scaling (llama.embedding_scale = 12)"),
    ("residual_scale", 0.22, "residual scaling"),
    ("logit_scale", 0.5, "logit scaling"),
    ("attention.layer_norm_epsilon", 1e-5, "LayerNorm (the forward pass implements RMSNorm)"),
    ("use_parallel_residual", True, "parallel attention and MLP residuals"),
    ("rope.dimension_count", 4, "rotates 4 of each head's 8 dimensions"),
])
def test_gguf_features_the_forward_pass_lacks_are_refused(key, value, phrase, tmp_path):
    model = write_gguf(tmp_path / "m.gguf", meta={key: value})
    assert_refused(model, phrase)
    assert_still_read(model, tmp_path)


def test_gguf_values_that_change_nothing_still_run(tmp_path):
    model = write_gguf(tmp_path / "m.gguf", meta={"rope.scaling.type": "none", "rope.scaling.factor": 1.0,
                                                  "expert_count": 0, "embedding_scale": 1.0})
    assert ppl(model)[0] == 0


def test_gguf_sliding_window_is_refused_past_the_window(tmp_path):
    model = write_gguf(tmp_path / "m.gguf", meta={"attention.sliding_window": 32})
    assert_refused(model, "sliding-window attention (a window of 32 positions)", "a context of 64 positions")
    # within the window full attention is the same computation
    model = write_gguf(tmp_path / "w.gguf", meta={"attention.sliding_window": 64})
    assert ppl(model, ctx=64)[0] == 0
    assert_refused(model, "a window of 64 positions", ctx=128)


@pytest.mark.parametrize("tensor,shape", [("blk.0.attn_norm.bias", (64,)), ("output_norm.bias", (64,)),
                                          ("blk.0.attn_output.bias", (64,)), ("blk.1.ffn_gate_exps.weight", (4, 172, 64)),
                                          ("blk.5.attn_q.weight", (64, 64))])
def test_gguf_tensors_the_forward_pass_would_not_read_are_refused(tensor, shape, tmp_path):
    model = write_gguf(tmp_path / "m.gguf", extra_tensors={tensor: np.zeros(shape, np.float32)})
    assert_refused(model, f"tensor '{tensor}' is not one the forward pass reads (architecture llama, 5 layers)")
    ml.run("inspect", model)


@pytest.mark.parametrize("config,phrase", [
    ({"num_local_experts": 8, "num_experts_per_tok": 2}, "mixture of experts (num_local_experts = 8)"),
    ({"num_experts": 60}, "mixture of experts (num_experts = 60)"),
    ({"hidden_act": "gelu_pytorch_tanh"}, "activation 'gelu_pytorch_tanh' (hidden_act"),
    ({"hidden_activation": "gelu"}, "activation 'gelu' (hidden_activation"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope scaling 'yarn'"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope scaling 'linear'"),
    ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope scaling 'dynamic'"),
    ({"rope_scaling": {"rope_type": "llama3", "low_freq_factor": 1.0}}, "llama3 rope scaling without a factor"),
    ({"rope_scaling": 2.0}, "rope_scaling without a rope_type"),
    ({"partial_rotary_factor": 0.5}, "partial rotary embedding (partial_rotary_factor = 0.5)"),
    ({"final_logit_softcapping": 30.0}, "logit softcapping (final_logit_softcapping = 30)"),
    ({"attn_logit_softcapping": 50.0}, "logit softcapping (attn_logit_softcapping = 50)"),
    ({"embedding_multiplier": 12.0}, "scaling (embedding_multiplier = 12)"),
    ({"scale_emb": 12}, "scaling (scale_emb = 12)"),
    ({"layer_norm_eps": 1e-5}, "LayerNorm (layer_norm_eps"),
    ({"use_parallel_residual": True}, "parallel attention and MLP residuals (use_parallel_residual)"),
    ({"mlp_bias": True}, "MLP biases (mlp_bias)"),
    ({"layer_types": ["full_attention"] * 4 + ["chunked_attention"]}, "layer type 'chunked_attention'"),
])
def test_config_features_the_forward_pass_lacks_are_refused(config, phrase, hf_base, tmp_path):
    model = hf_copy(hf_base, tmp_path / "m", **config)
    assert_refused(model, phrase, "which the forward pass does not implement (architecture llama")
    assert_still_read(model, tmp_path)


def test_config_values_that_change_nothing_still_run(hf_base, tmp_path):
    model = hf_copy(hf_base, tmp_path / "m", hidden_act="silu", rope_scaling={"rope_type": "default"},
                    partial_rotary_factor=1.0, num_local_experts=0, final_logit_softcapping=None, mlp_bias=False,
                    use_sliding_window=False, sliding_window=16)
    assert ppl(model)[0] == 0


def test_config_sliding_window(hf_base, tmp_path):
    # llama/mistral: sliding_window applies when set; Qwen only with use_sliding_window
    assert_refused(hf_copy(hf_base, tmp_path / "a", sliding_window=32), "a window of 32 positions")
    assert ppl(hf_copy(hf_base, tmp_path / "b", sliding_window=4096))[0] == 0
    assert_refused(hf_copy(hf_base, tmp_path / "c", sliding_window=32, use_sliding_window=True), "window of 32")
    assert_refused(hf_copy(hf_base, tmp_path / "d", sliding_window=32, use_sliding_window=False,
                           layer_types=["sliding_attention"] * 5), "window of 32")


@pytest.mark.parametrize("tensor", ["model.layers.0.self_attn.o_proj.bias", "model.layers.2.mlp.down_proj.bias",
                                    "model.norm.bias", "model.layers.0.input_layernorm.bias"])
def test_config_tensors_the_forward_pass_would_not_read_are_refused(tensor, hf_base, tmp_path):
    model = hf_copy(hf_base, tmp_path / "m", extra_tensors={tensor: np.zeros(64, np.float32)})
    assert_refused(model, f"tensor '{tensor}' is not one the forward pass reads")


# ------------------------------------------------------------ the library

def test_lb_runner_new_and_lb_runner_supports_refuse_through_the_api(tmp_path):
    import ctypes
    import test_forward_reference as tf
    L = tf.runner_lib()
    L.lb_runner_supports.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    UNSUPPORTED = 7

    def both(path, max_ctx):
        m, r = ctypes.c_void_p(), ctypes.c_void_p()
        assert L.lb_model_open(str(path).encode(), ctypes.byref(m)) == 0
        try:
            sup = L.lb_runner_supports(m, max_ctx)
            sup_msg = L.lb_last_error().decode()
            opts = tf.RunnerOptions(threads=1, max_ctx=max_ctx)
            new = L.lb_runner_new(m, ctypes.byref(opts), ctypes.byref(r))
            new_msg = L.lb_last_error().decode()
            if new == 0:
                L.lb_runner_free(r)
            else:
                assert not r.value and new_msg == sup_msg
            return sup, new, new_msg
        finally:
            L.lb_model_close(m)

    assert both(write_gguf(tmp_path / "llama.gguf"), 0)[:2] == (0, 0)
    sup, new, msg = both(write_gguf(tmp_path / "gemma.gguf", "gemma"), 0)
    assert sup == new == UNSUPPORTED and "architecture 'gemma'" in msg
    window = write_gguf(tmp_path / "window.gguf", meta={"attention.sliding_window": 32})
    assert both(window, 32)[:2] == (0, 0)
    sup, new, msg = both(window, 0)  # the default context: the model's 512 positions
    assert sup == new == UNSUPPORTED and "a context of 512 positions" in msg
    assert L.lb_runner_supports(None, 0) == 1  # LB_ERR_ARG


# ------------------------------------------- memory bounded by the file

MEASURE = """
import json, os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read().decode()
_, status, usage = os.wait4(p.pid, 0)
print(json.dumps([os.waitstatus_to_exitcode(status), err, usage.ru_maxrss / 1024]))
"""


def run_measured(*args):
    """Runs the CLI; returns (exit code, stderr, its peak RSS in MB). The
    CLI is started from a small Python process: a child forked from this
    one would start with this process's RSS (SmolLM2's bytes) as its peak."""
    p = subprocess.run([sys.executable, "-c", MEASURE, ml.LOWBIT, *map(str, args)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("meta,phrase", [
    ({"block_count": 2000000}, "the model has no tensor model.layers.5."),
    ({"block_count": 4294967295}, "the model has no tensor model.layers.5."),
    ({"context_length": 4294967295}, None),  # the command's --ctx, not the metadata, sizes the cache
    ({"embedding_length": 2000000000, "rope.dimension_count": 250000000}, "tensor model.embed_tokens.weight: expected shape [512, 2000000000]"),
    ({"feed_forward_length": 2000000000}, "tensor model.layers.0.mlp.gate_proj.weight: expected shape [2000000000, 64]"),
    ({"attention.head_count": 1 << 30, "attention.head_count_kv": 1 << 30, "attention.key_length": 8},
     "tensor model.layers.0.self_attn.q_proj.weight: expected shape [8589934592, 64]"),
    ({"attention.key_length": 1 << 28, "rope.dimension_count": 1 << 28},
     "tensor model.layers.0.self_attn.q_proj.weight: expected shape [2147483648, 64]"),
    ({"vocab_size": 4000000000}, "4000000000"),  # the tokenizer, loaded first, already cannot hold it
])
def test_huge_metadata_fails_fast_without_a_large_allocation(meta, phrase, tmp_path):
    model = write_gguf(tmp_path / "huge.gguf", meta=meta)
    assert model.stat().st_size < 1 << 20
    code, err, rss_mb = run_measured("ppl", model, "--tokenizer", TOK, "--text", TEXT, "--ctx", 64, "--chunks", 1)
    if phrase is None:
        assert code == 0, err
    else:
        assert code == 1 and phrase in err, err
    assert rss_mb < 200, f"peak RSS {rss_mb:.0f} MB for {meta}"
