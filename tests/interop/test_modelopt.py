"""lowbit's ModelOpt writer (src/export/modelopt*.c) against nvidia-modelopt.

The judge is the package itself: modelopt_reference.py has it quantize a
tiny fp32 Llama (fp32: for bf16 weights ModelOpt divides by the FP8 scale in
bf16, rounding twice) on CPU (mtq.quantize, a calibration forward) and export it
(export_hf_checkpoint) under FP8, FP8_PER_CHANNEL_PER_TOKEN, NVFP4,
W4A16_NVFP4 and MXFP8. lowbit then quantizes the *same* original weights
(lb_quantize under the spec of the matching lowbit scheme) and writes one
layer's tensors (lb__mo_emit_weight) with the calibrated input range
ModelOpt measured. For modules outside a fused group (o_proj, down_proj:
their NVFP4 weight_scale_2 is their own) the tensors must be ModelOpt's:
the same names, dtypes, shapes and bytes. lowbit's dequantization must also
equal the package's own FP8QTensor / NVFP4QTensor / MXFP8QTensor
dequantization of lowbit's bytes, in fp32, exactly; and NVFP4 goes through
compressed-tensors' reader (its ModelOpt converter's rules: global scale =
1 / weight_scale_2) to the same values.

exclude_modules: lowbit's summary equals ModelOpt's
_prefix_wildcard_summarize_exclude_modules on many name sets. Refusals: specs
ModelOpt cannot express are LB_ERR_UNSUPPORTED naming the tensor, the format
and what works.

Run with the interop environment (make test-interop):
  LOWBIT_BUILD=build ~/.cache/lowbit/interop-*/bin/python -m pytest tests/interop/test_modelopt.py
"""
import ctypes
import pathlib
import random
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

torch = pytest.importorskip("torch")
pytest.importorskip("modelopt")

import internal_lib  # noqa: E402
import modelopt_reference as ref  # noqa: E402
from lowbit_ctypes import QSpec, QView  # noqa: E402

LB_OK, LB_ERR_UNSUPPORTED = 0, 7  # lowbit.h lb_status
ACT_NONE, ACT_DYNAMIC, ACT_STATIC, ACT_LOCAL = 0, 1, 2, 3
ALGO = {"FP8": 0, "FP8_PER_CHANNEL_PER_TOKEN": 1, "NVFP4": 2, "W4A16_NVFP4": 3, "MXFP8": 4}

# The lowbit scheme behind each ModelOpt algorithm (src/weights/scheme.c):
# weight spec, input mode, input spec.
SCHEMES = {
    "FP8": ("fp8_e4m3:tensor", ACT_STATIC, "fp8_e4m3:tensor"),
    "FP8_PER_CHANNEL_PER_TOKEN": ("fp8_e4m3:channel", ACT_DYNAMIC, "fp8_e4m3:token"),
    "NVFP4": ("nvfp4", ACT_LOCAL, "nvfp4"),
    "W4A16_NVFP4": ("nvfp4", ACT_NONE, None),
    "MXFP8": ("mxfp8_e4m3:round=rceil", ACT_DYNAMIC, "mxfp8_e4m3:round=rceil"),
}


class QAct(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("spec", QSpec)]


class OutTensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
        ("n_dims", ctypes.c_int),
        ("shape", ctypes.c_uint64 * 4),
        ("data", ctypes.c_void_p),
        ("bytes", ctypes.c_uint64),
    ]


EMIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(OutTensor))


@pytest.fixture(scope="module")
def lib():
    lb = internal_lib.load()
    lb.lb_qspec_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(QSpec)]
    lb.lb_quantize.argtypes = [ctypes.POINTER(QSpec), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                               ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
    lb.lb_dequantize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lb.lb_qtensor_view_get.argtypes = [ctypes.c_void_p, ctypes.POINTER(QView)]
    lb.lb_qtensor_free.argtypes = [ctypes.c_void_p]
    lb.lb_last_error.restype = ctypes.c_char_p
    lb.lb__mo_classify.argtypes = [ctypes.c_char_p, ctypes.POINTER(QSpec), ctypes.POINTER(QAct), ctypes.c_uint64,
                                   ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]
    lb.lb__mo_emit_weight.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(QView), ctypes.c_float, EMIT,
                                      ctypes.c_void_p]
    lb.lb__jsonw_new.restype = ctypes.c_void_p
    lb.lb__jsonw_free.argtypes = [ctypes.c_void_p]
    lb.lb__jsonw_text.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lb.lb__jsonw_text.restype = ctypes.c_char_p
    lb.lb__mo_exclude_json.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                       ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t, ctypes.c_void_p]
    return lb


def spec(lib, text):
    s = QSpec()
    assert lib.lb_qspec_parse(text.encode(), ctypes.byref(s)) == LB_OK, text
    return s


def act(lib, mode, text):
    a = QAct()
    a.mode = mode
    if text:
        a.spec = spec(lib, text)
    return a


class Written:
    """lowbit's quantized tensor of one weight and what the writer emitted."""

    def __init__(self, lib, module, algo, w, input_amax):
        wtext, mode, atext = SCHEMES[algo]
        s = spec(lib, wtext)
        a = act(lib, mode, atext)
        got = ctypes.c_int(-1)
        st = lib.lb__mo_classify(f"{module}.weight".encode(), ctypes.byref(s), ctypes.byref(a), w.shape[0],
                                 w.shape[1], ctypes.byref(got))
        assert st == LB_OK, lib.lb_last_error()
        assert got.value == ALGO[algo]
        x = np.ascontiguousarray(w, dtype=np.float32)
        h = ctypes.c_void_p()
        assert lib.lb_quantize(ctypes.byref(s), x.ctypes.data, x.shape[0], x.shape[1], 1, ctypes.byref(h)) == LB_OK
        try:
            view = QView()
            assert lib.lb_qtensor_view_get(h, ctypes.byref(view)) == LB_OK
            self.dequantized = np.empty_like(x)
            assert lib.lb_dequantize(h, self.dequantized.ctypes.data, 1) == LB_OK
            self.tensors = {}

            def emit(_sink, t):
                t = t.contents
                shape = tuple(t.shape[i] for i in range(t.n_dims))
                raw = ctypes.string_at(t.data, t.bytes)
                self.tensors[t.name.decode()] = (t.dtype.decode(), shape, np.frombuffer(raw, np.uint8).copy())
                return LB_OK

            cb = EMIT(emit)
            st = lib.lb__mo_emit_weight(module.encode(), ALGO[algo], ctypes.byref(view), input_amax, cb, None)
            assert st == LB_OK, lib.lb_last_error()
        finally:
            lib.lb_qtensor_free(h)

    def torch(self, name):
        """The emitted tensor as torch (its safetensors dtype)."""
        dtype, shape, raw = self.tensors[name]
        tdt = {"F8_E4M3": torch.float8_e4m3fn, "U8": torch.uint8, "F32": torch.float32}[dtype]
        return torch.frombuffer(bytearray(raw.tobytes()), dtype=torch.uint8).view(tdt).reshape(shape)


ST_DTYPE = {torch.float8_e4m3fn: "F8_E4M3", torch.uint8: "U8", torch.float32: "F32", torch.bfloat16: "BF16"}


@pytest.fixture(scope="module", params=list(SCHEMES))
def reference(request, tmp_path_factory):
    algo = request.param
    out = tmp_path_factory.mktemp(f"modelopt-{algo}")
    weights, input_amax, kv_amax = ref.export(algo, out, dtype="float32")
    return algo, out, weights, input_amax, ref.read_tensors(out / "model.safetensors")


# o_proj and down_proj: outside the fused groups, so ModelOpt's NVFP4
# weight_scale_2 is the module's own (q/k/v and gate/up share one).
UNFUSED = ["model.layers.0.self_attn.o_proj", "model.layers.1.mlp.down_proj"]


@pytest.mark.parametrize("module", UNFUSED)
def test_layer_tensors_are_modelopts(lib, reference, module):
    algo, _, weights, input_amax, theirs = reference
    mine = Written(lib, module, algo, weights[f"{module}.weight"], input_amax.get(module, 0.0))
    expected = {k for k in theirs if k.startswith(module + ".")}
    assert set(mine.tensors) == expected, f"{algo}: lowbit {sorted(mine.tensors)} vs ModelOpt {sorted(expected)}"
    for name in sorted(expected):
        t = theirs[name]
        dtype, shape, raw = mine.tensors[name]
        assert dtype == ST_DTYPE[t.dtype], f"{name}: {dtype} vs ModelOpt {t.dtype}"
        assert shape == tuple(t.shape), f"{name}: shape {shape} vs ModelOpt {tuple(t.shape)}"
        theirs_raw = ref.as_numpy_bytes(t)
        differ = np.flatnonzero(raw != theirs_raw)
        assert differ.size == 0, f"{algo} {name}: {differ.size} of {raw.size} bytes differ from ModelOpt's, first at {differ[:5]}"


def modelopt_dequantize(algo, w):
    """ModelOpt's own dequantization of the written tensors (fp32)."""
    from modelopt.torch.quantization.qtensor import FP8QTensor, MXFP8QTensor, NVFP4QTensor

    q = w.torch("m.weight")
    scale = w.torch("m.weight_scale")
    if algo in ("FP8", "FP8_PER_CHANNEL_PER_TOKEN"):
        rows, cols = q.shape
        if scale.ndim == 1:
            scale = scale.reshape(rows, 1)
        return FP8QTensor((rows, cols), torch.float32, q).dequantize(torch.float32, scale=scale).numpy()
    if algo in ("NVFP4", "W4A16_NVFP4"):
        rows = q.shape[0]
        t = NVFP4QTensor((rows, q.shape[1] * 2), torch.float32, q)
        return t.dequantize(torch.float32, scale=scale, double_scale=w.torch("m.weight_scale_2"),
                            block_sizes={-1: 16}).numpy()
    if algo == "MXFP8":
        return MXFP8QTensor(tuple(q.shape), torch.float32, q).dequantize(torch.float32, scale=scale).numpy()
    raise AssertionError(algo)


def weights_with_outliers(rows, cols, seed):
    """Heavy-tailed values with a few large ones and an all-zero block: the
    cases where block scales floor, saturate or differ between conventions."""
    r = np.random.default_rng(seed)
    w = (r.standard_t(3, size=(rows, cols)) * 0.02).astype(np.float32)
    w[r.integers(0, rows, 4), r.integers(0, cols, 4)] *= 40
    w[0, :32] = 0
    w[1, :16] = 1e-9
    return w


@pytest.mark.parametrize("algo", list(SCHEMES))
@pytest.mark.parametrize("seed", [0, 1])
def test_modelopt_dequantizes_to_lowbits_values(lib, algo, seed):
    w = weights_with_outliers(48, 96, seed)
    mine = Written(lib, "m", algo, w, 3.5)
    theirs = modelopt_dequantize(algo, mine)
    # equal values (a zero's sign may differ: ModelOpt's E2M1 table decodes -0 as +0)
    differ = np.flatnonzero(theirs != mine.dequantized)
    assert differ.size == 0, f"{algo}: {differ.size} values differ, first {differ[:5]}"
    # and the static input scales are the package's formulas
    if algo == "FP8":
        assert mine.torch("m.input_scale").item() == np.float32(3.5) / np.float32(448)
    if algo == "NVFP4":
        assert mine.torch("m.input_scale").item() == np.float32(3.5) / np.float32(6 * 448)


@pytest.mark.parametrize("algo", ["NVFP4", "W4A16_NVFP4"])
def test_compressed_tensors_reads_lowbits_nvfp4(lib, algo):
    """compressed-tensors' own ModelOpt converter (ModelOptNvfp4Converter:
    weight -> weight_packed, 1 / weight_scale_2 -> weight_global_scale,
    1 / input_scale -> input_global_scale) takes lowbit's tensors, and its
    NVFP4 decompression gives lowbit's values to its output precision: it
    decompresses to bf16 (unpacked E2M1 values are bf16), so within half a
    bf16 step (2^-9 relative) plus the rounding of the reciprocal."""
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.entrypoints.convert.converters.modelopt_nvfp4 import ModelOptNvfp4Converter
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import NVFP4

    w = weights_with_outliers(32, 64, 7)
    mine = Written(lib, "model.layers.0.mlp.down_proj", algo, w, 2.0)
    tensors = {n: mine.torch(n) for n in mine.tensors}
    tensors = ModelOptNvfp4Converter(targets=["Linear"]).validate(tensors)
    m = "model.layers.0.mlp.down_proj"
    assert tensors[f"{m}.weight_packed"].dtype == torch.uint8
    assert (f"{m}.input_global_scale" in tensors) == (algo == "NVFP4")
    sd = {k.rpartition(".")[2]: v for k, v in tensors.items()}
    out = NVFP4PackedCompressor.decompress(sd, QuantizationScheme(targets=["Linear"], **NVFP4))
    got = out["weight"]
    assert got.dtype == torch.bfloat16, got.dtype
    np.testing.assert_allclose(got.float().numpy(), mine.dequantized, rtol=2 ** -8, atol=0)
    # and it is not a loose match: a wrong nibble order or scale is far off
    assert np.abs(got.float().numpy() - mine.dequantized).max() < 2 ** -8 * np.abs(mine.dequantized).max()


REFUSED = [
    ("int4:g128", ACT_NONE, None, 64, 256, "compressed-tensors"),
    ("int8:channel", ACT_DYNAMIC, "int8:token", 64, 256, "compressed-tensors"),
    ("mxfp4", ACT_NONE, None, 64, 256, "no format"),
    ("fp8_e4m3:g128", ACT_DYNAMIC, "fp8_e4m3:g128", 64, 256, "no format"),
    ("fp8_e4m3:tensor", ACT_NONE, None, 64, 256, "static per-tensor"),
    ("fp8_e4m3:channel", ACT_STATIC, "fp8_e4m3:tensor", 64, 256, "dynamic per-token"),
    ("nvfp4", ACT_NONE, None, 64, 72, "not a multiple of 16"),
    ("nvfp4", ACT_DYNAMIC, "fp8_e4m3:token", 64, 64, "W4A16_NVFP4"),
    ("mxfp8_e4m3", ACT_NONE, None, 64, 64, "no weight-only MXFP8"),
    ("mxfp8_e4m3", ACT_DYNAMIC, "mxfp8_e4m3", 64, 48, "not a multiple of 32"),
]


@pytest.mark.parametrize("wtext,mode,atext,rows,cols,why", REFUSED)
def test_refusals_name_tensor_format_and_what_works(lib, wtext, mode, atext, rows, cols, why):
    s, a = spec(lib, wtext), act(lib, mode, atext)
    got = ctypes.c_int(-1)
    name = b"model.layers.3.mlp.up_proj.weight"
    st = lib.lb__mo_classify(name, ctypes.byref(s), ctypes.byref(a), rows, cols, ctypes.byref(got))
    msg = lib.lb_last_error().decode()
    assert st == LB_ERR_UNSUPPORTED, (st, msg)
    assert got.value == -1
    assert name.decode() in msg and "modelopt" in msg and why in msg, msg
    assert "W8A8-FP8-STATIC" in msg and "--format compressed-tensors" in msg, msg


def lowbit_exclude(lib, unquantized, quantized):
    def arr(names):
        a = (ctypes.c_char_p * max(1, len(names)))()
        for i, n in enumerate(names):
            a[i] = n.encode()
        return a

    w = lib.lb__jsonw_new()
    try:
        assert lib.lb__mo_exclude_json(arr(unquantized), len(unquantized), arr(quantized), len(quantized), w) == LB_OK
        import json

        return json.loads(lib.lb__jsonw_text(w, None).decode())
    finally:
        lib.lb__jsonw_free(w)


def llama_modules(layers):
    names = ["model.embed_tokens"]
    for i in range(layers):
        names += [f"model.layers.{i}.self_attn.{p}_proj" for p in "qkvo"]
        names += [f"model.layers.{i}.mlp.{p}_proj" for p in ("gate", "up", "down")]
    return names + ["lm_head"]


@pytest.mark.parametrize("seed", range(40))
def test_exclude_modules_is_modelopts_summary(lib, seed):
    from modelopt.torch.export.quant_utils import _prefix_wildcard_summarize_exclude_modules

    r = random.Random(seed)
    names = llama_modules(r.choice([2, 3, 12, 24]))
    # whole layers, whole kinds or single modules kept 16-bit
    kind = r.randrange(4)
    if kind == 0:
        keep = {n for n in names if "layers" not in n}
    elif kind == 1:
        layer = r.randrange(len(names) // 7)
        keep = {n for n in names if "layers" not in n or f"layers.{layer}." in n}
    elif kind == 2:
        keep = {n for n in names if "layers" not in n or "mlp" in n and r.random() < 0.5}
    else:
        keep = {n for n in names if r.random() < 0.3}
    unq = [n for n in names if n in keep]
    qn = [n for n in names if n not in keep]
    expected = sorted(_prefix_wildcard_summarize_exclude_modules(unq, qn))
    assert lowbit_exclude(lib, unq, qn) == expected


def test_exclude_modules_of_the_reference(lib, reference):
    """The exclude list ModelOpt wrote for the tiny Llama (embeddings and
    head kept) is lowbit's for the same modules."""
    import json

    algo, out, *_ = reference
    if algo == "MIXED_PRECISION":
        pytest.skip("MIXED_PRECISION lists quantized_layers instead")
    cfg = json.loads((out / "hf_quant_config.json").read_text())
    names = llama_modules(2)
    unq = ["model.embed_tokens", "lm_head"]
    qn = [n for n in names if n not in unq]
    assert lowbit_exclude(lib, unq, qn) == cfg["quantization"]["exclude_modules"]
