"""One CLI (issue 12, item 14): every option a command's parser accepts is in
its usage lines; --threads follows one rule everywhere (0 = one per CPU,
1..LB_MAX_THREADS as given); bad values say which range is accepted; an
evaluation command given several specs points to compare; convert refuses
an output name whose kind it cannot tell."""
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
STORIES = ROOT / "models/stories260K.bin"
TEXT = ROOT / "models/tinystories-valid-excerpt.txt"
COMMANDS = ["formats", "cast", "grid", "quant", "inspect", "error", "convert", "plan", "ppl", "kld", "generate",
            "compare", "bench", "imatrix"]
MAX_THREADS = int(re.search(r"#define LB_MAX_THREADS (\d+)", (ROOT / "include/lowbit.h").read_text()).group(1))


def run(*args, timeout=60):
    return subprocess.run([LOWBIT, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def usage_lines(cmd):
    """The synopsis: the help text up to its first blank line."""
    return run(cmd, "--help").stdout.split("\n\n")[0]


def options_in(text):
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-z])\b", text))


def candidate_options():
    """Every option any command's usage shows, and every option-like string
    literal in the CLI's sources (an option a parser knows but no usage shows)."""
    found = set()
    for cmd in COMMANDS:
        found |= options_in(usage_lines(cmd))
    for src in (ROOT / "cli").glob("*.c"):
        found |= set(re.findall(r'"(--[a-z][a-z0-9-]*|-[a-z])"', src.read_text()))
    return sorted(found - {"--help", "-h", "--version"})


def unknown(p, opt):
    return re.search(r"(unknown option|unexpected argument)[^\n']*'%s'" % re.escape(opt), p.stderr) is not None


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_option_a_command_accepts_is_in_its_usage(cmd):
    shown = options_in(usage_lines(cmd))
    missing = []
    for opt in candidate_options():
        # a value that no option takes quietly ('@' is no number, format,
        # file or spec), then an option no command knows so that nothing
        # runs: an unknown option is the first error, and names itself
        p = run(cmd, opt, "@", "--zz-end")
        if not unknown(p, opt) and opt not in shown:
            missing.append(opt)
    assert not missing, "%s accepts %s but its usage does not show them" % (cmd, missing)


THREAD_COMMANDS = {
    "quant": ["quant", "--spec", "int8"],
    "error": ["error", STORIES, "--spec", "int8"],
    "ppl": ["ppl", STORIES, "--text", TEXT],
    "kld": ["kld", STORIES, "--text", TEXT, "--spec", "int8"],
    "generate": ["generate", STORIES, "-p", "x"],
    "compare": ["compare", STORIES, "--text", TEXT, "--spec", "int8"],
    "bench": ["bench"],
    "imatrix": ["imatrix", STORIES, "--text", TEXT, "-o", "/nonexistent/im.gguf"],
}


@pytest.mark.parametrize("cmd", THREAD_COMMANDS)
@pytest.mark.parametrize("value", ["-1", str(MAX_THREADS + 1), "x", "1.5", ""])
def test_threads_one_rule_for_every_command(cmd, value):
    p = run(*THREAD_COMMANDS[cmd], "--threads", value)
    assert p.returncode == 2, p.stderr
    assert "--threads takes 0..%d (0: one per CPU), not '%s'" % (MAX_THREADS, value) in p.stderr, p.stderr


@pytest.mark.parametrize("cmd", ["error", "ppl", "generate"])
def test_threads_zero_and_the_cap_are_accepted(cmd):
    extra = {"ppl": ["--ctx", 64, "--chunks", 1], "generate": ["-n", 2], "error": []}[cmd]
    for value in ("0", str(MAX_THREADS)):
        p = run(*THREAD_COMMANDS[cmd], *extra, "--threads", value)
        assert p.returncode == 0, (value, p.stderr)


@pytest.mark.parametrize("args, needle", [
    (["-n", "0"], "-n takes a token count 1..1048576, not '0'"),
    (["-n", "x"], "-n takes a token count 1..1048576, not 'x'"),
    (["--temp", "-1"], "--temp takes 0 (greedy) or a positive temperature below 1e6, not '-1'"),
    (["--temp", "nan"], "--temp takes 0 (greedy) or a positive temperature below 1e6, not 'nan'"),
    (["--seed", "-3"], "--seed takes a whole number 0..18446744073709551615, not '-3'"),
    (["--seed", "99999999999999999999"], "--seed takes a whole number 0..18446744073709551615, not '99999999999999999999'"),
])
def test_generate_says_which_values_it_takes(args, needle):
    p = run("generate", STORIES, "-p", "x", *args)
    assert p.returncode == 2 and needle in p.stderr, p.stderr


@pytest.mark.parametrize("cmd", ["ppl", "kld", "generate"])
@pytest.mark.parametrize("opt", ["--spec", "--spec-attn", "--spec-embed"])
def test_one_spec_only_outside_compare(cmd, opt):
    args = {"generate": ["-p", "x"]}.get(cmd, ["--text", TEXT])
    p = run(cmd, STORIES, *args, opt, "int8:channel,int4:g32")
    assert p.returncode == 2
    assert "%s takes one spec ('int8:channel,int4:g32' is several); use compare for several" % opt in p.stderr, p.stderr


def test_compare_spec_for_a_class_is_one_spec():
    p = run("compare", STORIES, "--text", TEXT, "--spec", "int8", "--spec-head", "int8,int4")
    assert p.returncode == 2
    assert "--spec-head takes one spec ('int8,int4' is several): the rows come from --spec" in p.stderr, p.stderr


@pytest.mark.parametrize("out", ["out.txt", "model.GGUF.bak", "x.bin"])
def test_convert_refuses_an_output_of_unknown_kind(tmp_path, out):
    p = run("convert", STORIES, tmp_path / out)
    assert p.returncode == 2, p.stderr
    assert "cannot tell what to write to '%s'" % (tmp_path / out) in p.stderr
    assert ".gguf (GGUF), .safetensors (one safetensors file) or be a directory name" in p.stderr
    assert not (tmp_path / out).exists()  # nothing made


@pytest.mark.parametrize("out, made", [("m.gguf", "file"), ("m.safetensors", "file"), ("hf", "dir"),
                                       ("hf.v1/", "dir")])
def test_convert_accepts_the_kinds_it_knows(tmp_path, out, made):
    p = run("convert", STORIES, "%s/%s" % (tmp_path, out))
    assert p.returncode == 0, p.stderr
    target = tmp_path / out
    assert target.is_file() if made == "file" else (target / "config.json").is_file()
