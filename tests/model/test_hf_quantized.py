"""Reading quantized Hugging Face checkpoints without the packages (numpy
only, so `make test` covers it; the packages themselves are the judges in
tests/interop/test_read_compressed_tensors.py).

The files are built here byte by byte from the formats' definitions
(compressed-tensors' pack_to_int32 dense bit stream, zero points packed
along the output rows, NVFP4 nibbles with the even element low and a
divisor global scale, ModelOpt's multiplier weight_scale_2), and the
expected weights come from an independent numpy dequantization written from
the same definitions. Then every malformed variant must be refused with
LB_ERR_PARSE / LB_ERR_UNSUPPORTED naming the tensor or module."""
import json
import struct

import numpy as np
import pytest

import model_lib as ml

ROWS, COLS = 8, 64
MOD = "model.layers.0.mlp.down_proj"
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
ST = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int32): "I32",
      np.dtype(np.int64): "I64", np.dtype(np.uint8): "U8", np.dtype(np.int8): "I8"}


def write_st(path, tensors):
    """a safetensors file: {name: (dtype string, shape, bytes)} or numpy arrays"""
    header, blobs, off = {}, [], 0
    for name, v in sorted(tensors.items()):
        if isinstance(v, np.ndarray):
            v = (ST[v.dtype], list(v.shape), v.tobytes())
        dt, shape, raw = v
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def config(qc):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": COLS,
            "intermediate_size": COLS, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
            "vocab_size": 32, "rms_norm_eps": 1e-5, "quantization_config": qc}


def ct_config(fmt, weights, targets=("Linear",), ignore=("lm_head",)):
    return {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
            "ignore": list(ignore), "kv_cache_scheme": None, "sparsity_config": {}, "transform_config": {},
            "config_groups": {"group_0": {"targets": list(targets), "weights": weights, "input_activations": None,
                                          "output_activations": None, "format": fmt}}}


def pack_stream(codes, bits):
    """compressed-tensors' pack_to_int32 from its definition: value i of a row
    at bits [i*bits, i*bits+bits) of the row's little-endian word stream"""
    rows, cols = codes.shape
    words = -(-cols * bits // 32)
    out = np.zeros((rows, words), dtype=np.uint64)
    u = (codes.astype(np.int64) + (1 << (bits - 1))).astype(np.uint64)
    for c in range(cols):
        p = c * bits
        out[:, p // 32] |= (u[:, c] << np.uint64(p % 32)) & np.uint64(0xFFFFFFFF)
        if p % 32 + bits > 32:
            out[:, p // 32 + 1] |= u[:, c] >> np.uint64(32 - p % 32)
    return out.astype(np.uint32).view(np.int32)


def write_model(tmp_path, qc, tensors):
    (tmp_path / "config.json").write_text(json.dumps(config(qc)))
    base = {"model.norm.weight": np.ones(COLS, np.float32)}
    base.update(tensors)
    write_st(tmp_path / "model.safetensors", {k: v for k, v in base.items() if v is not None})
    return tmp_path


def packed_case(rng, bits=4, group=32, sym=False, scale_dtype=np.float32, negative=False):
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    q = rng.integers(lo, hi + 1, (ROWS, COLS)).astype(np.int8)
    s = (rng.random((ROWS, COLS // group)) * 0.1 + 0.01).astype(scale_dtype)
    if negative:  # range=signed writes negative scales (ggml's rule); a reader multiplies them like any other
        s = np.where(rng.random(s.shape) < 0.5, -s, s).astype(scale_dtype)
    z = None if sym else rng.integers(lo, hi + 1, (ROWS, COLS // group)).astype(np.int8)
    t = {f"{MOD}.weight_packed": pack_stream(q, bits), f"{MOD}.weight_scale": s,
         f"{MOD}.weight_shape": np.array([ROWS, COLS], np.int64)}
    if z is not None:
        t[f"{MOD}.weight_zero_point"] = np.ascontiguousarray(pack_stream(z.T, bits).T)  # packed along rows
    # the package computes in the scale's dtype: numpy does each op in it too
    zz = np.zeros((ROWS, COLS // group), np.int8) if z is None else z
    x = q.astype(scale_dtype) - np.repeat(zz, group, axis=1).astype(scale_dtype)
    want = (x * np.repeat(s, group, axis=1)).astype(np.float32)
    w = {"num_bits": bits, "type": "int", "symmetric": sym, "group_size": group, "strategy": "group"}
    return t, w, want


def weights(path):
    with ml.Model(path) as m:
        return {t.name.decode(): (ml.DTYPES[t.dtype], ml.shape(t), m.values(t)) for t in m.tensors()}


@pytest.mark.parametrize("bits,group,sym,sdt", [(4, 32, False, np.float32), (4, 64, True, np.float16),
                                                (3, 32, False, np.float16), (5, 16, True, np.float32),
                                                (8, 32, False, np.float32), (2, 64, False, np.float16)])
def test_pack_quantized(tmp_path, bits, group, sym, sdt):
    t, w, want = packed_case(np.random.default_rng(bits * 100 + group), bits, group, sym, sdt)
    got = weights(write_model(tmp_path, ct_config("pack-quantized", w), t))
    assert set(got) == {"model.norm.weight", f"{MOD}.weight"}  # the components are not listed
    dt, shape, v = got[f"{MOD}.weight"]
    assert dt == "quantized" and shape == (ROWS, COLS)
    np.testing.assert_array_equal(v, want)


@pytest.mark.parametrize("bits,group,sdt", [(4, 32, np.float32), (4, 16, np.float16), (8, 64, np.float16)])
def test_pack_quantized_negative_scales(tmp_path, bits, group, sdt):
    t, w, want = packed_case(np.random.default_rng(bits + group), bits, group, True, sdt, negative=True)
    assert (t[f"{MOD}.weight_scale"] < 0).any() and (t[f"{MOD}.weight_scale"] > 0).any()
    dt, shape, v = weights(write_model(tmp_path, ct_config("pack-quantized", w), t))[f"{MOD}.weight"]
    np.testing.assert_array_equal(v, want)


def e4m3(codes):
    """OCP E4M3 (fn) decode from the definition"""
    c = codes.astype(np.int64)
    s, e, m = np.where(c & 0x80, -1.0, 1.0), (c >> 3) & 15, c & 7
    v = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7))
    return (s * v).astype(np.float32)


def bf16(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def fp4_case(rng, modelopt=False):
    nib = rng.integers(0, 16, (ROWS, COLS)).astype(np.uint8)
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    sc = rng.integers(0x20, 0x60, (ROWS, COLS // 16)).astype(np.uint8)  # positive e4m3 codes
    g = np.array([123.25], np.float32)
    val = np.where(nib & 8, -1, 1) * E2M1[nib & 7]
    if modelopt:  # x * fp32(s * weight_scale_2)
        eff = (e4m3(sc) * g[0]).astype(np.float32)
        want = (val * np.repeat(eff, 16, axis=1)).astype(np.float32)
        t = {f"{MOD}.weight": packed, f"{MOD}.weight_scale": ("F8_E4M3", sc.shape, sc.tobytes()),
             f"{MOD}.weight_scale_2": ("F32", [], g.tobytes()), f"{MOD}.input_scale": ("F32", [], g.tobytes())}
    else:  # bf16(x * fp32(s / global))
        eff = (e4m3(sc) / g[0]).astype(np.float32)
        want = bf16((val * np.repeat(eff, 16, axis=1)).astype(np.float32))
        t = {f"{MOD}.weight_packed": packed, f"{MOD}.weight_scale": ("F8_E4M3", sc.shape, sc.tobytes()),
             f"{MOD}.weight_global_scale": g, f"{MOD}.input_global_scale": g}
    return t, want


def test_nvfp4_compressed_tensors(tmp_path):
    t, want = fp4_case(np.random.default_rng(1))
    w = {"num_bits": 4, "type": "float", "symmetric": True, "group_size": 16, "strategy": "tensor_group"}
    got = weights(write_model(tmp_path, ct_config("nvfp4-pack-quantized", w), t))
    assert set(got) == {"model.norm.weight", f"{MOD}.weight"}  # input_global_scale set aside too
    np.testing.assert_array_equal(got[f"{MOD}.weight"][2], want)


def modelopt_dir(tmp_path, t, algo="NVFP4"):
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt", "version": "0.47.0"},
         "quantization": {"quant_algo": algo, "kv_cache_quant_algo": None, "group_size": 16,
                          "exclude_modules": ["lm_head"]}}))
    return write_model(tmp_path, {"quant_method": "modelopt", "quant_algo": algo}, t)


def test_nvfp4_modelopt(tmp_path):
    t, want = fp4_case(np.random.default_rng(2), modelopt=True)
    got = weights(modelopt_dir(tmp_path, t))
    assert set(got) == {"model.norm.weight", f"{MOD}.weight"}
    np.testing.assert_array_equal(got[f"{MOD}.weight"][2], want)


def test_a_plain_checkpoint_is_untouched(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in config(None).items()
                                                     if k != "quantization_config"}))
    write_st(tmp_path / "model.safetensors", {f"{MOD}.weight": np.ones((ROWS, COLS), np.float32),
                                              f"{MOD}.weight_scale": np.ones((ROWS, 1), np.float32)})
    got = weights(tmp_path)  # no quantization_config: every tensor as stored
    assert got[f"{MOD}.weight"][0] == "f32" and f"{MOD}.weight_scale" in got


# 2-D blocks (compressed-tensors' FP8_BLOCK: strategy "block"): 10 x 64 weights
# in blocks of 4 x 32, so the last row of blocks is partial (2 rows); one scale
# per block, [ceil(10 / 4), 64 / 32] = [3, 2]
BR, BC, BROWS = 4, 32, 10


def block_case(rng, scale_dtype=np.float32):
    codes = rng.integers(0, 256, (BROWS, COLS)).astype(np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x3F  # no NaN codes
    s = (rng.random((3, 2)) * 0.1 + 0.01).astype(np.float32)
    if scale_dtype == "bf16":
        s = bf16(s)
        scale = ("BF16", s.shape, (s.view(np.uint32) >> 16).astype(np.uint16).tobytes())
    else:
        scale = s
    t = {f"{MOD}.weight": ("F8_E4M3", codes.shape, codes.tobytes()), f"{MOD}.weight_scale": scale}
    full = np.repeat(np.repeat(s, BR, axis=0)[:BROWS], BC, axis=1)  # block (r // 4, c // 32)
    want = e4m3(codes) * full
    if scale_dtype == "bf16":  # the package multiplies in the scale's dtype
        want = bf16(want)
    w = {"num_bits": 8, "type": "float", "symmetric": True, "group_size": None, "strategy": "block",
         "block_structure": [BR, BC], "dynamic": False}
    return t, w, want.astype(np.float32)


@pytest.mark.parametrize("sdt", [np.float32, "bf16"])
def test_fp8_block(tmp_path, sdt):
    t, w, want = block_case(np.random.default_rng(12), sdt)
    got = weights(write_model(tmp_path, ct_config("float-quantized", w), t))
    dt, shape, v = got[f"{MOD}.weight"]
    assert dt == "quantized" and shape == (BROWS, COLS)
    np.testing.assert_array_equal(v, want)


@pytest.mark.parametrize("what,scale_shape,block,expect", [
    ("transposed", (2, 3), [BR, BC], "expected shape [3, 2]"),
    ("floor rows", (2, 2), [BR, BC], "expected 3 x 2"),
    ("one per row", (BROWS, 2), [BR, BC], "expected 3 x 2"),
    ("flat", (6,), [BR, BC], "one scale per block of rows x cols"),
    ("3-D", (3, 2, 1), [BR, BC], "one scale per block of rows x cols"),
    ("block of 0 rows", (3, 2), [0, BC], "block_structure"),
    ("one number", (3, 2), [BR], "block_structure"),
    ("huge", (3, 2), [1 << 40, BC], "block_structure"),
    ("blocks of 5 rows", (3, 2), [5, BC], "expected 2 x 2"),
])
def test_fp8_block_malformed_scales_refused(tmp_path, what, scale_shape, block, expect):
    t, w, _ = block_case(np.random.default_rng(13))
    n = int(np.prod(scale_shape))
    t[f"{MOD}.weight_scale"] = np.full(scale_shape, 0.5, np.float32) if n else np.zeros(0, np.float32)
    w["block_structure"] = block
    msg = open_error(write_model(tmp_path, ct_config("float-quantized", w), t))
    assert expect in msg, f"{what}: {msg!r}"
    assert MOD in msg or "block_structure" in msg


# ------------------------------------------------------------------ refusals

def open_error(path):
    with pytest.raises(OSError) as e:
        ml.Model(path)
    return str(e.value)


def variant(tmp_path, mutate_cfg=None, mutate_tensors=None, **kw):
    t, w, _ = packed_case(np.random.default_rng(5), **kw)
    qc = ct_config("pack-quantized", w)
    if mutate_cfg:
        mutate_cfg(qc)
    if mutate_tensors:
        mutate_tensors(t)
    return write_model(tmp_path, qc, t)


def set_(path, value):
    def f(qc):
        d = qc
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return f


W = ("config_groups", "group_0", "weights")


@pytest.mark.parametrize("what,cfg,tensors,expect", [
    ("scale shape", None, lambda t: t.update({f"{MOD}.weight_scale": np.ones((ROWS, 3), np.float32)}),
     [f"{MOD}.weight_scale", "expected 8 x 2"]),
    ("packed width", None, lambda t: t.update({f"{MOD}.weight_packed": np.zeros((ROWS, 7), np.int32)}),
     [f"{MOD}.weight_packed", "expected shape [8, 8]"]),
    ("packed dtype", None, lambda t: t.update({f"{MOD}.weight_packed": np.zeros((ROWS, 8), np.uint8)}),
     [f"{MOD}.weight_packed", "expected dtype i32"]),
    ("no weight_shape", None, lambda t: t.pop(f"{MOD}.weight_shape"), [MOD, "weight_shape"]),
    ("bad weight_shape", None, lambda t: t.update({f"{MOD}.weight_shape": np.array([ROWS, 0], np.int64)}),
     [f"{MOD}.weight_shape", "positive"]),
    ("no zero point", None, lambda t: t.pop(f"{MOD}.weight_zero_point"), [MOD, "weight_zero_point"]),
    ("zero point shape", None, lambda t: t.update({f"{MOD}.weight_zero_point": np.zeros((2, 2), np.int32)}),
     [f"{MOD}.weight_zero_point", "expected shape [1, 2]"]),
    ("zp but symmetric", set_(W + ("symmetric",), True), None, [MOD, "symmetric"]),
    ("num_bits", set_(W + ("num_bits",), 9), None, ["num_bits", "1..8"]),
    ("group", set_(W + ("group_size",), 48), None, [MOD, "whole groups of 48"]),
    ("strategy", set_(W + ("strategy",), "diagonal"), None, ["diagonal"]),
    ("format", set_(("config_groups", "group_0", "format"), "marlin-24"), None, [MOD, "marlin-24"]),
    ("quant_method", set_(("quant_method",), "gptq"), None, ["gptq", "compressed-tensors, modelopt"]),
    ("no group", set_(("config_groups", "group_0", "targets"), ["re:.*q_proj"]), None, [MOD, "no config group"]),
    ("ignored", set_(("ignore",), ["re:.*down_proj"]), None, [MOD, "ignore"]),
    ("bad regex", set_(("config_groups", "group_0", "targets"), ["re:(unclosed"]), None, ["re:(unclosed"]),
    ("act order", set_(W + ("actorder",), "group"), None, ["actorder", "g_idx"]),
    ("g_idx", None, lambda t: t.update({f"{MOD}.weight_g_idx": np.zeros(COLS, np.int32)}), [MOD, "weight_g_idx"]),
    ("transform", set_(("transform_config",), {"config_groups": {}}), None, ["transform_config"]),
    ("no groups", set_(("config_groups",), {}), None, ["config_groups"]),
])
def test_refused(tmp_path, what, cfg, tensors, expect):
    msg = open_error(variant(tmp_path, cfg, tensors))
    for e in expect:
        assert e in msg, f"{what}: {msg!r} lacks {e!r}"


def test_modelopt_awq_refused(tmp_path):
    t, _ = fp4_case(np.random.default_rng(3), modelopt=True)
    msg = open_error(modelopt_dir(tmp_path, t, algo="W4A16_AWQ"))
    assert "W4A16_AWQ" in msg and "TensorRT-LLM" in msg


def test_modelopt_nvfp4_group_mismatch(tmp_path):
    t, _ = fp4_case(np.random.default_rng(4), modelopt=True)
    sc = np.zeros((ROWS, 3), np.uint8)
    t[f"{MOD}.weight_scale"] = ("F8_E4M3", sc.shape, sc.tobytes())
    msg = open_error(modelopt_dir(tmp_path, t))
    assert f"{MOD}.weight_scale" in msg and "expected 8 x 4" in msg


def test_lb_dtype_to_f32_refuses_quantized():
    import ctypes
    buf = (ctypes.c_uint8 * 4)()
    out = (ctypes.c_float * 1)()
    assert ml.lib.lb_dtype_to_f32(ml.DTYPES.index("quantized"), buf, 1, out) == 7  # LB_ERR_UNSUPPORTED
    assert b"lb_tensor_to_f32" in ml.lib.lb_last_error()


def test_inspect_json(tmp_path):
    t, w, _ = packed_case(np.random.default_rng(9), bits=4, group=32, sym=False)
    d = write_model(tmp_path, ct_config("pack-quantized", w), t)
    out = ml.run_json("inspect", "--json", "--quiet", d)
    q = out["quantization"]
    assert (q["method"], q["format"], q["quantized"], q["hidden"]) == ("compressed-tensors", "pack-quantized", 1, 3)
    assert q["groups"] == [{"name": "group_0", "format": "pack-quantized", "weights": "int4 group 32 asymmetric",
                            "input": "none", "modules": 1}]
    row = next(r for r in out["tensors"] if r["name"] == f"{MOD}.weight")
    # every component's bytes: packed codes, scales, zero points
    assert row["dtype"] == "quantized" and row["bytes"] == ROWS * COLS // 2 + ROWS * 2 * 4 + 2 * 4
