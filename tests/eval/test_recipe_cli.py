"""Recipes on the evaluation commands (issue 13, item 1): `ppl --scheme S`
evaluates the same model as the equivalent --spec options (the scheme's
weights on the decoder's linear layers, the tied embedding/head kept in
bf16), --rule and --keep come first (first match wins), a recipe file says
the same as the command line, the README's example recipe is a real one,
and bad recipes are usage errors naming what is wrong."""
import json
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
STORIES = ROOT / "models/stories260K.bin"
TEXT = ROOT / "models/tinystories-valid-excerpt.txt"
WINDOWS = ["--text", TEXT, "--ctx", 64, "--chunks", 4]


def run(*args):
    return subprocess.run([LOWBIT, *map(str, args)], capture_output=True, text=True, timeout=300)


def ppl(*args):
    p = run("ppl", STORIES, *WINDOWS, *args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["ppl"]


def test_scheme_is_the_equivalent_spec():
    # W4A16:g32 = int4 g32 bf16 scales on every decoder weight, positive scales
    # (range=full, not int4's default signed); the tied embedding (also the
    # head) stays 16-bit: bf16, which --spec-embed bf16 says
    scheme = ppl("--scheme", "W4A16:g32")
    assert scheme == ppl("--spec", "int4:g32:scale=bf16:range=full", "--spec-embed", "bf16")
    assert scheme == ppl("--rule", "model.layers.*=int4:g32:scale=bf16:range=full")
    assert scheme != ppl("--rule", "model.layers.*=int4:g32:scale=bf16")  # range=signed
    assert scheme == ppl("--scheme", "w4a16:g32")
    assert scheme != ppl()  # it does quantize
    asym = ppl("--scheme", "W4A16-ASYM:g32")
    assert asym == ppl("--spec", "int4:g32:affine:scale=bf16", "--spec-embed", "bf16")


def test_scheme_with_activations_is_the_equivalent_spec():
    scheme = ppl("--scheme", "W8A8-INT8")
    assert scheme == ppl("--spec", "int8:channel:scale=bf16", "--act", "int8", "--spec-embed", "bf16")


def test_keep_and_rule_come_first():
    # --keep takes the MLP before the scheme's rule can: only attention is quantized
    kept = ppl("--keep", "*.mlp.*", "--scheme", "W4A16:g32")
    assert kept == ppl("--spec-attn", "int4:g32:scale=bf16:range=full", "--spec-mlp", "bf16", "--spec-embed", "bf16")
    ruled = ppl("--rule", "re:.*\\.mlp\\..*=int8:channel:scale=bf16", "--scheme", "W4A16:g32")
    assert ruled == ppl("--spec-attn", "int4:g32:scale=bf16:range=full", "--spec-mlp", "int8:channel:scale=bf16",
                        "--spec-embed", "bf16")
    assert kept != ruled


def test_recipe_file_says_what_the_command_line_says(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"lowbit_recipe": 1, "scheme": "W4A16:g32",
                             "rules": [{"match": "*.mlp.*", "keep": True}]}))
    assert ppl("--recipe", f) == ppl("--keep", "*.mlp.*", "--scheme", "W4A16:g32")


def readme_recipe():
    text = (ROOT / "README.md").read_text()
    block = text.split("### Recipe files", 1)[1]
    return json.loads(re.search(r"```json\n(.*?)```", block, re.S).group(1))


def test_the_readme_example_recipe_runs(tmp_path):
    f = tmp_path / "example.json"
    f.write_text(json.dumps(readme_recipe()))
    calib = tmp_path / "calib.txt"  # never calibrate on the text measured: another excerpt
    calib.write_text(" ".join(["Once upon a time there was a little girl who liked to play in the park."] * 40))
    p = run("ppl", STORIES, *WINDOWS, "--recipe", f, "--calib", calib, "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["recipe"] == str(f) and out["kv"] == "fp8" and out["ppl"] > 1
    # the file's kv_cache asks for calibration
    p = run("ppl", STORIES, *WINDOWS, "--recipe", f)
    assert p.returncode == 2 and "--calib" in p.stderr


@pytest.mark.parametrize("args, words", [
    (["--keep", "lm_head.weight", "--scheme", "W4A16:g32"], ["'lm_head.weight'", "matches no weight",
                                                              "model.embed_tokens.weight"]),
    (["--rule", "*.input_layernorm.weight=int8:channel"], ["matches no weight", "never", "norms"]),
    (["--rule", "model.layers.*=int4:g32", "--rule", "*.q_proj.weight=int8:channel"],
     ["rule 2", "earlier rule"]),
    (["--scheme", "W5A16"], ["unknown scheme", "W4A16-ASYM"]),
    (["--scheme", "NVFP4:g32"], ["no group size"]),
    (["--scheme", "NVFP4"], ["--calib"]),
    (["--scheme", "W4A16", "--spec", "int8"], ["do not combine"]),
    (["--scheme", "W4A16", "--kv", "int8"], ["--kv takes fp8"]),
    (["--rule", "nothing"], ["PATTERN=SPEC"]),
    (["--rule", "re:(=keep"], ["regex"]),
    (["--recipe", "/nonexistent/r.json"], ["/nonexistent/r.json"]),
])
def test_bad_recipes_are_refused_naming_why(args, words):
    p = run("ppl", STORIES, *WINDOWS, *args)
    assert p.returncode in (1, 2) and p.stdout == "", p.stderr
    assert p.returncode == (1 if "/nonexistent/r.json" in args else 2), p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)


def test_recipe_file_errors_name_key_and_line(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text('{"lowbit_recipe": 1,\n "rules": [{"match": "*",\n   "wieghts": "int8:channel"}]}\n')
    p = run("ppl", STORIES, *WINDOWS, "--recipe", f)
    assert p.returncode == 2 and "'wieghts'" in p.stderr and "line 3" in p.stderr, p.stderr


def test_compare_refuses_recipes():
    p = run("compare", STORIES, *WINDOWS, "--spec", "int8", "--scheme", "W4A16")
    assert p.returncode == 2 and "--spec" in p.stderr


def test_kld_base_is_the_model_as_stored():
    # the base of kld never takes the recipe: KLD of a scheme is positive, of nothing 0
    p = run("kld", STORIES, *WINDOWS, "--scheme", "W4A16:g32", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["kld_mean"] > 0


def test_calib_is_a_note_where_nothing_is_static():
    p = run("ppl", STORIES, *WINDOWS, "--scheme", "W4A16:g32", "--calib", TEXT, "--json")
    assert p.returncode == 0 and "unused" in p.stderr and "no static scales" in p.stderr, p.stderr
    assert json.loads(p.stdout)["ppl"] == ppl("--scheme", "W4A16:g32")


@pytest.mark.parametrize("scheme", ["W8A8-FP8-STATIC", "NVFP4"])
def test_static_schemes_calibrate(tmp_path, scheme):
    calib = tmp_path / "calib.txt"  # never the text measured
    calib.write_text(" ".join(["Once upon a time there was a little girl who liked to play in the park."] * 40))
    static = ppl("--scheme", scheme, "--calib", calib)
    assert static > 1 and static != ppl()
    # the calibration text matters: the static scales come from it
    other = tmp_path / "other.txt"
    other.write_text(" ".join(["The big dog ran fast."] * 3))
    assert ppl("--scheme", scheme, "--calib", other) != static
