"""Block quantization (MX presets and NVFP4) against an independent
numpy + ml_dtypes reference written from the specifications, not from the
library's source.

Specs followed:
  * OCP Microscaling Formats (MX) v1.0: blocks of 32 along a row, one E8M0
    scale per block (sec. 5), the scale exponent chosen by the "floor" rule
    of sec. 6.3, elements FP8/FP6/FP4/INT8 (sec. 5.3, 5.4).  The other
    scale-rounding options (ceil, even, rceil) are the torchao / cuBLAS
    variants documented at lb_mx_rounding in include/lowbit.h.
  * NVFP4: blocks of 16, FP4 E2M1 elements, a UE4M3 block scale and an fp32
    tensor scale over the block scales.
  * The packed layout of include/lowbit.h / README ("Packed layout").

Every comparison is bit-exact (data bytes, scale bytes, tensor scale and the
dequantized values as uint32 bit patterns) and runs on every instruction
set this CPU offers.  All arithmetic is np.float32 where the spec says so;
casts to the element types use ml_dtypes, which rounds to nearest, ties to
even."""
import os
import sys

import ml_dtypes as md
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lowbit_ctypes as lb  # noqa: E402

F32 = np.float32

# ---------------------------------------------------------------- formats

# OCP MX v1.0 sec. 5.3 (table 2) / 5.4: element type, emax of the element,
# largest element magnitude, mantissa bits, bits per element.
MX = {
    "mxfp8_e4m3": dict(elem=md.float8_e4m3fn, emax=8, max=448.0, mbits=3, bits=8),
    "mxfp8_e5m2": dict(elem=md.float8_e5m2, emax=15, max=57344.0, mbits=2, bits=8),
    "mxfp6_e2m3": dict(elem=md.float6_e2m3fn, emax=2, max=7.5, mbits=3, bits=6),
    "mxfp6_e3m2": dict(elem=md.float6_e3m2fn, emax=4, max=28.0, mbits=2, bits=6),
    "mxfp4": dict(elem=md.float4_e2m1fn, emax=2, max=6.0, mbits=1, bits=4),
    # MXINT8 (sec. 5.4): 8-bit two's complement with an implied scale of
    # 2^-6, i.e. 1.6 fixed point, so emax = 0 and the largest value is 127/64.
    "mxint8": dict(elem=None, emax=0, max=127.0 / 64.0, mbits=6, bits=8),
}
MX_BLOCK = 32
ROUNDINGS = ["floor", "ceil", "even", "rceil"]

NV_BLOCK = 16
NV_ELEM_MAX = F32(6.0)       # FP4 E2M1 max
NV_SCALE_MAX = F32(448.0)    # E4M3 max
NV_TS_DIVISOR = F32(2688.0)  # 6 * 448
NV_SCALE_FLOOR = F32(2.0**-9)  # smallest positive E4M3 (subnormal)

COLS = [1, 5, 16, 31, 32, 33, 100, 257]
SEEDS = [0, 1, 2]


# ---------------------------------------------------------------- fp32 helpers

def bits32(a):
    return np.asarray(a, dtype=F32).view(np.uint32)


def f32_exponent(a):
    """E(a): the unbiased fp32 exponent field; a subnormal (or zero) counts
    as -127 (OCP MX sec. 6.3 works on the fp32 bit pattern)."""
    return ((bits32(a) >> 23) & 0xFF).astype(np.int64) - 127


def pow2_f32(e):
    """2^e as fp32 for e in [-127, 127]; 2^-127 is the subnormal 0x00400000.
    This is also the value of the E8M0 code e + 127 (OCP MX sec. 5.4.1)."""
    e = np.asarray(e, dtype=np.int64)
    b = np.where(e >= -126, (e + 127) << 23, 0x00400000 >> np.clip(-127 - e, 0, 22))
    return b.astype(np.uint32).view(F32)


def block_starts(cols, block):
    return np.arange(0, cols, block)


def block_amax(x, block):
    """max |x| over each block of `block` consecutive values along a row;
    the last block of a row may hold fewer values."""
    return np.maximum.reduceat(np.abs(x), block_starts(x.shape[1], block), axis=1).astype(F32)


def per_element(v, cols, block):
    """Spreads one value per block to every element of the block."""
    return np.repeat(v, block, axis=1)[:, :cols]


# ---------------------------------------------------------------- MX scale rules

def finish_exponent(e, amax):
    """Common to every rule: amax == 0 gives -127; clamp to the E8M0 range
    [-127, 127] (code 0xFF is NaN and never produced)."""
    e = np.where(amax == 0, -127, e)
    return np.clip(e, -127, 127)


def scale_exp_floor(amax, fmt):
    """OCP MX v1.0 sec. 6.3: X = 2^(floor(log2(amax)) - emax_elem)."""
    return finish_exponent(f32_exponent(amax) - fmt["emax"], amax)


def scale_exp_ceil(amax, fmt):
    """ceil(log2(amax)) - emax: one more unless amax is a power of two."""
    up = (bits32(amax) & 0x7FFFFF) != 0
    return finish_exponent(f32_exponent(amax) + up - fmt["emax"], amax)


def scale_exp_even(amax, fmt):
    """amax rounded to the element's mantissa width (half up in bits) first,
    then floor: a' = bits(amax) + 2^(23 - mbits - 1), keep its exponent."""
    a = bits32(amax).astype(np.uint64) + (1 << (23 - fmt["mbits"] - 1))
    a = (a & 0x7F800000).astype(np.uint32).view(F32)
    return finish_exponent(f32_exponent(a) - fmt["emax"], amax)


def scale_exp_rceil(amax, fmt):
    """ceil(log2(amax / max_elem)) on the fp32 quotient's bit pattern."""
    with np.errstate(all="ignore"):
        d = (amax / F32(fmt["max"])).astype(F32)
    f = ((bits32(d) >> 23) & 0xFF).astype(np.int64)
    m = bits32(d) & 0x7FFFFF
    up = np.where(f == 0, m > 0x400000, m != 0)
    return finish_exponent(f + up - 127, amax)


SCALE_RULES = {"floor": scale_exp_floor, "ceil": scale_exp_ceil,
               "even": scale_exp_even, "rceil": scale_exp_rceil}


# ---------------------------------------------------------------- packing

def pack_rows(codes, bits):
    """Layout of include/lowbit.h: each row starts on a byte; row_bytes =
    ceil(cols * bits / 8).  4-bit: element 2i in the low nibble, 2i+1 in the
    high one.  6-bit: little-endian bit stream, element i in bits
    [6i, 6i+6).  8-bit: one byte each."""
    codes = np.asarray(codes, dtype=np.uint8)
    rows, cols = codes.shape
    row_bytes = (cols * bits + 7) // 8
    if bits == 8:
        return codes.copy()
    if bits == 4:
        c = np.zeros((rows, 2 * row_bytes), dtype=np.uint8)
        c[:, :cols] = codes & 0xF
        return (c[:, 0::2] | (c[:, 1::2] << 4)).astype(np.uint8)
    assert bits == 6
    stream = ((codes[:, :, None] >> np.arange(6, dtype=np.uint8)) & 1).reshape(rows, cols * 6)
    padded = np.zeros((rows, row_bytes * 8), dtype=np.uint8)
    padded[:, :cols * 6] = stream
    return np.packbits(padded, axis=1, bitorder="little")


# ---------------------------------------------------------------- references

class Ref:
    def __init__(self, data, scales, tensor_scale, dequantized):
        self.data, self.scales = data, scales
        self.tensor_scale, self.dequantized = F32(tensor_scale), dequantized


def mx_reference(x, preset, rounding="floor"):
    """OCP MX v1.0 sec. 6.3 quantization of every 32-value block."""
    fmt = MX[preset]
    rows, cols = x.shape
    amax = block_amax(x, MX_BLOCK)
    e = SCALE_RULES[rounding](amax, fmt)
    scale_bytes = (e + 127).astype(np.uint8).reshape(-1)  # E8M0 code
    X = per_element(pow2_f32(e), cols, MX_BLOCK)
    with np.errstate(all="ignore"):
        if fmt["elem"] is None:  # MXINT8
            step = (X * F32(2.0**-6)).astype(F32)
            q = np.clip(np.rint((x / step).astype(F32)), F32(-127), F32(127)).astype(np.int8)
            codes = q.view(np.uint8)
            deq = (q.astype(F32) * step).astype(F32)
        else:
            y = (x / X).astype(F32)
            y = np.clip(y, F32(-fmt["max"]), F32(fmt["max"])).astype(F32)
            el = y.astype(fmt["elem"])  # RNE
            codes = el.view(np.uint8)
            deq = (el.astype(F32) * X).astype(F32)
    return Ref(pack_rows(codes, fmt["bits"]), scale_bytes, 1.0, deq)


def nvfp4_tensor_scale(x):
    """ts = amax_tensor / (6 * 448); 1 when that is 0: an all-zero tensor,
    or one so small (amax < ~1.9e-42) that the quotient underflows, where a
    zero tensor scale would make every divisor 0 (lowbit's documented rule;
    ModelOpt's code divides by zero there)."""
    amax = F32(np.max(np.abs(x)))
    ts = F32(amax / NV_TS_DIVISOR)
    return F32(1.0) if ts == 0 else ts


def nvfp4_block_scales(amax_b, ts):
    """bs = amax_block / (6 * ts) (product first), 1 for a zero block,
    floored at 2^-9, then E4M3 with RNE, saturating at 448."""
    with np.errstate(all="ignore"):
        bs = (amax_b / (NV_ELEM_MAX * ts)).astype(F32)
    bs = np.where(amax_b == 0, F32(1.0), bs).astype(F32)
    bs = np.maximum(bs, NV_SCALE_FLOOR)
    bs = np.minimum(bs, NV_SCALE_MAX)  # saturate
    return bs.astype(md.float8_e4m3fn)


def nvfp4_reference(x):
    rows, cols = x.shape
    ts = nvfp4_tensor_scale(x)
    code = nvfp4_block_scales(block_amax(x, NV_BLOCK), ts)
    scale_bytes = code.view(np.uint8).reshape(-1)
    divisor = per_element((code.astype(F32) * ts).astype(F32), cols, NV_BLOCK)
    with np.errstate(all="ignore"):
        y = (x / divisor).astype(F32)
        # The spec leaves 0 / 0 undefined (divisor is 0 only when ts
        # underflows to 0, see test_nvfp4_tensor_scale_underflow): a zero
        # element stays a zero of its own sign, as it does for divisor > 0.
        y = np.where(x == 0, x, y).astype(F32)
        y = np.clip(y, -NV_ELEM_MAX, NV_ELEM_MAX).astype(F32)
        el = y.astype(md.float4_e2m1fn)
        deq = (el.astype(F32) * divisor).astype(F32)
    return Ref(pack_rows(el.view(np.uint8), 4), scale_bytes, ts, deq)


def reference(spec):
    name, _, opt = spec.partition(":")
    if name == "nvfp4":
        return nvfp4_reference
    rounding = opt.split("=", 1)[1] if opt else "floor"
    return lambda x: mx_reference(x, name, rounding)


# ---------------------------------------------------------------- test data

def elem_max(spec):
    name = spec.split(":")[0]
    return 6.0 if name == "nvfp4" else MX[name]["max"]


def element_grid(spec):
    """Non-negative representable element magnitudes (MXINT8: k/64)."""
    name = spec.split(":")[0]
    if name == "mxint8":
        return np.arange(128) / 64.0
    t = md.float4_e2m1fn if name == "nvfp4" else MX[name]["elem"]
    v = np.arange(256 if md.finfo(t).bits == 8 else 1 << md.finfo(t).bits, dtype=np.uint16).astype(np.uint8)
    v = v.view(t).astype(np.float64)
    return np.unique(v[np.isfinite(v) & (v >= 0)])


def anchored(rng, rows, cols, block, values_fn):
    """Fills each block from values_fn(n) and returns the tensor."""
    x = np.zeros((rows, cols), dtype=np.float64)
    for r in range(rows):
        for s in range(0, cols, block):
            n = min(block, cols - s)
            x[r, s:s + n] = values_fn(n)
    return x


def make_input(kind, spec, rows, cols, seed):
    rng = np.random.default_rng(seed * 1000 + cols)
    block = NV_BLOCK if spec.startswith("nvfp4") else MX_BLOCK
    emx = elem_max(spec)
    if kind == "normal":
        x = rng.standard_normal((rows, cols))
    elif kind == "heavy":
        x = rng.standard_t(1.5, (rows, cols)) * 3.0
    elif kind == "outliers":
        x = rng.standard_normal((rows, cols))
        n = max(1, rows * cols // 20)
        idx = rng.integers(0, rows * cols, n)
        x.reshape(-1)[idx] *= rng.choice([1e3, 1e4, -1e3, -1e4], n)
    elif kind == "zero_blocks":
        x = rng.standard_normal((rows, cols)) * 2.0
        for r in range(rows):
            for s in range(0, cols, block):
                if rng.random() < 0.5:
                    x[r, s:s + block] = 0.0
        x[0, :] = 0.0  # one row entirely zero
        if cols > 2:
            x[-1, 1] = -0.0
    elif kind == "pow2_max":
        # a block's amax exactly emx * 2^k, or at the binade edges that the
        # rounding rules treat differently (2^k, 1.75 * 2^k, +-1 ulp)
        def values(n):
            k = int(rng.integers(-20, 20))
            a = F32(rng.choice([emx, 1.0, 1.5, 1.75, 1.875]) * 2.0**k)
            a = rng.choice([a, np.nextafter(a, F32(np.inf)), np.nextafter(a, F32(0))])
            v = rng.uniform(-1, 1, n) * float(a)
            v[rng.integers(0, n)] = float(a) * rng.choice([-1.0, 1.0])
            return v
        x = anchored(rng, rows, cols, block, values)
    elif kind == "ties":
        # element-grid midpoints times the block's power of two (its amax is
        # emx * 2^k, so under "floor" the scale is 2^k and x / X is a tie)
        grid = element_grid(spec)
        mids = np.concatenate([(grid[:-1] + grid[1:]) / 2, grid])

        def values(n):
            k = int(rng.integers(-10, 10))
            v = rng.choice(mids, n) * rng.choice([-1.0, 1.0], n) * 2.0**k
            v[rng.integers(0, n)] = emx * 2.0**k
            return v
        x = anchored(rng, rows, cols, block, values)
    elif kind == "sub38":
        x = rng.standard_normal((rows, cols)) * 1e-38
    elif kind == "sub42":
        x = rng.standard_normal((rows, cols)) * 1e-42
    elif kind == "huge":
        # near the top of fp32: E(amax) = 127, so ceil / rceil / even hit
        # the +127 clamp (MXINT8 has emax 0)
        x = rng.uniform(-1, 1, (rows, cols)) * float(np.finfo(F32).max)
        x.reshape(-1)[rng.integers(0, rows * cols)] = float(np.finfo(F32).max) * rng.choice([-1.0, 1.0])
    elif kind == "mixed":
        # huge and tiny blocks in one tensor: NVFP4 block scales hit 2^-9
        mag = rng.choice([1e4, 1.0, 1e-3, 1e-6, 1e-20, 1e-39], (rows, (cols + block - 1) // block))
        x = rng.standard_normal((rows, cols)) * per_element(mag, cols, block)
    else:
        raise ValueError(kind)
    x = x.astype(F32)
    assert np.isfinite(x).all()
    return x


KINDS = ["normal", "heavy", "outliers", "zero_blocks", "pow2_max", "ties", "sub38", "sub42", "huge", "mixed"]
MX_SPECS = [p if r == "floor" else f"{p}:round={r}" for p in MX for r in ROUNDINGS]
SPECS = MX_SPECS + ["nvfp4"]


# ---------------------------------------------------------------- comparison

def hexs(a):
    return [hex(int(v)) for v in np.asarray(a).reshape(-1)]


def used_bits(rows, cols, bits):
    """1 where a packed row byte holds element bits, 0 in the padding."""
    return pack_rows(np.full((rows, cols), (1 << bits) - 1, dtype=np.uint8), bits)


def check(spec, x, threads=1):
    """Quantizes x with the library and with the reference; returns a list
    of (category, message) for every way they differ (empty: bit-identical)."""
    want = reference(spec)(x)
    st, q = lb.quantize(spec, x, threads=threads)
    where = f"{spec} isa={lb.lib.lb_isa_active()} threads={threads} shape={x.shape}"
    if st != lb.LB_OK:
        return [("status", f"{where}: status {st}: {lb.last_error()}")]
    problems = []
    rows, cols = x.shape
    block = NV_BLOCK if spec.startswith("nvfp4") else MX_BLOCK
    nb = (cols + block - 1) // block
    bits = 4 if spec.startswith(("nvfp4", "mxfp4")) else MX[spec.split(":")[0]]["bits"]

    # scale bytes, row-major [rows, nb]
    if q.scales.shape != want.scales.shape:
        problems.append(("scale", f"{where}: {q.scales.shape} scale bytes, want {want.scales.shape}"))
    else:
        bad = np.flatnonzero(q.scales != want.scales)
        if bad.size:
            i = bad[0]
            r, b = divmod(int(i), nb)
            a = np.abs(x[r, b * block:(b + 1) * block]).max()
            problems.append(("scale", f"{where}: {bad.size} scale bytes differ; first [row {r}, block {b}] "
                                      f"got {hex(q.scales[i])} want {hex(want.scales[i])}; block amax {a!r} "
                                      f"(bits {hex(bits32(a))}), tensor amax {np.abs(x).max()!r}"))

    # tensor scale
    if bits32(q.tensor_scale) != bits32(want.tensor_scale):
        problems.append(("tensor_scale", f"{where}: tensor_scale {q.tensor_scale!r} "
                                         f"({hex(bits32(q.tensor_scale))}) want {want.tensor_scale!r} "
                                         f"({hex(bits32(want.tensor_scale))})"))

    # packed data: the element bits, then the padding bits (which must be 0)
    if q.data.shape != want.data.shape:
        problems.append(("data", f"{where}: data {q.data.shape}, want {want.data.shape}"))
    else:
        mask = used_bits(rows, cols, bits)
        bad = np.argwhere((q.data ^ want.data) & mask)
        if bad.size:
            r, c = bad[0]
            first = int(c) * 8 // bits
            problems.append(("data", f"{where}: {len(bad)} data bytes differ in element bits; first "
                                     f"[row {r}, byte {c}] got {hex(q.data[r, c])} want {hex(want.data[r, c])}; "
                                     f"inputs from col {first}: {x[r, first:first + 3].tolist()} "
                                     f"(bits {hexs(bits32(x[r, first:first + 3]))})"))
        bad = np.argwhere(q.data & ~mask)
        if bad.size:
            r, c = bad[0]
            problems.append(("padding", f"{where}: {len(bad)} rows have nonzero padding bits; first "
                                        f"[row {r}, byte {c}] got {hex(q.data[r, c])} want "
                                        f"{hex(want.data[r, c])} (padding mask {hex(~mask[r, c] & 0xFF)})"))

    # dequantized values, bit for bit
    got_b, want_b = bits32(q.dequantized), bits32(want.dequantized)
    bad = np.argwhere(got_b != want_b)
    if bad.size:
        r, c = bad[0]
        problems.append(("dequantized", f"{where}: {len(bad)} dequantized values differ; first [{r}, {c}] "
                                        f"x={x[r, c]!r} ({hex(bits32(x[r, c]))}) got {q.dequantized[r, c]!r} "
                                        f"({hex(got_b[r, c])}) want {want.dequantized[r, c]!r} ({hex(want_b[r, c])})"))
    return problems


def assert_no_problems(problems):
    """Fails with a count per kind of difference and the first of each."""
    if not problems:
        return
    first, count = {}, {}
    for cat, msg in problems:
        first.setdefault(cat, msg)
        count[cat] = count.get(cat, 0) + 1
    pytest.fail("\n".join(f"[{cat}] {count[cat]} failing case(s); first: {first[cat]}" for cat in first))


# ---------------------------------------------------------------- tests

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("spec", SPECS)
def test_matches_reference(spec, kind):
    problems = []
    for isa in lb.isas():
        lb.set_isa(isa)
        for seed in SEEDS:
            for cols in COLS:
                rows = 1 + (seed + cols) % 4
                problems += check(spec, make_input(kind, spec, rows, cols, seed))
    assert_no_problems(problems)


@pytest.mark.parametrize("spec", ["mxfp4", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8:round=rceil", "nvfp4"])
def test_matches_reference_larger_threaded(spec):
    rng = np.random.default_rng(11)
    x = (rng.standard_t(3, (37, 1000)) * rng.choice([1e-3, 1.0, 50.0], (37, 1))).astype(F32)
    problems = []
    for isa in lb.isas():
        lb.set_isa(isa)
        for threads in (1, 4):
            problems += check(spec, x, threads=threads)
    assert_no_problems(problems)


def test_reference_self_checks():
    """The reference's own building blocks, against hand-worked values."""
    assert bits32(pow2_f32(-127)) == 0x00400000
    assert bits32(pow2_f32(-126)) == 0x00800000
    assert pow2_f32(127) == F32(2.0**127) and pow2_f32(0) == F32(1.0)
    fp4 = MX["mxfp4"]
    a = np.array([6.0, 7.0, 0.0, 1e-42, 4.0, 5.9], dtype=F32)
    assert scale_exp_floor(a, fp4).tolist() == [0, 0, -127, -127, 0, 0]
    assert scale_exp_ceil(a, fp4).tolist() == [1, 1, -127, -127, 0, 1]
    # even: 6 = 1.5 * 2^2 stays 1.5 + 0.25 < 2; 7 = 1.75 * 2^2 carries; 5.9 = 1.475 * 2^2 does not
    assert scale_exp_even(a, fp4).tolist() == [0, 1, -127, -127, 0, 0]
    assert scale_exp_rceil(a, fp4).tolist() == [0, 1, -127, -127, 0, 0]
    # 6-bit stream: four values fill three bytes
    assert pack_rows(np.array([[0x3F, 0, 0x3F, 0]]), 6).tolist() == [[0x3F, 0xF0, 0x03]]
    assert pack_rows(np.array([[0x1, 0x2, 0x3]]), 4).tolist() == [[0x21, 0x03]]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_is_an_error(spec, bad):
    for isa in lb.isas():
        lb.set_isa(isa)
        for rows, cols, r, c in ((1, 1, 0, 0), (3, 33, 2, 32), (4, 100, 1, 17), (2, 257, 0, 256)):
            x = np.ones((rows, cols), dtype=F32)
            x[r, c] = bad
            st, q = lb.quantize(spec, x)
            assert st == lb.LB_ERR_NAN, f"{spec} isa={isa} {bad} at [{r},{c}] of {rows}x{cols}: status {st}"
            assert q is None


def test_nvfp4_tensor_scale_underflow():
    """amax_tensor < ~1.9e-42: amax / 2688 rounds to fp32 zero; the tensor
    scale falls back to 1 (as for an all-zero tensor), block scales to the
    2^-9 floor, and every element quantizes to a zero of its own sign."""
    x = np.array([[3.46e-43, -1e-44, 0.0, -0.0, 1e-45]], dtype=F32)
    assert F32(F32(np.max(np.abs(x))) / NV_TS_DIVISOR) == 0  # the case really arises
    assert nvfp4_tensor_scale(x) == 1
    problems = []
    for isa in lb.isas():
        lb.set_isa(isa)
        problems += check("nvfp4", x)
    assert_no_problems(problems)
