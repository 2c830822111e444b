"""Checks of the GPTQ reference (gptq_ref.py) on its own: the quantizer
formulas on hand-worked values, GPTQ == RTN for a diagonal Hessian,
GPTQ beats RTN on held-out inputs, the blocked lazy-update form equals the
plain column-by-column OBS form, act-order's output order, and the dead
column / singular / indefinite Hessian paths. numpy only, a few seconds."""
import os
import sys

# Every matrix here is at most 256 x 256: BLAS threads only add contention
# (on a busy 2-core machine this file took 3-8x longer with them). OpenBLAS
# reads the variable when numpy loads it, so this takes effect only when
# numpy is not imported yet (this file run on its own); the environment is
# put back at once so that no subprocess of the session inherits it.
_saved = os.environ.get("OPENBLAS_NUM_THREADS")
os.environ["OPENBLAS_NUM_THREADS"] = "1"
import numpy as np  # noqa: E402
if _saved is None:
    del os.environ["OPENBLAS_NUM_THREADS"]
else:
    os.environ["OPENBLAS_NUM_THREADS"] = _saved
import pytest  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import gptq_ref as G  # noqa: E402

QUANTIZERS = {
    "int4sym": G.IntSym(4),
    "int4sym_g32": G.IntSym(4, 32),
    "int3asym": G.IntAsym(3),
    "int3asym_g32": G.IntAsym(3, 32),
    "fp8": G.FP8(),
    "nvfp4": G.NVFP4(),
    "mxfp4": G.MXFP4(),
}
WHOLE_ROW = ["int4sym", "int3asym", "fp8"]
# (actorder, static_groups)
MODES = {"plain": (False, False), "static": (False, True),
         "actorder": (True, True)}


def make_inputs(rng, n, inp):
    """Correlated features (16 shared latent factors), per-channel scales
    spread over about e^+-1, and four planted large channels (x8)."""
    mix = rng.normal(size=(16, inp)) * 0.7
    scale = np.exp(rng.normal(0.0, 0.5, inp))
    big = rng.choice(inp, 4, replace=False)
    scale[big] *= 8.0

    def draw(m):
        x = rng.normal(size=(m, inp)) + rng.normal(size=(m, 16)) @ mix
        return x * scale
    return draw(n), draw(n)


@pytest.fixture(scope="module")
def layer():
    rng = np.random.default_rng(1234)
    out, inp, n = 48, 256, 2048
    Xc, Xt = make_inputs(rng, n, inp)
    W = rng.normal(size=(out, inp)) * 0.05
    W[rng.integers(0, out, 6), rng.integers(0, inp, 6)] *= 6.0  # outliers
    return W, Xc, Xt, G.hessian(Xc)


def out_err(X, W, Q):
    return float(np.sum((X @ (W - Q).T) ** 2))


# ---------------------------------------------------------------- formulas

def row(*v):
    return np.array([v], dtype=np.float64)


def rt(qz, W):
    return G.rtn(W, qz)[0].tolist()


def test_hessian():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(37, 5))
    H = G.hessian(X.astype(np.float32))
    assert H.dtype == np.float64
    assert np.allclose(H, 2 * X.T @ X / 37, rtol=1e-6)


def test_int_sym_formula():
    qz = G.IntSym(4)
    # amax 1.75 -> d = 0.25
    # codes 7, rne(-3.5) = -4, rne(0.5) = 0, rne(2.25) = 2
    assert rt(qz, row(1.75, -0.875, 0.125, 0.5625)) == [1.75, -1.0, 0.0, 0.5]
    (d,) = qz.params(row(1.75, -1.0))
    assert d.tolist() == [0.25]
    # error-updated values beyond the range saturate at codes -8 and 7
    assert qz.quantize(np.array([-3.0, 3.0]), (np.array([0.25, 0.25]),)
                       ).tolist() == [-2.0, 1.75]
    assert rt(qz, row(0.0, 0.0)) == [0.0, 0.0]
    assert rt(G.IntSym(8), row(127.0, -64.5, 1.5)) == [127.0, -64.0, 2.0]


def test_int_asym_formula():
    qz = G.IntAsym(2)
    # lo=-1 hi=2 -> d=1, z=1; codes 0, 3, rne(.5)+1 = 1, rne(1.25)+1 = 2
    assert rt(qz, row(-1.0, 2.0, 0.5, 1.25)) == [-1.0, 2.0, 0.0, 1.0]
    d, z = qz.params(row(-1.0, 2.0))
    assert (d.tolist(), z.tolist()) == ([1.0], [1.0])
    # the range always includes 0: lo = 0 here, d = 0.5, z = 0
    assert rt(qz, row(0.5, 1.5)) == [0.5, 1.5]
    # codes clip at 0 and maxq
    assert qz.quantize(np.array([-5.0, 5.0]), (np.array([1.0, 1.0]),
                       np.array([1.0, 1.0]))).tolist() == [-1.0, 2.0]
    assert rt(qz, row(0.0, 0.0)) == [0.0, 0.0]


def test_fp8_formula():
    qz = G.FP8()
    # amax 896 -> s = 2; 34/2 = 17 is a tie between 16 and 18 -> 16
    assert rt(qz, row(896.0, 3.0, 34.0, -1.0)) == [896.0, 3.0, 32.0, -1.0]
    # an updated weight past 448 s saturates instead of becoming NaN
    assert qz.quantize(np.array([1000.0]), (np.array([2.0]),)
                       ).tolist() == [896.0]


def test_nvfp4_formula():
    # max|W| = 2688 = 6 * 448 -> G = 1
    W = np.zeros((1, 32))
    W[0, :4] = [12.0, 5.0, 1.0, -7.0]          # block 0: amax 12 -> s = 2
    W[0, 16:19] = [2688.0, 102.0, 0.0]         # block 1: amax 2688 -> s=448
    q = G.rtn(W, G.NVFP4())[0]
    assert q[:4].tolist() == [12.0, 4.0, 1.0, -8.0]   # 2.5->2, -3.5->-4
    assert q[16:19].tolist() == [2688.0, 0.0, 0.0]    # 102/448 -> 0 (e2m1)
    qz = G.NVFP4().bind(W)
    assert qz.global_scale == 1.0
    # block scale rounded to E4M3: 102/6 = 17 -> 16; 102/16 -> clip 6 -> 96
    (sg,) = qz.params(row(102.0, 40.0))
    assert sg.tolist() == [16.0]
    assert qz.quantize(np.array([102.0, 40.0]), (np.array([16.0, 16.0]),)
                       ).tolist() == [96.0, 32.0]
    # G is stored as float32
    qz = G.NVFP4().bind(row(1.0))
    assert qz.global_scale == float(np.float32(1.0 / 2688.0))
    assert np.array_equal(G.rtn(np.zeros((2, 16)), G.NVFP4()),
                          np.zeros((2, 16)))


def test_mxfp4_formula():
    qz = G.MXFP4()
    for amax, X in [(5.0, 1.0), (4.0, 1.0), (7.9, 1.0), (8.0, 2.0),
                    (0.75, 0.125), (1e-30, 2.0 ** (-100 - 2))]:
        assert qz.params(row(amax, -amax / 3))[0].tolist() == [X], amax
    # X = 1: 5 ties between 4 and 6 -> 4; 2.5 -> 2; 0.75 -> 1; 7.9 -> 6
    assert rt(qz, row(5.0, 2.5, -0.25, 0.75)) == [4.0, 2.0, -0.0, 1.0]
    assert rt(qz, row(7.9, -7.9)) == [6.0, -6.0]
    assert rt(qz, row(0.75, 0.1)) == [0.75, 0.125]


def test_groups_partial_last():
    # 40 columns in groups of 32: the last group (8 columns) has its own d
    W = np.ones((1, 40))
    W[0, 0] = 7.0
    W[0, 32:] = 0.5
    W[0, 39] = 3.5
    q = G.rtn(W, G.IntSym(4, 32))[0]
    assert q[1] == 1.0 and q[0] == 7.0
    assert q[32] == 0.5 and q[39] == 3.5


# ---------------------------------------------------------------- H diagonal

@pytest.mark.parametrize("qname", QUANTIZERS)
@pytest.mark.parametrize("mode", MODES)
def test_diagonal_hessian_is_rtn(qname, mode):
    """H = I (damp 0 or 0.01) or a random positive diagonal: U is diagonal,
    no error reaches another column, so GPTQ rounds exactly like RTN --
    with groups, act-order (a real permutation for the random diagonal)
    and blocks of 1, 7 and 128 over 100 columns (partial last blocks and
    groups)."""
    qz = QUANTIZERS[qname]
    actorder, static = MODES[mode]
    rng = np.random.default_rng(7)
    W = rng.normal(size=(16, 100)) * np.exp(rng.normal(0, 1, 100))
    ref = G.rtn(W, qz)
    Hs = [(np.eye(100), 0.0), (np.eye(100), 0.01),
          (np.diag(rng.uniform(0.1, 10.0, 100)), 0.01)]
    for H, damp in Hs:
        for block in (1, 7, 128):
            Q, info = G.gptq(W, H, qz, block=block, damp=damp,
                             actorder=actorder, static_groups=static)
            assert np.array_equal(Q, ref), (damp, block)
            assert info["damp_retries"] == 0
    # act-order really permuted for the random diagonal
    if actorder:
        assert not np.array_equal(info["perm"], np.arange(100))


# ---------------------------------------------------------------- vs RTN

@pytest.mark.parametrize("qname", QUANTIZERS)
@pytest.mark.parametrize("mode", MODES)
def test_gptq_beats_rtn_heldout(layer, qname, mode):
    W, Xc, Xt, H = layer
    qz = QUANTIZERS[qname]
    actorder, static = MODES[mode]
    Q, info = G.gptq(W, H, qz, actorder=actorder, static_groups=static)
    e_g, e_r = out_err(Xt, W, Q), out_err(Xt, W, G.rtn(W, qz))
    # on these correlated inputs GPTQ removes most of RTN's output error
    # (observed ratios 0.12 - 0.16); a wrong sign, index or scaling in the
    # update makes it worse than RTN.
    assert e_g < 0.5 * e_r, (e_g / e_r)
    assert info["damp_retries"] == 0


# ---------------------------------------------------------------- blocked

@pytest.mark.parametrize("qname", QUANTIZERS)
@pytest.mark.parametrize("mode", MODES)
def test_blocked_equals_unblocked(layer, qname, mode):
    """Lazy batch updates + Cholesky form (gptq) == the plain OBS form with
    an explicit shrinking inverse (gptq_unblocked). Differences are the
    float64 rounding of two routes to the same numbers (~1e-14); a rounding
    tie would have to fall within that of a grid midpoint to flip."""
    W, Xc, Xt, H = layer
    qz = QUANTIZERS[qname]
    actorder, static = MODES[mode]
    Qu, _ = G.gptq_unblocked(W, H, qz, actorder=actorder,
                             static_groups=static)
    scale = np.max(np.abs(Qu))
    for block in (1, 7, 128, 300):
        Q, _ = G.gptq(W, H, qz, block=block, actorder=actorder,
                      static_groups=static)
        assert np.max(np.abs(Q - Qu)) <= 1e-9 * scale, block


def test_blocked_equals_unblocked_dead_columns():
    rng = np.random.default_rng(5)
    Xc, _ = make_inputs(rng, 512, 96)
    Xc[:, [3, 40, 41]] = 0.0
    H = G.hessian(Xc)
    W = rng.normal(size=(8, 96))
    for qz in (G.IntSym(4, 32), G.NVFP4()):
        for actorder, static in MODES.values():
            Qu, iu = G.gptq_unblocked(W, H, qz, actorder=actorder,
                                      static_groups=static)
            Q, info = G.gptq(W, H, qz, block=16, actorder=actorder,
                             static_groups=static)
            assert info["dead"].tolist() == [3, 40, 41]
            assert np.all(Q[:, [3, 40, 41]] == 0)
            assert np.max(np.abs(Q - Qu)) <= 1e-9 * np.max(np.abs(Qu))


def test_block_start_group_quirk(layer):
    """group_params_from="block_start" (the reference code's choice) equals
    the default exactly when every group starts a block, and differs when a
    group starts inside a block (g=32, block=128)."""
    W, Xc, Xt, H = layer
    qz = G.IntSym(4, 32)
    cur, _ = G.gptq(W, H, qz, block=128)
    for block in (1, 32):
        q, _ = G.gptq(W, H, qz, block=block, group_params_from="block_start")
        assert np.array_equal(q, G.gptq(W, H, qz, block=block)[0])
    quirk, _ = G.gptq(W, H, qz, block=128, group_params_from="block_start")
    assert not np.array_equal(quirk, cur)
    qz = G.IntSym(4, 128)
    assert np.array_equal(
        G.gptq(W, H, qz, block=128, group_params_from="block_start")[0],
        G.gptq(W, H, qz, block=128)[0])


# ---------------------------------------------------------------- act-order

@pytest.mark.parametrize("qname", WHOLE_ROW)
def test_actorder_is_permuted_plain_gptq(layer, qname):
    """For whole-row parameters, act-order == plain GPTQ run on the
    columns sorted by decreasing diag(H), un-permuted afterwards."""
    W, Xc, Xt, H = layer
    qz = QUANTIZERS[qname]
    Q, info = G.gptq(W, H, qz, actorder=True)
    perm = np.argsort(-np.diag(H), kind="stable")
    assert np.array_equal(info["perm"], perm)
    assert np.all(np.diff(np.diag(H)[perm]) <= 0)
    Qp, _ = G.gptq(W[:, perm], H[np.ix_(perm, perm)], qz)
    assert np.array_equal(Q, Qp[:, np.argsort(perm)])
    assert not np.array_equal(Q, G.gptq(W, H, qz)[0])  # order matters


@pytest.mark.parametrize("qname", QUANTIZERS)
def test_actorder_permutation_equivariant(layer, qname):
    """Relabelling the input columns (W's columns and H's rows/columns
    together) relabels Q the same way. The permutation moves whole groups
    of the quantizer's group size (32 for whole rows) and shuffles inside
    each, so every group keeps its members (the
    static parameters depend only on them)."""
    W, Xc, Xt, H = layer
    qz = QUANTIZERS[qname]
    u = qz.group or 32
    rng = np.random.default_rng(3)
    blocks = rng.permutation(W.shape[1] // u)
    s = np.concatenate([b * u + rng.permutation(u) for b in blocks])
    Q, _ = G.gptq(W, H, qz, actorder=True, static_groups=True)
    Qs, _ = G.gptq(W[:, s], H[np.ix_(s, s)], qz, actorder=True,
                   static_groups=True)
    assert np.array_equal(Qs, Q[:, s])


def test_actorder_with_dynamic_groups_rejected(layer):
    W, Xc, Xt, H = layer
    with pytest.raises(ValueError):
        G.gptq(W, H, G.IntSym(4, 32), actorder=True, static_groups=False)
    with pytest.raises(ValueError):
        G.gptq_unblocked(W, H, G.MXFP4(), actorder=True)
    # whole-row groups: fine, parameters from W
    Q1, _ = G.gptq(W, H, G.IntSym(4), actorder=True, static_groups=False)
    Q2, _ = G.gptq(W, H, G.IntSym(4), actorder=True, static_groups=True)
    assert np.array_equal(Q1, Q2)


# ---------------------------------------------------------------- edge paths

def test_dead_column_finite(layer):
    W, Xc, Xt, H = layer
    X = Xc.copy()
    X[:, 10] = 0.0
    Hd = G.hessian(X)
    for qz in QUANTIZERS.values():
        for actorder, static in MODES.values():
            Q, info = G.gptq(W, Hd, qz, actorder=actorder,
                             static_groups=static)
            assert np.all(np.isfinite(Q))
            assert info["dead"].tolist() == [10]
            assert np.all(Q[:, 10] == 0.0)


def test_singular_hessian_finite(layer):
    """64 samples for 256 features: rank(H) <= 64; the 1% dampening makes
    it definite, no retry, and GPTQ still beats RTN on the samples it saw."""
    W, Xc, Xt, H = layer
    X = Xc[:64]
    Hs = G.hessian(X)
    assert np.linalg.matrix_rank(Hs) <= 64
    for name in ("int4sym_g32", "nvfp4", "mxfp4"):
        qz = QUANTIZERS[name]
        Q, info = G.gptq(W, Hs, qz, static_groups=True)
        assert np.all(np.isfinite(Q))
        assert info["damp_retries"] == 0
        assert out_err(X, W, Q) < out_err(X, W, G.rtn(W, qz))


def test_indefinite_hessian_raises_damping(layer):
    """H - c mean(diag) I with a singular H has eigenvalue -c mean(diag):
    not definite until lambda > c mean(diag)."""
    W, Xc, Xt, H = layer
    Hs = G.hessian(Xc[:64])
    m = np.mean(np.diag(Hs))
    n = Hs.shape[0]
    qz = G.IntSym(4, 32)
    for c, damp, retries, rel in [(0.05, 0.01, 1, 0.1),     # 0.01 -> 0.1
                                  (0.3, 0.01, 2, 1.0),      # -> 0.1 -> 1
                                  (0.005, 0.0, 1, 0.01)]:   # 0 -> 0.01
        Hb = Hs - c * m * np.eye(n)
        mb = np.mean(np.diag(Hb))
        Q, info = G.gptq(W, Hb, qz, damp=damp)
        Qu, iu = G.gptq_unblocked(W, Hb, qz, damp=damp)
        assert info["damp_retries"] == retries == iu["damp_retries"], c
        assert info["damp_rel"] == pytest.approx(rel)
        assert info["damp"] == pytest.approx(rel * mb)
        assert np.all(np.isfinite(Q))
        assert np.max(np.abs(Q - Qu)) <= 1e-9 * np.max(np.abs(Qu))
    # a plainly negative H: the base switches to max|H|
    Q, info = G.gptq(W, -np.eye(n), qz)
    assert info["damp_retries"] > 0 and np.all(np.isfinite(Q))


def test_float32_input_and_shapes(layer):
    W, Xc, Xt, H = layer
    W32 = W.astype(np.float32)
    Q, _ = G.gptq(W32, H, G.FP8())
    assert Q.dtype == np.float64 and Q.shape == W.shape
    assert np.array_equal(Q, G.gptq(W32.astype(np.float64), H, G.FP8())[0])
    with pytest.raises(ValueError):
        G.gptq(W, H[:10, :10], G.FP8())
    Hn = H.copy()
    Hn[0, 0] = np.nan
    with pytest.raises(ValueError):
        G.gptq(W, Hn, G.FP8())
