"""lowbit convert: GGUF -> Hugging Face directory -> GGUF, checked with the
safetensors and gguf packages; dtypes; nothing left behind on failure."""
import json
import os
import sys

import gguf
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))
import model_lib as ml  # noqa: E402

needs_smollm2 = pytest.mark.skipif(not ml.SMOLLM2.exists(), reason="SmolLM2 not fetched (make test fetches it)")


def gguf_values(reader):
    """canonical name -> fp32 values in numpy order, from the gguf package"""
    out = {}
    for t in reader.tensors:
        v = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        out[ml.name_from_gguf(t.name)[0]] = v.reshape([int(d) for d in reversed(t.shape.tolist())])
    return out


@pytest.fixture(scope="module")
def r_smol():
    """The gguf package's reader of SmolLM2 (slow to build: one per module)"""
    return gguf.GGUFReader(str(ml.SMOLLM2))


@pytest.fixture(scope="module")
def smol_hf(tmp_path_factory):
    out = tmp_path_factory.mktemp("conv") / "smol-hf"
    ml.run("convert", ml.SMOLLM2, out)
    return out


@needs_smollm2
def test_gguf_to_hf_directory(smol_hf, r_smol):
    r = r_smol
    ref = gguf_values(r)
    got = load_file(str(smol_hf / "model.safetensors"))
    assert set(got) == set(ref)
    heads, kv_heads = 9, 3
    for name, want in ref.items():
        if name.endswith("q_proj.weight"):
            want = ml.permute_to_half(want, heads)      # llama.cpp stored them permuted
        elif name.endswith("k_proj.weight"):
            want = ml.permute_to_half(want, kv_heads)
        assert got[name].dtype == np.float32 and got[name].shape == want.shape, name
        assert np.array_equal(got[name].view(np.uint32), want.view(np.uint32)), name
    cfg = json.loads((smol_hf / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert (cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]) == (576, 1536, 30)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (9, 3, 64)
    assert cfg["vocab_size"] == 49152 and cfg["tie_word_embeddings"] is True
    assert cfg["rope_theta"] == 100000 and np.float32(cfg["rms_norm_eps"]) == np.float32(1e-5)


@needs_smollm2
def test_round_trip_back_to_gguf_is_bit_exact(smol_hf, r_smol, tmp_path):
    back = tmp_path / "back.gguf"
    ml.run("convert", smol_hf, back)
    r0, r1 = r_smol, gguf.GGUFReader(str(back))
    assert sorted(t.name for t in r0.tensors) == sorted(t.name for t in r1.tensors)
    v0 = gguf_values(r0)
    for t in r1.tensors:
        assert t.tensor_type == gguf.GGMLQuantizationType.F32
        v = np.asarray(t.data).reshape(-1)
        assert np.array_equal(v.view(np.uint32), v0[ml.name_from_gguf(t.name)[0]].reshape(-1).view(np.uint32))
    f = r1.fields
    assert f["general.architecture"].contents() == "llama" and f["llama.block_count"].contents() == 30
    assert f["llama.attention.head_count_kv"].contents() == 3
    # and f32 GGUF -> safetensors -> GGUF again: identical tensor bytes
    again_dir, again = tmp_path / "hf2", tmp_path / "again.gguf"
    ml.run("convert", back, again_dir)
    ml.run("convert", again_dir, again)
    r2 = gguf.GGUFReader(str(again))
    for a, b in zip(r1.tensors, r2.tensors):
        assert a.name == b.name and a.data.tobytes() == b.data.tobytes()


@needs_smollm2
def test_gguf_to_gguf_keeps_metadata_and_tokenizer(r_smol, tmp_path):
    out = tmp_path / "copy.gguf"
    ml.run("convert", ml.SMOLLM2, out)
    r0, r1 = r_smol, gguf.GGUFReader(str(out))
    for key in ["tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id", "general.name",
                "tokenizer.chat_template"]:
        assert r1.fields[key].contents() == r0.fields[key].contents(), key
    for key in ["tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"]:
        f0, f1 = r0.fields[key], r1.fields[key]
        assert len(f0.data) == len(f1.data) > 40000
        # every element's bytes, without decoding 49152 Python strings
        assert b"".join(bytes(f1.parts[i]) for i in f1.data) == b"".join(bytes(f0.parts[i]) for i in f0.data)
    # llama -> llama: rotary layout unchanged, so q_proj is the same values
    q0 = next(t for t in r0.tensors if t.name == "blk.0.attn_q.weight")
    q1 = next(t for t in r1.tensors if t.name == "blk.0.attn_q.weight")
    assert np.array_equal(gguf.quants.dequantize(q0.data, q0.tensor_type), np.asarray(q1.data))


@needs_smollm2
@pytest.mark.parametrize("dtype,qtype", [("q8_0", gguf.GGMLQuantizationType.Q8_0),
                                         ("q4_0", gguf.GGMLQuantizationType.Q4_0),
                                         ("mxfp4", gguf.GGMLQuantizationType.MXFP4)])
def test_block_types_written_as_ggml_quantizes_them(r_smol, tmp_path, dtype, qtype):
    out = tmp_path / f"m-{dtype}.gguf"
    ml.run("convert", ml.SMOLLM2, out, "--dtype", dtype)
    r0, r1 = r_smol, gguf.GGUFReader(str(out))
    checked = 0
    for a, b in zip(r0.tensors, r1.tensors):
        assert a.name == b.name
        if len(a.shape) == 1:
            assert b.tensor_type == gguf.GGMLQuantizationType.F32
            continue
        assert b.tensor_type == qtype, a.name
        # the gguf package's numpy quantizers are slow: compare bytes on 6 layer matrices of each type
        if checked < 6 and a.name.startswith("blk."):
            x = gguf.quants.dequantize(a.data, a.tensor_type).astype(np.float32)
            assert np.asarray(b.data).tobytes() == gguf.quants.quantize(x, qtype).tobytes(), a.name
            checked += 1
    assert checked == 6


@needs_smollm2
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_precision_outputs_round_to_nearest_even(smol_hf, tmp_path, dtype):
    out = tmp_path / f"m-{dtype}.safetensors"
    ml.run("convert", smol_hf, out, "--dtype", dtype)
    got = load_file(str(out))
    ref = load_file(str(smol_hf / "model.safetensors"))
    np_type = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    for name in list(ref)[:40]:
        assert got[name].dtype == np_type
        assert np.array_equal(got[name].view(np.uint16), ref[name].astype(np_type).view(np.uint16)), name


def test_llama2c_to_hf_permutes_to_half_split(tmp_path):
    out = tmp_path / "stories-hf"
    ml.run("convert", ml.STORIES, out)
    got = load_file(str(out / "model.safetensors"))
    with ml.Model(ml.STORIES) as m:
        for t in m.tensors():
            name, v = t.name.decode(), m.values(t)
            if name.endswith("q_proj.weight"):
                v = ml.permute_to_half(v, 8)
            elif name.endswith("k_proj.weight"):
                v = ml.permute_to_half(v, 4)
            assert np.array_equal(got[name], v), name
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (64, 8, 4)
    # and reading the directory back gives the arrays written
    with ml.Model(out) as m:
        assert m.arch.rope_layout == 0 and m.arch.n_heads == 8 and m.arch.tied_embeddings == 1
        assert {t.name.decode() for t in m.tensors()} == set(got)


def test_sharded_directory_reads_like_one_file(tmp_path):
    with ml.Model(ml.STORIES) as m:
        tensors = {t.name.decode(): m.values(t) for t in m.tensors()}
    d = tmp_path / "sharded"
    d.mkdir()
    names = sorted(tensors)
    half = len(names) // 2
    save_file({n: tensors[n] for n in names[:half]}, str(d / "model-00001-of-00002.safetensors"))
    save_file({n: tensors[n] for n in names[half:]}, str(d / "model-00002-of-00002.safetensors"))
    index = {"metadata": {}, "weight_map": {n: f"model-0000{1 if i < half else 2}-of-00002.safetensors"
                                            for i, n in enumerate(names)}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8,
                                               "num_key_value_heads": 4, "num_hidden_layers": 5,
                                               "intermediate_size": 172, "vocab_size": 512}))
    with ml.Model(d) as m:
        assert len(m) == len(tensors) and m.arch.n_layers == 5 and m.arch.head_dim == 8
        for t in m.tensors():
            assert np.array_equal(m.values(t), tensors[t.name.decode()])
    # an index naming a file outside the directory is refused
    index["weight_map"][names[0]] = "../model-00001-of-00002.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    code, _, err = ml.run("inspect", d, check=False)
    assert code == 1 and "not a file name in the model directory" in err
    # an index that misses a tensor the shards hold is refused
    del index["weight_map"][names[0]]
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    code, _, err = ml.run("inspect", d, check=False)
    assert code == 1 and "the shards hold" in err


def test_failures_leave_nothing_behind(tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    code, _, err = ml.run("convert", ml.STORIES, busy, check=False)
    assert code == 2 and "not empty" in err and "--force" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]
    code, _, err = ml.run("convert", tmp_path / "missing.gguf", tmp_path / "out.gguf", check=False)
    assert code == 1 and "cannot open" in err and not (tmp_path / "out.gguf").exists()
    code, _, err = ml.run("convert", ml.STORIES, tmp_path / "x.safetensors", "--dtype", "q4_0", check=False)
    assert code == 2 and "block types need a .gguf output" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]


def test_bad_usage_exits_2():
    assert ml.run("convert", ml.STORIES, check=False)[0] == 2
    assert ml.run("convert", ml.STORIES, "/tmp/x", "--dtype", "f12", check=False)[0] == 2
    assert ml.run("inspect", check=False)[0] == 2
    assert ml.run("error", ml.STORIES, check=False)[0] == 2
    assert ml.run("error", ml.STORIES, "--spec", "int9", check=False)[0] == 2


@pytest.mark.parametrize("dtype,qtype,np_type", [("f16", gguf.GGMLQuantizationType.F16, np.float16),
                                                 ("bf16", gguf.GGMLQuantizationType.BF16, ml_dtypes.bfloat16),
                                                 ("f32", gguf.GGMLQuantizationType.F32, np.float32)])
def test_llama2c_to_gguf_plain_types(tmp_path, dtype, qtype, np_type):
    out = tmp_path / f"stories-{dtype}.gguf"
    ml.run("convert", ml.STORIES, out, "--dtype", dtype)
    r = gguf.GGUFReader(str(out))
    with ml.Model(ml.STORIES) as m:
        want = {ml.name_to_gguf(t.name.decode())[0]: m.values(t) for t in m.tensors()}
    assert {t.name for t in r.tensors} == set(want)
    assert r.fields["general.architecture"].contents() == "llama"
    assert r.fields["llama.attention.head_count"].contents() == 8
    for t in r.tensors:
        assert t.tensor_type == qtype
        raw = np.frombuffer(t.data.tobytes(), dtype=np_type)
        # llama2.c and GGUF llama both keep adjacent rotary pairs: no permutation
        assert np.array_equal(raw.view(np.uint8), want[t.name].reshape(-1).astype(np_type).view(np.uint8)), t.name
