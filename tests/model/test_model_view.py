"""The model view against the reference readers: SmolLM2's GGUF read by
the gguf package, llama2.c's stories260K parsed by offsets here, and the
canonical naming."""
import ctypes
import json
import os
import struct
import subprocess
import sys

import gguf
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import internal_lib  # noqa: E402
import model_lib as ml  # noqa: E402

needs_smollm2 = pytest.mark.skipif(not ml.SMOLLM2.exists(), reason="SmolLM2 not fetched (make test fetches it)")


@pytest.fixture(scope="module")
def smol():
    with ml.Model(ml.SMOLLM2) as m:
        yield m, gguf.GGUFReader(str(ml.SMOLLM2))


@needs_smollm2
def test_gguf_tensors_names_shapes_types_bytes(smol):
    m, r = smol
    assert len(m) == len(r.tensors) == 272
    for t, ref in zip(m.tensors(), r.tensors):
        assert t.file_name.decode() == ref.name
        assert ml.shape(t) == tuple(int(d) for d in reversed(ref.shape.tolist()))  # ne[0] innermost
        assert ml.DTYPES[t.dtype] == ref.tensor_type.name.lower()
        assert t.n_elements == ref.n_elements and t.n_bytes == ref.n_bytes
        assert m.raw(t) == ref.data.tobytes()


@needs_smollm2
def test_gguf_every_tensor_dequantizes_like_the_gguf_package(smol):
    m, r = smol
    for t, ref in zip(m.tensors(), r.tensors):
        want = gguf.quants.dequantize(ref.data, ref.tensor_type).reshape(-1)
        got = m.values(t).reshape(-1)
        assert np.array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32)), ref.name


@needs_smollm2
def test_gguf_architecture_from_metadata(smol):
    m, r = smol
    kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.")}
    a = m.arch
    assert a.name == b"llama"
    assert (a.n_layers, a.dim, a.hidden_dim) == (kv["llama.block_count"], kv["llama.embedding_length"],
                                               kv["llama.feed_forward_length"])
    assert (a.n_heads, a.n_kv_heads, a.head_dim) == (9, 3, 64)
    assert a.vocab_size == kv["llama.vocab_size"] == 49152 and a.max_seq_len == 8192
    assert a.rope_theta == kv["llama.rope.freq_base"] and a.norm_eps == np.float32(1e-5)
    assert a.tied_embeddings == 1  # no output.weight in the file
    assert a.rope_layout == 1      # llama.cpp's llama family: adjacent pairs


@needs_smollm2
def test_inspect_json_matches_numpy_statistics(smol):
    m, r = smol
    out = ml.run_json("inspect", ml.SMOLLM2, "--json")
    assert out["kind"] == "gguf" and out["parameters"] == sum(int(t.n_elements) for t in r.tensors)
    assert out["bytes"] == sum(int(t.n_bytes) for t in r.tensors)
    by_name = {t["file_name"]: t for t in out["tensors"]}
    for ref in r.tensors[:12]:
        x = gguf.quants.dequantize(ref.data, ref.tensor_type).astype(np.float64)
        x = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(1, -1)
        t = by_name[ref.name]
        sd = x.std()
        row_max = np.sort(np.abs(x).max(axis=1))
        n = len(row_max)
        median = row_max[n // 2] if n % 2 else (row_max[n // 2 - 1] + row_max[n // 2]) / 2
        assert t["absmax"] == pytest.approx(np.abs(x).max(), rel=1e-12)
        assert t["std"] == pytest.approx(sd, rel=1e-9)
        assert t["kurtosis"] == pytest.approx(((x - x.mean()) ** 4).mean() / sd**4, rel=1e-9)
        assert t["outlier_ratio"] == pytest.approx(row_max[-1] / median, rel=1e-12)
        assert t["beyond_6std"] == int((np.abs(x - x.mean()) > 6 * sd).sum())
        assert t["shape"] == [int(d) for d in reversed(ref.shape.tolist())]


def test_llama2c_layers_are_the_files_arrays():
    blob = ml.STORIES.read_bytes()
    dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack("<7i", blob[:28])
    f = np.frombuffer(blob, dtype="<f4", offset=28)
    hs = dim // heads
    sizes = [("tok", vocab * dim), ("rms_att", layers * dim), ("wq", layers * dim * dim),
             ("wk", layers * dim * kv_heads * hs), ("wv", layers * dim * kv_heads * hs), ("wo", layers * dim * dim),
             ("rms_ffn", layers * dim), ("w1", layers * hidden * dim), ("w2", layers * dim * hidden),
             ("w3", layers * hidden * dim), ("rms_final", dim)]
    arrays, at = {}, 0
    for name, n in sizes:
        arrays[name], at = f[at:at + n], at + n
    assert at + 2 * seq * hs // 2 == len(f)  # the legacy rotary tables end the file; vocab > 0: shared head
    with ml.Model(ml.STORIES) as m:
        a = m.arch
        assert (a.dim, a.hidden_dim, a.n_layers, a.n_heads, a.n_kv_heads, a.vocab_size, a.max_seq_len) == \
            (dim, hidden, layers, heads, kv_heads, vocab, seq)
        assert a.tied_embeddings == 1 and a.rope_layout == 1
        got = {t.name.decode(): m.values(t) for t in m.tensors()}
        assert np.array_equal(got["model.embed_tokens.weight"], arrays["tok"].reshape(vocab, dim))
        assert np.array_equal(got["model.norm.weight"], arrays["rms_final"])
        for l in range(layers):
            p = f"model.layers.{l}."
            assert np.array_equal(got[p + "self_attn.q_proj.weight"], arrays["wq"].reshape(layers, dim, dim)[l])
            kvd = kv_heads * hs
            assert np.array_equal(got[p + "self_attn.k_proj.weight"], arrays["wk"].reshape(layers, kvd, dim)[l])
            assert np.array_equal(got[p + "self_attn.v_proj.weight"], arrays["wv"].reshape(layers, kvd, dim)[l])
            assert np.array_equal(got[p + "self_attn.o_proj.weight"], arrays["wo"].reshape(layers, dim, dim)[l])
            assert np.array_equal(got[p + "mlp.gate_proj.weight"], arrays["w1"].reshape(layers, hidden, dim)[l])
            assert np.array_equal(got[p + "mlp.down_proj.weight"], arrays["w2"].reshape(layers, dim, hidden)[l])
            assert np.array_equal(got[p + "mlp.up_proj.weight"], arrays["w3"].reshape(layers, hidden, dim)[l])
            assert np.array_equal(got[p + "input_layernorm.weight"], arrays["rms_att"].reshape(layers, dim)[l])
            assert np.array_equal(got[p + "post_attention_layernorm.weight"], arrays["rms_ffn"].reshape(layers, dim)[l])
        assert len(got) == 2 + 9 * layers


@pytest.mark.parametrize("gguf_name,hf", [
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
    ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"),
    ("blk.17.attn_k.bias", "model.layers.17.self_attn.k_proj.bias"),
    ("blk.3.attn_v.weight", "model.layers.3.self_attn.v_proj.weight"),
    ("blk.3.attn_output.weight", "model.layers.3.self_attn.o_proj.weight"),
    ("blk.29.attn_q_norm.weight", "model.layers.29.self_attn.q_norm.weight"),
    ("blk.2.attn_k_norm.weight", "model.layers.2.self_attn.k_norm.weight"),
    ("blk.5.attn_norm.weight", "model.layers.5.input_layernorm.weight"),
    ("blk.5.ffn_norm.weight", "model.layers.5.post_attention_layernorm.weight"),
    ("blk.120.ffn_gate.weight", "model.layers.120.mlp.gate_proj.weight"),
    ("blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight"),
    ("blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"),
])
def test_names_map_both_ways(gguf_name, hf):
    assert ml.name_from_gguf(gguf_name) == (hf, 1)
    assert ml.name_to_gguf(hf) == (gguf_name, 1)


@pytest.mark.parametrize("name", ["rope_freqs.weight", "blk.01.attn_q.weight", "blk.x.attn_q.weight",
                                  "blk.3.unknown.weight", "model.layers.3.mlp.experts.0.weight", ""])
def test_unmapped_names_pass_through(name):
    assert ml.name_from_gguf(name) == (name, 0)
    assert ml.name_to_gguf(name) == (name, 0)


def test_llama2c_tokenizer_file_reads_like_its_format():
    import ctypes

    class Vocab(ctypes.Structure):
        _fields_ = [("n", ctypes.c_uint32), ("max_token_length", ctypes.c_uint32),
                    ("scores", ctypes.POINTER(ctypes.c_float)), ("tokens", ctypes.POINTER(ctypes.c_char_p)),
                    ("lengths", ctypes.POINTER(ctypes.c_uint32))]

    blob = (ml.ROOT / "models/tok512.bin").read_bytes()
    want, at = [], 4
    (maxlen,) = struct.unpack_from("<i", blob, 0)
    while at < len(blob):
        score, n = struct.unpack_from("<fi", blob, at)
        want.append((score, blob[at + 8:at + 8 + n]))
        at += 8 + n
    assert len(want) == 512 and maxlen == 7
    lib = internal_lib.load()  # the internals are not exported by liblowbit.so
    lib.lb_last_error.restype = ctypes.c_char_p
    parse = lib.lb__l2c_vocab_parse
    parse.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_char_p, ctypes.POINTER(Vocab)]
    lib.lb__l2c_vocab_free.argtypes = [ctypes.POINTER(Vocab)]
    lib.lb__l2c_vocab_free.restype = None
    v = Vocab()
    assert parse(blob, len(blob), 512, b"tok512.bin", ctypes.byref(v)) == 0
    try:
        assert v.n == 512 and v.max_token_length == 7
        for i, (score, tok) in enumerate(want):
            assert v.scores[i] == score and v.lengths[i] == len(tok)
            assert ctypes.string_at(v.tokens[i], v.lengths[i]) == tok
        assert ctypes.string_at(v.tokens[1], v.lengths[1]) == b"\n<s>\n"
    finally:
        lib.lb__l2c_vocab_free(ctypes.byref(v))
    # a vocabulary of another size than the model's does not fit the file
    assert parse(blob, len(blob), 511, b"tok512.bin", ctypes.byref(v)) == 6
    assert b"follow the 511 tokens" in lib.lb_last_error()
    assert parse(blob, len(blob), 513, b"tok512.bin", ctypes.byref(v)) == 6
    assert b"cut off by the end of the file" in lib.lb_last_error()


@pytest.mark.parametrize("path", [ml.STORIES, ml.SMOLLM2])
def test_param_count_is_every_tensor_once(path):
    if not path.exists():
        pytest.skip(f"{path} not fetched")
    ml.lib.lb_model_param_count.restype = ctypes.c_uint64
    ml.lib.lb_model_param_count.argtypes = [ctypes.c_void_p]
    with ml.Model(path) as m:
        want = sum(t.n_elements for t in m.tensors())
        assert ml.lib.lb_model_param_count(m.h) == want > 0
    assert ml.lib.lb_model_param_count(None) == 0
    info = json.loads(subprocess.run([ml.LOWBIT, "inspect", str(path), "--json"], capture_output=True,
                                     check=True).stdout)
    assert info["parameters"] == want
