"""SmoothQuant's folding (lb__smoothquant_layer with hand-made statistics,
every input smoothed: q/k/v into input_layernorm, o_proj into v_proj's
rows, gate/up into post_attention_layernorm, down_proj into up_proj's rows)
on stories260K and SmolLM2 (GQA: 9 q heads over 3 kv heads):

* the new source values are what numpy computes from the paper's formula
  (weights' columns times s, the producer divided by s; for o_proj one
  scale per kv channel from the maxima over its group's q heads);
* the unquantized model computes the same: logits of the folded source
  values (a qmodel holding them as f32 replacements) against those of the
  original values, equal within fp32 rounding (bound below);
* groups whose weights or activations are not quantized are left alone."""
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
import smooth_lib as sl  # noqa: E402

ROOT = sl.ml.ROOT
STORIES = ROOT / "models/stories260K.bin"
SMOLLM2 = sl.ml.SMOLLM2
PROJ = [n for names in sl.LAYER_WEIGHTS for n in names]
W8A8 = ("int8:channel", "int8:tensor")  # weights per channel, static per-tensor activations
# fp32: each folded value is rounded once (w * s, n / s) and the layer's sums
# reassociate nothing, so logits move by a few ulps per layer; relative to
# the largest logit: measured 2e-7 (stories260K) and 3e-6 (SmolLM2).
REL_BOUND = 2e-5
LB_ERR_ARG = 1


def np_scales(x, w, alpha):
    """The paper's s_j = max|X_j|^a / max|W_j|^(1-a), 1 where either is 0,
    clamped to [1e-5, 1e5] (smoothquant.h)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    ok = (x > 0) & (w > 0) & np.isfinite(x) & np.isfinite(w)
    s = np.ones_like(x)
    s[ok] = x[ok] ** alpha / w[ok] ** (1 - alpha)
    return np.clip(s, 1e-5, 1e5).astype(np.float32)


def kv_scales(x, w, alpha, n_heads, n_kv, hd):
    """o_proj's scale with GQA: one per kv channel (g, d) from the maxima
    over the group's q heads, repeated over them."""
    grp = n_heads // n_kv
    xk = x.reshape(n_kv, grp, hd).max(axis=1)
    wk = w.reshape(n_kv, grp, hd).max(axis=1)
    sk = np_scales(xk.ravel(), wk.ravel(), alpha).reshape(n_kv, 1, hd)
    return np.broadcast_to(sk, (n_kv, grp, hd)).ravel().copy(), sk.ravel()


def random_absmax(rng, n):
    a = rng.lognormal(0.0, 1.5, n).astype(np.float32)
    a[rng.choice(n, max(1, n // 16), replace=False)] = 0  # dead channels: s = 1
    a[rng.choice(n, 2, replace=False)] *= 50  # outliers
    return a


def layer_names(li):
    return [f"model.layers.{li}.{p}.weight" for p in PROJ]


def quantize_all(q, n_layers):
    for li in range(n_layers):
        for name in layer_names(li):
            i = q.index(name)
            q.set_spec(i, W8A8[0])
            q.set_act(i, sl.ACT_STATIC, W8A8[1])


def logits_of(path, values, tokens):
    """Logits of a qmodel holding `values` (index -> array) as f32
    replacements, everything else as stored."""
    with sl.QModel(path) as r:
        r.set_dtype(sl.DT_F32)
        for i, v in values.items():
            r.replace(i, v)
        return r.logits(tokens)


def fold_and_check(path, layers, tokens, alpha=0.5):
    rng = np.random.default_rng(15)
    with sl.QModel(path) as q:
        a = q.arch()
        n_heads, n_kv, hd = a.n_heads, a.n_kv_heads, a.head_dim
        q.set_dtype(sl.DT_F32)
        quantize_all(q, a.n_layers)
        touched = [q.index(n) for li in layers for n in layer_names(li) + [
            f"model.layers.{li}.input_layernorm.weight", f"model.layers.{li}.post_attention_layernorm.weight"]]
        before = {i: q.source(i) for i in touched}
        for li in layers:
            idx = {n: q.index(f"model.layers.{li}.{n}.weight") for n in PROJ}
            norms = [q.index(f"model.layers.{li}.{n}.weight") for n in ("input_layernorm", "post_attention_layernorm")]
            absmax = [random_absmax(rng, a.dim), random_absmax(rng, n_heads * hd), random_absmax(rng, a.dim),
                      random_absmax(rng, a.hidden_dim)]
            st = sl.Stats(q, li, n_kv, hd, absmax)
            sl.check(sl.smooth_layer(q, st, alpha=alpha, sites=sl.ALL_SITES), f"layer {li}")
            # numpy: the expected new values, site by site in the order the C code folds
            w = {n: before[idx[n]].copy() for n in PROJ}
            norm = [before[norms[0]].copy(), before[norms[1]].copy()]
            for site, names in enumerate(sl.LAYER_WEIGHTS):
                wmax = np.max([np.abs(w[n]).max(axis=0) for n in names], axis=0)
                if site == sl.SITE_O_IN:
                    s, s_kv = kv_scales(absmax[site], wmax, alpha, n_heads, n_kv, hd)
                else:
                    s = np_scales(absmax[site], wmax, alpha)
                assert np.any(s != 1), "the test should move something"
                for n in names:
                    w[n] = (w[n] * s[None, :]).astype(np.float32)
                if site == sl.SITE_ATTN_IN:
                    norm[0] = norm[0] / s
                elif site == sl.SITE_MLP_IN:
                    norm[1] = norm[1] / s
                elif site == sl.SITE_O_IN:
                    w["self_attn.v_proj"] = w["self_attn.v_proj"] / s_kv[:, None]
                else:
                    w["mlp.up_proj"] = w["mlp.up_proj"] / s[:, None]
            for n in PROJ:
                got = q.source(idx[n])
                np.testing.assert_allclose(got, w[n], rtol=1e-6, atol=0, err_msg=f"layer {li} {n}")
            for k in range(2):
                np.testing.assert_allclose(q.source(norms[k]), norm[k], rtol=1e-6, atol=0)
        after = {i: q.source(i) for i in touched}
    want = logits_of(path, before, tokens)
    got = logits_of(path, after, tokens)
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err <= REL_BOUND, f"folded logits differ by {err:.3g} of the largest"
    # and the folds did change the model's values (else the test proves nothing)
    assert max(np.abs(after[i] - before[i]).max() / np.abs(before[i]).max() for i in touched) > 0.5
    return err


def test_fold_stories260k_every_layer():
    tokens = np.random.default_rng(3).integers(0, 512, 48).astype(np.int32)
    with sl.QModel(STORIES) as q:
        n = q.arch().n_layers
    err = fold_and_check(STORIES, range(n), tokens)
    print(f"stories260K: folded logits within {err:.3g} of the largest")


def test_fold_smollm2_gqa():
    if not SMOLLM2.exists():
        pytest.skip(f"{SMOLLM2} not fetched")
    tokens = np.random.default_rng(4).integers(0, 49152, 24).astype(np.int32)
    with sl.QModel(SMOLLM2) as q:
        a = q.arch()
        assert a.n_kv_heads < a.n_heads  # the GQA fold into v_proj
        n = a.n_layers
    err = fold_and_check(SMOLLM2, [0, 1, n // 2, n - 1], tokens)
    print(f"SmolLM2: folded logits within {err:.3g} of the largest")


def test_only_groups_with_quantized_activations_and_default_sites():
    """Weight-only layers (activations 16-bit) are left as they are; with
    quantized activations the default smooths q/k/v and gate/up only
    (their norms change, o_proj and down_proj do not)."""
    rng = np.random.default_rng(8)
    with sl.QModel(STORIES) as q:
        a = q.arch()
        names = layer_names(0)
        norms = [q.index(f"model.layers.0.{n}.weight") for n in ("input_layernorm", "post_attention_layernorm")]
        absmax = [random_absmax(rng, a.dim), random_absmax(rng, a.n_heads * a.head_dim), random_absmax(rng, a.dim),
                  random_absmax(rng, a.hidden_dim)]
        for n in names:
            q.set_spec(q.index(n), "int4:g32")
        st = sl.Stats(q, 0, a.n_kv_heads, a.head_dim, absmax)
        sl.check(sl.smooth_layer(q, st, alpha=0.5, sites=sl.ALL_SITES), "weight-only")
        assert not any(q.entry(i).replaced for i in [q.index(n) for n in names] + norms)
        for n in names:
            q.set_act(q.index(n), sl.ACT_STATIC, "int8:tensor")
        sl.check(sl.smooth_layer(q, st, alpha=0.5), "default sites")
        replaced = {n: bool(q.entry(q.index(n)).replaced) for n in names}
        assert replaced == {n: not n.endswith(("o_proj.weight", "down_proj.weight")) for n in names}
        assert all(q.entry(i).replaced for i in norms)


def test_alpha_out_of_range_and_gqa_mismatch_are_refused():
    with sl.QModel(STORIES) as q:
        a = q.arch()
        quantize_all(q, 1)
        ones = [np.ones(a.dim, np.float32), np.ones(a.n_heads * a.head_dim, np.float32), np.ones(a.dim, np.float32),
                np.ones(a.hidden_dim, np.float32)]
        st = sl.Stats(q, 0, a.n_kv_heads, a.head_dim, ones)
        assert sl.smooth_layer(q, st, alpha=1.5) == LB_ERR_ARG
        assert b"alpha" in sl.lib.lb_last_error()
        # a scale that differs between the q heads of one kv group cannot fold into v_proj
        s = np.ones(a.n_heads * a.head_dim, np.float32)
        s[a.head_dim] = 2  # head 1, kv group 0 (2 q heads per kv head in stories260K)
        assert a.n_heads // a.n_kv_heads >= 2
        assert sl.lib.lb__fold_input_scale(q.h, st.ref(), sl.SITE_O_IN, sl.fp(s), 1) == LB_ERR_ARG
        assert b"kv group 0" in sl.lib.lb_last_error()
        assert not q.entry(q.index("model.layers.0.self_attn.v_proj.weight")).replaced  # nothing changed
        bad = np.ones(a.dim, np.float32)
        bad[3] = 0
        assert sl.lib.lb__fold_input_scale(q.h, st.ref(), sl.SITE_ATTN_IN, sl.fp(bad), 1) == LB_ERR_ARG

