"""lowbit eval end to end on stories260K: three hand-made items scored here
independently (lowbit's tokens, the numpy reference forward pass of each
whole sequence from an empty cache, lm-eval's definitions of acc and
acc_norm, llama.cpp's of the token-normalized score) agree with what the
command reports; the shared tokens are run once; base vs quantized gives
consistent paired statistics; the ppl task equals lowbit ppl and kld;
bad usage and bad files are refused."""
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "model"))
import model_lib as ml  # noqa: E402
import reference_llama as ref  # noqa: E402
from test_eval_cli import TEXT, lowbit, tokens_of  # noqa: E402

ITEMS = [
    {"context": "Once upon a time, there was a little girl named Lily.",
     "choices": ["She liked to play outside.", "The car drove away fast.", "He ate a big red apple."], "label": 0},
    {"context": "Tom had a big dog.", "choices": ["The dog was happy.", "The dog was very very sad and cried.", "dog"],
     "label": 0},
    {"context": "The sun was", "choices": ["hot", "hot and bright", "cold"], "label": 1},
]


def write_items(tmp_path, items=ITEMS):
    p = tmp_path / "items.jsonl"
    p.write_text("".join(json.dumps(d) + "\n" for d in items))
    return p


def log_softmax(row):
    m = row.max()
    return row - (m + np.log(np.exp(row - m).sum()))


def reference_scores(item, model):
    """Per choice: (loglik, tokens, loglik_tok, greedy), and the tokens run
    when the shared prefix is run once."""
    ctx = tokens_of(item["context"])
    fulls = [tokens_of(item["context"] + " " + c) for c in item["choices"]]
    starts = [len(ctx) if len(ctx) < len(f) else len(f) - 1 for f in fulls]
    shared = 0
    while all(shared < len(f) for f in fulls) and len({f[shared] for f in fulls}) == 1:
        shared += 1
    out = []
    for full, start in zip(fulls, starts):
        model.reset()
        logits = model.forward(full)
        lps = [log_softmax(logits[j - 1])[full[j]] for j in range(start, len(full))]
        greedy = all(int(np.argmax(logits[j - 1])) == full[j] for j in range(start, len(full)))
        tok_from = shared if start < shared < len(full) else start
        out.append((sum(lps), len(full) - start, float(np.mean(lps[tok_from - start:])), greedy))
    s = min(shared, min(starts))
    run = s + sum(len(f) - 1 - s for f in fulls)
    return out, run


@pytest.fixture(scope="module")
def reference():
    model = ref.Transformer(ref.load_llama2c(str(ml.STORIES)))
    return [reference_scores(it, model) for it in ITEMS]


def test_hand_made_items_match_the_reference_forward_pass(tmp_path, reference):
    items_out = tmp_path / "scores.jsonl"
    out = json.loads(lowbit("eval", ml.STORIES, "--task", "mc", "--data", write_items(tmp_path), "--items", items_out,
                            "--json").stdout)
    rows = [json.loads(line) for line in items_out.read_text().splitlines()]
    assert len(rows) == 3
    acc = {"acc": 0, "acc_norm": 0, "acc_norm_tok": 0}
    for item, row, (ref_scores, _) in zip(ITEMS, rows, reference):
        got = row["base"]
        lls = np.array([r[0] for r in ref_scores])
        toks = [r[1] for r in ref_scores]
        lltok = np.array([r[2] for r in ref_scores])
        assert got["tokens"] == toks
        assert np.allclose(got["loglik"], lls, rtol=1e-4, atol=1e-4), (got["loglik"], lls)
        assert np.allclose(got["loglik_tok"], lltok, rtol=1e-4, atol=1e-4)
        assert got["greedy"] == [r[3] for r in ref_scores]
        chars = np.array([len(c) for c in item["choices"]], float)
        picks = {"acc": int(np.argmax(lls)), "acc_norm": int(np.argmax(lls / chars)), "acc_norm_tok": int(np.argmax(lltok))}
        for name, pick in picks.items():
            # the decision is not a near tie, so the fp32 run must make the same one
            for scores in (lls, lls / chars, lltok):
                top = np.sort(scores)[::-1]
                assert top[0] - top[1] > 1e-3
            assert got[name] == int(pick == item["label"]), name
            acc[name] += pick == item["label"]
    for name, k in acc.items():
        assert out["tasks"][0]["base"][name] == pytest.approx(k / 3)
        assert out["tasks"][0]["base"][name + "_se"] == pytest.approx(np.std([1] * k + [0] * (3 - k), ddof=1) / np.sqrt(3))
    # the three metrics do not all agree on these items: each is really computed
    assert len(set(acc.values())) > 1 or acc["acc"] not in (0, 3)


def test_shared_tokens_run_once(tmp_path, reference):
    out = json.loads(lowbit("eval", ml.STORIES, "--task", "mc", "--data", write_items(tmp_path), "--json").stdout)
    expected = sum(run for _, run in reference)
    full = sum(len(tokens_of(it["context"] + " " + c)) for it in ITEMS for c in it["choices"])
    assert out["tasks"][0]["base"]["tokens_run"] == expected < full


def test_vs_itself_is_noise(tmp_path):
    out = json.loads(lowbit("eval", ml.STORIES, "--task", "mc", "--data", write_items(tmp_path), "--vs", ml.STORIES,
                            "--json").stdout)
    t = out["tasks"][0]
    assert t["base"]["acc"] == t["quant"]["acc"]
    for m in ("acc", "acc_norm", "acc_norm_tok"):
        p = t["paired"][m]
        assert p["diff"] == 0 and p["ci_lo"] == 0 and p["ci_hi"] == 0 and p["p_mcnemar"] == 1 and not p["significant"]
    assert t["verdict"] == "indistinguishable from noise at 95%"


def lambada_items(n=60):
    """Passages of the stories' text cut at a word: LAMBADA's layout."""
    words = TEXT.read_text().split()
    return [{"text": " ".join(words[i * 12:i * 12 + 12])} for i in range(n)]


def test_quantized_comparison_is_consistent_with_the_items(tmp_path):
    data = tmp_path / "l.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in lambada_items()))
    items_out = tmp_path / "scores.jsonl"
    p = lowbit("eval", ml.STORIES, "--task", "lambada", "--data", data, "--spec", "int4:tensor", "--items",
               items_out, "--json")
    t = json.loads(p.stdout)["tasks"][0]
    rows = [json.loads(line) for line in items_out.read_text().splitlines()]
    a = np.array([r["base"]["acc"] for r in rows], float)
    b = np.array([r["quant"]["acc"] for r in rows], float)
    assert [r["base"]["greedy"][0] for r in rows] == [bool(x) for x in a]
    pa = t["paired"]["acc"]
    assert pa["only_base"] == int(((a == 1) & (b == 0)).sum()) and pa["only_quant"] == int(((a == 0) & (b == 1)).sum())
    assert pa["only_base"] + pa["only_quant"] > 0  # the quantization changed something
    assert pa["diff"] == pytest.approx(b.mean() - a.mean())
    assert pa["ci_lo"] <= pa["diff"] <= pa["ci_hi"]
    lls = np.array([r["base"]["loglik"][0] for r in rows])
    assert t["base"]["ppl"] == pytest.approx(np.exp(-lls.mean()), rel=1e-9)
    assert t["verdict"].startswith(("indistinguishable", "worse by", "better by"))
    text = lowbit("eval", ml.STORIES, "--task", "lambada", "--data", data, "--spec", "int4:tensor").stdout
    assert "verdict: " + t["verdict"] in text and "McNemar p" in text


def test_ppl_task_equals_ppl_and_kld():
    args = ["--task", "ppl", "--data", TEXT, "--ctx", 64, "--chunks", 3, "--json"]
    alone = json.loads(lowbit("eval", ml.STORIES, *args).stdout)["tasks"][0]
    ppl = json.loads(lowbit("ppl", ml.STORIES, "--text", TEXT, "--ctx", 64, "--chunks", 3, "--json").stdout)
    assert alone["ppl"] == ppl["ppl"] and alone["ppl_err"] == ppl["ppl_err"]
    both = json.loads(lowbit("eval", ml.STORIES, *args, "--spec", "int4:g32").stdout)["tasks"][0]
    kld = json.loads(lowbit("kld", ml.STORIES, "--text", TEXT, "--ctx", 64, "--chunks", 3, "--spec", "int4:g32",
                            "--json").stdout)
    for a, b in (("ppl_base", "ppl_base"), ("ppl_quant", "ppl"), ("dppl", "dppl"), ("dppl_err", "dppl_err"),
                 ("kld_mean", "kld_mean")):
        assert both[a] == kld[b], a
    assert both["verdict"].startswith(("indistinguishable", "worse by", "better by"))


@pytest.mark.parametrize("args,words", [
    (["--task", "mc"], ["--data"]),
    (["--data", "x"], ["after the --task"]),
    (["--task", "nope", "--data", str(TEXT)], ["unknown task 'nope'"]),
    (["--task", "mc", "--data", str(TEXT), "--vs", str(ml.STORIES), "--spec", "int8"], ["--vs QUANT or"]),
    (["--task", "mc", "--data", str(TEXT), "--limit", "x"], ["--limit"]),
    (["--task", "mc", "--data", str(TEXT), "--shots", "65"], ["--shots"]),
    (["--task", "mmlu", "--data", str(TEXT), "--mmlu-form", "odd"], ["--mmlu-form"]),
])
def test_bad_usage(args, words):
    p = lowbit("eval", ml.STORIES, *args, check=False)
    assert p.returncode == 2, p.stderr
    for w in words:
        assert w in p.stderr


def test_bad_files_and_outputs(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ITEMS[0]) + "\n" + '{"context": "x", "choices": ["a", "b"], "label": 5}\n')
    p = lowbit("eval", ml.STORIES, "--task", "mc", "--data", bad, check=False)
    assert p.returncode == 1 and "bad.jsonl: line 2" in p.stderr and "'label'" in p.stderr
    good = write_items(tmp_path)
    before = good.read_bytes()
    p = lowbit("eval", ml.STORIES, "--task", "mc", "--data", good, "--items", good, check=False)
    assert p.returncode == 2 and good.read_bytes() == before
    p = lowbit("eval", ml.STORIES, "--task", "mc", "--data", tmp_path / "missing.jsonl", check=False)
    assert p.returncode == 1 and "missing.jsonl" in p.stderr
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"context": "Once upon a time " * 200, "choices": ["a", "b"], "label": 0}) + "\n")
    p = lowbit("eval", ml.STORIES, "--task", "mc", "--data", long, check=False)
    assert p.returncode == 2 and "item 0 (line 1)" in p.stderr and "context" in p.stderr


def test_base_items_reuse_the_base_scores(tmp_path):
    data = tmp_path / "l.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in lambada_items(30)))
    mc = write_items(tmp_path)
    custom = tmp_path / "c.jsonl"
    custom.write_text(json.dumps({"prompt": "Once upon a time", "expected": "there", "match": "contains"}) + "\n" +
                      json.dumps({"prompt": "The sun was", "choices": ["hot", "cold"], "label": 0}) + "\n")
    tasks = ["--task", "lambada", "--data", data, "--task", "mc", "--data", mc, "--task", "custom", "--data", custom,
             "--max-tokens", 8]
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a = json.loads(lowbit("eval", ml.STORIES, *tasks, "--spec", "int4:tensor", "--items", first, "--json").stdout)
    b = json.loads(lowbit("eval", ml.STORIES, *tasks, "--spec", "int4:tensor", "--base-items", first, "--items", second,
                          "--json").stdout)
    for ta, tb in zip(a["tasks"], b["tasks"]):
        assert ta["paired"] == tb["paired"] and ta["verdict"] == tb["verdict"]
        for m in ("acc", "acc_norm", "acc_norm_tok"):
            assert ta["base"][m] == tb["base"][m]
    assert first.read_text() == second.read_text()
    p = lowbit("eval", ml.STORIES, *tasks, "--spec", "int4:tensor", "--base-items", first, "--limit", 2, check=False)
    assert p.returncode == 2 and "--base-items" in p.stderr and "line 3" in p.stderr, p.stderr
    p = lowbit("eval", ml.STORIES, *tasks, "--base-items", first, check=False)
    assert p.returncode == 2 and "comparison" in p.stderr


def test_choices_that_differ_from_their_first_token(tmp_path):
    """SmolLM2 adds no BOS: a Winogrande blank at the start leaves the choices no shared token."""
    smollm2 = ml.ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    data = tmp_path / "w.jsonl"
    data.write_text(json.dumps({"sentence": "_ was hungry, so Sarah gave Maria an apple.", "option1": "Sarah",
                                "option2": "Maria", "answer": "2"}) + "\n")
    out_items = tmp_path / "o.jsonl"
    out = json.loads(lowbit("eval", smollm2, "--task", "winogrande", "--data", data, "--items", out_items,
                            "--json").stdout)
    row = json.loads(out_items.read_text())
    assert row["base"]["tokens"][0] == row["base"]["tokens"][1] > 0
    assert all(np.isfinite(row["base"]["loglik"]))
    assert out["tasks"][0]["base"]["tokens_run"] == sum(len(tokens_of_smollm2(c)) - 1 for c in (
        "Sarah was hungry, so Sarah gave Maria an apple.", "Maria was hungry, so Sarah gave Maria an apple."))


def tokens_of_smollm2(text):
    import ctypes
    lib = ml.lib
    lib.lb_model_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.lb_tokenizer_from_model.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.lb_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)), ctypes.POINTER(ctypes.c_size_t)]
    lib.lb_tokenizer_free.argtypes = [ctypes.c_void_p]
    lib.lb_model_close.argtypes = [ctypes.c_void_p]
    path = str(ml.ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf").encode()
    m, t = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.lb_model_open(path, ctypes.byref(m)) == 0 and lib.lb_tokenizer_from_model(m, path, ctypes.byref(t)) == 0
    ids, n = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
    data = text.encode()
    assert lib.lb_tokenize(t, data, len(data), 0, ctypes.byref(ids), ctypes.byref(n)) == 0
    out = [ids[i] for i in range(n.value)]
    lib.lb_tokenizer_free(t)
    lib.lb_model_close(m)
    return out
