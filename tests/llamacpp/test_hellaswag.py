"""lowbit eval's HellaSwag against llama.cpp's `llama-perplexity --hellaswag`
on the same tasks (the first 200 of data/evals' validation set) and model
(SmolLM2-135M-Instruct Q4_1):

  - llama.cpp draws its tasks in a random order, without replacement
    (std::mt19937 seeded with 1, one std::uniform_int_distribution draw over
    the tasks left for each), so asked for every task of the file it scores
    all of them: its final accuracy is over the same 200 tasks as lowbit's.
    Its score is the mean log-probability of an ending's tokens after the
    tokens the four sequences share: lowbit's acc_norm_tok.
  - the two accuracies agree within the standard error;
  - task by task: llama.cpp prints the running accuracy after each task, so
    each task's right/wrong is the step of that running count; the order is
    reproduced here (numpy's MT19937 with the legacy seeding is
    std::mt19937; libstdc++'s draw is Lemire's multiply-and-shift with
    rejection), and the two tools agree on at least 95% of the tasks (the
    others are near ties that the float arithmetic decides either way:
    llama.cpp rounds every matmul input to 8 bits).

200 tasks (400 until 2026-12-06, 4 minutes of CI) keep both checks' power
-- a wrong task order agrees on about half -- in half the time."""
import json
import math
import os
import pathlib
import re
import subprocess

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
HS = ROOT / "data/evals/hellaswag/hellaswag_val_full.txt"
TASKS = 200


def llamacpp_order(n_tasks):
    """The order llama-perplexity --hellaswag picks the tasks in."""
    mt = np.random.MT19937()
    mt._legacy_seeding(1)  # std::mt19937(1): init_genrand(1)
    left, out = list(range(n_tasks)), []
    while left:
        n = len(left)
        prod = int(mt.random_raw()) * n
        if (prod & 0xFFFFFFFF) < n:
            threshold = (2**32 - n) % n
            while (prod & 0xFFFFFFFF) < threshold:
                prod = int(mt.random_raw()) * n
        out.append(left.pop(prod >> 32))
    return out


def test_hellaswag_agrees_with_llama_cpp(tmp_path, llamacpp_bin):
    data = tmp_path / "hs.txt"
    data.write_text("".join(HS.read_text().splitlines(keepends=True)[:6 * TASKS]))
    env = dict(os.environ, LD_LIBRARY_PATH=str(llamacpp_bin))
    p = subprocess.run([str(llamacpp_bin / "llama-perplexity"), "-m", str(SMOLLM2), "-f", str(data), "--hellaswag",
                        "--hellaswag-tasks", str(TASKS), "-t", "2", "-ctk", "f32", "-ctv", "f32", "-fa", "off"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    steps = [float(m.group(1)) for m in re.finditer(r"^\d+\t([0-9.]+)%\t", p.stdout + p.stderr, re.M)]
    assert len(steps) == TASKS
    running = [round(a * (i + 1) / 100) for i, a in enumerate(steps)]
    right = [running[0]] + [b - a for a, b in zip(running, running[1:])]
    assert set(right) <= {0, 1}
    items = tmp_path / "items.jsonl"
    out = subprocess.run([str(BUILD / "lowbit"), "eval", str(SMOLLM2), "--task", "hellaswag", "--data", str(data),
                          "--items", str(items), "--json", "--quiet"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    ours = json.loads(out.stdout)["tasks"][0]["base"]
    llama_acc = running[-1] / TASKS
    se = math.sqrt(llama_acc * (1 - llama_acc) / (TASKS - 1))
    assert abs(ours["acc_norm_tok"] - llama_acc) <= se, (ours["acc_norm_tok"], llama_acc, se)
    per_item = [json.loads(line)["base"]["acc_norm_tok"] for line in items.read_text().splitlines()]
    agree = sum(right[k] == per_item[i] for k, i in enumerate(llamacpp_order(TASKS)))
    assert agree >= 0.95 * TASKS, f"{agree} of {TASKS} tasks agree (a wrong task order gives about half)"
