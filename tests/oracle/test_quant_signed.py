"""range=signed: ggml's Q4_0/Q8_0 rule for symmetric int4/int8, whose scale
may be negative, against a numpy reference written from ggml's description
(ggml-quants.c, quantize_row_q4_0_ref / quantize_row_q8_0_ref: the block's
value of largest magnitude `max`, d = max / -8 (int8: amax / 127 there;
lowbit's int8 puts max on -128 the same way), so max lands on the lowest
code whatever its sign), and against the gguf package's own Q4_0 quantizer.

The rule as lowbit.h states it (lb_int_range), per block (lo = min(0, min x),
hi = max(0, max x)):
    m = lo if -lo >= hi else hi     (a tie of magnitudes takes lo: s > 0)
    s = fl(m / qmin)                qmin = -8 (int4), -128 (int8)
then s is stored in the scale format (round to nearest even) and each code
is rne(min(max(x / s_stored, qmin), qmax)); x' = code * s_stored. An
all-zero block stores scale 0 and codes 0.

Where lowbit and ggml differ, by choice: ggml takes the first of two values
of equal magnitude and opposite sign (lowbit the negative one), rounds
x * (1/d) half up with the unrounded fp32 d (lowbit x / d_stored to even)."""
import os
import sys

import ml_dtypes as md
import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import quantize as gguf_quantize

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lowbit_ctypes as lb  # noqa: E402

F32 = np.float32
QRANGE = {"int4": (-8, 7), "int8": (-128, 127)}
SCALE_TYPES = {"fp32": np.float32, "fp16": np.float16, "bf16": md.bfloat16}


def parse(spec):
    parts = spec.split(":")
    scale = next((p.split("=")[1] for p in parts if p.startswith("scale=")), "fp32")
    return parts[0], parts[1], scale


def blocks_of(rows, cols, gran):
    if gran == "tensor":
        return [(slice(0, rows), slice(0, cols))]
    block = cols if gran == "channel" else int(gran[1:])
    return [(slice(r, r + 1), slice(a, min(a + block, cols))) for r in range(rows) for a in range(0, cols, block)]


def reference(spec, x):
    """(codes [rows, cols], stored scales as float32 [n], dequantized) by the rule above."""
    elem, gran, scale = parse(spec)
    qmin, qmax = QRANGE[elem]
    st = SCALE_TYPES[scale]
    x = x.astype(F32)
    codes = np.zeros(x.shape, np.int64)
    deq = np.zeros(x.shape, F32)
    scales = []
    for rs, cs in blocks_of(*x.shape, gran):
        blk = x[rs, cs]
        lo, hi = min(F32(0), blk.min()), max(F32(0), blk.max())
        if lo == 0 and hi == 0:
            scales.append(F32(0))
            continue
        m = lo if -lo >= hi else hi
        s = F32(st(F32(m) / F32(qmin)))
        c = np.rint(np.clip(blk / s, qmin, qmax)).astype(np.int64)
        codes[rs, cs] = c
        deq[rs, cs] = (c.astype(F32) * s).astype(F32)
        scales.append(s)
    return codes, np.array(scales, F32), deq


def lowbit_codes(spec, q):
    if parse(spec)[0] == "int8":
        return q.data.view(np.int8).astype(np.int64)[:, :q.cols]
    nib = np.stack([q.data & 0xF, q.data >> 4], axis=2).reshape(q.rows, -1)[:, :q.cols].astype(np.int64)
    return np.where(nib >= 8, nib - 16, nib)


def stored_scales(spec, q):
    return q.scales.view(SCALE_TYPES[parse(spec)[2]]).astype(F32)


def make_input(kind, spec, rows, cols, seed):
    """Blocks whose largest magnitude is positive, negative, tied between the
    signs, all zero; and codes that land on half steps of the scale."""
    rng = np.random.default_rng(seed * 104729 + cols)
    elem, gran, _ = parse(spec)
    qmin, qmax = QRANGE[elem]
    x = np.zeros((rows, cols))
    for rs, cs in blocks_of(rows, cols, gran if gran != "tensor" else "channel"):
        n = cs.stop - cs.start
        if kind == "normal":
            v = rng.standard_normal(n)
        elif kind == "heavy":
            v = rng.standard_t(1.5, n) * 0.02
        elif kind == "signs":  # the extreme positive, negative, tied (+a and -a), or the block zero
            v = rng.uniform(-1, 1, n) * 0.5
            pick = rng.integers(0, 4)
            if pick == 0:
                v[rng.integers(0, n)] = 1.0
            elif pick == 1:
                v[rng.integers(0, n)] = -1.0
            elif pick == 2 and n > 1:
                i, j = rng.choice(n, 2, replace=False)
                v[i], v[j] = 1.0, -1.0
            else:
                v[:] = rng.choice([0.0, -0.0])
        elif kind == "ties":  # the extreme on qmin, the rest on half steps of the scale, both signs of scale
            s = 2.0 ** int(rng.integers(-12, 4)) * rng.choice([1.0, -1.0])
            v = (rng.integers(qmin, qmax, n) + 0.5) * s
            v[rng.integers(0, n)] = qmin * s
        else:
            raise ValueError(kind)
        x[rs, cs] = v
    return x.astype(F32)


SPECS = ["int4:g32:range=signed", "int4:g16:range=signed", "int4:channel:range=signed", "int4:tensor:range=signed",
         "int4:g32:scale=fp16:range=signed", "int4:g128:scale=bf16:range=signed", "int4:g7:range=signed",
         "int8:channel:range=signed", "int8:g32:range=signed", "int8:tensor:range=signed",
         "int8:channel:scale=fp16:range=signed", "int8:g64:scale=bf16:range=signed"]
KINDS = ["normal", "heavy", "signs", "ties"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("kind", KINDS)
def test_signed_matches_the_rule(spec, kind):
    for cols in (1, 5, 32, 33, 100, 257):
        for seed in range(2):
            x = make_input(kind, spec, 4, cols, seed)
            codes, scales, deq = reference(spec, x)
            for isa in lb.isas():
                lb.set_isa(isa)
                for threads in (1, 3):
                    st, q = lb.quantize(spec, x, threads=threads)
                    assert st == lb.LB_OK, lb.last_error()
                    got = lowbit_codes(spec, q)
                    bad = np.argwhere(got != codes)
                    assert not bad.size, (spec, kind, cols, seed, isa, bad[:3], got[tuple(bad[0])],
                                          codes[tuple(bad[0])])
                    assert (stored_scales(spec, q).view(np.uint32) == scales.view(np.uint32)).all(), \
                        (spec, kind, cols, seed, isa, stored_scales(spec, q)[:4], scales[:4])
                    assert (q.dequantized.view(np.uint32) == deq.view(np.uint32)).all(), (spec, kind, cols, isa)
            lb.set_isa(lb.isas()[-1])


def test_the_largest_magnitude_lands_on_the_lowest_code_whatever_its_sign():
    x = make_input("signs", "int4:g32", 64, 256, 5)
    for elem in ("int4", "int8"):
        qmin = QRANGE[elem][0]
        spec = f"{elem}:g32:range=signed"
        q = lb.quantize(spec, x)[1]
        codes, scales = lowbit_codes(spec, q), stored_scales(spec, q)
        assert (scales < 0).any() and (scales > 0).any() and (scales == 0).any()
        for r in range(64):
            for b in range(8):
                blk, c = x[r, 32 * b:32 * b + 32], codes[r, 32 * b:32 * b + 32]
                if not blk.any():
                    assert scales[r * 8 + b] == 0 and not c.any()
                    continue
                neg = -blk.min() >= blk.max()  # a tie of magnitudes takes the negative one
                i = int(np.argmin(blk) if neg else np.argmax(blk))
                assert c[i] == qmin, (elem, r, b)
                assert np.sign(scales[r * 8 + b]) == (1 if neg else -1), (elem, r, b)
                if -blk.min() == blk.max():  # the positive twin goes on +8, clamped to +7
                    assert c[int(np.argmax(blk))] == -qmin - 1


def test_signed_gives_the_gguf_packages_q4_0_scales():
    """int4:g32:scale=fp16:range=signed is Q4_0's rule: where a block's value
    of largest magnitude is unique, the fp16 scale is the gguf package's d bit
    for bit; codes agree except near half steps (ggml rounds x * (1/d) half
    up with the unrounded d, lowbit x / d_fp16 to even)."""
    rng = np.random.default_rng(4040)
    x = (rng.standard_normal((48, 32 * 8)) * 0.05).astype(F32)
    x[:, 5] *= 4  # some blocks with a large positive extreme, some negative
    spec = "int4:g32:scale=fp16:range=signed"
    q = lb.quantize(spec, x)[1]
    codes, scales = lowbit_codes(spec, q), q.scales.view(np.uint16)
    raw = gguf_quantize(x, GGMLQuantizationType.Q4_0).reshape(-1, 18)
    gd = raw[:, :2].copy().view(np.uint16).ravel()
    gq = np.stack([raw[:, 2:] & 0xF, raw[:, 2:] >> 4], axis=1).reshape(-1, 32).astype(np.int64) - 8
    blocks = x.reshape(-1, 32)
    unique = np.array([(np.abs(b) == np.abs(b).max()).sum() == 1 for b in blocks])
    assert unique.sum() > 300
    assert (scales[unique] == gd[unique]).all()
    d32 = np.array([b[np.argmax(np.abs(b))] / F32(-8) for b in blocks], F32)
    y = (blocks.astype(np.float64) / d32[:, None].astype(np.float64))
    far = np.abs(np.abs(y - np.floor(y)) - 0.5) > 0.01
    mine = codes.reshape(-1, 32)
    assert (mine[unique][far[unique]] == gq[unique][far[unique]]).all()
    assert (gq[unique] == -8).any(axis=1).all() and (mine[unique] == -8).any(axis=1).all()


def test_signed_refuses_unsigned_and_two_level_scales():
    for text in ("int4:g16:scale=ue4m3:range=signed", "int4:g16:scale=fp16:twolevel:range=signed",
                 "int8:channel:scale=ue4m3:twolevel:range=signed"):
        st, _ = lb.parse_spec(text)
        assert st != lb.LB_OK and "range=signed needs a signed scale format" in lb.last_error(), text
    for text in ("int4:g128:affine:range=signed", "fp8_e4m3:channel:range=signed", "mxint8:range=signed"):
        st, _ = lb.parse_spec(text)
        assert st != lb.LB_OK and "range= applies to symmetric int8/int4" in lb.last_error(), text


@pytest.mark.parametrize("text,canonical", [
    ("int4:g32:range=signed", "int4:g32"),  # int4's default (fp32, fp16, bf16 scales)
    ("int4:g128:scale=bf16", "int4:g128:scale=bf16"),
    ("int8:channel:scale=fp16:clip=mse:range=signed", "int8:channel:scale=fp16:clip=mse:range=signed"),
    ("int4:g32:range=signed:range=full", "int4:g32:range=full"),
    ("int4:g16:scale=ue4m3", "int4:g16:scale=ue4m3"),  # unsigned scales: full
])
def test_signed_text_round_trips(text, canonical):
    st, spec = lb.parse_spec(text)
    assert st == lb.LB_OK, lb.last_error()
    assert lb.format_spec(spec) == canonical
    st, again = lb.parse_spec(canonical)
    assert st == lb.LB_OK and again.range == spec.range


def test_int4s_default_is_signed_and_int8s_full():
    for text, want in (("int4:g32", 2), ("int4:channel:scale=bf16", 2), ("int4:g16:scale=ue4m3", 0),
                       ("int4:g16:scale=fp16:twolevel", 0), ("int8:channel", 0), ("int8:g32:scale=bf16", 0)):
        st, spec = lb.parse_spec(text)
        assert st == lb.LB_OK and spec.range == want, (text, spec.range)


def test_error_stats_with_negative_scales():
    """lb_qstats (lowbit error's numbers) from the dequantized values, the
    scale's sign irrelevant: MSE equals numpy's on the same values."""
    x = make_input("signs", "int4:g32", 8, 256, 9)
    q = lb.quantize("int4:g32:range=signed", x)[1]
    _, _, deq = reference("int4:g32:range=signed", x)
    mse = float(np.mean((x.astype(np.float64) - deq.astype(np.float64)) ** 2))
    assert q.stats.mse == pytest.approx(mse, rel=1e-12, abs=0)
    # saturated: outside what the block's codes reach, [-8 s, 7 s] or [7 s, -8 s] when s < 0
    s = np.repeat(stored_scales("int4:g32:range=signed", q).astype(np.float64), 32).reshape(x.shape)
    ends = np.stack([-8 * s, 7 * s]) * (1 + 2.0**-22)
    out = (x < ends.min(axis=0)) | (x > ends.max(axis=0))
    assert 0 < out.sum() < x.size // 10  # values rounding past +7 on the extreme's opposite side
    assert q.stats.saturated_fraction == out.sum() / x.size
