"""llm-compressor's `oneshot` baseline for `make bench-quantize`: quantizes a Hugging Face directory with
one preset scheme on this CPU and saves the compressed checkpoint (with the input's tokenizer).

usage: python bench/llmc_oneshot.py IN OUT SCHEME [--group N] [--calib FILE] [--samples N] [--seqlen N]

SCHEME is an llm-compressor / compressed-tensors preset: W4A16, W4A16_ASYM, W8A16, FP8_DYNAMIC, W8A8 (int8),
NVFP4A16, NVFP4, MXFP4A16, MXFP4 ... --group overrides the weight group size of a group scheme (SmolLM2's
576-wide layers refuse group 128: use the same 64 or 32 as lowbit). --calib tokenizes a text (the WikiText-2
*train* excerpt, never the evaluation text) into --samples windows of --seqlen tokens for schemes with static
activation scales (NVFP4); data-free schemes run without it. Timing and peak RSS are taken by the caller
(/usr/bin/time -v) so that they cover the whole process, imports included, as a user would see it.
"""
import argparse
import time

import torch
from compressed_tensors.quantization import preset_name_to_scheme
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier
from transformers import AutoModelForCausalLM, AutoTokenizer


def calib_dataset(tok, path, samples, seqlen):
    from datasets import Dataset
    with open(path, encoding="utf-8") as f:
        ids = tok(f.read(), add_special_tokens=False)["input_ids"]
    rows = [ids[i * seqlen:(i + 1) * seqlen] for i in range(min(samples, len(ids) // seqlen))]
    return Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * len(r) for r in rows]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("scheme")
    ap.add_argument("--group", type=int, default=0)
    ap.add_argument("--calib")
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--seqlen", type=int, default=512)
    a = ap.parse_args()
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(a.inp)
    model = AutoModelForCausalLM.from_pretrained(a.inp, dtype="auto")
    scheme = preset_name_to_scheme(a.scheme, ["Linear"])
    if a.group:
        scheme.weights.group_size = a.group
    recipe = QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"])
    kw = {}
    if a.calib:
        kw = dict(dataset=calib_dataset(tok, a.calib, a.samples, a.seqlen), max_seq_length=a.seqlen,
                  num_calibration_samples=a.samples)
    t1 = time.time()
    oneshot(model=model, recipe=recipe, **kw)
    t2 = time.time()
    model.save_pretrained(a.out, save_compressed=True)
    tok.save_pretrained(a.out)
    t3 = time.time()
    print(f"llmc_oneshot {a.scheme} group={a.group or 'preset'}: load {t1 - t0:.1f} s, oneshot {t2 - t1:.1f} s, "
          f"save {t3 - t2:.1f} s -> {a.out}")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
