"""Full-range symmetric integer grids (range=full, the default for int8 and
int4 with an fp32/fp16/bf16/ue4m3 scale) against a numpy reference written
from the rule as lowbit.h states it (lb_int_range), and against ggml's Q4_0
rule, written from ggml's description (ggml-quants.c, quantize_row_q4_0_ref:
the block's value of largest magnitude `max`, first one on ties, d = max / -8,
id = 1/d, code = min(15, trunc(x * id + 8.5)) - 8).

The rule, per block of the row (lo = min(0, min x), hi = max(0, max x)):
    a = fl(-lo / -qmin)                       qmin = -8 (int4), -128 (int8)
    s = a          if fl(a * qmax) >= hi       qmax = 7, 127
        fl(hi / qmax) otherwise
then s is stored in the scale format (round to nearest even), and each code
is rne(min(max(x / s_stored, qmin), qmax)): x' = code * s_stored, s > 0.
range=restricted keeps the old grid, checked byte for byte against hashes
taken from main before the change (lowbit at d5d1a51)."""
import hashlib
import os
import sys

import ml_dtypes as md
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lowbit_ctypes as lb  # noqa: E402

F32 = np.float32
QRANGE = {"int4": (-8, 7), "int8": (-128, 127)}
SCALE_TYPES = {"fp32": np.float32, "fp16": np.float16, "bf16": md.bfloat16}


def parse(spec):
    parts = spec.split(":")
    elem, gran = parts[0], parts[1]
    scale = next((p.split("=")[1] for p in parts if p.startswith("scale=")), "fp32")
    return elem, gran, scale


def block_bounds(cols, gran):
    block = cols if gran in ("channel", "tensor") else int(gran[1:])
    return [(s, min(s + block, cols)) for s in range(0, cols, block)]


def rule_scale(lo, hi, qmin, qmax):
    """The documented rule in fp32 (lo <= 0 <= hi)."""
    lo, hi = F32(lo), F32(hi)
    a = F32(-lo) / F32(-qmin)
    return a if F32(a * F32(qmax)) >= hi else F32(hi / F32(qmax))


def reference(spec, x):
    """(codes [rows, cols] int, stored scales as float32 [n], dequantized)."""
    elem, gran, scale = parse(spec)
    qmin, qmax = QRANGE[elem]
    st = SCALE_TYPES[scale]
    x = x.astype(F32)
    rows, cols = x.shape
    codes = np.zeros((rows, cols), np.int64)
    deq = np.zeros((rows, cols), F32)
    scales = []

    def one(blk):
        lo = min(F32(0), blk.min()) + F32(0)  # +0 for a zero
        hi = max(F32(0), blk.max()) + F32(0)
        if lo == 0 and hi == 0:
            return F32(0), np.zeros(blk.shape, np.int64), F32(0)
        s = F32(st(rule_scale(lo, hi, qmin, qmax)))
        c = np.rint(np.clip(blk / s, qmin, qmax)).astype(np.int64)
        return s, c, s

    if gran == "tensor":
        s, c, d = one(x)
        return c, np.array([s], F32), (c * d).astype(F32)
    for r in range(rows):
        for a, b in block_bounds(cols, gran):
            s, c, d = one(x[r, a:b])
            codes[r, a:b] = c
            deq[r, a:b] = (c.astype(F32) * d).astype(F32)
            scales.append(s)
    return codes, np.array(scales, F32), deq


def lowbit_codes(spec, q):
    elem = parse(spec)[0]
    if elem == "int8":
        return q.data.view(np.int8).astype(np.int64)[:, :q.cols]
    lo, hi = q.data & 0xF, q.data >> 4
    nib = np.stack([lo, hi], axis=2).reshape(q.rows, -1)[:, :q.cols].astype(np.int64)
    return np.where(nib >= 8, nib - 16, nib)


def stored_scales(spec, q):
    st = SCALE_TYPES[parse(spec)[2]]
    return q.scales.view(st).astype(F32)


# ---------------------------------------------------------------- inputs

def make_input(kind, spec, rows, cols, seed):
    rng = np.random.default_rng(seed * 7919 + cols)
    elem, gran, _ = parse(spec)
    qmin, qmax = QRANGE[elem]
    bounds = block_bounds(cols, gran if gran != "tensor" else "channel")
    x = np.zeros((rows, cols))
    for r in range(rows):
        for a, b in bounds:
            n = b - a
            if kind == "normal":
                v = rng.standard_normal(n)
            elif kind == "heavy":
                v = rng.standard_t(1.5, n) * 0.02
            elif kind == "constant":  # all equal: positive, negative or zero
                v = np.full(n, rng.choice([0.37, -0.37, 0.0, -0.0]))
            elif kind == "ties":  # the negative extreme on qmin, the rest on half steps of its scale
                s = 2.0 ** int(rng.integers(-12, 4))
                v = (rng.integers(qmin, qmax, n) + 0.5) * s
                v[rng.integers(0, n)] = qmin * s
            elif kind == "positive_side":  # a negative extreme with the positive side near 7/8 of it
                v = rng.uniform(-1, 1, n) * 0.5
                v[0] = -1.0
                if n > 1:
                    v[1] = qmax / -qmin * rng.choice([1.0, 1.0 + 2.0**-20, 1.0 - 2.0**-20, 1.01, 0.99])
            else:
                raise ValueError(kind)
            x[r, a:b] = v
    if kind == "normal" and rows > 1:
        x[1] = 0.0  # a whole row of zeros
    return x.astype(F32)


SPECS = [s + ":range=full" for s in  # int4's default is range=signed (test_quant_signed.py)
         ["int4:g32", "int4:g16", "int4:channel", "int4:tensor", "int4:g32:scale=fp16", "int4:g128:scale=bf16",
          "int8:channel", "int8:g32", "int8:tensor", "int8:channel:scale=fp16", "int4:g7", "int8:g64:scale=bf16"]]
KINDS = ["normal", "heavy", "constant", "ties", "positive_side"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("kind", KINDS)
def test_full_range_matches_the_rule(spec, kind):
    for cols in (1, 5, 32, 33, 100, 257):
        for seed in range(2):
            x = make_input(kind, spec, 5, cols, seed)
            codes, scales, deq = reference(spec, x)
            for isa in lb.isas():
                lb.set_isa(isa)
                st, q = lb.quantize(spec, x)
                assert st == lb.LB_OK, lb.last_error()
                got = lowbit_codes(spec, q)
                bad = np.argwhere(got != codes)
                assert not bad.size, (spec, kind, cols, seed, isa, bad[:3], got[tuple(bad[0])],
                                      codes[tuple(bad[0])])
                assert (stored_scales(spec, q).view(np.uint32) == scales.view(np.uint32)).all(), \
                    (spec, kind, cols, seed, isa, stored_scales(spec, q)[:4], scales[:4])
                assert (q.dequantized.view(np.uint32) == deq.view(np.uint32)).all(), (spec, kind, cols, isa)
            lb.set_isa(lb.isas()[-1])


def test_full_range_uses_the_lowest_code_and_restricted_never_does():
    x = make_input("normal", "int4:g32", 16, 256, 3)
    for elem, low in (("int4", -8), ("int8", -128)):
        for gran in ("g32", "channel"):
            full = lowbit_codes(f"{elem}:{gran}", lb.quantize(f"{elem}:{gran}:range=full", x)[1])
            old = lowbit_codes(f"{elem}:{gran}", lb.quantize(f"{elem}:{gran}:range=restricted", x)[1])
            assert (full == low).any() and not (old == low).any(), (elem, gran)
            assert full.max() <= -low - 1 and old.min() >= low + 1


# ---------------------------------------------------------------- ggml's Q4_0

def ggml_q4_0_block(blk):
    """ggml's quantize_row_q4_0_ref for one block of 32 (fp32 throughout;
    the fp16 storage of d is left out: lowbit's int4:g32 keeps an fp32 scale)."""
    amax, mx = F32(0), F32(0)
    for v in blk:
        if abs(v) > amax:
            amax, mx = abs(v), v
    d = F32(mx / F32(-8))
    inv = F32(1) / d if d != 0 else F32(0)
    codes = [min(15, int(np.int8(np.trunc(F32(v * inv) + F32(8.5))))) - 8 for v in blk]
    return d, np.array(codes), inv


def test_blocks_with_a_negative_extreme_get_ggmls_scale_and_codes():
    """Where the block's value of largest magnitude is negative and its
    positive side fits (fl(7a) >= hi), ggml's d = max / -8 is positive and
    lowbit's scale is the same fp32 number; the codes agree except where
    x / d sits on a half step (ggml rounds x * (1/d) half up, lowbit x / d
    to even)."""
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((64, 32 * 16)) * 0.05).astype(F32)
    st, q = lb.quantize("int4:g32:range=full", x)
    assert st == lb.LB_OK
    codes, scales = lowbit_codes("int4:g32", q), stored_scales("int4:g32", q)
    checked = 0
    for r in range(x.shape[0]):
        for b in range(16):
            blk = x[r, 32 * b:32 * b + 32]
            d, gcodes, inv = ggml_q4_0_block(blk)
            if d <= 0 or F32(d * F32(7)) < max(F32(0), blk.max()):
                continue
            checked += 1
            assert scales[r * 16 + b] == d, (r, b)
            y = (blk * inv).astype(np.float64)
            off_tie = np.abs(np.abs(y - np.floor(y)) - 0.5) > 1e-4
            assert (codes[r, 32 * b:32 * b + 32][off_tie] == gcodes[off_tie]).all(), (r, b)
    assert checked > 300  # about half the blocks


# ---------------------------------------------------------------- the old grid

# (spec, input) -> sha256 of data + scales + tensor scale, first 16 hex digits,
# from lowbit built at d5d1a51 (before range=full existed) with the inputs
# of golden_inputs(); range=restricted must give the same bytes.
GOLDEN = {
    ("int4:g32", "normal"): "521dd1223dfffdb4",
    ("int4:g32", "heavy"): "fdfc0afbd5b2018f",
    ("int4:g32", "zeros"): "07af2030c6f7487f",
    ("int4:channel", "normal"): "a04d51f954caa30a",
    ("int4:channel", "heavy"): "ad7630b7b502c176",
    ("int4:channel", "zeros"): "190265c297a23ee6",
    ("int4:tensor", "normal"): "17a5285c5c4b6f83",
    ("int4:tensor", "heavy"): "5c251d054670f603",
    ("int4:tensor", "zeros"): "8ceaaa8e7294848a",
    ("int8:channel", "normal"): "d4e8de3bd4d95d8b",
    ("int8:channel", "heavy"): "dff8b2bb6807cb32",
    ("int8:channel", "zeros"): "f9a8f555f8a70460",
    ("int8:tensor", "normal"): "b399de923d92e908",
    ("int8:tensor", "heavy"): "a2213962d1ab3361",
    ("int8:tensor", "zeros"): "7d312ae0cc46b8a1",
    ("int8:token", "normal"): "d4e8de3bd4d95d8b",
    ("int8:token", "heavy"): "dff8b2bb6807cb32",
    ("int8:token", "zeros"): "f9a8f555f8a70460",
    ("int8:g32", "normal"): "0ecf8db8c3e598bc",
    ("int8:g32", "heavy"): "ddb6566e60652382",
    ("int8:g32", "zeros"): "e80ada798aa11918",
    ("int4:g128:scale=bf16", "normal"): "36d0a7b597f689c8",
    ("int4:g128:scale=bf16", "heavy"): "47fcf08fba7ea1ec",
    ("int4:g128:scale=bf16", "zeros"): "14766e0fb001a497",
    ("int4:g32:scale=fp16", "normal"): "7a5c45e7f5b6e395",
    ("int4:g32:scale=fp16", "heavy"): "478ab24e0e0a3b38",
    ("int4:g32:scale=fp16", "zeros"): "8626d71fa2c322f3",
    ("int8:g16:scale=fp16:clip=mse", "normal"): "3458888dc8a62345",
    ("int8:g16:scale=fp16:clip=mse", "heavy"): "0f5cb731a1ef42ce",
    ("int8:g16:scale=fp16:clip=mse", "zeros"): "9c347f2a0beb3a6c",
    ("int4:g32:clip=mse", "normal"): "f4542a0cc8512133",
    ("int4:g32:clip=mse", "heavy"): "9422b9e02b3703c6",
    ("int4:g32:clip=mse", "zeros"): "39b333684f9991b3",
    ("int8:tensor:clip=mse", "normal"): "b399de923d92e908",
    ("int8:tensor:clip=mse", "heavy"): "a2213962d1ab3361",
    ("int8:tensor:clip=mse", "zeros"): "7d312ae0cc46b8a1",
    ("int4:g16:scale=ue4m3", "normal"): "715dd6e0a635c824",
    ("int4:g16:scale=ue4m3", "heavy"): "b655d1e1f317546b",
    ("int4:g16:scale=ue4m3", "zeros"): "ac94eac6b5b7e00c",
    ("int4:g16:scale=fp16:twolevel", "normal"): "a246ebf7895e5f56",
    ("int4:g16:scale=fp16:twolevel", "heavy"): "de9fdd093af8d40c",
    ("int4:g16:scale=fp16:twolevel", "zeros"): "d99dfaf28ab01fcf",
    ("int8:channel:scale=ue4m3:twolevel", "normal"): "d0ae7d4ca8bd60eb",
    ("int8:channel:scale=ue4m3:twolevel", "heavy"): "9d94ab71a031c213",
    ("int8:channel:scale=ue4m3:twolevel", "zeros"): "c1efc06ed3263649",
}


def golden_inputs():
    rng = np.random.default_rng(1313)
    a = rng.standard_normal((7, 300))
    b = rng.standard_t(1.5, (5, 257)) * 0.05
    c = rng.standard_normal((4, 96))
    c[:, 32:64] = 0
    c[1] = 0
    return {"normal": a, "heavy": b, "zeros": c}


def digest(q):
    h = hashlib.sha256()
    h.update(q.data.tobytes())
    h.update(q.scales.tobytes())
    h.update(np.float32(q.tensor_scale).tobytes())
    return h.hexdigest()[:16]


def test_restricted_gives_the_old_bytes():
    inputs = golden_inputs()
    for (spec, kind), want in GOLDEN.items():
        for isa in lb.isas():
            lb.set_isa(isa)
            for threads in (1, 3):
                st, q = lb.quantize(spec + ":range=restricted", inputs[kind], threads=threads)
                assert st == lb.LB_OK, lb.last_error()
                assert digest(q) == want, (spec, kind, isa, threads)
        lb.set_isa(lb.isas()[-1])


def test_full_differs_from_the_old_bytes_and_is_the_default_but_for_int4():
    """range=full is the default of int8 and of int4 under ue4m3 or
    two-level scales; int4 under fp32/fp16/bf16 scales defaults to
    range=signed (test_quant_signed.py)."""
    inputs = golden_inputs()
    for (spec, kind), want in GOLDEN.items():
        q_default = lb.quantize(spec, inputs[kind])[1]
        q_full = lb.quantize(spec + ":range=full", inputs[kind])[1]
        signed_default = spec.startswith("int4") and "ue4m3" not in spec and "twolevel" not in spec
        if signed_default:
            assert digest(q_default) == digest(lb.quantize(spec + ":range=signed", inputs[kind])[1])
        else:
            assert digest(q_default) == digest(q_full)
        # blocks of 16 to 128: some block has a negative extreme, so the bytes move (a tensor or a
        # few rows can have only positive extremes, and keep their bytes)
        if ":g" in spec and kind != "zeros":  # zeros: 4 rows of 96
            assert digest(q_full) != want, (spec, kind)


# ---------------------------------------------------------------- spec text

@pytest.mark.parametrize("text,canonical", [
    ("int4:g32:range=restricted", "int4:g32:range=restricted"),
    ("int4:g32:range=full", "int4:g32:range=full"),
    ("int4:g32:range=signed", "int4:g32"),
    ("int8:channel:range=full", "int8:channel"),
    ("int8:channel:scale=fp16:clip=mse:range=restricted", "int8:channel:scale=fp16:clip=mse:range=restricted"),
    ("int4:g16:scale=ue4m3:range=restricted:range=full", "int4:g16:scale=ue4m3"),
    ("fp8_e4m3:channel:range=full", "fp8_e4m3:channel"),
])
def test_range_text_round_trips(text, canonical):
    st, spec = lb.parse_spec(text)
    assert st == lb.LB_OK, lb.last_error()
    assert lb.format_spec(spec) == canonical
    st, again = lb.parse_spec(canonical)
    assert st == lb.LB_OK and lb.format_spec(again) == canonical and again.range == spec.range


@pytest.mark.parametrize("text,needle", [
    ("int4:g32:range=wide", "unknown integer range"),
    ("fp8_e4m3:channel:range=restricted", "range= applies to symmetric int8/int4"),
    ("int4:g128:affine:range=restricted", "range= applies to symmetric int8/int4"),
    ("mxint8:range=restricted", "range= applies to symmetric int8/int4"),
    ("nvfp4:range=restricted", "range= applies to symmetric int8/int4"),
])
def test_bad_range_is_refused(text, needle):
    st, _ = lb.parse_spec(text)
    assert st != lb.LB_OK and needle in lb.last_error(), lb.last_error()


def test_a_hand_filled_range_out_of_bounds_is_refused():
    st, spec = lb.parse_spec("int8:channel")
    spec.range = 3  # one past LB_RANGE_SIGNED
    assert lb.lib.lb_qspec_validate(spec) != lb.LB_OK and "range" in lb.last_error()
