"""An independent check of what `lowbit kld` reports for a W8A8 int8 compressed-tensors checkpoint with
static per-tensor input scales (bench/llmcompressor_baseline.py's sq-/rtn-w8a8-static): the same model
computed in torch from the checkpoint's tensors, written from the compressed-tensors conventions and not
from lowbit's code. Each Linear gets weight = int8 codes x weight_scale (per output row) and its input
x -> clamp(round(x / input_scale), -128, 127) x input_scale (symmetric, zero point 0) before the product,
in fp32; everything else (embeddings, norms, the tied head) from the checkpoint as stored. KLD(ref || q)
per scored token over lowbit ppl's windows (bench/hf_ppl.py's rule: non-overlapping windows of CTX, the
second half scored), and both perplexities.

usage: python bench/w8a8_static_kld.py REF_DIR CKPT_DIR TEXT [--ctx 512] [--chunks 4] [--json]
"""
import argparse
import json
import math

import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer


def quantized_copy(ref_dir, ckpt_dir):
    model = AutoModelForCausalLM.from_pretrained(ref_dir, dtype=torch.float32).eval()
    mods = dict(model.named_modules())
    hooks = 0
    with safe_open(f"{ckpt_dir}/model.safetensors", "pt") as f:
        keys = set(f.keys())
        params = dict(model.named_parameters())
        for k in keys:
            if k.endswith(".weight") and k in params and f.get_slice(k).get_dtype() != "I8":
                params[k].data.copy_(f.get_tensor(k).float())  # smoothed norms, embeddings
        for name, m in mods.items():
            if not isinstance(m, torch.nn.Linear) or f"{name}.weight_scale" not in keys:
                continue
            w = f.get_tensor(f"{name}.weight")
            assert w.dtype == torch.int8, f"{name}: {w.dtype} weights, expected int8"
            m.weight.data.copy_(w.float() * f.get_tensor(f"{name}.weight_scale").float())
            s = float(f.get_tensor(f"{name}.input_scale").float().reshape(-1)[0])

            def pre(mod, args, s=s):
                x = args[0]
                return (torch.clamp(torch.round(x / s), -128, 127) * s,) + tuple(args[1:])

            m.register_forward_pre_hook(pre)
            hooks += 1
    return model, hooks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("ckpt")
    ap.add_argument("text")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(a.ref)
    with open(a.text, encoding="utf-8") as f:
        ids = tok(f.read(), add_special_tokens=False)["input_ids"]
    ref = AutoModelForCausalLM.from_pretrained(a.ref, dtype=torch.float32).eval()
    q, hooks = quantized_copy(a.ref, a.ckpt)
    kl, nll_r, nll_q = [], [], []
    with torch.no_grad():
        for c in range(min(a.chunks, len(ids) // a.ctx)):
            w = ids[c * a.ctx:(c + 1) * a.ctx]
            x = torch.tensor([w])
            lr = torch.log_softmax(ref(x, use_cache=False).logits[0].float(), -1)
            lq = torch.log_softmax(q(x, use_cache=False).logits[0].float(), -1)
            for j in range(a.ctx // 2, a.ctx - 1):
                kl.append(float((lr[j].exp() * (lr[j] - lq[j])).sum()))
                nll_r.append(-float(lr[j, w[j + 1]]))
                nll_q.append(-float(lq[j, w[j + 1]]))
    n = len(kl)
    r = {"ckpt": a.ckpt, "static_linears": hooks, "scored": n, "kld_mean": sum(kl) / n,
         "ppl_base": math.exp(sum(nll_r) / n), "ppl": math.exp(sum(nll_q) / n)}
    if a.json:
        print(json.dumps(r))
    else:
        print(f"{a.ckpt}: {hooks} static int8 linears, {n} scored tokens: KLD {r['kld_mean']:.5f}, "
              f"PPL {r['ppl']:.4f} (reference {r['ppl_base']:.4f})")


if __name__ == "__main__":
    main()
