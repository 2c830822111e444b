"""transformers (CPU, fp32) loads what `lowbit quantize` writes, with the
tokenizer lowbit synthesized from the GGUF, and computes what lowbit
computes (issue 13, item 3):

  - logits on real sequences of wiki.test.raw: transformers on the written
    directory (compressed-tensors decompressed, fp32 forward) against
    lowbit's forward on the same directory. Both sides then use the same
    dequantized weights in fp32; only the order of the float sums differs
    (lowbit's kernels vs torch's GEMM), so the logits agree to about 1e-6
    of their range: 1e-4 of the range is the bound (the one lowbit's fp32
    forward meets against its numpy reference).
  - perplexity on 8 windows of 512 of wiki.test.raw (llama.cpp's rule:
    the second half of each window is scored): transformers on the
    directory against `lowbit ppl --scheme` on the GGUF (what lowbit
    evaluated before writing; for W8A8, whose activations transformers
    does not quantize on CPU, lowbit on the same directory) within 0.5%. The two differ by more than
    the sums' order: the package dequantizes pack-quantized weights in the
    scale's bf16 (an engine does the same), lowbit in fp32.

Run: make test-interop
"""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from lowbit_ctypes import QModel  # noqa: E402

BUILD = pathlib.Path(os.environ.get("LOWBIT_BUILD", "build"))
LOWBIT = str(BUILD / "lowbit")
REPO = HERE.parent.parent
SMOLLM2 = REPO / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WIKI = pathlib.Path("/work/shared/data/wikitext-2-raw/wiki.test.raw")
CTX, WINDOWS = 512, 8

# W4A16 with groups of 64 (SmolLM2's 576-wide layers: 128 does not divide
# them) and a W8A8 scheme: transformers reads the weights of both; then the
# same with an outlier method (issue 15): AWQ's and SmoothQuant's folded
# scales (norms, v_proj and up_proj rows) must read back as lowbit computes.
CALIB = REPO / "data/wikitext-2-raw/wiki.train.excerpt.raw"
METHOD = {"awq": ["--method", "awq"], "smoothquant": ["--method", "smoothquant"]}
SCHEMES = ["W4A16:g64", "W8A8-INT8", "W4A16:g64+awq", "W8A8-INT8+smoothquant"]


def scheme_args(param):
    """--scheme S [--method M --calib ... (4 windows of 512)] for a SCHEMES entry."""
    scheme, _, method = param.partition("+")
    extra = [*METHOD[method], "--calib", str(CALIB), "--calib-seqs", "4", "--calib-len", "512"] if method else []
    return scheme, ["--scheme", scheme, *extra]


def wiki_text():
    if not WIKI.exists():
        pytest.skip("wiki.test.raw not found")
    return WIKI.read_text(encoding="utf-8")


@pytest.fixture(scope="module", params=SCHEMES)
def written(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("tf") / request.param.replace(":", "_").replace("+", "_")
    r = subprocess.run([LOWBIT, "quantize", str(SMOLLM2), "-o", str(out), *scheme_args(request.param)[1],
                        "--quiet"], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr
    return request.param, out


def load(path):
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig
    m = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32,
                                             quantization_config=CompressedTensorsConfig(dequantize=True))
    return m.float().eval()


def windows(tok):
    ids = tok(wiki_text(), add_special_tokens=False)["input_ids"]
    bos = tok.bos_token_id if getattr(tok, "add_bos_token", False) else None
    out = []
    for c in range(WINDOWS):
        w = list(ids[c * CTX:(c + 1) * CTX])
        if bos is not None:
            w[0] = bos
        out.append(w)
    return out


def test_logits_match_lowbit_on_the_same_directory(written):
    from transformers import AutoTokenizer
    _, out = written
    tok = AutoTokenizer.from_pretrained(str(out))
    seqs = [w[:96] for w in windows(tok)[:3]]
    model = load(out)
    with QModel(out) as q:
        st, runner = q.runner(threads=2, max_ctx=128)
        assert st == 0
        try:
            for s in seqs:
                with torch.no_grad():
                    ref = model(torch.tensor([s]), use_cache=False).logits[0].float().numpy()
                got = runner.logits(s)
                span = ref.max(axis=1) - ref.min(axis=1)
                err = np.abs(got - ref).max(axis=1) / span
                assert err.max() < 1e-4, err.max()
        finally:
            runner.close()


def test_perplexity_matches_what_lowbit_evaluated(written):
    from transformers import AutoTokenizer
    param, out = written
    scheme, args = scheme_args(param)
    tok = AutoTokenizer.from_pretrained(str(out))
    model = load(out)
    nll = []
    with torch.no_grad():
        for w in windows(tok):
            lp = torch.log_softmax(model(torch.tensor([w]), use_cache=False).logits[0].float(), dim=-1)
            nll += [-float(lp[j, w[j + 1]]) for j in range(CTX // 2, CTX - 1)]
    ppl_tf = float(np.exp(np.mean(nll)))
    # transformers' CPU path dequantizes the weights and keeps activations in
    # fp32: a weight-only scheme is what lowbit evaluated (--scheme on the
    # GGUF); for W8A8, lowbit reads the same directory, its weights alone
    # (--weights-only: lowbit would otherwise quantize the activations too, as
    # an engine does)
    weight_only = scheme.split(":")[0].endswith("A16")
    what = args if weight_only else ["--weights-only"]
    src = SMOLLM2 if weight_only else out
    r = subprocess.run([LOWBIT, "ppl", str(src), *what, "--text", str(WIKI), "--ctx", str(CTX),
                        "--chunks", str(WINDOWS), "--json", "--quiet"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    lb = json.loads(r.stdout)
    assert lb["scored_tokens"] == len(nll)
    assert abs(ppl_tf / lb["ppl"] - 1) < 0.005, (ppl_tf, lb["ppl"])
