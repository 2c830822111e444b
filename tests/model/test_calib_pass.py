"""The calibration pass (src/algo/calib_pass.h) on the embedded stories260K,
against what the public forward pass shows:

* lb__calib_windows: the documented generator (splitmix64 from the seed
  "lowbit!!", a partial Fisher-Yates draw of non-overlapping slots, sorted)
  re-implemented here gives the same windows; every window lies in the
  text; fewer windows when the text is short; BOS replacement;
* lb__calib_sample_positions: the documented draw (one uniform row per
  slice) re-implemented here gives the same rows, which reach every
  position of a window;
* per-site statistics (absmax, mean |x|, mean x^2), the row samples at the
  documented positions, the Hessians and the per-head K/V maxima equal
  numpy's on the inputs lb_runner_forward's activation hook delivers on the
  same windows (unquantized model, SOURCE mode);
* QUANTIZED mode: layer i's statistics equal those of a forward pass whose
  layers < i are quantized and layer i is not; with no spec set it equals
  SOURCE mode exactly;
* a callback that replaces a norm changes the later layers' statistics
  exactly as a model with that norm replaced beforehand gives them;
* a callback's error stops the pass and is returned; a non-finite
  activation is LB_ERR_NAN naming the layer and the input."""
import ctypes
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import internal_lib  # noqa: E402
import lowbit_ctypes as lbc  # noqa: E402
import model_lib as ml  # noqa: E402
import reference_llama as ref  # noqa: E402

LB_OK, LB_ERR_ARG, LB_ERR_NAN = 0, 1, 3
SOURCE, QUANTIZED, SUBLAYERS = 0, 1, 2
SITES = ["attn_in", "o_in", "mlp_in", "down_in"]
SITE_WEIGHTS = [["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], ["self_attn.o_proj"],
                ["mlp.gate_proj", "mlp.up_proj"], ["mlp.down_proj"]]
N_LAYERS = 5
P = ctypes.c_void_p


class SiteStats(ctypes.Structure):
    _fields_ = [("cols", ctypes.c_size_t), ("rows", ctypes.c_uint64), ("absmax", ctypes.POINTER(ctypes.c_float)),
                ("mean_abs", ctypes.POINTER(ctypes.c_float)), ("mean_sq", ctypes.POINTER(ctypes.c_float)),
                ("sample", ctypes.POINTER(ctypes.c_float)), ("n_sample", ctypes.c_size_t),
                ("hessian", ctypes.POINTER(ctypes.c_double)), ("weight", ctypes.c_size_t * 3),
                ("n_weights", ctypes.c_size_t)]


class LayerStats(ctypes.Structure):
    _fields_ = [("layer", ctypes.c_size_t), ("site", SiteStats * 4), ("n_kv_heads", ctypes.c_size_t),
                ("head_dim", ctypes.c_size_t), ("k_absmax", ctypes.POINTER(ctypes.c_float)),
                ("v_absmax", ctypes.POINTER(ctypes.c_float)), ("attn_norm", ctypes.c_size_t),
                ("ffn_norm", ctypes.c_size_t), ("partial", ctypes.c_int), ("current", ctypes.c_int)]


class PassOptions(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("sample_rows", ctypes.c_size_t), ("hessian", ctypes.c_int), ("keep_outputs", ctypes.c_int),
                ("threads", ctypes.c_int), ("progress", P), ("progress_ctx", P)]


LAYER_FN = ctypes.CFUNCTYPE(ctypes.c_int, P, P, ctypes.POINTER(LayerStats))
PROGRESS_FN = ctypes.CFUNCTYPE(None, P, ctypes.c_size_t, ctypes.c_size_t)
HOOK_FN = ctypes.CFUNCTYPE(None, P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, ctypes.c_size_t)


@pytest.fixture(scope="module")
def lib():
    L = internal_lib.load()
    for name, args, res in [
        ("lb_model_open", [ctypes.c_char_p, ctypes.POINTER(P)], ctypes.c_int), ("lb_model_close", [P], None),
        ("lb_qmodel_new", [P, ctypes.POINTER(P)], ctypes.c_int), ("lb_qmodel_free", [P], None),
        ("lb_qmodel_find", [P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)], ctypes.c_int),
        ("lb_qmodel_set_spec", [P, ctypes.c_size_t, ctypes.POINTER(lbc.QSpec)], ctypes.c_int),
        ("lb_qmodel_replace", [P, ctypes.c_size_t, P], ctypes.c_int),
        ("lb_qmodel_source_f32", [P, ctypes.c_size_t, P], ctypes.c_int),
        ("lb_qmodel_values_f32", [P, ctypes.c_size_t, P], ctypes.c_int),
        ("lb_qspec_parse", [ctypes.c_char_p, ctypes.POINTER(lbc.QSpec)], ctypes.c_int),
        ("lb_runner_from_qmodel", [P, ctypes.POINTER(lbc.RunnerOptions), ctypes.POINTER(P)], ctypes.c_int),
        ("lb_runner_new", [P, ctypes.POINTER(lbc.RunnerOptions), ctypes.POINTER(P)], ctypes.c_int),
        ("lb_runner_free", [P], None), ("lb_runner_reset", [P], None),
        ("lb_runner_set_hook", [P, HOOK_FN, P], None),
        ("lb_runner_forward", [P, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, P, ctypes.c_int], ctypes.c_int),
    ]:
        getattr(L, name).argtypes = args
        getattr(L, name).restype = res
    L.lb_last_error.restype = ctypes.c_char_p
    L.lb__calib_pass.argtypes = [P, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.c_size_t,
                                 ctypes.POINTER(PassOptions), LAYER_FN, P]
    L.lb__calib_pass.restype = ctypes.c_int
    L.lb__calib_windows.argtypes = [ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.c_size_t,
                                    ctypes.c_size_t, ctypes.c_int32, ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)),
                                    ctypes.POINTER(ctypes.c_size_t)]
    L.lb__calib_windows.restype = ctypes.c_int
    L.lb__calib_sample_positions.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_uint64]
    L.lb__calib_sample_positions.restype = None
    for name, args in [("lb__runner_build_layerwise", [P, P, ctypes.c_int, ctypes.POINTER(P)]),
                       ("lb__runner_reload_layer_as", [P, P, ctypes.c_size_t, ctypes.c_int]),
                       ("lb__runner_layer", [P, ctypes.c_size_t, P, ctypes.c_size_t]),
                       ("lb__runner_embed", [P, P, ctypes.c_size_t, P]),
                       ("lb__runner_reload_weights", [P, P, ctypes.c_size_t, ctypes.c_int, ctypes.c_int])]:
        getattr(L, name).argtypes = args
        getattr(L, name).restype = ctypes.c_int
    L.lb__runner_unload_layer.argtypes = [P, ctypes.c_size_t]
    L.lb__runner_unload_layer.restype = None
    L.lb__runner_unload_ends.argtypes = [P]
    L.lb__runner_unload_ends.restype = None
    L.lb__calib_struct_layout.argtypes = [P]
    L.lb__calib_struct_layout.restype = None
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [P]
    L.free = libc.free
    return L


def err(lib):
    return lib.lb_last_error().decode()


class QModel:
    def __init__(self, lib):
        self.lib = lib
        self.model, self.h = P(), P()
        assert lib.lb_model_open(str(ml.STORIES).encode(), ctypes.byref(self.model)) == LB_OK, err(lib)
        assert lib.lb_qmodel_new(self.model, ctypes.byref(self.h)) == LB_OK, err(lib)

    def close(self):
        self.lib.lb_qmodel_free(self.h)
        self.lib.lb_model_close(self.model)

    def index(self, name):
        i = ctypes.c_size_t()
        assert self.lib.lb_qmodel_find(self.h, name.encode(), ctypes.byref(i)) == LB_OK, name
        return i.value

    def set_spec(self, name, text):
        spec = lbc.QSpec()
        assert self.lib.lb_qspec_parse(text.encode(), ctypes.byref(spec)) == LB_OK
        assert self.lib.lb_qmodel_set_spec(self.h, self.index(name), ctypes.byref(spec)) == LB_OK, err(self.lib)

    def source(self, name, shape):
        out = np.empty(shape, dtype=np.float32)
        assert self.lib.lb_qmodel_source_f32(self.h, self.index(name), out.ctypes.data) == LB_OK
        return out

    def replace(self, name, values):
        v = np.ascontiguousarray(values, dtype=np.float32)
        return self.lib.lb_qmodel_replace(self.h, self.index(name), v.ctypes.data)

    def values(self, name, shape):
        out = np.zeros(shape, np.float32)
        assert self.lib.lb_qmodel_values_f32(self.h, self.index(name), out.ctypes.data) == LB_OK
        return out


@pytest.fixture
def qm(lib):
    q = QModel(lib)
    yield q
    q.close()


def weight_name(layer, w):
    return f"model.layers.{layer}.{w}.weight"


def tokens(n, seed=5):
    return np.random.default_rng(seed).integers(1, 512, n).astype(np.int32)


def windows_of(lib, toks, seqs, length, bos=-1):
    out, n_out = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
    st = lib.lb__calib_windows(toks.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), toks.size, seqs, length, bos,
                               ctypes.byref(out), ctypes.byref(n_out))
    if st != LB_OK:
        return st, None
    w = np.ctypeslib.as_array(out, (n_out.value * length,)).copy().reshape(n_out.value, length)
    lib.free(ctypes.cast(out, P))
    return st, w


def copy_stats(s):
    """The layer's statistics as numpy arrays (the pass reuses its buffers)."""
    out = {"layer": s.layer, "partial": s.partial, "current": s.current, "k_absmax": np.ctypeslib.as_array(s.k_absmax, (s.n_kv_heads,)).copy(),
           "v_absmax": np.ctypeslib.as_array(s.v_absmax, (s.n_kv_heads,)).copy(), "attn_norm": s.attn_norm,
           "ffn_norm": s.ffn_norm, "n_kv_heads": s.n_kv_heads, "head_dim": s.head_dim}
    for k, name in enumerate(SITES):
        ss = s.site[k]
        c = ss.cols
        d = {"cols": c, "rows": ss.rows, "weights": list(ss.weight[:ss.n_weights]),
             "absmax": np.ctypeslib.as_array(ss.absmax, (c,)).copy(),
             "mean_abs": np.ctypeslib.as_array(ss.mean_abs, (c,)).copy(),
             "mean_sq": np.ctypeslib.as_array(ss.mean_sq, (c,)).copy(),
             "sample": np.ctypeslib.as_array(ss.sample, (ss.n_sample * c,)).copy().reshape(ss.n_sample, c)
             if ss.n_sample else np.zeros((0, c), np.float32),
             "hessian": np.ctypeslib.as_array(ss.hessian, (c * c,)).copy().reshape(c, c) if ss.hessian else None}
        out[name] = d
    return out


def run_pass(lib, q, wins, mode=SOURCE, sample_rows=0, hessian=0, fn=None, threads=2, no_callback=False,
             keep_outputs=0):
    """lb__calib_pass; returns (status, [per-layer stats], progress calls).
    fn(q, layer) may change q and returns a status (SUBLAYERS: fn(q, layer,
    site), and the stats come per site); no_callback: fn NULL (statistics
    only: none come back)."""
    stats, progress = [], []

    def on_layer(ctx, qh, s):
        stats.append(copy_stats(s.contents))
        if not fn:
            return LB_OK
        return fn(q, s.contents.layer, s.contents.current) if mode == SUBLAYERS else fn(q, s.contents.layer)

    def on_progress(ctx, done, total):
        progress.append((done, total))

    cb, pcb = LAYER_FN(0) if no_callback else LAYER_FN(on_layer), PROGRESS_FN(on_progress)
    o = PassOptions(mode=mode, sample_rows=sample_rows, hessian=hessian, threads=threads,
                    keep_outputs=keep_outputs, progress=ctypes.cast(pcb, P))
    w = np.ascontiguousarray(wins, dtype=np.int32)
    st = lib.lb__calib_pass(q.h, w.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), w.shape[0], w.shape[1],
                            ctypes.byref(o), cb, None)
    return st, stats, progress


def hooked_inputs(lib, runner, wins):
    """What lb_runner_forward's activation hook shows on each window (from
    position 0): {weight name: [T, cols]} over all windows in order."""
    seen = {}

    def hook(ctx, name, x, rows, cols):
        seen.setdefault(name.decode(), []).append(np.ctypeslib.as_array(x, (rows * cols,)).copy().reshape(rows, cols))

    h = HOOK_FN(hook)
    lib.lb_runner_set_hook(runner, h, None)
    for w in wins:
        w = np.ascontiguousarray(w, dtype=np.int32)
        lib.lb_runner_reset(runner)
        assert lib.lb_runner_forward(runner, w.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), w.size, None,
                                     0) == LB_OK, err(lib)
    lib.lb_runner_set_hook(runner, HOOK_FN(0), None)
    return {k: np.concatenate(v) for k, v in seen.items()}


def site_inputs(seen, layer):
    return [seen[weight_name(layer, ws[0])] for ws in SITE_WEIGHTS]


def qmodel_runner(lib, q, window):
    o = lbc.RunnerOptions(threads=2, max_ctx=window)
    r = P()
    assert lib.lb_runner_from_qmodel(q.h, ctypes.byref(o), ctypes.byref(r)) == LB_OK, err(lib)
    return r


# ---- the structs ----

def test_ctypes_mirrors_match_the_header(lib):
    got = (ctypes.c_size_t * 6)()
    lib.lb__calib_struct_layout(got)
    want = [ctypes.sizeof(SiteStats), ctypes.sizeof(LayerStats), ctypes.sizeof(PassOptions),
            SiteStats.n_weights.offset, LayerStats.current.offset, PassOptions.progress_ctx.offset]
    assert list(got) == want


# ---- windows ----

def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & (2**64 - 1)
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    return state, z ^ (z >> 31)


def expected_slots(n_tokens, seqs, length):
    """calib_pass.c's documented draw, written from its comment."""
    slots = n_tokens // length
    count = min(seqs, slots)
    idx = list(range(slots))
    state = 0x6C6F776269742121  # "lowbit!!"
    if count < slots:
        for i in range(count):
            n = slots - i
            limit = (2**64 - 1) - (2**64 - 1) % n
            while True:
                state, z = splitmix64(state)
                if z < limit:
                    break
            j = i + z % n
            idx[i], idx[j] = idx[j], idx[i]
    return sorted(idx[:count])


@pytest.mark.parametrize("n_tokens,seqs,length", [(10000, 8, 100), (10000, 200, 64), (1000, 5, 1000),
                                                  (999, 3, 100), (4096, 128, 32)])
def test_windows_follow_the_documented_draw(lib, n_tokens, seqs, length):
    toks = np.arange(n_tokens, dtype=np.int32) * 7 + 3  # each position's id says where it came from
    st, w = windows_of(lib, toks, seqs, length)
    assert st == LB_OK, err(lib)
    slots = n_tokens // length
    assert w.shape == (min(seqs, slots), length)  # fewer when the text is short
    starts = (w[:, 0] - 3) // 7
    assert np.all(starts % length == 0) and np.all(starts + length <= n_tokens)  # whole, non-overlapping slots
    for row, s in zip(w, starts):
        assert np.array_equal(row, toks[s:s + length])
    assert list(starts // length) == expected_slots(n_tokens, seqs, length)
    assert np.all(np.diff(starts) > 0)  # distinct, in text order
    st2, w2 = windows_of(lib, toks, seqs, length)
    assert np.array_equal(w, w2)  # deterministic


def test_windows_are_spread_over_the_text(lib):
    toks = np.arange(100000, dtype=np.int32)
    st, w = windows_of(lib, toks, 20, 100)  # 20 of 1000 slots
    assert st == LB_OK
    starts = w[:, 0] // 100
    assert starts.min() < 200 and starts.max() > 800  # a draw over the whole text, not its start


def test_windows_bos_and_errors(lib):
    toks = tokens(1000)
    st, w = windows_of(lib, toks, 4, 100, bos=1)
    assert st == LB_OK
    _, plain = windows_of(lib, toks, 4, 100)
    assert np.all(w[:, 0] == 1) and np.array_equal(w[:, 1:], plain[:, 1:])
    st, _ = windows_of(lib, toks, 4, 1001)
    assert st == LB_ERR_ARG and "fewer than one window" in err(lib)
    st, _ = windows_of(lib, toks, 0, 100)
    assert st == LB_ERR_ARG


# ---- statistics against the forward pass's hook ----

WINDOW = 64
N_WINDOWS = 4


@pytest.fixture(scope="module")
def wins(lib):
    st, w = windows_of(lib, tokens(3000), N_WINDOWS, WINDOW, bos=1)
    assert st == LB_OK
    return w


def uniform_below(state, n):
    """calib_pass.c's rejection draw: uniform in [0, n)."""
    limit = (2**64 - 1) - (2**64 - 1) % n
    while True:
        state, z = splitmix64(state)
        if z < limit:
            return state, z % n


def sample_positions(n, total):
    """The documented sample rows: one uniform draw in each slice [k T / n, (k + 1) T / n)."""
    state, pos = 0x6C6F776269742122, []
    for k in range(n):
        lo, hi = k * total // n, (k + 1) * total // n
        state, d = uniform_below(state, hi - lo)
        pos.append(lo + d)
    return pos


def library_sample_positions(lib, n, total):
    pos = (ctypes.c_uint64 * n)()
    lib.lb__calib_sample_positions(pos, n, total)
    return list(pos)


@pytest.mark.parametrize("n,total", [(37, 256), (20, 256), (256, 256), (4096, 128 * 512), (1000, 10**12 + 7)])
def test_sample_positions_follow_the_documented_draw(lib, n, total):
    pos = library_sample_positions(lib, n, total)
    assert pos == sample_positions(n, total)
    assert all(k * total // n <= p < (k + 1) * total // n for k, p in enumerate(pos))  # one per slice
    if n == total:
        assert pos == list(range(total))


def test_sample_positions_reach_every_place_in_a_window(lib):
    """At the methods' default (128 windows of 512, 4096 rows) the samples fall on
    (nearly) every position of a window, the first ones included; the slices' centres
    fell on 32 positions, 8, 24, .., 504, the same in every window."""
    pos = np.array(library_sample_positions(lib, 4096, 128 * 512))
    in_window = pos % 512
    assert len(set(in_window.tolist())) > 500
    assert np.any(in_window < 8)


def test_stats_equal_numpy_on_the_hooked_inputs(lib, qm, wins):
    n_sample = 37
    st, stats, progress = run_pass(lib, qm, wins, sample_rows=n_sample, hessian=1)
    assert st == LB_OK, err(lib)
    assert [s["layer"] for s in stats] == list(range(N_LAYERS))
    assert progress == [(i + 1, N_LAYERS) for i in range(N_LAYERS)]
    o = lbc.RunnerOptions(threads=2, max_ctx=WINDOW)
    r = P()
    assert lib.lb_runner_new(qm.model, ctypes.byref(o), ctypes.byref(r)) == LB_OK
    seen = hooked_inputs(lib, r, wins)
    lib.lb_runner_free(r)
    total = N_WINDOWS * WINDOW
    pos = sample_positions(n_sample, total)
    assert len(set(pos)) == n_sample and pos[0] > 0 and pos[-1] < total
    freq = ref.rope_frequencies(ref.load_llama2c(ml.STORIES).config)
    for layer, s in enumerate(stats):
        for k, (name, x) in enumerate(zip(SITES, site_inputs(seen, layer))):
            d = s[name]
            assert d["rows"] == total and x.shape == (total, d["cols"])
            x64 = x.astype(np.float64)
            assert np.array_equal(d["absmax"], np.abs(x).max(axis=0)), (layer, name)
            np.testing.assert_allclose(d["mean_abs"], np.abs(x64).mean(axis=0), rtol=2e-7, atol=0)
            np.testing.assert_allclose(d["mean_sq"], (x64 * x64).mean(axis=0), rtol=2e-7, atol=0)
            assert np.array_equal(d["sample"], x[pos]), (layer, name)
            # each window's X^T X is one fp32 product (sums of WINDOW products, fused):
            # within WINDOW * 2^-24 * (|X|^T |X|) of the exact sum, summed over windows
            want = x64.T @ x64
            bound = WINDOW * 2.0**-24 * (np.abs(x64).T @ np.abs(x64)) + 1e-30
            assert np.all(np.abs(d["hessian"] - want) <= bound), (layer, name)
            assert np.array_equal(d["hessian"], d["hessian"].T)
            assert d["weights"] == [qm.index(weight_name(layer, w)) for w in SITE_WEIGHTS[k]]
        assert s["attn_norm"] == qm.index(f"model.layers.{layer}.input_layernorm.weight")
        assert s["ffn_norm"] == qm.index(f"model.layers.{layer}.post_attention_layernorm.weight")
        # keys (after the rotary embedding, positions 0 .. WINDOW-1 in every window) and values per KV head
        heads, hd = s["n_kv_heads"], s["head_dim"]
        assert (heads, hd) == (4, 8)
        xa = seen[weight_name(layer, "self_attn.q_proj")].astype(np.float64)
        wk = qm.source(weight_name(layer, "self_attn.k_proj"), (heads * hd, 64)).astype(np.float64)
        wv = qm.source(weight_name(layer, "self_attn.v_proj"), (heads * hd, 64)).astype(np.float64)
        kk = (xa @ wk.T).reshape(N_WINDOWS, WINDOW, heads, hd)
        kk = np.stack([ref.apply_rope(kw, np.arange(WINDOW), freq, "adjacent") for kw in kk])
        vv = (xa @ wv.T).reshape(N_WINDOWS, WINDOW, heads, hd)
        np.testing.assert_allclose(s["k_absmax"], np.abs(kk).max(axis=(0, 1, 3)), rtol=1e-5)
        np.testing.assert_allclose(s["v_absmax"], np.abs(vv).max(axis=(0, 1, 3)), rtol=1e-5)


def test_all_rows_sampled_when_asked_for_more(lib, qm, wins):
    st, stats, _ = run_pass(lib, qm, wins[:2], sample_rows=10**6)
    assert st == LB_OK
    o = lbc.RunnerOptions(threads=2, max_ctx=WINDOW)
    r = P()
    assert lib.lb_runner_new(qm.model, ctypes.byref(o), ctypes.byref(r)) == LB_OK
    seen = hooked_inputs(lib, r, wins[:2])
    lib.lb_runner_free(r)
    for layer in (0, N_LAYERS - 1):
        for name, x in zip(SITES, site_inputs(seen, layer)):
            assert np.array_equal(stats[layer][name]["sample"], x)
            assert stats[layer][name]["hessian"] is None


def same_stats(a, b):
    return all(np.array_equal(a[n][f], b[n][f]) for n in SITES for f in ("absmax", "mean_abs", "mean_sq", "sample")) \
        and np.array_equal(a["k_absmax"], b["k_absmax"]) and np.array_equal(a["v_absmax"], b["v_absmax"])


def test_quantized_mode_with_no_spec_is_source_mode(lib, qm, wins):
    st, src, _ = run_pass(lib, qm, wins, mode=SOURCE, sample_rows=20)
    assert st == LB_OK
    st, quant, _ = run_pass(lib, qm, wins, mode=QUANTIZED, sample_rows=20)
    assert st == LB_OK, err(lib)
    assert all(same_stats(a, b) for a, b in zip(src, quant))


def test_quantized_mode_sees_the_layers_before_quantized(lib, wins):
    """Layer i's statistics in QUANTIZED mode are those of a model whose
    layers < i are quantized and layer i is not; SOURCE mode's are the
    float model's."""
    spec = "int4:channel"
    full = QModel(lib)
    try:
        for layer in range(N_LAYERS):
            for ws in SITE_WEIGHTS:
                for w in ws:
                    full.set_spec(weight_name(layer, w), spec)
        st, quant, _ = run_pass(lib, full, wins, mode=QUANTIZED, sample_rows=20)
        assert st == LB_OK, err(lib)
        st, src, _ = run_pass(lib, full, wins, mode=SOURCE, sample_rows=20)
        assert st == LB_OK
    finally:
        full.close()
    assert same_stats(quant[0], src[0])  # layer 0: its input is the embedding in both
    for layer in range(1, N_LAYERS):
        assert not np.array_equal(quant[layer]["attn_in"]["absmax"], src[layer]["attn_in"]["absmax"])
    for layer in (1, 3):
        part = QModel(lib)  # layers < layer quantized, the rest float
        try:
            for li in range(layer):
                for ws in SITE_WEIGHTS:
                    for w in ws:
                        part.set_spec(weight_name(li, w), spec)
            r = qmodel_runner(lib, part, WINDOW)
            seen = hooked_inputs(lib, r, wins)
            lib.lb_runner_free(r)
        finally:
            part.close()
        pos = sample_positions(20, N_WINDOWS * WINDOW)
        for name, x in zip(SITES, site_inputs(seen, layer)):
            d = quant[layer][name]
            assert np.array_equal(d["absmax"], np.abs(x).max(axis=0)), (layer, name)
            assert np.array_equal(d["sample"], x[pos]), (layer, name)
            np.testing.assert_allclose(d["mean_sq"], (x.astype(np.float64) ** 2).mean(axis=0), rtol=2e-7)


def quantized_everywhere(lib, spec="int4:channel"):
    q = QModel(lib)
    for layer in range(N_LAYERS):
        for ws in SITE_WEIGHTS:
            for w in ws:
                q.set_spec(weight_name(layer, w), spec)
    return q


def test_sublayers_mode_sees_the_sites_before_it_rounded(lib, wins):
    """SUBLAYERS mode (GPTQ's true-sequential order): site s of layer i is
    taken with layers < i and the sites < s of layer i as the quantized
    model holds them -- which is what a forward pass of the quantized model
    shows at that site, since a site's input depends on no later weight.
    The callback comes once per site, in order, with only that site's
    statistics complete; the K/V maxima come from the rounded k/v weights.
    QUANTIZED mode differs from the second site on (o_proj's input from the
    float q/k/v)."""
    full = quantized_everywhere(lib)
    try:
        st, sub, progress = run_pass(lib, full, wins, mode=SUBLAYERS, sample_rows=20, hessian=1)
        assert st == LB_OK, err(lib)
        st, quant, _ = run_pass(lib, full, wins, mode=QUANTIZED, sample_rows=20)
        assert st == LB_OK, err(lib)
        r = qmodel_runner(lib, full, WINDOW)
        seen = hooked_inputs(lib, r, wins)
        lib.lb_runner_free(r)
        wq = {layer: [full.values(weight_name(layer, w), (32, 64)).astype(np.float64)
                      for w in ("self_attn.k_proj", "self_attn.v_proj")] for layer in range(N_LAYERS)}
    finally:
        full.close()
    assert [(s["layer"], s["partial"], s["current"]) for s in sub] == \
        [(layer, 1, k) for layer in range(N_LAYERS) for k in range(4)]
    assert progress == [(i + 1, N_LAYERS) for i in range(N_LAYERS)]
    assert all(s["partial"] == 0 for s in quant)
    pos = sample_positions(20, N_WINDOWS * WINDOW)
    freq = ref.rope_frequencies(ref.load_llama2c(ml.STORIES).config)
    for layer in range(N_LAYERS):
        for k, (name, x) in enumerate(zip(SITES, site_inputs(seen, layer))):
            d = sub[4 * layer + k][name]
            assert np.array_equal(d["absmax"], np.abs(x).max(axis=0)), (layer, name)
            assert np.array_equal(d["sample"], x[pos]), (layer, name)
            x64 = x.astype(np.float64)
            np.testing.assert_allclose(d["mean_sq"], (x64 * x64).mean(axis=0), rtol=2e-7)
            bound = WINDOW * 2.0**-24 * (np.abs(x64).T @ np.abs(x64)) + 1e-30
            assert np.all(np.abs(d["hessian"] - x64.T @ x64) <= bound), (layer, name)
            if k > 0:  # o_proj's input onward: QUANTIZED mode took them with the layer unrounded
                assert not np.array_equal(quant[layer][name]["absmax"], d["absmax"]), (layer, name)
        s = sub[4 * layer + 1]  # the keys and values come with o_proj's input
        xa = seen[weight_name(layer, "self_attn.q_proj")].astype(np.float64)
        kk = (xa @ wq[layer][0].T).reshape(N_WINDOWS, WINDOW, 4, 8)
        kk = np.stack([ref.apply_rope(kw, np.arange(WINDOW), freq, "adjacent") for kw in kk])
        vv = (xa @ wq[layer][1].T).reshape(N_WINDOWS, WINDOW, 4, 8)
        np.testing.assert_allclose(s["k_absmax"], np.abs(kk).max(axis=(0, 1, 3)), rtol=1e-5)
        np.testing.assert_allclose(s["v_absmax"], np.abs(vv).max(axis=(0, 1, 3)), rtol=1e-5)


RUNNER_CALIB, RUNNER_SOURCE = 1, 2


def test_the_pass_runner_holds_one_layer_at_a_time(lib, qm, wins):
    """lb__runner_build_layerwise (the pass's runner): no decoder layer until
    it is loaded, none after it is dropped, and no embedding once the ends
    are dropped -- each refused with LB_ERR_ARG naming what is missing,
    never read; a loaded layer computes as the whole runner's does."""
    o = lbc.RunnerOptions(threads=2, max_ctx=WINDOW)
    r, full = P(), P()
    assert lib.lb__runner_build_layerwise(qm.h, ctypes.byref(o), 3, ctypes.byref(r)) == LB_ERR_ARG  # not a calib mode
    assert lib.lb__runner_build_layerwise(qm.h, ctypes.byref(o), RUNNER_SOURCE, ctypes.byref(r)) == LB_OK, err(lib)
    assert lib.lb_runner_from_qmodel(qm.h, ctypes.byref(o), ctypes.byref(full)) == LB_OK, err(lib)
    try:
        toks = np.ascontiguousarray(wins[0], dtype=np.int32)
        x = np.zeros((WINDOW, 64), np.float32)
        assert lib.lb__runner_embed(r, toks.ctypes.data, WINDOW, x.ctypes.data) == LB_OK, err(lib)
        y = x.copy()
        assert lib.lb__runner_layer(r, 1, y.ctypes.data, WINDOW) == LB_ERR_ARG and "layer 1 is not loaded" in err(lib)
        assert lib.lb_runner_forward(r, toks.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), WINDOW, None, 0) == \
            LB_ERR_ARG and "not loaded" in err(lib)
        assert lib.lb__runner_reload_weights(r, qm.h, 1, 0, 3) == LB_ERR_ARG and "not loaded" in err(lib)
        assert lib.lb__runner_reload_layer_as(r, qm.h, 1, RUNNER_SOURCE) == LB_OK, err(lib)
        assert lib.lb__runner_reload_weights(r, qm.h, 1, 3, 3) == LB_ERR_ARG  # an empty range
        assert lib.lb__runner_reload_weights(r, qm.h, 1, 0, 7) == LB_OK, err(lib)  # the same values again
        assert lib.lb__runner_layer(r, 1, y.ctypes.data, WINDOW) == LB_OK, err(lib)
        y_full = x.copy()  # the whole runner of the same (unquantized) model
        assert lib.lb__runner_layer(full, 1, y_full.ctypes.data, WINDOW) == LB_OK, err(lib)
        assert not np.array_equal(y, x) and np.array_equal(y, y_full)
        lib.lb__runner_unload_layer(r, 1)
        z = x.copy()
        assert lib.lb__runner_layer(r, 1, z.ctypes.data, WINDOW) == LB_ERR_ARG and np.array_equal(z, x)
        lib.lb__runner_unload_ends(r)
        assert lib.lb__runner_embed(r, toks.ctypes.data, WINDOW, z.ctypes.data) == LB_ERR_ARG
        assert "embeddings and head were dropped" in err(lib)
    finally:
        lib.lb_runner_free(r)
        lib.lb_runner_free(full)


UP_2 = weight_name(2, "mlp.up_proj")


def test_sublayers_mode_a_change_reaches_the_next_site(lib, wins):
    """A callback that doubles layer 2's up_proj when handed gate/up's input
    (site 2) changes down_proj's input of that same layer (site 3), and every
    later layer, exactly as the model with up_proj doubled beforehand; the
    sites before the change are as without it."""
    plain = QModel(lib)
    try:
        st, base, _ = run_pass(lib, plain, wins, mode=SUBLAYERS, sample_rows=16)
        assert st == LB_OK, err(lib)
        doubled = plain.source(UP_2, (172, 64)) * 2

        def change(q, layer, site):
            return q.replace(UP_2, doubled) if (layer, site) == (2, 2) else LB_OK

        st, changed, _ = run_pass(lib, plain, wins, mode=SUBLAYERS, sample_rows=16, fn=change)
        assert st == LB_OK, err(lib)
    finally:
        plain.close()
    before = QModel(lib)
    try:
        assert before.replace(UP_2, doubled) == LB_OK
        st, want, _ = run_pass(lib, before, wins, mode=SUBLAYERS, sample_rows=16)
        assert st == LB_OK
    finally:
        before.close()
    call = {(s["layer"], s["current"]): s for s in changed}
    for (layer, k), s in call.items():
        name = SITES[k]
        same = [np.array_equal(s[name][f], ref_s[name][f]) for ref_s in (base[4 * layer + k], want[4 * layer + k])
                for f in ("absmax", "mean_abs", "mean_sq", "sample")]
        if (layer, k) < (2, 3):
            assert all(same[:4]), (layer, name)  # before the change: as the plain model
        else:
            assert not all(same[:4]) and all(same[4:]), (layer, name)  # after: as the doubled one
        d = s[name]
        if (layer, k) == (2, 3):  # silu(gate) * 2 up (the runner holds a replaced tensor as the qmodel keeps it,
            # rounded to 16 bits, so not exactly twice)
            np.testing.assert_allclose(d["absmax"], 2 * base[4 * layer + k][name]["absmax"], rtol=1e-2)


NORM_1 = "model.layers.1.post_attention_layernorm.weight"


def base_and_doubled_norm(lib, q, wins):
    """The pass's statistics of q as it is, and layer 1's post-attention norm doubled."""
    st, base, _ = run_pass(lib, q, wins, sample_rows=16)
    assert st == LB_OK
    return base, q.source(NORM_1, (64,)) * 2


def test_a_callback_change_reaches_the_later_layers(lib, wins):
    norm = NORM_1
    plain = QModel(lib)
    try:
        base, doubled = base_and_doubled_norm(lib, plain, wins)

        def change(q, layer):
            return q.replace(norm, doubled) if layer == 1 else LB_OK

        st, changed, _ = run_pass(lib, plain, wins, sample_rows=16, fn=change)
        assert st == LB_OK, err(lib)
    finally:
        plain.close()
    before = QModel(lib)  # the same norm replaced before the pass
    try:
        assert before.replace(norm, doubled) == LB_OK
        st, want, _ = run_pass(lib, before, wins, sample_rows=16)
        assert st == LB_OK
    finally:
        before.close()
    assert same_stats(changed[0], base[0]) and same_stats(changed[1], base[1])  # taken before the change
    for layer in range(2, N_LAYERS):
        assert not same_stats(changed[layer], base[layer])
        assert same_stats(changed[layer], want[layer]), layer


def test_kept_outputs_skip_the_callbacks_changes(lib, wins):
    """keep_outputs: the windows go on with the layer's outputs from before the
    callback, so a change to a layer (here one that is not output-preserving,
    to make the difference visible) reaches no later layer's statistics; the
    callback still runs at every layer. QUANTIZED mode refuses it."""
    norm = NORM_1
    q = QModel(lib)
    try:
        base, doubled = base_and_doubled_norm(lib, q, wins)
        calls = []

        def change(qq, layer):
            calls.append(layer)
            return qq.replace(norm, doubled) if layer == 1 else LB_OK

        st, kept, _ = run_pass(lib, q, wins, sample_rows=16, fn=change, keep_outputs=1)
        assert st == LB_OK, err(lib)
        assert calls == list(range(N_LAYERS))
        assert all(same_stats(kept[layer], base[layer]) for layer in range(N_LAYERS))
        st, _, _ = run_pass(lib, q, wins, mode=QUANTIZED, fn=change, keep_outputs=1)
        assert st == LB_ERR_ARG and "keep_outputs" in err(lib)
    finally:
        q.close()


def test_a_callback_error_stops_the_pass(lib, qm, wins):
    calls = []

    def fail_at_2(q, layer):
        calls.append(layer)
        return LB_ERR_ARG if layer == 2 else LB_OK

    st, stats, progress = run_pass(lib, qm, wins, fn=fail_at_2)
    assert st == LB_ERR_ARG
    assert calls == [0, 1, 2] and progress == [(1, N_LAYERS), (2, N_LAYERS)]


@pytest.mark.parametrize("mode", [SOURCE, QUANTIZED])
def test_without_a_callback_the_pass_runs_every_layer(lib, qm, wins, mode):
    st, stats, progress = run_pass(lib, qm, wins, mode=mode, sample_rows=8, hessian=1, no_callback=True)
    assert st == LB_OK, err(lib)
    assert stats == [] and progress == [(i + 1, N_LAYERS) for i in range(N_LAYERS)]


@pytest.mark.parametrize("no_callback", [False, True])
def test_a_non_finite_activation_names_layer_and_input(lib, qm, wins, no_callback):
    norm = "model.layers.2.post_attention_layernorm.weight"
    assert qm.replace(norm, np.full(64, 3e38, np.float32)) == LB_OK  # finite, but its product overflows
    st, stats, progress = run_pass(lib, qm, wins, sample_rows=8, no_callback=no_callback)
    assert st == LB_ERR_NAN
    msg = err(lib)
    assert "layer 2" in msg and "gate_proj" in msg and "not finite" in msg, msg
    assert len(stats) == (0 if no_callback else 2) and progress == [(1, N_LAYERS), (2, N_LAYERS)]


def test_bad_arguments(lib, qm, wins):
    w = np.ascontiguousarray(wins, dtype=np.int32)
    o = PassOptions(mode=7)
    st = lib.lb__calib_pass(qm.h, w.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), w.shape[0], w.shape[1],
                            ctypes.byref(o), LAYER_FN(0), None)
    assert st == LB_ERR_ARG and "mode" in err(lib)
    bad = w.copy()
    bad[1, 5] = 600  # outside the 512-token vocabulary
    o = PassOptions(mode=SOURCE)
    st = lib.lb__calib_pass(qm.h, bad.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), w.shape[0], w.shape[1],
                            ctypes.byref(o), LAYER_FN(0), None)
    assert st == LB_ERR_ARG and "vocabulary" in err(lib)
