"""Perplexity of a Hugging Face model directory measured by transformers, the way `lowbit ppl` does it
(llama.cpp's method, see README "lowbit ppl"): the whole text is tokenized (BOS first when the
tokenizer adds one), cut into non-overlapping windows of CTX tokens whose first token becomes BOS
(when it adds one), each run from an empty cache, and only the second half is scored: the logits at
positions CTX/2 .. CTX-2 predict the next token. PPL = exp(mean NLL), +/- exp(mean)*sd/sqrt(n-1).

Quantized directories (compressed-tensors) are decompressed by transformers + compressed-tensors and
the forward pass runs in fp32 (the model is cast after dequantization), as lowbit's runner does.

usage: python bench/hf_ppl.py DIR TEXT [--ctx 512] [--chunks 40] [--json]
"""
import argparse
import json
import math
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def load_model(path):
    kw = {"dtype": torch.float32}
    with open(f"{path}/config.json") as f:
        if "quantization_config" in json.load(f):
            # Dequantize to dense weights (CPU has no compressed kernels).
            from transformers import CompressedTensorsConfig
            kw["quantization_config"] = CompressedTensorsConfig(dequantize=True)
    model = AutoModelForCausalLM.from_pretrained(path, **kw)
    return model.float().eval()  # CT may decompress to bf16: compute in fp32 regardless


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("text")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    tok = AutoTokenizer.from_pretrained(a.model)
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    add_bos = bool(getattr(tok, "add_bos_token", False)) and tok.bos_token_id is not None
    if add_bos:
        ids = [tok.bos_token_id] + ids
    chunks = min(a.chunks, len(ids) // a.ctx) if a.chunks else len(ids) // a.ctx
    t0 = time.time()
    model = load_model(a.model)
    t_load = time.time() - t0
    nll = []
    t0 = time.time()
    with torch.no_grad():
        for c in range(chunks):
            w = list(ids[c * a.ctx:(c + 1) * a.ctx])
            if add_bos:
                w[0] = tok.bos_token_id
            x = torch.tensor([w])
            logits = model(x, use_cache=False).logits[0].float()
            lp = torch.log_softmax(logits, dim=-1)
            for j in range(a.ctx // 2, a.ctx - 1):
                nll.append(-float(lp[j, w[j + 1]]))
    n = len(nll)
    mean = sum(nll) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in nll) / (n - 1))
    ppl = math.exp(mean)
    err = ppl * sd / math.sqrt(n - 1)
    r = {"model": a.model, "tokens": len(ids), "windows": chunks, "ctx": a.ctx, "scored": n,
         "ppl": ppl, "ppl_err": err, "load_s": t_load, "eval_s": time.time() - t0}
    if a.json:
        print(json.dumps(r))
    else:
        print(f"{a.model}: {len(ids)} tokens of text, {chunks} windows of {a.ctx}, {n} scored")
        print(f"PPL = {ppl:.4f} +/- {err:.4f}   (transformers, fp32; load {t_load:.1f} s, eval {r['eval_s']:.1f} s)")


if __name__ == "__main__":
    sys.exit(main())
