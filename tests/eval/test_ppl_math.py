"""Perplexity arithmetic, hand-computed: lb_nll and the running sums."""
import ctypes
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "model"))
import model_lib as ml  # noqa: E402


class Acc(ctypes.Structure):
    _fields_ = [("mean", ctypes.c_double), ("m2", ctypes.c_double), ("count", ctypes.c_uint64)]


lib = ml.lib
lib.lb_nll.restype = ctypes.c_double
lib.lb_nll.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32]
lib.lb_ppl_add.argtypes = [ctypes.POINTER(Acc), ctypes.c_double]
lib.lb_ppl_get.argtypes = [ctypes.POINTER(Acc), ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)]


def nll(logits, target):
    x = np.ascontiguousarray(logits, dtype=np.float32)
    return lib.lb_nll(x.ctypes.data, x.size, target)


def ppl_of(nlls):
    a = Acc()
    for v in nlls:
        lib.lb_ppl_add(ctypes.byref(a), v)
    p, e = ctypes.c_double(), ctypes.c_double()
    lib.lb_ppl_get(ctypes.byref(a), ctypes.byref(p), ctypes.byref(e))
    return p.value, e.value


@pytest.mark.parametrize("vocab", [2, 512, 49152])
def test_uniform_distribution_has_perplexity_vocab(vocab):
    # equal logits: p = 1/V for every token, nll = ln V, ppl = exp(ln V) = V, and no spread: error 0
    logits = np.full(vocab, 3.25, np.float32)
    assert nll(logits, 0) == pytest.approx(math.log(vocab), rel=1e-12)
    p, e = ppl_of([nll(logits, t % vocab) for t in range(10)])
    assert p == pytest.approx(vocab, rel=1e-12) and e == 0


def test_two_tokens_by_hand():
    # vocab 3. Token 1: logits (0, ln 2, ln 3) -> p = (1, 2, 3) / 6; target 2: nll = ln 6 - ln 3 = ln 2.
    # Token 2: logits (0, 0, 0) -> p = 1/3; target 0: nll = ln 3.
    # mean nll = (ln 2 + ln 3) / 2 = ln 6 / 2 -> ppl = sqrt(6) = 2.449490;
    # nll sd = (ln 3 - ln 2) / 2 = 0.202733 (population); error = ppl x sd / sqrt(n - 1) = 2.449490 x 0.202733 = 0.496594
    a = nll([0, math.log(2), math.log(3)], 2)
    b = nll([0, 0, 0], 0)
    assert a == pytest.approx(math.log(2), abs=1e-7) and b == pytest.approx(math.log(3), rel=1e-12)
    p, e = ppl_of([a, b])
    assert p == pytest.approx(math.sqrt(6), rel=1e-7)
    assert e == pytest.approx(math.sqrt(6) * (math.log(3) - math.log(2)) / 2, rel=1e-6)


def test_large_logits_do_not_overflow():
    # log-sum-exp subtracts the max: 1e4 and 1e4 - ln 3 give p = 3/4 and 1/4
    x = np.array([1e4, 1e4 - math.log(3)], np.float32)
    assert nll(x, 0) == pytest.approx(-math.log(0.75), abs=2e-3)  # fp32 spacing at 1e4 is ~1e-3
