"""What `llama-perplexity --kl-divergence` prints, read back: the figures the GGUF benchmarks compare
(bench/gguf_bench.py, bench/gptq_gguf_bench.py)."""
import re


def _number(pattern, text, what):
    m = re.search(pattern, text)
    if not m:
        raise SystemExit(f"llama-perplexity printed no {what}:\n{text[-2000:]}")
    return m


def parse_kl_divergence(text):
    """ppl, ppl_err, kld, kld_err and top1 (same top token, a fraction) of one llama-perplexity run."""
    ppl = _number(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)\s*±\s*([0-9.]+)", text, "Mean PPL(Q)")
    kld = _number(r"Mean\s+KLD:\s*([0-9.]+)\s*±\s*([0-9.]+)", text, "Mean KLD")
    top1 = _number(r"Same top p:\s*([0-9.]+)", text, "Same top p")
    return {"ppl": float(ppl.group(1)), "ppl_err": float(ppl.group(2)), "kld": float(kld.group(1)),
            "kld_err": float(kld.group(2)), "top1": float(top1.group(1)) / 100}
