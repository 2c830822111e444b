"""lowbit quantize --format gguf (issue 14): refusals are usage errors that
write nothing (unknown type, output onto the input, an existing output
without --force, lowbit schemes in a GGUF), odd shapes fall back instead of
failing, --dry-run writes nothing, and the GGUF written reads back with the
gguf package with llama-quantize's metadata. (Types and bytes against
llama-quantize itself: tests/llamacpp/test_gguf_mix.py, test_gguf_bytes.py.)"""
import json
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
STORIES = ROOT / "models/stories260K.bin"


def run(*args):
    return subprocess.run([LOWBIT, "quantize", *map(str, args)], capture_output=True, text=True, timeout=300)


def test_writes_a_gguf_with_file_type(tmp_path):
    import gguf
    out = tmp_path / "s.gguf"
    r = run(STORIES, "-o", out, "--type", "q8_0", "--json", "--quiet")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["format"] == "gguf" and s["tensors"] == 47
    g = gguf.GGUFReader(str(out))
    kv = g.fields
    assert int(kv["general.file_type"].parts[-1][0]) == 7  # LLAMA_FTYPE_MOSTLY_Q8_0
    assert int(kv["general.quantization_version"].parts[-1][0]) == 2
    types = {t.name: t.tensor_type.name for t in g.tensors}
    # rows of 172 are not whole 32-blocks: F16, as llama-quantize falls back
    assert types["blk.0.ffn_down.weight"] == "F16" and types["blk.0.ffn_up.weight"] == "Q8_0"
    assert types["blk.0.attn_norm.weight"] == "F32"
    names = [t.name for t in g.tensors]  # llama-quantize's order: by layer, then name
    assert names.index("output_norm.weight") < names.index("blk.0.attn_k.weight") < names.index("blk.0.attn_norm.weight")


def test_dry_run_writes_nothing(tmp_path):
    out = tmp_path / "s.gguf"
    r = run(STORIES, "-o", out, "--type", "Q4_K_M", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    t = {x["name"]: x["type"] for x in json.loads(r.stdout)["tensors"]}
    assert t["blk.0.ffn_down.weight"] == "f16" and t["blk.0.attn_q.weight"] == "q5_0"
    assert not out.exists()


def test_unknown_type(tmp_path):
    out = tmp_path / "s.gguf"
    r = run(STORIES, "-o", out, "--type", "Q9_X")
    assert r.returncode == 2 and "Q9_X" in r.stderr and "Q4_K_M" in r.stderr
    r = run(STORIES, "-o", out, "--type", "Q8_0", "--tensor-type", "attn=q9_x")
    assert r.returncode == 2 and "q9_x" in r.stderr
    r = run(STORIES, "-o", out, "--type", "Q8_0", "--tensor-type", "attn")
    assert r.returncode == 2 and "PATTERN=TYPE" in r.stderr
    assert not out.exists()


def test_type_lowbit_cannot_write_yet_is_refused(tmp_path):
    out = tmp_path / "s.gguf"
    r = run(STORIES, "-o", out, "--type", "Q8_0", "--tensor-type", "attn_q=bf16", "--tensor-type", "ffn_up=q4_1")
    if r.returncode == 0:  # q4_1 writable now: nothing to refuse
        return
    assert r.returncode == 2 and "q4_1" in r.stderr and not out.exists()


def test_output_onto_input_is_refused(tmp_path):
    model = tmp_path / "m.gguf"
    assert run(STORIES, "-o", model, "--type", "F32", "--quiet").returncode == 0
    before = model.read_bytes()
    r = run(model, "-o", model, "--type", "Q8_0", "--force")
    assert r.returncode == 2 and "same file" in r.stderr
    assert model.read_bytes() == before


def test_existing_output_needs_force(tmp_path):
    out = tmp_path / "s.gguf"
    out.write_bytes(b"keep me")
    r = run(STORIES, "-o", out, "--type", "Q8_0")
    assert r.returncode == 2 and out.read_bytes() == b"keep me"
    r = run(STORIES, "-o", out, "--type", "Q8_0", "--force", "--quiet")
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:4] == b"GGUF"


def test_lowbit_schemes_are_not_gguf_types(tmp_path):
    out = tmp_path / "s.gguf"
    r = run(STORIES, "-o", out, "--scheme", "W4A16")
    assert r.returncode == 2 and "--type" in r.stderr and not out.exists()
    r = run(STORIES, "-o", tmp_path / "dir", "--scheme", "W4A16", "--pure")
    assert r.returncode == 2 and "gguf" in r.stderr.lower()


def test_rule_with_ggml_type_on_canonical_names(tmp_path):
    r = run(STORIES, "--type", "Q8_0", "--dry-run", "--json", "--rule", "*.self_attn.q_proj.weight=q4_0")
    assert r.returncode == 0, r.stderr
    t = {x["hf_name"]: x["type"] for x in json.loads(r.stdout)["tensors"]}
    assert t["model.layers.0.self_attn.q_proj.weight"] == "q4_0"
    assert t["model.layers.0.self_attn.k_proj.weight"] == "q8_0"
    r = run(STORIES, "--type", "Q8_0", "--dry-run", "--rule", "*.nothing.weight=q4_0")
    assert r.returncode == 2 and "matches no" in r.stderr


def ppl(*args):
    r = subprocess.run([LOWBIT, "ppl", *map(str, args), "--text", ROOT / "models/tinystories-valid-excerpt.txt",
                        "--tokenizer", ROOT / "models/tok512.bin", "--json", "--quiet", "--ctx", "128", "--chunks", "8"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["ppl"]


def test_ppl_with_type_evaluates_the_file(tmp_path):
    """ppl MODEL --type T (the qmodel holding each tensor's ggml round trip)
    equals ppl of the GGUF quantize --type T writes, and differs from fp32"""
    out = tmp_path / "s.gguf"
    assert run(STORIES, "-o", out, "--type", "Q4_0", "--tensor-type", "attn_v=q8_0", "--quiet").returncode == 0
    file = ppl(out)
    assert ppl(STORIES, "--type", "q4_0", "--tensor-type", "attn_v=q8_0") == file
    assert ppl(STORIES) != file
    r = subprocess.run([LOWBIT, "ppl", STORIES, "--text", ROOT / "models/tinystories-valid-excerpt.txt", "--type",
                        "Q8_0", "--scheme", "W4A16"], capture_output=True, text=True)
    assert r.returncode == 2 and "--type" in r.stderr
