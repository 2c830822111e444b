"""Custom evals and chat prompts: lowbit's greedy generation equals the
numpy reference model's greedy decode (stories260K), each match kind
judges as documented, stop strings and token limits end generation,
per-item results name the failures; SmolLM2's chat template rendered by
jinja2 (as transformers renders it) equals lb_chat_prompt's text; bad
files are refused naming the line and field."""
import ctypes
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "model"))
import model_lib as ml  # noqa: E402
import reference_llama as ref  # noqa: E402
from test_eval_cli import lowbit, tokens_of  # noqa: E402

import task_lib as tl  # noqa: E402

SMOLLM2 = ml.ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPTS = ["Once upon a time", "Tom and Lily went to the park. They", "The little dog"]


def reference_greedy(prompt, n):
    """The reference model's greedy continuation: token ids."""
    model = ref.Transformer(ref.load_llama2c(str(ml.STORIES)))
    ids = tokens_of(prompt)
    logits = model.forward(ids)[-1]
    out = []
    for _ in range(n):
        nxt = int(np.argmax(logits))
        if nxt == 2:  # llama2.c's end of text
            break
        out.append(nxt)
        logits = model.forward([nxt])[-1]
    return out


def piece_text(ids):
    """The text of a continuation's token ids: llama2.c's pieces, none after BOS."""
    pieces = ref.load_llama2c_tokenizer(str(ml.ROOT / "models/tok512.bin"), 512)
    # decode_llama2c drops a leading space after its `prev` token: start it at the last prompt token, not BOS
    return ref.decode_llama2c(pieces, [0] + ids, bos=1)[len(ref.decode_llama2c(pieces, [0], bos=1)):].decode()


def run_custom(tmp_path, items, *extra):
    data = tmp_path / "custom.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in items))
    out_items = tmp_path / "out.jsonl"
    p = lowbit("eval", ml.STORIES, "--task", "custom", "--data", data, "--items", out_items, "--force", "--json", *extra)
    return json.loads(p.stdout), [json.loads(line) for line in out_items.read_text().splitlines()]


def test_generation_equals_the_reference_greedy_decode(tmp_path):
    n = 12
    texts = [piece_text(reference_greedy(p, n)) for p in PROMPTS]
    items = [{"id": f"p{i}", "prompt": p, "expected": t, "match": "exact"} for i, (p, t) in enumerate(zip(PROMPTS, texts))]
    out, rows = run_custom(tmp_path, items, "--max-tokens", n)
    for row, text in zip(rows, texts):
        assert row["base"]["output"] == text
        assert row["base"]["generated_tokens"] == n and not row["base"]["stopped"]
        assert row["base"]["correct"] == 1
    assert out["tasks"][0]["base"]["acc"] == 1


def test_match_kinds_stop_and_limits(tmp_path):
    text = piece_text(reference_greedy(PROMPTS[0], 12))
    words = text.split()
    assert len(words) >= 3
    items = [
        {"prompt": PROMPTS[0], "expected": "  " + text + "\n", "match": "exact"},       # white space at the ends
        {"prompt": PROMPTS[0], "expected": text[:-1], "match": "exact"},                # one character short
        {"prompt": PROMPTS[0], "expected": words[1], "match": "contains"},
        {"prompt": PROMPTS[0], "expected": "zzzz", "match": "contains"},
        {"prompt": PROMPTS[0], "expected": "^ *" + words[0] + " +[a-z]+", "match": "regex"},
        {"prompt": PROMPTS[0], "expected": "^[0-9]+$", "match": "regex"},
        {"prompt": PROMPTS[0], "expected": words[0], "match": "exact", "stop": " " + words[1]},
        {"prompt": PROMPTS[0], "expected": "x", "max_tokens": 3},
    ]
    out, rows = run_custom(tmp_path, items, "--max-tokens", 12)
    assert [r["base"]["correct"] for r in rows] == [1, 0, 1, 0, 1, 0, 1, 0]
    stopped = rows[6]["base"]
    assert stopped["stopped"] and text.startswith(stopped["output"]) and " " + words[1] not in stopped["output"]
    assert rows[7]["base"]["generated_tokens"] == 3 and not rows[7]["base"]["stopped"]
    assert rows[0]["match"] == "exact" and rows[7]["match"] == "exact"  # the default with "expected"
    assert out["tasks"][0]["base"]["acc"] == pytest.approx(4 / 8)
    # --stop for every item
    _, rows = run_custom(tmp_path, items[:1], "--max-tokens", 12, "--stop", words[2])
    assert rows[0]["base"]["stopped"] and words[2] not in rows[0]["base"]["output"]


def test_choices_items_are_scored_as_multiple_choice(tmp_path):
    item = {"prompt": "Once upon a time, there was a little girl named Lily.",
            "choices": ["She liked to play outside.", "The car drove away fast."], "label": 0}
    _, rows = run_custom(tmp_path, [item])
    mc = tmp_path / "mc.jsonl"
    mc.write_text(json.dumps({"context": item["prompt"], "choices": item["choices"], "label": 0}) + "\n")
    mc_out = tmp_path / "mc_out.jsonl"
    lowbit("eval", ml.STORIES, "--task", "mc", "--data", mc, "--items", mc_out)
    want = json.loads(mc_out.read_text())["base"]
    assert rows[0]["match"] == "choices" and rows[0]["base"]["loglik"] == want["loglik"]
    assert rows[0]["base"]["acc"] == want["acc"]


@pytest.mark.parametrize("obj,words", [
    ({"expected": "a"}, ["'prompt'"]),
    ({"prompt": "p"}, ["'expected'"]),
    ({"prompt": "p", "expected": "a", "match": "fuzzy"}, ["'match'"]),
    ({"prompt": "p", "expected": "(", "match": "regex"}, ["'expected'", "regular expression"]),
    ({"prompt": "p", "choices": ["a", "b"], "label": 3}, ["'label'"]),
    ({"prompt": "p", "choices": ["a"], "label": 0}, ["'choices'"]),
    ({"prompt": "p", "expected": "a", "max_tokens": 0}, ["'max_tokens'"]),
    ({"prompt": "p", "expected": "a", "stop": ""}, ["'stop'"]),
    ({"prompt": "p", "expected": "a", "id": 7}, ["'id'"]),
])
def test_malformed_custom_files(tmp_path, obj, words):
    data = tmp_path / "c.jsonl"
    data.write_text(json.dumps({"prompt": "ok", "expected": "ok"}) + "\n" + json.dumps(obj) + "\n")
    p = lowbit("eval", ml.STORIES, "--task", "custom", "--data", data, check=False)
    assert p.returncode == 1 and "c.jsonl: line 2" in p.stderr, p.stderr
    for w in words:
        assert w in p.stderr


def libc_free(ptr):
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(ptr)


def chat_prompt(template, user):
    lib = tl.lib
    lib.lb_chat_prompt.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    out = ctypes.c_void_p()
    st = lib.lb_chat_prompt(template.encode(), user.encode(), ctypes.byref(out))
    if st != 0:
        return None
    text = ctypes.string_at(out).decode()
    libc_free(out)
    return text


def render(template, user):
    """What transformers' apply_chat_template renders (its jinja2 settings)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    return env.from_string(template).render(messages=[{"role": "user", "content": user}], add_generation_prompt=True,
                                            bos_token="", eos_token="<|im_end|>")


def test_smollm2_chat_prompt_equals_the_rendered_template():
    import gguf
    r = gguf.GGUFReader(str(SMOLLM2))
    field = r.fields["tokenizer.chat_template"]
    template = bytes(field.parts[field.data[0]]).decode()
    lib = tl.lib
    lib.lb_model_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.lb_chat_template.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.lb_model_close.argtypes = [ctypes.c_void_p]
    m, out = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.lb_model_open(str(SMOLLM2).encode(), ctypes.byref(m)) == 0
    assert lib.lb_chat_template(m, ctypes.byref(out)) == 0
    assert ctypes.string_at(out).decode() == template
    libc_free(out)
    lib.lb_model_close(m)
    for user in ["What is the capital of France?", "two\nlines, \"quotes\" and {braces}"]:
        want = render(template, user)
        assert "You are a helpful AI assistant named SmolLM" in want  # the default system message
        assert chat_prompt(template, user) == want


@pytest.mark.parametrize("template,want", [
    ("{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>...",
     "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("{{ '<start_of_turn>' + role }}", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"),
    ("{{ '<|user|>' }}...{{ '<|end|>' }}{{ '<|assistant|>' }}", "<|user|>\nHi<|end|>\n<|assistant|>\n"),
    ("{{ '[INST] ' + content + ' [/INST]' }}", "[INST] Hi [/INST]"),
    ("{{ '<|im_start|>' + m.role }}", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
    ("{{ unknown }}", None),
])
def test_chat_families(template, want):
    assert chat_prompt(template, "Hi") == want


def test_chat_needs_a_template(tmp_path):
    data = tmp_path / "c.jsonl"
    data.write_text(json.dumps({"prompt": "p", "expected": "a"}) + "\n")
    p = lowbit("eval", ml.STORIES, "--task", "custom", "--data", data, "--chat", check=False)
    assert p.returncode == 2 and "no chat template" in p.stderr
