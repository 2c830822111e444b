"""lowbit's paired statistics against scipy and numpy: McNemar's exact test
(scipy.stats.binomtest, two-sided, p = 1/2), the binomial standard error
(numpy's sample standard deviation), and the bootstrap interval on the
same resamples (the generator reproduced from lowbit.h's description,
numpy.percentile's default interpolation); degenerate cases included."""
import numpy as np
import pytest
from scipy import stats

import task_lib as tl


@pytest.mark.parametrize("b,c", [(0, 0), (0, 1), (1, 0), (0, 7), (7, 0), (5, 5), (3, 9), (12, 4), (40, 61),
                                 (100, 100), (250, 310), (1000, 1100), (3000, 3190), (20000, 20500)])
def test_mcnemar_equals_scipys_exact_binomial_test(b, c):
    want = 1.0 if b + c == 0 else stats.binomtest(min(b, c), b + c, 0.5).pvalue
    assert tl.mcnemar(b, c) == pytest.approx(want, rel=1e-9, abs=1e-300)
    assert tl.mcnemar(b, c) == tl.mcnemar(c, b)


@pytest.mark.parametrize("k,n", [(0, 10), (10, 10), (3, 10), (4187, 10042), (1, 2)])
def test_binomial_se_is_the_sample_sd_over_sqrt_n(k, n):
    x = np.array([1.0] * k + [0.0] * (n - k))
    assert tl.binomial_se(k, n) == pytest.approx(x.std(ddof=1) / np.sqrt(n), rel=1e-12, abs=1e-15)


def xorshift64star(s):
    M = (1 << 64) - 1
    s ^= s >> 12
    s ^= (s << 25) & M
    s ^= s >> 27
    return s, (s * 0x2545F4914F6CDD1D) & M


def bootstrap(d, resamples, seed):
    n, s, out = len(d), seed or 1, []
    for _ in range(resamples):
        idx = []
        for _ in range(n):
            s, r = xorshift64star(s)
            idx.append(int((r >> 11) / 2.0**53 * n))
        out.append(d[idx].sum() / n)
    return np.percentile(out, [2.5, 97.5])


def outcomes(seed, n, p_a, p_b):
    rng = np.random.default_rng(seed)
    return (rng.random(n) < p_a).astype(float), (rng.random(n) < p_b).astype(float)


@pytest.mark.parametrize("seed,n,pa,pb", [(1, 150, 0.6, 0.5), (2, 80, 0.4, 0.45), (3, 60, 0.9, 0.2)])
def test_bootstrap_interval_and_summary(seed, n, pa, pb):
    a, b = outcomes(seed, n, pa, pb)
    r, err = tl.paired(a, b, 1, resamples=400, seed=seed + 10)
    assert err is None
    d = b - a
    lo, hi = bootstrap(d, 400, seed + 10)
    assert r.ci_lo == pytest.approx(lo, abs=1e-12) and r.ci_hi == pytest.approx(hi, abs=1e-12)
    assert r.mean_a == pytest.approx(a.mean()) and r.mean_b == pytest.approx(b.mean()) and r.diff == pytest.approx(d.mean())
    assert r.diff_se == pytest.approx(d.std(ddof=1) / np.sqrt(n))
    assert (r.only_a, r.only_b) == (int((d < 0).sum()), int((d > 0).sum()))
    assert r.p_mcnemar == pytest.approx(stats.binomtest(min(r.only_a, r.only_b), r.only_a + r.only_b, 0.5).pvalue)
    assert r.significant == (r.p_mcnemar < 0.05)
    assert r.mde == pytest.approx((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * max(d.std(ddof=1), 1 / np.sqrt(n)) / np.sqrt(n))


def test_no_disagreement_is_noise():
    a = np.array([1, 0, 1, 1, 0] * 20, float)
    r, _ = tl.paired(a, a, 1)
    assert (r.diff, r.ci_lo, r.ci_hi, r.only_a, r.only_b, r.p_mcnemar, r.significant) == (0, 0, 0, 0, 0, 1, 0)
    assert r.mde == pytest.approx((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) / 100)  # the floor: one in n


def test_all_disagree_is_significant():
    a = np.ones(50)
    r, _ = tl.paired(a, np.zeros(50), 1)
    assert (r.diff, r.ci_lo, r.ci_hi, r.only_a, r.only_b) == (-1, -1, -1, 50, 0)
    assert r.p_mcnemar == pytest.approx(2 * 0.5**50) and r.significant


def test_continuous_outcomes_use_the_interval():
    rng = np.random.default_rng(5)
    a = rng.normal(0, 1, 300)
    r, _ = tl.paired(a, a + 0.5 + rng.normal(0, 0.1, 300), 0)
    assert np.isnan(r.p_mcnemar) and r.significant and r.ci_lo > 0.4
    r, _ = tl.paired(a, a + rng.normal(0, 0.1, 300), 0)
    assert r.significant == (r.ci_lo > 0 or r.ci_hi < 0)


def test_too_few_items_refused():
    r, err = tl.paired([1.0], [0.0], 1)
    assert r is None and "at least 2" in err
