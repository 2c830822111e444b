"""Paired comparison of two `lowbit kld --save-tokens` files: the same base,
text and windows, two quantized models A and B. Per scored token the KLDs are
paired samples; the mean difference A - B with its standard error and 95%
interval, two ways: tokens as independent samples, and windows as the unit
(the mean difference of each window, then their spread: tokens of one window
share a context and are not independent, so this is the honest one).

usage: kld_paired.py A.tsv B.tsv [--json]"""
import json
import math
import sys

import numpy as np


def load(path):
    a = np.loadtxt(path, comments="#", delimiter="\t", ndmin=2)
    if a.shape[1] != 5:
        raise SystemExit(f"{path}: expected 5 tab-separated columns, got {a.shape[1]}")
    return a


def paired(a, b):
    if a.shape != b.shape or not (a[:, :2] == b[:, :2]).all():
        raise SystemExit("the files do not score the same windows and positions")
    if not np.allclose(a[:, 3], b[:, 3], rtol=0, atol=1e-3):
        raise SystemExit("the files' base NLLs differ: not the same base model or text")
    d = a[:, 2] - b[:, 2]
    n = len(d)
    wins = np.unique(a[:, 0])
    per_win = np.array([d[a[:, 0] == w].mean() for w in wins])
    se_tok = d.std(ddof=1) / math.sqrt(n)
    se_win = per_win.std(ddof=1) / math.sqrt(len(wins))
    return {"tokens": n, "windows": len(wins), "kld_a": a[:, 2].mean(), "kld_b": b[:, 2].mean(),
            "diff": d.mean(), "se_tokens": se_tok, "se_windows": se_win,
            "ci95_windows": [d.mean() - 1.96 * se_win, d.mean() + 1.96 * se_win],
            "ci95_tokens": [d.mean() - 1.96 * se_tok, d.mean() + 1.96 * se_tok],
            "a_lower_frac": float((d < 0).mean()), "a_higher_frac": float((d > 0).mean())}


def main():
    args = [x for x in sys.argv[1:] if x != "--json"]
    if len(args) != 2:
        raise SystemExit(__doc__)
    r = paired(load(args[0]), load(args[1]))
    if "--json" in sys.argv:
        print(json.dumps(r))
        return
    print(f"{r['tokens']} tokens in {r['windows']} windows: KLD A {r['kld_a']:.5f}, B {r['kld_b']:.5f}")
    print(f"A - B = {r['diff']:+.5f}  se {r['se_windows']:.5f} (windows), {r['se_tokens']:.5f} (tokens)  "
          f"95% CI [{r['ci95_windows'][0]:+.5f}, {r['ci95_windows'][1]:+.5f}] (windows)")
    print(f"A lower on {100 * r['a_lower_frac']:.1f}% of tokens, higher on {100 * r['a_higher_frac']:.1f}%")


if __name__ == "__main__":
    main()
