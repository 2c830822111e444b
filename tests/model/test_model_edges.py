"""Edge cases of opening and converting models, each one a bug a review
found: wrong weights written silently, crashes on empty tensors, inputs
overwritten, names cut, hangs."""
import json
import os
import stat
import struct
import subprocess
import sys

import gguf
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))
import model_lib as ml  # noqa: E402


def hf_dir(tmp_path, tensors, **config):
    d = tmp_path / "hf"
    d.mkdir()
    save_file(tensors, str(d / "model.safetensors"))
    cfg = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
           "num_key_value_heads": 1, "intermediate_size": 4, "vocab_size": 4}
    cfg.update(config)
    (d / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    return d


def tiny(**extra):
    rng = np.random.default_rng(0)
    t = {"model.layers.0.self_attn.q_proj.weight": rng.standard_normal((8, 8), dtype=np.float32),
         "model.layers.0.self_attn.k_proj.weight": rng.standard_normal((4, 8), dtype=np.float32)}
    t.update(extra)
    return t


def test_qk_rows_are_never_written_in_the_wrong_layout(tmp_path):
    d = hf_dir(tmp_path, tiny(), num_attention_heads=None)  # no head count: cannot permute
    code, _, err = ml.run("convert", d, tmp_path / "o.gguf", check=False)
    assert code == 1 and "number of heads" in err and not (tmp_path / "o.gguf").exists()


def test_empty_and_scalar_tensors(tmp_path):
    t = tiny(**{"model.layers.0.self_attn.q_proj.bias": np.array(42.0, dtype=np.float32),
                "a.weight": np.zeros((0, 64), np.float32), "z.weight": np.zeros((8, 0), np.float32)})
    d = hf_dir(tmp_path, t)
    # a scalar bias has no rows to permute: refused, not filled with garbage
    code, _, err = ml.run("convert", d, tmp_path / "o.gguf", check=False)
    assert code == 1 and "q_proj.bias" in err
    del t["model.layers.0.self_attn.q_proj.bias"]
    d2 = tmp_path / "b"
    d2.mkdir()
    save_file(t, str(d2 / "m.safetensors"))
    for args in [["--dtype", "q8_0"], ["--dtype", "f16"]]:
        out = tmp_path / f"o{args[1]}.gguf"
        ml.run("convert", d2 / "m.safetensors", out, *args)
        r = gguf.GGUFReader(str(out))
        assert {x.name for x in r.tensors} >= {"a.weight", "z.weight"}
    ml.run("convert", d2 / "m.safetensors", tmp_path / "o.safetensors", "--dtype", "f16")
    assert load_file(str(tmp_path / "o.safetensors"))["a.weight"].shape == (0, 64)
    out = ml.run_json("error", d2 / "m.safetensors", "--spec", "int4:g32", "--json")
    assert "a.weight" not in {r["name"] for r in out["tensors"]}  # empty weights are skipped
    ml.run("inspect", d2 / "m.safetensors")


def test_long_names_are_refused_not_cut(tmp_path):
    name = "x" * 170 + ".weight"
    save_file({name: np.ones((4, 8), np.float32)}, str(tmp_path / "long.safetensors"))
    code, _, err = ml.run("convert", tmp_path / "long.safetensors", tmp_path / "o.safetensors", check=False)
    assert code == 1 and "longer than lowbit writes" in err and not (tmp_path / "o.safetensors").exists()


@pytest.mark.parametrize("field,value", [("rope_theta", 1e400), ("rms_norm_eps", -1), ("rms_norm_eps", "x")])
def test_bad_float_fields_are_refused(tmp_path, field, value):
    d = hf_dir(tmp_path, tiny())
    cfg = json.loads((d / "config.json").read_text())
    cfg[field] = value
    (d / "config.json").write_text(json.dumps(cfg).replace("Infinity", "1e400"))
    code, _, err = ml.run("inspect", d, check=False)
    assert code == 1 and field in err


def test_head_dim_comes_from_the_embedding_when_hidden_size_is_missing(tmp_path):
    t = tiny(**{"model.embed_tokens.weight": np.ones((4, 8), np.float32)})
    d = hf_dir(tmp_path, t, hidden_size=None)
    ml.run("convert", d, tmp_path / "out")
    assert json.loads((tmp_path / "out/config.json").read_text())["head_dim"] == 4


def test_integer_tensors_keep_their_type(tmp_path):
    ids = np.array([2**40 + 1, 123456789], dtype=np.int64)
    save_file({"ids": ids, "w.weight": np.ones((2, 2), np.float32)}, str(tmp_path / "i.safetensors"))
    ml.run("convert", tmp_path / "i.safetensors", tmp_path / "o.safetensors")
    assert np.array_equal(load_file(str(tmp_path / "o.safetensors"))["ids"], ids)


def test_two_gguf_names_for_one_tensor_are_refused(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "two.gguf"), "llama")
    w.add_tensor("output.weight", np.ones((2, 4), np.float32))
    w.add_tensor("lm_head.weight", np.ones((2, 4), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    code, _, err = ml.run("inspect", tmp_path / "two.gguf", check=False)
    assert code == 1 and "both mean 'lm_head.weight'" in err


def test_gguf_metadata_of_other_architectures_is_copied_verbatim(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "phi.gguf"), "phi2")
    w.add_uint32("phi2.rope.dimension_count", 2)
    w.add_uint32("phi2.block_count", 1)
    w.add_tensor("blk.0.attn_q.weight", np.ones((4, 4), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    ml.run("convert", tmp_path / "phi.gguf", tmp_path / "copy.gguf")
    r = gguf.GGUFReader(str(tmp_path / "copy.gguf"))
    assert r.fields["phi2.rope.dimension_count"].contents() == 2
    code, _, err = ml.run("convert", tmp_path / "phi.gguf", tmp_path / "phi-hf", check=False)
    assert code == 1 and "not for architecture 'phi2'" in err and not (tmp_path / "phi-hf").exists()


def test_llama2c_header_with_a_brace_at_byte_8(tmp_path):
    # n_layers = 123 puts '{' (0x7B) at byte 8: still a llama2.c file, not a broken safetensors one
    dim, hidden, layers, heads, kv, vocab, seq = 8, 12, 123, 2, 1, 16, 4
    hs = dim // heads
    floats = (vocab * dim + layers * dim + layers * dim * dim + 2 * layers * dim * kv * hs + layers * dim * dim
              + layers * dim + 3 * layers * hidden * dim + dim + 2 * seq * hs // 2)
    blob = struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq) + bytes(4 * floats)
    assert blob[8:9] == b"{"
    (tmp_path / "l123.bin").write_bytes(blob)
    out = ml.run_json("inspect", tmp_path / "l123.bin", "--json")
    assert out["kind"] == "llama2.c" and out["architecture"]["layers"] == 123


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "ff"
    os.mkfifo(fifo)
    p = subprocess.run([ml.LOWBIT, "inspect", str(fifo)], capture_output=True, text=True, timeout=20)
    assert p.returncode == 1 and "not a regular file" in p.stderr


def test_convert_refuses_to_overwrite_its_input(tmp_path):
    src = tmp_path / "s.safetensors"
    save_file({"w.weight": np.ones((2, 2), np.float32)}, str(src))
    before = src.read_bytes()
    code, _, err = ml.run("convert", src, src, "--dtype", "bf16", check=False)
    assert code == 2 and "it is the same file as IN" in err and src.read_bytes() == before


def test_outputs_follow_the_umask(tmp_path):
    src = tmp_path / "s.safetensors"
    save_file({"w.weight": np.ones((2, 2), np.float32)}, str(src))
    old = os.umask(0o077)
    try:
        ml.run("convert", src, tmp_path / "o.safetensors")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "o.safetensors").stat().st_mode) == 0o600


def test_torch_dtype_says_what_was_written(tmp_path):
    t = {k: v.astype(ml_dtypes.bfloat16) for k, v in tiny().items()}
    d = hf_dir(tmp_path, t)
    ml.run("convert", d, tmp_path / "out")  # kept as bf16
    assert json.loads((tmp_path / "out/config.json").read_text())["torch_dtype"] == "bfloat16"


def test_sharded_index_must_name_the_right_shard(tmp_path):
    d = tmp_path / "sh"
    d.mkdir()
    save_file({"a.weight": np.ones((2, 2), np.float32)}, str(d / "s1.safetensors"))
    save_file({"b.weight": np.ones((2, 2), np.float32)}, str(d / "s2.safetensors"))
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
    idx = {"weight_map": {"a.weight": "s1.safetensors", "b.weight": "s1.safetensors"}}
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    code, _, err = ml.run("inspect", d, check=False)
    assert code == 1 and "'b.weight' is not in s1.safetensors" in err
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    code, _, err = ml.run("inspect", d, check=False)
    assert code == 1 and "lists no tensors" in err


def test_many_tensors_open(tmp_path):
    # 20k tiny tensors: lookups are binary searches, so this is quick
    save_file({f"t{i}": np.zeros(1, np.float32) for i in range(20000)}, str(tmp_path / "many.safetensors"))
    out = ml.run_json("inspect", tmp_path / "many.safetensors", "--json")
    assert len(out["tensors"]) == 20000


def test_trailing_slash_names_the_directory(tmp_path):
    ml.run("convert", ml.STORIES, str(tmp_path / "out") + "/")
    # the tokenizer files come from tok512.bin beside the model
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json",
        "tokenizer_config.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
