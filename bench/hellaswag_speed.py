"""HellaSwag tasks per second: lowbit eval and llama.cpp's llama-perplexity
--hellaswag on the same first N tasks of data/evals' validation set, the
same model, 2 threads, one after the other in this run (the machine is
shared: compare the ratio, not the absolute rates). Both run every task of
the file (llama.cpp in its random order without replacement), both with an
fp32 KV cache; the accuracies are printed too (lowbit's acc_norm_tok is
llama.cpp's score).

usage: python bench/hellaswag_speed.py LLAMACPP_BIN_DIR [MODEL.gguf] [N=400]
(LLAMACPP_BIN_DIR: what `make llamacpp` prints)"""
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
HS = ROOT / "data/evals/hellaswag/hellaswag_val_full.txt"


def main():
    bin_dir = pathlib.Path(sys.argv[1])
    model = sys.argv[2] if len(sys.argv) > 2 else str(ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    with tempfile.TemporaryDirectory() as tmp:
        data = pathlib.Path(tmp) / "hs.txt"
        data.write_text("".join(HS.read_text().splitlines(keepends=True)[:6 * n]))
        t0 = time.time()
        out = subprocess.run([str(ROOT / "build/lowbit"), "eval", model, "--task", "hellaswag", "--data", str(data),
                              "--threads", "2", "--json", "--quiet"], capture_output=True, text=True, check=True)
        t_lowbit = time.time() - t0
        base = json.loads(out.stdout)["tasks"][0]["base"]
        env = dict(os.environ, LD_LIBRARY_PATH=str(bin_dir))
        t0 = time.time()
        p = subprocess.run([str(bin_dir / "llama-perplexity"), "-m", model, "-f", str(data), "--hellaswag",
                            "--hellaswag-tasks", str(n), "-t", "2", "-ctk", "f32", "-ctv", "f32", "-fa", "off"],
                           capture_output=True, text=True, env=env, check=True)
        t_llama = time.time() - t0
    acc = [float(m.group(1)) for m in re.finditer(r"^\d+\t([0-9.]+)%\t", p.stdout + p.stderr, re.M)][-1]
    print(f"tasks {n}, model {pathlib.Path(model).name}, 2 threads")
    print(f"lowbit eval        {n / t_lowbit:6.2f} tasks/s ({t_lowbit:.1f} s wall, model load included; "
          f"{base['items_per_s']:.2f} tasks/s scoring alone)  acc_norm_tok {100 * base['acc_norm_tok']:.2f}  "
          f"acc_norm {100 * base['acc_norm']:.2f}")
    print(f"llama-perplexity   {n / t_llama:6.2f} tasks/s ({t_llama:.1f} s wall, model load included)  "
          f"acc_norm {acc:.2f}")
    print(f"ratio lowbit / llama.cpp: {t_llama / t_lowbit:.2f}x")


if __name__ == "__main__":
    main()
