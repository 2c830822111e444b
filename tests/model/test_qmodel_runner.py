"""The runner built from a quantized model (lb_runner_from_qmodel) and
calibration (lb_calibrate), on the embedded stories260K:

* a spec set per tensor gives exactly the logits of lb_runner_new's class
  specs (the old path, now a wrapper over a private qmodel), W8A8 included;
* NVFP4 q/k/v of a layer share one tensor scale, 448 * 6 / max amax as
  vLLM wants it (numpy oracle), gate/up theirs, o_proj its own;
* the static fp8 KV cache (k/v scale = calibrated amax / 448) against a
  numpy forward pass that rounds k and v the same way (ml_dtypes e4m3);
* lb_calibrate's per-layer input and k/v ranges against a numpy forward
  pass on the qmodel's values that records the same maxima."""
import os
import sys

import ml_dtypes
import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import lowbit_ctypes as lb  # noqa: E402
import reference_llama as ref  # noqa: E402
import model_lib as ml  # noqa: E402

PROJ = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
        "mlp.up_proj", "mlp.down_proj"]
N_LAYERS = 5
TOKENS = np.random.default_rng(13).integers(0, 512, 40).astype(np.int32)  # >= 16: the panel (prefill) kernels


def proj_names(layer):
    return [f"model.layers.{layer}.{p}.weight" for p in PROJ]


def all_proj():
    return [n for i in range(N_LAYERS) for n in proj_names(i)]


@pytest.mark.parametrize("spec,act", [("int4:g32", None), ("fp8_e4m3:channel", None), ("int4:g128:affine", None),
                                      ("mxfp4", None), ("int8:channel", "int8"), ("fp8_e4m3:channel", "fp8_e4m3")])
def test_spec_per_tensor_equals_the_class_runner(spec, act):
    with lb.QModel(ml.STORIES) as q:
        for name in all_proj() + ["model.embed_tokens.weight"]:
            assert q.set_spec(q.index(name), spec) == 0, lb.last_error()
        if act:
            for name in all_proj():
                assert q.set_act(q.index(name), lb.ACT_DYNAMIC, f"{act}:token") == 0, lb.last_error()
        st, r = q.runner()
        assert st == 0, lb.last_error()
        got = r.logits(TOKENS)
        r.close()
        fmt = lb.info(act).id if act else 0
        old = lb.class_runner(q.model, attn=spec, mlp=spec, embed=spec, act=fmt)
        want = old.logits(TOKENS)
        old.close()
    assert np.array_equal(got, want)


def test_kept_bf16_equals_the_plain_class_spec():
    """KEPT weights run as their bf16-rounded values: lb_runner_new's plain
    bf16 spec held 16-bit codes; on prefill both give the same logits."""
    with lb.QModel(ml.STORIES) as q:
        for name in all_proj():
            assert lb.lib.lb_qmodel_keep(q.h, q.index(name)) == 0
        st, r = q.runner()
        assert st == 0
        got = r.logits(TOKENS)
        r.close()
        plain = lb.QSpec(element=lb.info("bf16").id)
        import ctypes
        o = lb.RunnerOptions(threads=2, attn=ctypes.cast(ctypes.byref(plain), ctypes.c_void_p),
                             mlp=ctypes.cast(ctypes.byref(plain), ctypes.c_void_p))
        h = ctypes.c_void_p()
        lb.check(lb.lib.lb_runner_new(q.model, ctypes.byref(o), ctypes.byref(h)), "plain")
        old = lb.Runner(h)
        want = old.logits(TOKENS)
        old.close()
    assert np.array_equal(got, want)


def test_nvfp4_fused_groups_share_one_tensor_scale():
    with lb.QModel(ml.STORIES) as q:
        for name in all_proj():
            assert q.set_spec(q.index(name), "nvfp4") == 0
        for layer in range(N_LAYERS):
            names = proj_names(layer)
            amax = {n: np.float32(np.abs(q.source(q.index(n))).max()) for n in names}
            ts = {n: q.tensor_scale(q.index(n)) for n in names}
            qkv, gu = names[:3], names[4:6]
            for group in (qkv, gu):
                m = max(amax[n] for n in group)
                # compressed-tensors' global scale 448 * 6 / amax; lowbit stores its reciprocal (the multiplier)
                want = np.float32(m) / np.float32(448.0 * 6.0)
                for n in group:
                    assert ts[n] == want, (n, ts[n], want)
                    assert q.entry(q.index(n)).group_amax == m
            for n in (names[3], names[6]):  # o_proj, down_proj: alone
                assert ts[n] == np.float32(amax[n]) / np.float32(2688.0)
            assert len({amax[n] for n in qkv}) > 1  # the members differ: the sharing is visible


def reference(q, kv_scales=None, record=None):
    """The numpy forward pass on the qmodel's values (float64); kv_scales:
    {layer: (k_scale, v_scale)} rounds the cached k and v to e4m3 under
    them; record: a dict that receives each linear input's and k/v's
    largest magnitude."""
    w = ref.load_llama2c(ml.STORIES)
    fields = ["wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"]
    for i, L in enumerate(w.layers):
        for f, n in zip(fields, proj_names(i)):
            setattr(L, f, q.values(q.index(n)).astype(np.float64))
    t = ref.Transformer(w)
    if kv_scales is None and record is None:
        return t.forward(TOKENS)
    return Probe(t, kv_scales, record).forward(TOKENS)


def e4m3(x, s):
    return np.clip(x / s, -448, 448).astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * s


class Probe:
    """ref.Transformer's forward pass with hooks: linear inputs recorded,
    k/v rounded to the static KV format as the cache stores them."""

    def __init__(self, t, kv_scales, record):
        self.t, self.kv, self.rec = t, kv_scales, record

    def forward(self, tokens):
        t, rec, kv = self.t, self.rec, self.kv
        orig_linear, orig_rope = ref.linear, ref.apply_rope
        state = {"layer": 0, "rope": 0}
        names = {}
        for i, L in enumerate(t.w.layers):
            for f, n in zip(["wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"], proj_names(i)):
                names[id(getattr(L, f))] = n

        def linear(x, w, b=None):
            n = names.get(id(w))
            if rec is not None and n:
                rec[n] = max(rec.get(n, 0.0), float(np.abs(x).max()))
            return orig_linear(x, w, b)

        def rope(x, positions, inv_freq, pairs):
            y = orig_rope(x, positions, inv_freq, pairs)
            state["rope"] += 1
            if state["rope"] % 2 == 0:  # the second call of a layer: the keys
                li = state["rope"] // 2 - 1
                if rec is not None:
                    rec[f"k{li}"] = max(rec.get(f"k{li}", 0.0), float(np.abs(y).max()))
                if kv is not None:
                    y = e4m3(y, kv[li][0])
            return y
        ref.linear, ref.apply_rope = linear, rope
        try:
            # values: the v projection's output, rounded where the cache stores it
            orig_concat = np.concatenate
            calls = {"n": 0}

            def concat(arrs, *a, **k):
                calls["n"] += 1
                out = orig_concat(arrs, *a, **k)
                if calls["n"] % 2 == 0:  # self.v[li] = concat([cached, v])
                    li = calls["n"] // 2 - 1
                    v = arrs[1]
                    if rec is not None:
                        rec[f"v{li}"] = max(rec.get(f"v{li}", 0.0), float(np.abs(v).max()))
                    if kv is not None:
                        out = orig_concat([arrs[0], e4m3(v, kv[li][1])], *a, **k)
                return out
            np.concatenate = concat
            try:
                return t.forward(tokens)
            finally:
                np.concatenate = orig_concat
        finally:
            ref.linear, ref.apply_rope = orig_linear, orig_rope


def test_calibrate_records_what_a_numpy_forward_pass_sees():
    with lb.QModel(ml.STORIES) as q:
        for name in all_proj():
            assert q.set_spec(q.index(name), "int4:g32") == 0
        assert lb.lib.lb_qmodel_set_kv(q.h, lb.info("fp8_e4m3").id) == 0
        assert q.calibrate(TOKENS, ctx=len(TOKENS)) == 0, lb.last_error()
        rec = {}
        reference(q, record=rec)
        for name in all_proj():
            got = q.entry(q.index(name)).input_amax
            assert got == pytest.approx(rec[name], rel=1e-5), name
        k, v = lb.ctypes.c_float(), lb.ctypes.c_float()
        for li in range(N_LAYERS):
            assert lb.lib.lb_qmodel_kv_amax(q.h, li, lb.ctypes.byref(k), lb.ctypes.byref(v)) == 0
            assert k.value == pytest.approx(rec[f"k{li}"], rel=1e-5)
            assert v.value == pytest.approx(rec[f"v{li}"], rel=1e-5)
        # a second call on other tokens keeps the running maximum
        before = {n: q.entry(q.index(n)).input_amax for n in all_proj()}
        assert q.calibrate(TOKENS[:8], ctx=8) == 0
        for n in all_proj():
            assert q.entry(q.index(n)).input_amax >= before[n]
        # unquantized layers record nothing
        assert q.entry(q.index("model.embed_tokens.weight")).input_amax == 0


def test_static_kv_scales_against_numpy():
    with lb.QModel(ml.STORIES) as q:
        for name in all_proj():
            assert q.set_spec(q.index(name), "int8:channel") == 0
        fp8 = lb.info("fp8_e4m3").id
        assert lb.lib.lb_qmodel_set_kv(q.h, fp8) == 0
        st, _ = q.runner()
        assert st == lb.LB_ERR_ARG and "calibrated" in lb.last_error()
        # deliberately tight scales (half the range) so that values saturate: the static path is visible
        rec = {}
        reference(q, record=rec)
        scales = {}
        for li in range(N_LAYERS):
            ka, va = np.float32(rec[f"k{li}"] * 0.5), np.float32(rec[f"v{li}"] * 0.5)
            assert lb.lib.lb_qmodel_set_kv_amax(q.h, li, ka, va) == 0
            scales[li] = (float(np.float32(ka) / np.float32(448)), float(np.float32(va) / np.float32(448)))
        st, r = q.runner()
        assert st == 0, lb.last_error()
        got = r.logits(TOKENS).astype(np.float64)
        r.close()
        want = reference(q, kv_scales=scales)
        dynamic = lb.class_runner(q.model, attn="int8:channel", mlp="int8:channel", kv=fp8)
        per_token = dynamic.logits(TOKENS).astype(np.float64)
        dynamic.close()
    err = np.abs(got - want).max()
    assert err < 2e-3 * np.abs(want).max(), err
    # the per-token scaled cache is farther from the static simulation than lowbit's static path is
    assert np.abs(per_token - want).max() > 5 * err


class ActProbe(Probe):
    """The reference with every projection's input quantized and dequantized
    under a spec by lb_quantize (rows = tokens)."""

    def __init__(self, t, spec):
        super().__init__(t, None, None)
        self.spec = spec

    def forward(self, tokens):
        orig = ref.linear
        names = {id(getattr(L, f)) for L in self.t.w.layers
                 for f in ["wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"]}

        def linear(x, w, b=None):
            if id(w) in names:
                x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
                st, qx = lb.quantize(self.spec, x2)
                assert st == 0
                x = qx.dequantized.astype(np.float64).reshape(x.shape)
            return orig(x, w, b)
        ref.linear = linear
        try:
            return self.t.forward(tokens)
        finally:
            ref.linear = orig


def test_simulated_mxfp4_activations_against_numpy():
    with lb.QModel(ml.STORIES) as q:
        for name in all_proj():
            assert q.set_spec(q.index(name), "mxfp4") == 0
        st, r = q.runner()
        weight_only = r.logits(TOKENS).astype(np.float64)
        r.close()
        for name in all_proj():
            assert q.set_act(q.index(name), lb.ACT_DYNAMIC, "mxfp4") == 0, lb.last_error()
        st, r = q.runner()
        assert st == 0, lb.last_error()
        got = r.logits(TOKENS).astype(np.float64)
        r.close()
        w = ref.load_llama2c(ml.STORIES)
        for i, L in enumerate(w.layers):
            for f, n in zip(["wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"], proj_names(i)):
                setattr(L, f, q.values(q.index(n)).astype(np.float64))
        want = ActProbe(ref.Transformer(w), "mxfp4").forward(TOKENS)
    # fp32 against float64 can round an activation to the next 4-bit step now and then: the bound is
    # a fraction of what quantizing the activations changes at all
    assert np.abs(got - want).max() < 0.01 * np.abs(weight_only - want).max()
    assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.999


def test_nvfp4_w4a4_needs_calibration_then_runs():
    with lb.QModel(ml.STORIES) as q:
        for name in all_proj():
            i = q.index(name)
            assert q.set_spec(i, "nvfp4") == 0
            assert q.set_act(i, lb.ACT_LOCAL, "nvfp4") == 0, lb.last_error()
        st, _ = q.runner()
        assert st == lb.LB_ERR_ARG and "calibrat" in lb.last_error()
        assert q.calibrate(TOKENS, ctx=len(TOKENS)) == 0
        st, r = q.runner()
        assert st == 0, lb.last_error()
        got = r.logits(TOKENS)
        r.close()
        for name in all_proj():
            assert q.set_act(q.index(name), lb.ACT_NONE, None) == 0
        st, r = q.runner()
        a16 = r.logits(TOKENS)
        r.close()
    assert np.isfinite(got).all() and not np.array_equal(got, a16)
    assert np.corrcoef(got.ravel(), a16.ravel())[0, 1] > 0.95


def test_from_qmodel_refuses_class_options():
    import ctypes
    with lb.QModel(ml.STORIES) as q:
        st_spec, spec = lb.parse_spec("int4:g32")
        o = lb.RunnerOptions(threads=1, attn=ctypes.cast(ctypes.byref(spec), ctypes.c_void_p))
        h = ctypes.c_void_p()
        assert lb.lib.lb_runner_from_qmodel(q.h, ctypes.byref(o), ctypes.byref(h)) == lb.LB_ERR_ARG
        assert "must be unset" in lb.last_error()
        assert lb.lib.lb_runner_from_qmodel(None, None, ctypes.byref(h)) == lb.LB_ERR_ARG
