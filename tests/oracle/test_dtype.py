"""The tensor storage types (lb_dtype_*) against the gguf package (0.19.0),
numpy and ml_dtypes.

* The table: every row's names, GGUF id and block geometry against
  gguf.GGMLQuantizationType and gguf.GGML_QUANT_SIZES.
* lb_dtype_to_f32 for every ggml block type: thousands of random blocks
  (random bytes, fp16 scale fields replaced by finite fp16 values of
  realistic magnitude) plus edge blocks (zero, negative, subnormal, largest
  and non-finite scales; all-0x00 and all-0xFF codes), bit-equal (uint32
  views) to gguf.quants.dequantize.
* lb_dtype_from_f32 for q8_0, q4_0, q4_1, q5_0, q5_1, mxfp4 (and bf16):
  byte-equal to gguf.quants.quantize on normal, heavy-tailed, zero, tiny,
  huge-outlier, exact-tie and power-of-two-boundary blocks (except where
  gguf and ggml differ: lowbit writes ggml's bytes, and
  tests/llamacpp/test_ggml_quants_classic.py checks every written type
  against libggml); f16 against numpy astype.
* The plain types against numpy / ml_dtypes astype, every code point of
  the 8- and 16-bit ones.
* Errors: NULL, partial blocks, unknown ids, unsupported writes, NaN/inf
  (naming the element), lb_dtype_bytes overflow."""
import ctypes
import os
import pathlib
import sys

import gguf
import ml_dtypes as md
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as G

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
lib = ctypes.CDLL(str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "liblowbit.so"))

LB_OK, LB_ERR_ARG, LB_ERR_FORMAT, LB_ERR_NAN, LB_ERR_PARSE, LB_ERR_UNSUPPORTED = 0, 1, 2, 3, 6, 7


sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from lowbit_ctypes import DtypeInfo  # noqa: E402  (the struct, shared by the oracle tests)


lib.lb_last_error.restype = ctypes.c_char_p
lib.lb_dtype_get.restype = ctypes.POINTER(DtypeInfo)
lib.lb_dtype_get.argtypes = [ctypes.c_int]
lib.lb_dtype_by_name.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
lib.lb_dtype_from_ggml.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
lib.lb_dtype_bytes.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]
lib.lb_dtype_to_f32.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
lib.lb_dtype_from_f32.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
lib.lb_isa_set.argtypes = [ctypes.c_int]
lib.lb_isa_detected.restype = ctypes.c_int
lib.lb_encode_f32.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                              ctypes.c_int]

# The enum in lowbit.h, in order.
NAMES = ["f32", "f16", "bf16", "f64", "f8_e4m3", "f8_e5m2", "i8", "i16", "i32", "i64", "u8", "bool",
         "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "mxfp4", "nvfp4",
         "iq4_nl", "iq4_xs"]
DT = {n: i for i, n in enumerate(NAMES)}
# then LB_DT_QUANTIZED: a quantized checkpoint's logical weight (several file
# tensors), which has no bytes of its own; tests/model/test_hf_quantized.py reads it
QUANTIZED = len(NAMES)
COUNT = QUANTIZED + 1
SAFETENSORS = {"f64": "F64", "f32": "F32", "f16": "F16", "bf16": "BF16", "f8_e4m3": "F8_E4M3",
               "f8_e5m2": "F8_E5M2", "i64": "I64", "i32": "I32", "i16": "I16", "i8": "I8", "u8": "U8",
               "bool": "BOOL"}
NO_GGML = {"f8_e4m3", "f8_e5m2", "u8", "bool"}
WRITES = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "mxfp4",
          "nvfp4", "iq4_nl", "iq4_xs"}
BLOCK_TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "mxfp4", "nvfp4",
               "iq4_nl", "iq4_xs"]
# byte offsets of the fp16 scale fields in each block (gguf's layouts)
FP16_FIELDS = {"q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2], "q8_0": [0], "q2_k": [80, 82],
               "q3_k": [108], "q4_k": [0, 2], "q5_k": [0, 2], "q6_k": [208], "mxfp4": [], "nvfp4": [],
               "iq4_nl": [0], "iq4_xs": [0]}
RANDOM_BLOCKS = 4000


def ggml_of(name):
    return G[name.upper()]


def info(name):
    return lib.lb_dtype_get(DT[name]).contents


def last_error():
    return lib.lb_last_error().decode()


def to_f32(name, raw, n):
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    out = np.full(n, np.nan, dtype=np.float32)
    st = lib.lb_dtype_to_f32(DT[name], raw.ctypes.data, n, out.ctypes.data)
    assert st == LB_OK, last_error()
    return out


def from_f32(name, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    i = info(name)
    out = np.zeros(x.size // i.block * i.block_bytes, dtype=np.uint8)
    st = lib.lb_dtype_from_f32(DT[name], x.ctypes.data, x.size, out.ctypes.data)
    assert st == LB_OK, last_error()
    return out


def gguf_dequantize(blocks, name):
    """The oracle; inf scales (mxfp4's e = 255, a q8_0 scale past fp16's range) overflow quietly."""
    with np.errstate(all="ignore"):
        return gguf.quants.dequantize(blocks, ggml_of(name)).reshape(-1)


def assert_bits_equal(got, want, what):
    g, w = np.asarray(got, np.float32).view(np.uint32), np.asarray(want, np.float32).view(np.uint32)
    bad = np.nonzero(g != w)[0]
    assert bad.size == 0, (f"{what}: {bad.size} of {g.size} differ; first at {bad[0]}: "
                           f"lowbit 0x{g[bad[0]]:08x}, oracle 0x{w[bad[0]]:08x}")


# ===== the table =====

def test_table_rows():
    assert lib.lb_dtype_get(COUNT).__bool__() is False and lib.lb_dtype_get(-1).__bool__() is False
    for name in NAMES:
        i = info(name)
        assert i.id == DT[name] and i.name.decode() == name
        st = SAFETENSORS.get(name)
        assert (i.st_name.decode() if i.st_name else None) == st, name
        if name in NO_GGML:
            assert i.ggml_type == -1, name
            assert (i.block, i.block_bytes) == (1, {"f8_e4m3": 1, "f8_e5m2": 1, "u8": 1, "bool": 1}[name])
        else:
            g = ggml_of(name)
            assert i.ggml_type == int(g), name
            assert (i.block, i.block_bytes) == GGML_QUANT_SIZES[g], name
        assert i.can_read == 1, name
        assert i.can_write == (name in WRITES), name


def test_quantized_row():
    i = lib.lb_dtype_get(QUANTIZED).contents
    assert i.id == QUANTIZED and i.name.decode() == "quantized" and not i.st_name and i.ggml_type == -1
    assert (i.block, i.block_bytes, i.can_read, i.can_write) == (1, 0, 1, 0)
    out = ctypes.c_uint64(7)
    assert lib.lb_dtype_bytes(QUANTIZED, 1, ctypes.byref(out)) == LB_ERR_ARG and out.value == 7


def test_by_name():
    out = ctypes.c_int(-1)
    for name in NAMES:
        spellings = {name, name.upper(), name.capitalize()}
        if name in SAFETENSORS:
            spellings.add(SAFETENSORS[name])
        if name not in NO_GGML:
            spellings |= {ggml_of(name).name, ggml_of(name).name.lower()}
        for s in spellings:
            assert lib.lb_dtype_by_name(s.encode(), ctypes.byref(out)) == LB_OK, s
            assert out.value == DT[name], s
    for bad in [b"", b"q4", b"f8", b"q8_1", b"float32", b"q4_0 "]:
        assert lib.lb_dtype_by_name(bad, ctypes.byref(out)) == LB_ERR_FORMAT, bad
        assert bad.decode().strip() in last_error()
    assert lib.lb_dtype_by_name(None, ctypes.byref(out)) == LB_ERR_ARG


def test_from_ggml():
    out = ctypes.c_int(-1)
    for name in NAMES:
        if name not in NO_GGML:
            assert lib.lb_dtype_from_ggml(int(ggml_of(name)), ctypes.byref(out)) == LB_OK
            assert out.value == DT[name]
    known = {int(ggml_of(n)) for n in NAMES if n not in NO_GGML}
    for g in list(G) + [-1, 4, 5, 31, 1000]:
        if int(g) not in known:
            assert lib.lb_dtype_from_ggml(int(g), ctypes.byref(out)) == LB_ERR_PARSE, g
            assert str(int(g)) in last_error()


def test_bytes():
    out = ctypes.c_uint64(7)
    for name in NAMES:
        i = info(name)
        for blocks in [0, 1, 3, 1000, 2**40]:
            assert lib.lb_dtype_bytes(DT[name], blocks * i.block, ctypes.byref(out)) == LB_OK
            assert out.value == blocks * i.block_bytes
        if i.block > 1:
            for n in [1, i.block - 1, i.block + 1, 2**64 - 1]:
                out.value = 7
                assert lib.lb_dtype_bytes(DT[name], n, ctypes.byref(out)) == LB_ERR_ARG
                assert out.value == 7 and "block" in last_error()
        # the largest count that fits, and the next whole block, which does not
        top = (2**64 - 1) // i.block_bytes * i.block
        if top + i.block < 2**64:
            assert lib.lb_dtype_bytes(DT[name], top, ctypes.byref(out)) == LB_OK
            assert out.value == top // i.block * i.block_bytes
            out.value = 7
            assert lib.lb_dtype_bytes(DT[name], top + i.block, ctypes.byref(out)) == LB_ERR_ARG
            assert out.value == 7 and "overflow" in last_error()
    assert lib.lb_dtype_bytes(COUNT, 1, ctypes.byref(out)) == LB_ERR_ARG


# ===== block types: dequantize =====

def fp16_scales(rng, n):
    """Finite fp16 scales of the magnitudes real checkpoints hold (2^-24 .. 2^4), either sign."""
    mag = 2.0 ** rng.uniform(-24, 4, n)
    sign = np.where(rng.random(n) < 0.2, -1.0, 1.0)
    return (mag * sign).astype(np.float16).view(np.uint16)


def edge_scales():
    return np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0200, 0x0400, 0x3C00, 0xBC00,
                     0x7BFF, 0xFBFF, 0x1400, 0x2E66, 0xA8F5], dtype=np.uint16)


def random_blocks(name, rng):
    i = info(name)
    blocks = rng.integers(0, 256, (RANDOM_BLOCKS, i.block_bytes), dtype=np.uint8)
    for off in FP16_FIELDS[name]:
        blocks[:, off:off + 2] = fp16_scales(rng, RANDOM_BLOCKS).view(np.uint8).reshape(-1, 2)
    edges = []
    for fill in (0x00, 0xFF, 0x55, 0xAA, 0x0F, 0xF0):
        for sc in edge_scales():
            b = np.full(i.block_bytes, fill, dtype=np.uint8)
            for k, off in enumerate(FP16_FIELDS[name]):
                s = sc if k == 0 else edge_scales()[(list(edge_scales()).index(sc) + 3) % len(edge_scales())]
                b[off:off + 2] = np.array([s], np.uint16).view(np.uint8)
            edges.append(b)
    if name == "mxfp4":  # every E8M0 scale with every code
        for e in range(256):
            b = np.zeros(17, np.uint8)
            b[0] = e
            b[1:9] = [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]
            b[9:] = [0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01]
            edges.append(b)
    if name == "nvfp4":  # every UE4M3 scale code (sign bit, 0x7F and 0xFF included)
        for c in range(0, 256, 4):
            b = np.full(36, 0xA7, np.uint8)
            b[:4] = [c, c + 1, c + 2, c + 3]
            b[4:] = np.arange(32, dtype=np.uint8) * 9
            edges.append(b)
    return np.concatenate([blocks, np.array(edges, dtype=np.uint8)])


@pytest.mark.parametrize("name", BLOCK_TYPES)
def test_dequantize_matches_gguf(name):
    rng = np.random.default_rng(1000 + DT[name])
    blocks = random_blocks(name, rng)
    i = info(name)
    n = blocks.shape[0] * i.block
    want = gguf_dequantize(blocks, name)
    got = to_f32(name, blocks.reshape(-1), n)
    assert_bits_equal(got, want, name)
    # a run that starts at an odd address reads the same (blocks have alignment 1)
    buf = np.zeros(blocks.size + 1, np.uint8)
    buf[1:] = blocks.reshape(-1)
    out = np.zeros(n, np.float32)
    assert lib.lb_dtype_to_f32(DT[name], buf.ctypes.data + 1, n, out.ctypes.data) == LB_OK
    assert_bits_equal(out, want, name + " (unaligned)")


@pytest.mark.parametrize("name", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
                                  "iq4_nl", "iq4_xs"])
def test_dequantize_nonfinite_scales(name):
    """inf and NaN scales (not in real files, but possible in broken ones) propagate as numpy does."""
    i = info(name)
    rng = np.random.default_rng(7)
    rows = []
    for sc in (0x7C00, 0xFC00, 0x7C01, 0x7E00, 0xFE3F, 0x7FFF):
        for fill in (0x00, 0x88, 0xFF):
            b = np.full(i.block_bytes, fill, np.uint8)
            b[:] = rng.integers(0, 256, i.block_bytes) if fill == 0x88 else fill
            for off in FP16_FIELDS[name]:
                b[off:off + 2] = np.array([sc], np.uint16).view(np.uint8)
            rows.append(b)
    blocks = np.array(rows)
    want = gguf_dequantize(blocks, name)
    assert_bits_equal(to_f32(name, blocks.reshape(-1), blocks.shape[0] * i.block), want, name)


# ===== block types: quantize =====

def quant_inputs(block, rng):
    """Blocks of test data, each `block` long, as one flat fp32 array."""
    nb = 2000
    parts = [
        rng.standard_normal(nb * block).astype(np.float32),                         # normal
        (rng.standard_t(2, nb * block) * 0.02).astype(np.float32),                  # heavy-tailed
        (rng.standard_cauchy(nb * block)).astype(np.float32),                        # heavier
        (rng.standard_normal(nb * block) * 10.0 ** rng.integers(-38, 38, nb * block)).astype(np.float32),
        np.zeros(block, np.float32), np.full(block, -0.0, np.float32),
    ]
    one_huge = rng.standard_normal((60, block)).astype(np.float32)
    for k, v in enumerate([1e30, -1e30, 3.4e38, -3.4e38, 65504, 65520, 1e5, 1e-30, 6e-8, -3e-39]):
        one_huge[k * 6: k * 6 + 6, (k * 5) % block] = v
    parts.append(one_huge.reshape(-1))
    # tiny blocks: the scale's reciprocal overflows, numpy's casts decide the codes
    for mag in (1e-45, 1e-40, 1e-38, 3e-37, 2e-37, 1e-36):
        parts.append((rng.standard_normal(block) * mag).astype(np.float32))
        parts.append(np.full(block, mag, np.float32))
    # first and last element of largest magnitude, opposite signs
    b = rng.uniform(-1, 1, block).astype(np.float32)
    b[0], b[-1] = -2.0, 2.0
    parts.append(b.copy())
    b[0], b[-1] = 2.0, -2.0
    parts.append(b)
    # random fp32 bit patterns (finite), every exponent
    bits = rng.integers(0, 2**32, 200 * block, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    parts.append(np.where(np.isfinite(x), x, np.float32(1.5)))
    return np.concatenate(parts)


def tie_blocks(name, block):
    """Values exactly halfway between two codes, at the scales each quantizer picks."""
    out = []
    if name == "q8_0":  # amax 127 makes d = 1, so k + 0.5 is a tie of the rounding
        for off in range(0, 254, block - 1):
            b = np.arange(block, dtype=np.float32) - 127 + off + 0.5
            b = np.clip(b, -126.5, 126.5)
            b[0] = 127.0
            out += [b, -b]
        for s in (0.25, 3.0, 1e-3, 1e10):  # the same at other scales (ties no longer exact)
            out.append((np.arange(block, dtype=np.float32) - 16.5) * np.float32(s))
    if name == "q4_0":  # max -8 makes d = 1: x + 8.5 lands on integers and halves
        for shift in (0.0, 0.5, 0.25):
            b = (np.arange(block, dtype=np.float32) % 17 - 8 + shift).astype(np.float32)
            b[0] = -8.0
            out += [b, -b]
        b = np.linspace(-8, 8, block, dtype=np.float32)
        out += [b, b[::-1].copy()]
    if name == "mxfp4":  # amax 4 gives d = 0.5: the E2M1 grid; midpoints are ties
        mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                         0.125, 0.375], dtype=np.float32)
        for scale in (1.0, 2.0 ** -20, 2.0 ** 20, 2.0 ** -126, 2.0 ** 100):
            for sign in (1, -1):
                b = np.resize(mids, block) * np.float32(sign * scale)
                b[3] = np.float32(4 * scale)
                out.append(b.astype(np.float32))
    return np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)


def pow2_boundary_blocks(block):
    """mxfp4's scale is floor(log2(amax)): amax just below, at and above every power of two."""
    rows = []
    for e in range(1, 255):
        # log2 rounds up to the next integer for up to ~90 ulps below 2^128
        for m in list(range((1 << 23) - 100, 1 << 23)) + [0, 1, 2]:
            rows.append((e << 23) | m)
    for m in range(0, 1 << 23, 99991):  # fp32 subnormals
        rows.append(m + 1)
    amax = np.array(rows, np.uint32).view(np.float32)
    blocks = np.zeros((amax.size, block), np.float32)
    blocks[:, 5] = amax
    blocks[:, 6] = -amax * np.float32(0.4)
    blocks[:, 7] = amax * np.float32(0.6)
    return blocks.reshape(-1)


@pytest.mark.parametrize("name", ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "mxfp4"])
def test_quantize_matches_gguf(name):
    i = info(name)
    rng = np.random.default_rng(2000 + DT[name])
    sets = {"random": quant_inputs(i.block, rng), "ties": tie_blocks(name, i.block)}
    if name == "mxfp4":
        sets["pow2"] = pow2_boundary_blocks(i.block)
    for what, x in sets.items():
        if x.size == 0:  # no hand-made ties for this type
            continue
        assert x.size % i.block == 0 and np.isfinite(x).all()
        with np.errstate(all="ignore"):
            want = gguf.quants.quantize(x.reshape(-1, i.block), ggml_of(name))
        if name in ("q4_0", "q5_0"):
            # lowbit writes ggml's bytes, which differ from the gguf package's in one case: a block of zeros
            # whose first is -0. gguf's scale is that element / -8 (+0), ggml's starts from +0 and is -0 (0x8000)
            zero = (x.reshape(-1, i.block) == 0).all(axis=1)
            want[zero, :2] = [0x00, 0x80]
        want = want.reshape(-1)
        got = from_f32(name, x)
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, (f"{name} {what}: {bad.size} bytes differ, first in block {bad[0] // i.block_bytes}"
                               f" (byte {bad[0] % i.block_bytes}): lowbit {got[bad[0]]}, gguf {want[bad[0]]}")
        # and the bytes read back exactly as gguf reads them
        back = to_f32(name, got, x.size)
        assert_bits_equal(back, gguf_dequantize(want.reshape(-1, i.block_bytes), name), name + " round trip")


@pytest.mark.parametrize("name", sorted(WRITES - {"f32", "f16", "bf16"}))
def test_quantize_refuses_nonfinite(name):
    i = info(name)
    for bad in (np.nan, np.inf, -np.inf):
        x = np.ones(3 * i.block, np.float32)
        x[37] = bad
        out = np.zeros(3 * i.block_bytes, np.uint8)
        assert lib.lb_dtype_from_f32(DT[name], x.ctypes.data, x.size, out.ctypes.data) == LB_ERR_NAN
        msg = last_error()
        assert "element 37" in msg and name in msg, msg


# ===== plain types =====

# f16, bf16 and f8 go through the format layer's bulk codecs: every
# instruction set this CPU has must give the same bits.
ISAS = list(range(lib.lb_isa_detected() + 1))


@pytest.fixture(params=ISAS, ids=lambda i: ["scalar", "avx2", "avx512"][i])
def isa(request):
    assert lib.lb_isa_set(request.param) == LB_OK
    yield request.param
    lib.lb_isa_set(lib.lb_isa_detected())


def test_f16_bf16_every_code(isa):
    codes = np.arange(65536, dtype=np.uint16)
    assert_bits_equal(to_f32("f16", codes.view(np.uint8), 65536), codes.view(np.float16).astype(np.float32), "f16")
    assert_bits_equal(to_f32("bf16", codes.view(np.uint8), 65536),
                      gguf.quants.dequantize(codes.view(np.uint8), G.BF16), "bf16")
    assert_bits_equal(to_f32("bf16", codes.view(np.uint8), 65536), codes.view(md.bfloat16).astype(np.float32),
                      "bf16 (ml_dtypes)")


@pytest.mark.parametrize("name,oracle", [("f8_e4m3", md.float8_e4m3fn), ("f8_e5m2", md.float8_e5m2)])
def test_f8_every_code(name, oracle, isa):
    codes = np.arange(256, dtype=np.uint8)
    got = to_f32(name, codes, 256)
    want = codes.view(oracle).astype(np.float32)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), name
    assert (np.signbit(got[nan]) == np.signbit(want[nan])).all(), name
    assert_bits_equal(got[~nan], want[~nan], name)


def test_f32_f64_ints_bool():
    rng = np.random.default_rng(3)
    u32 = np.concatenate([rng.integers(0, 2**32, 100000, dtype=np.uint64).astype(np.uint32),
                          np.array([0x7F800001, 0xFFC00000, 0x80000000, 1], np.uint32)])
    assert_bits_equal(to_f32("f32", u32.view(np.uint8), u32.size), u32.view(np.float32), "f32")
    u64 = rng.integers(0, 2**64, 100000, dtype=np.uint64, endpoint=False)
    f64 = np.concatenate([u64.view(np.float64), rng.standard_normal(10000) * 10.0 ** rng.integers(-50, 50, 10000),
                          np.array([3.4028235677973366e38, 3.4028235677973367e38, 3.40282357e38, 1e-46, 7e-46,
                                    -0.0, np.inf, -np.inf, 1.4e-45, 2.0**-150, 2.0**-150 * 1.0000001])])
    with np.errstate(all="ignore"):
        want = f64.astype(np.float32)
    got = to_f32("f64", f64.view(np.uint8), f64.size)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert_bits_equal(got[~nan], want[~nan], "f64")
    for name, t in [("i8", np.int8), ("i16", np.int16), ("i32", np.int32), ("i64", np.int64), ("u8", np.uint8)]:
        ii = np.iinfo(t)
        v = np.concatenate([rng.integers(ii.min, ii.max, 50000, dtype=t, endpoint=True),
                            np.array([ii.min, ii.max, 0, -1 if ii.min else 1], dtype=t)])
        if t in (np.int32, np.int64):  # around 2^24 .. 2^31 and beyond, where fp32 rounds
            v = np.concatenate([v, (rng.integers(-2**31, 2**31, 50000) | 1).astype(t),
                                np.array([2**24 + 1, 2**24 + 3, 2**25 + 2, 2**25 + 6, -(2**24 + 1)], dtype=t)])
        assert_bits_equal(to_f32(name, v.view(np.uint8), v.size), v.astype(np.float32), name)
    b = np.arange(256, dtype=np.uint8)
    assert_bits_equal(to_f32("bool", b, 256), (b != 0).astype(np.float32), "bool")


def f32_patterns(rng):
    u = np.concatenate([rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32),
                        np.array([0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7FC00000, 0x7F802000, 0x7F801FFF,
                                  0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x477FEFFF, 0x477FF000, 0x477FE000,
                                  0x33000000, 0x33000001, 0x38800000, 0x387FFFFF, 0x80000000, 0], np.uint32)])
    # fp16 ties: every fp16 code +- half an ulp, and +- one fp32 ulp from there
    h = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    mids = ((h[1:] + h[:-1]) / 2).astype(np.float32).view(np.uint32)
    u = np.concatenate([u, mids, mids + 1, mids - 1])
    return np.concatenate([u, u | 0x80000000]).view(np.float32)


def test_write_f32_f16_bf16(isa):
    x = f32_patterns(np.random.default_rng(4))
    got = from_f32("f32", x)
    assert (got.view(np.uint32) == x.view(np.uint32)).all()
    with np.errstate(all="ignore"):
        want16 = x.astype(np.float16).view(np.uint16)
    got16 = from_f32("f16", x).view(np.uint16)
    bad = np.nonzero(got16 != want16)[0]
    assert bad.size == 0, f"f16: {x.view(np.uint32)[bad[0]]:08x} -> {got16[bad[0]]:04x}, numpy {want16[bad[0]]:04x}"
    want_bf = gguf.quants.quantize(x, G.BF16).view(np.uint16)
    got_bf = from_f32("bf16", x).view(np.uint16)
    bad = np.nonzero(got_bf != want_bf)[0]
    assert bad.size == 0, f"bf16: {x.view(np.uint32)[bad[0]]:08x} -> {got_bf[bad[0]]:04x}, gguf {want_bf[bad[0]]:04x}"


def test_bf16_writer_vs_format_layer():
    """lowbit's bf16 codec rounds as gguf does; they differ only on NaN, where gguf keeps the payload
    (quieted) and the codec writes the canonical quiet NaN with the sign."""
    x = f32_patterns(np.random.default_rng(5))
    codec = np.zeros(x.size, np.uint16)
    assert lib.lb_encode_f32(2, 1, x.ctypes.data, x.size, codec.ctypes.data, 1) == LB_OK  # LB_FMT_BF16, LB_IEEE
    mine = from_f32("bf16", x).view(np.uint16)
    nan = np.isnan(x)
    assert (codec[~nan] == mine[~nan]).all()
    assert (codec[nan] == np.where(np.signbit(x[nan]), 0xFFC0, 0x7FC0)).all()
    assert (mine[nan] == ((x[nan].view(np.uint32) >> 16) | 0x40)).all()


# ===== errors =====

def test_argument_errors():
    x = np.zeros(64, np.float32)
    buf = np.zeros(64 * 8, np.uint8)
    for fn in (lib.lb_dtype_to_f32, lib.lb_dtype_from_f32):
        assert fn(DT["f32"], None, 4, buf.ctypes.data) == LB_ERR_ARG and "NULL" in last_error()
        assert fn(DT["f32"], x.ctypes.data, 4, None) == LB_ERR_ARG and "NULL" in last_error()
        assert fn(COUNT, x.ctypes.data, 4, buf.ctypes.data) == LB_ERR_ARG and "dtype" in last_error()
        assert fn(-1, x.ctypes.data, 4, buf.ctypes.data) == LB_ERR_ARG
        for name in ("q4_0", "q8_0", "mxfp4", "nvfp4", "q6_k"):
            b = info(name).block
            assert fn(DT[name], x.ctypes.data, b + 1, buf.ctypes.data) == LB_ERR_ARG
            msg = last_error()
            assert name in msg and str(b) in msg and "block" in msg, msg
        assert fn(DT["q4_0"], x.ctypes.data, 0, buf.ctypes.data) == LB_OK  # zero elements is no work


def test_unsupported_writes():
    x = np.zeros(256, np.float32)
    buf = np.zeros(256 * 8, np.uint8)
    for name in NAMES:
        if name in WRITES:
            continue
        assert lib.lb_dtype_from_f32(DT[name], x.ctypes.data, 256, buf.ctypes.data) == LB_ERR_UNSUPPORTED, name
        assert name in last_error()
