"""Writes a GGUF's tokenizer as Hugging Face files (tokenizer.json, tokenizer_config.json, ...) into a
directory, with transformers' own GGUF tokenizer conversion. A stop-gap for the benchmark until
lowbit's own synthesized tokenizer (helper tok) is merged; `quantize_bench.sh` prefers lowbit's.

usage: python bench/hf_tokenizer_from_gguf.py MODEL.gguf DIR
"""
import os
import sys

from transformers import AutoTokenizer


def main():
    gguf, out = sys.argv[1], sys.argv[2]
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(gguf)), gguf_file=os.path.basename(gguf))
    tok.save_pretrained(out)
    print(f"{out}: tokenizer from {gguf} (vocab {len(tok)}, bos {tok.bos_token!r}, eos {tok.eos_token!r})")


if __name__ == "__main__":
    main()
