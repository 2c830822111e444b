"""lowbit's whole ModelOpt checkpoint against the one nvidia-modelopt writes
for the same model: the strongest check of lb__exporter_modelopt.

modelopt_reference.py saves a tiny bf16 Llama, then has ModelOpt quantize it
(mtq.quantize with a calibration forward, FP8 KV cache) and export it
(export_hf_checkpoint) under FP8, FP8_PER_CHANNEL_PER_TOKEN, NVFP4,
W4A16_NVFP4, MXFP8 and MIXED_PRECISION (FP8 attention, NVFP4 MLP). lowbit
opens the saved model, sets each decoder linear layer to the matching lowbit
scheme with the input ranges and KV ranges ModelOpt calibrated (so the static
scales are comparable), and drives the exporter's table as the export driver
does (check, tensor for every entry, extras, quant_config, extra_file).
Then:
  - hf_quant_config.json's "quantization" and config.json's
    quantization_config equal ModelOpt's (the producer aside: lowbit names
    itself);
  - the tensor set, every dtype and shape equal ModelOpt's; the 16-bit
    tensors and every static scale (weight_scale of FP8, weight_scale_2 shared
    over q/k/v and gate/up, input_scale, k_scale, v_scale) have ModelOpt's
    exact bytes, but FP8's input_scale, which is ModelOpt's rounded to bf16
    (lowbit evaluates, and compressed-tensors stores, the bf16 value);
  - ModelOpt's own tensor classes dequantize lowbit's quantized weights to
    lowbit's values (lb_qmodel_values_f32) exactly. (Quantized bytes of a
    bf16 model are not compared: ModelOpt divides by the FP8 scale in bf16,
    rounding twice; test_modelopt.py compares bytes on an fp32 model.)
  - NVFP4: compressed-tensors' ModelOpt converter accepts the whole state
    dict (validate: no orphan scales, uint8 packed weights);
  - lowbit's own reader reads the directory back to the values it evaluated;
  - the public lb_export (the driver, with its read-back verification)
    writes the same checkpoint from the same quantized model.

Run with the interop environment (make test-interop):
  LOWBIT_BUILD=build ~/.cache/lowbit/interop-*/bin/python -m pytest tests/interop/test_modelopt_export.py
"""
import ctypes
import json
import pathlib
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

torch = pytest.importorskip("torch")
pytest.importorskip("modelopt")

import modelopt_reference as ref  # noqa: E402
from test_modelopt import (ACT_DYNAMIC, ACT_LOCAL, ACT_NONE, ACT_STATIC, EMIT, LB_OK, OutTensor, QAct,  # noqa: E402,F401
                           SCHEMES, lib, modelopt_dequantize, spec)
from lowbit_ctypes import QSpec, QView  # noqa: E402

QSTATE_QUANTIZED = 2
FMT_FP8_E4M3 = 3
TORCH = {"F8_E4M3": torch.float8_e4m3fn, "U8": torch.uint8, "F32": torch.float32, "BF16": torch.bfloat16,
         "F16": torch.float16}


class Entry(ctypes.Structure):
    _fields_ = [("tensor", ctypes.c_void_p), ("state", ctypes.c_int), ("spec", QSpec), ("replaced", ctypes.c_int),
                ("has_qtensor", ctypes.c_int), ("act", QAct), ("input_amax", ctypes.c_float),
                ("fused_group", ctypes.c_int), ("group_amax", ctypes.c_float), ("ggml", ctypes.c_int),
                ("has_imatrix", ctypes.c_int)]  # lb_qentry, every field: C writes the whole struct


class Exporter(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("check", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)),
        ("tensor", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                    ctypes.POINTER(QView), EMIT, ctypes.c_void_p)),
        ("extras", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, EMIT, ctypes.c_void_p)),
        ("quant_config", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)),
        ("extra_file", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                        ctypes.c_void_p)),
    ]


def bind(lb):
    v, p, i, sz = ctypes.c_void_p, ctypes.POINTER, ctypes.c_int, ctypes.c_size_t
    lb.lb_model_open.argtypes = [ctypes.c_char_p, p(v)]
    lb.lb_model_close.argtypes = [v]
    lb.lb_model_arch.argtypes = [v]
    lb.lb_model_arch.restype = v
    lb.lb_qmodel_new.argtypes = [v, p(v)]
    lb.lb_qmodel_free.argtypes = [v]
    lb.lb_qmodel_count.argtypes = [v]
    lb.lb_qmodel_count.restype = sz
    lb.lb_qmodel_entry.argtypes = [v, sz, p(Entry)]
    lb.lb_qmodel_set_spec.argtypes = [v, sz, p(QSpec)]
    lb.lb_qmodel_keep.argtypes = [v, sz]
    lb.lb_qmodel_set_act.argtypes = [v, sz, p(QAct)]
    lb.lb_qmodel_set_input_amax.argtypes = [v, sz, ctypes.c_float]
    lb.lb_qmodel_set_kv.argtypes = [v, i]
    lb.lb_qmodel_set_kv_amax.argtypes = [v, ctypes.c_uint32, ctypes.c_float, ctypes.c_float]
    lb.lb_qmodel_values_f32.argtypes = [v, sz, v, i]
    lb.lb_qmodel_quantized.argtypes = [v, sz, i, p(v), p(i)]
    lb.lb_tensor_is_weight.argtypes = [v]
    lb.lb__mo_exporter_table.restype = v
    lb.lb__jsonw_status.argtypes = [v]
    return lb


def tensor_name(e):
    return ctypes.cast(e.tensor, ctypes.POINTER(ctypes.c_char_p))[0].decode()


def tensor_numel(e):
    # lb_tensor: name, file_name, dtype, n_dims, shape[8], n_elements
    class T(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("file_name", ctypes.c_char_p), ("dtype", ctypes.c_int),
                    ("n_dims", ctypes.c_int), ("shape", ctypes.c_uint64 * 8), ("n_elements", ctypes.c_uint64)]
    return ctypes.cast(e.tensor, ctypes.POINTER(T)).contents.n_elements


def json_text(lb, w):
    return json.loads(lb.lb__jsonw_text(w, None).decode())


def scheme_of(algo, module):
    if algo == "MIXED_PRECISION":
        return SCHEMES["NVFP4" if ".mlp." in module else "FP8"]
    return SCHEMES[algo]


def build_qmodel(lb, algo, original, input_amax, kv_amax):
    """The tiny model opened by lowbit, every decoder linear layer under
    algo's lowbit scheme with ModelOpt's calibrated ranges: (qmodel, model)."""
    m, q = ctypes.c_void_p(), ctypes.c_void_p()
    assert lb.lb_model_open(str(original).encode(), ctypes.byref(m)) == LB_OK, lb.lb_last_error()
    assert lb.lb_qmodel_new(m, ctypes.byref(q)) == LB_OK, lb.lb_last_error()
    n = lb.lb_qmodel_count(q)
    for i in range(n):
        e = Entry()
        assert lb.lb_qmodel_entry(q, i, ctypes.byref(e)) == LB_OK
        name = tensor_name(e)
        if not lb.lb_tensor_is_weight(e.tensor):
            continue
        if not name.startswith("model.layers."):
            assert lb.lb_qmodel_keep(q, i) == LB_OK
            continue
        module = name[: -len(".weight")]
        wtext, mode, atext = scheme_of(algo, module)
        s = spec(lb, wtext)
        assert lb.lb_qmodel_set_spec(q, i, ctypes.byref(s)) == LB_OK, lb.lb_last_error()
        a = QAct()
        a.mode = mode
        if atext:
            a.spec = spec(lb, atext)
        assert lb.lb_qmodel_set_act(q, i, ctypes.byref(a)) == LB_OK, lb.lb_last_error()
        if module in input_amax:
            assert lb.lb_qmodel_set_input_amax(q, i, input_amax[module]) == LB_OK, lb.lb_last_error()
    if kv_amax:
        assert lb.lb_qmodel_set_kv(q, FMT_FP8_E4M3) == LB_OK, lb.lb_last_error()
    for layer in range(ref.TINY["num_hidden_layers"] if kv_amax else 0):
        assert f"model.layers.{layer}.self_attn.k" in kv_amax, sorted(kv_amax)
        k = kv_amax[f"model.layers.{layer}.self_attn.k"]
        v = kv_amax[f"model.layers.{layer}.self_attn.v"]
        assert lb.lb_qmodel_set_kv_amax(q, layer, k, v) == LB_OK, lb.lb_last_error()
    return q, m


def lowbit_export(lb, algo, original, input_amax, kv_amax):
    """Drives lb__exporter_modelopt as the export driver does; returns
    (tensors: name -> torch, config, hf_quant_config, lowbit values of the
    quantized weights)."""
    exp = ctypes.cast(lb.lb__mo_exporter_table(), ctypes.POINTER(Exporter)).contents
    assert exp.name == b"modelopt"
    q, m = build_qmodel(lb, algo, original, input_amax, kv_amax)
    n = lb.lb_qmodel_count(q)
    tensors, values = {}, {}
    try:
        assert exp.check(q) == LB_OK, lb.lb_last_error()

        def emit(_sink, t):
            t = t.contents
            shape = [t.shape[d] for d in range(t.n_dims)]
            raw = bytearray(ctypes.string_at(t.data, t.bytes))
            name = t.name.decode()
            assert name not in tensors, f"{name} emitted twice"
            tensors[name] = torch.frombuffer(raw, dtype=torch.uint8).view(TORCH[t.dtype.decode()]).reshape(shape)
            return LB_OK

        cb = EMIT(emit)
        for i in range(n):
            e = Entry()
            assert lb.lb_qmodel_entry(q, i, ctypes.byref(e)) == LB_OK
            count = tensor_numel(e)
            vals = np.empty(count, np.float32)
            assert lb.lb_qmodel_values_f32(q, i, vals.ctypes.data, 1) == LB_OK, lb.lb_last_error()
            if e.state == QSTATE_QUANTIZED:
                values[tensor_name(e)] = vals
                qt, owned = ctypes.c_void_p(), ctypes.c_int()
                assert lb.lb_qmodel_quantized(q, i, 1, ctypes.byref(qt), ctypes.byref(owned)) == LB_OK
                view = QView()
                assert lb.lb_qtensor_view_get(qt, ctypes.byref(view)) == LB_OK
                st = exp.tensor(q, i, None, ctypes.byref(view), cb, None)
                if owned.value:
                    lb.lb_qtensor_free(qt)
            else:
                st = exp.tensor(q, i, vals.ctypes.data, None, cb, None)
            assert st == LB_OK, lb.lb_last_error()
        assert exp.extras(q, cb, None) == LB_OK, lb.lb_last_error()

        w = lb.lb__jsonw_new()
        assert exp.quant_config(q, w) == LB_OK, lb.lb_last_error()
        qc = json_text(lb, w)
        lb.lb__jsonw_free(w)
        w = lb.lb__jsonw_new()
        fname = ctypes.c_char_p()
        assert exp.extra_file(q, 0, ctypes.byref(fname), w) == 1, lb.lb_last_error()
        assert fname.value == b"hf_quant_config.json"
        hfq = json_text(lb, w)
        lb.lb__jsonw_free(w)
        w = lb.lb__jsonw_new()
        assert exp.extra_file(q, 1, ctypes.byref(fname), w) == 0
        lb.lb__jsonw_free(w)
    finally:
        if q:
            lb.lb_qmodel_free(q)
        lb.lb_model_close(m)
    return tensors, qc, hfq, values


@pytest.fixture(scope="module", params=list(ref.CONFIGS))
def both(request, tmp_path_factory, lib):
    algo = request.param
    base = tmp_path_factory.mktemp(f"mo-{algo}")
    weights, input_amax, kv_amax = ref.export(algo, base / "modelopt", original_dir=base / "original")
    theirs = {
        "tensors": ref.read_tensors(base / "modelopt" / "model.safetensors"),
        "config": json.loads((base / "modelopt" / "config.json").read_text())["quantization_config"],
        "hf_quant_config": json.loads((base / "modelopt" / "hf_quant_config.json").read_text()),
    }
    lb = bind(lib)
    t, qc, hfq, values = lowbit_export(lb, algo, base / "original", input_amax, kv_amax)
    mine = {"tensors": t, "config": qc, "hf_quant_config": hfq, "values": values, "base": base,
            "qmodel_factory": lambda: build_qmodel(lb, algo, base / "original", input_amax, kv_amax)}
    return algo, mine, theirs


def test_hf_quant_config_is_modelopts(both):
    algo, mine, theirs = both
    assert mine["hf_quant_config"]["producer"] == {"name": "lowbit", "version": mine["hf_quant_config"]["producer"]["version"]}
    assert list(mine["hf_quant_config"]) == list(theirs["hf_quant_config"])
    assert mine["hf_quant_config"]["quantization"] == theirs["hf_quant_config"]["quantization"]
    # the same key order too (json.dumps of dicts keeps it)
    assert list(mine["hf_quant_config"]["quantization"]) == list(theirs["hf_quant_config"]["quantization"])


def test_config_json_quantization_config_is_modelopts(both):
    algo, mine, theirs = both
    a, b = dict(mine["config"]), dict(theirs["config"])
    assert a.pop("producer")["name"] == "lowbit"
    b.pop("producer")
    assert json.dumps(a) == json.dumps(b)


def test_tensor_names_dtypes_shapes_are_modelopts(both):
    algo, mine, theirs = both
    m, t = mine["tensors"], theirs["tensors"]
    assert sorted(m) == sorted(t), f"only lowbit: {sorted(set(m) - set(t))}; only ModelOpt: {sorted(set(t) - set(m))}"
    for name in sorted(t):
        assert m[name].dtype == t[name].dtype, f"{name}: {m[name].dtype} vs ModelOpt {t[name].dtype}"
        assert tuple(m[name].shape) == tuple(t[name].shape), f"{name}: {tuple(m[name].shape)} vs {tuple(t[name].shape)}"


SCALES = ("weight_scale_2", "input_scale", "k_scale", "v_scale")


def fp8_input_scale(algo, name):
    """An FP8 layer's static input scale: lowbit writes amax/448 rounded to the
    model's dtype (bf16), the value it evaluated and the one compressed-tensors
    stores (src/weights/engine_scales.h); ModelOpt keeps fp32."""
    return name.endswith(".input_scale") and (algo == "FP8" or (algo == "MIXED_PRECISION" and ".mlp." not in name))


def test_plain_tensors_and_static_scales_have_modelopts_bytes(both):
    algo, mine, theirs = both
    m, t = mine["tensors"], theirs["tensors"]
    checked = 0
    for name in sorted(t):
        suffix = name.rpartition(".")[2]
        fp8_scale = suffix == "weight_scale" and t[name].dtype == torch.float32
        if fp8_input_scale(algo, name):
            want = t[name].to(torch.bfloat16).to(torch.float32)  # torch's round-to-nearest-even
            assert m[name].dtype == torch.float32 and torch.equal(m[name], want), \
                f"{name}: lowbit {m[name]} vs ModelOpt's {t[name]} in bf16 {want}"
            checked += 1
        elif t[name].dtype in (torch.bfloat16,) or suffix in SCALES or fp8_scale:
            assert torch.equal(ref.torch_bytes(m[name]), ref.torch_bytes(t[name])), \
                f"{name}: lowbit {m[name].flatten()[:4]} vs ModelOpt {t[name].flatten()[:4]}"
            checked += 1
    assert checked > 0


def test_modelopt_dequantizes_to_lowbits_values(both):
    algo, mine, theirs = both
    m = mine["tensors"]

    class W:
        def __init__(self, module):
            self.module = module

        def torch(self, n):
            return m[self.module + n[1:]]

    for name, vals in mine["values"].items():
        module = name[: -len(".weight")]
        kind = "NVFP4" if algo == "MIXED_PRECISION" and ".mlp." in module else \
            "FP8" if algo == "MIXED_PRECISION" else algo
        deq = modelopt_dequantize(kind, W(module))
        assert np.array_equal(deq.reshape(-1), vals), f"{name}: ModelOpt's dequantization differs from lowbit's"


def test_compressed_tensors_converter_accepts_nvfp4(both):
    algo, mine, _ = both
    if algo not in ("NVFP4", "W4A16_NVFP4"):
        pytest.skip("the converter is for NVFP4")
    from compressed_tensors.entrypoints.convert.converters.modelopt_nvfp4 import ModelOptNvfp4Converter
    from compressed_tensors.quantization import QuantizationArgs

    kv = QuantizationArgs(num_bits=8, type="float", strategy="tensor", dynamic=False, symmetric=True)
    t = dict(mine["tensors"])
    out = ModelOptNvfp4Converter(ignore=["lm_head", "re:.*embed_tokens"], targets=["Linear"], kv_cache_scheme=kv).validate(t)
    assert any(k.endswith("weight_global_scale") for k in out)


def test_lowbit_reads_its_own_checkpoint_back(both, lib):
    """The directory written from lowbit's tensors and JSON (as the export
    driver lays it out) is read by lowbit's ModelOpt reader (lb_model_open):
    every quantized weight dequantizes to the values lowbit evaluated, and
    every other tensor is the same."""
    from safetensors.torch import save_file

    algo, mine, _ = both
    out = mine["base"] / "lowbit"
    out.mkdir(exist_ok=True)
    save_file({k: v.contiguous() for k, v in mine["tensors"].items()}, str(out / "model.safetensors"))
    cfg = json.loads((mine["base"] / "original" / "config.json").read_text())
    cfg["quantization_config"] = mine["config"]
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    (out / "hf_quant_config.json").write_text(json.dumps(mine["hf_quant_config"], indent=2))

    lb = bind(lib)
    lb.lb_model_find.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lb.lb_model_find.restype = ctypes.c_void_p
    lb.lb_tensor_to_f32.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    m = ctypes.c_void_p()
    assert lb.lb_model_open(str(out).encode(), ctypes.byref(m)) == LB_OK, lb.lb_last_error()
    try:
        for name, vals in mine["values"].items():
            t = lb.lb_model_find(m, name.encode())
            assert t, f"{name} not in what lowbit reads back"
            got = np.empty_like(vals)
            assert lb.lb_tensor_to_f32(t, got.ctypes.data) == LB_OK, lb.lb_last_error()
            assert np.array_equal(got, vals), f"{name}: read back differs"
        for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"):
            t = lb.lb_model_find(m, name.encode())
            assert t, name
            ours = mine["tensors"][name].float().numpy().reshape(-1)
            got = np.empty_like(ours)
            assert lb.lb_tensor_to_f32(t, got.ctypes.data) == LB_OK
            assert np.array_equal(got, ours), name
    finally:
        lb.lb_model_close(m)


class ExportOptions(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int), ("max_shard_bytes", ctypes.c_uint64), ("model_path", ctypes.c_char_p),
                ("threads", ctypes.c_int), ("verify", ctypes.c_int), ("progress", ctypes.c_void_p),
                ("progress_ctx", ctypes.c_void_p)]


class ExportResult(ctypes.Structure):
    _fields_ = [("tensors", ctypes.c_uint64), ("quantized", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("weight_params", ctypes.c_uint64), ("bits_per_weight", ctypes.c_double), ("shards", ctypes.c_uint32)]


LB_EXPORT_MODELOPT = 1


def test_lb_export_writes_modelopts_checkpoint(both, lib):
    """The same quantized model through the public lb_export (the driver:
    files, config.json, read-back verification) gives the checkpoint
    ModelOpt writes: the same file set, JSON and tensor structure."""
    algo, mine, theirs = both
    lb = bind(lib)
    if not hasattr(lb, "lb_export"):
        pytest.skip("lb_export is not in this build")
    lb.lb_export.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ExportOptions),
                             ctypes.POINTER(ExportResult)]
    out = mine["base"] / "lb_export"
    q, m = mine["qmodel_factory"]()
    try:
        o = ExportOptions(format=LB_EXPORT_MODELOPT, model_path=str(mine["base"] / "original").encode(), threads=1,
                          verify=1)
        res = ExportResult()
        assert lb.lb_export(q, str(out).encode(), ctypes.byref(o), ctypes.byref(res)) == LB_OK, lb.lb_last_error()
    finally:
        lb.lb_qmodel_free(q)
        lb.lb_model_close(m)
    files = {p.name for p in out.iterdir()}
    theirs_files = {p.name for p in (mine["base"] / "modelopt").iterdir()}
    assert {"config.json", "hf_quant_config.json", "model.safetensors"} <= files
    assert {"config.json", "hf_quant_config.json", "model.safetensors"} <= theirs_files
    hfq = json.loads((out / "hf_quant_config.json").read_text())
    assert hfq["quantization"] == theirs["hf_quant_config"]["quantization"]
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert qc.pop("producer")["name"] == "lowbit"
    want = dict(theirs["config"])
    want.pop("producer")
    assert json.dumps(qc) == json.dumps(want)
    t = ref.read_tensors(out / "model.safetensors")
    assert sorted(t) == sorted(theirs["tensors"])
    for name, v in theirs["tensors"].items():
        assert t[name].dtype == v.dtype and tuple(t[name].shape) == tuple(v.shape), name
        if name in mine["tensors"]:
            assert torch.equal(ref.torch_bytes(t[name]), ref.torch_bytes(mine["tensors"][name])), name
