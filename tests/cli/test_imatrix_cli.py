"""lowbit imatrix on stories260K: the file it writes, --json, --chunks,
--in-file, and its usage errors (exit 2) and refusals."""
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
STORIES = ROOT / "models/stories260K.bin"
TEXT = ROOT / "models/tinystories-valid-excerpt.txt"


def run(*args):
    return subprocess.run([LOWBIT, "imatrix", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_help():
    p = run("--help")
    assert p.returncode == 0 and "usage: lowbit imatrix MODEL --text FILE -o OUT.gguf" in p.stdout


def test_writes_an_imatrix(tmp_path):
    out = tmp_path / "im.gguf"
    p = run(STORIES, "--text", TEXT, "-o", out, "--ctx", 64, "--chunks", 3, "--threads", 1, "--json", "--quiet")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["entries"] == 35 and r["chunks"] == 3 and r["chunk_size"] == 64 and r["output"] == str(out)
    # it reads back, and converts to byte-identical GGUF
    again = tmp_path / "again.gguf"
    p = run("--in-file", out, "-o", again)
    assert p.returncode == 0, p.stderr
    assert again.read_bytes() == out.read_bytes()
    # an existing output needs --force
    p = run(STORIES, "--text", TEXT, "-o", out, "--ctx", 64, "--chunks", 1)
    assert p.returncode == 2 and "exists" in p.stderr, p.stderr


@pytest.mark.parametrize("args, needle", [
    ([STORIES, "--text", TEXT], "need MODEL, --text FILE and -o OUT"),
    ([STORIES, "-o", "x.gguf"], "need MODEL, --text FILE and -o OUT"),
    (["--in-file", "x.dat"], "--in-file takes -o OUT"),
    ([STORIES, "--text", TEXT, "-o", "x.gguf", "--ctx", "0"], "--ctx takes a positive count"),
    ([STORIES, "--text", TEXT, "-o", "x.gguf", "--bogus"], "unknown option or missing value: '--bogus'"),
])
def test_usage_errors(tmp_path, args, needle):
    p = subprocess.run([LOWBIT, "imatrix", *map(str, args)], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2 and needle in p.stderr, p.stderr


def test_too_few_tokens(tmp_path):
    text = tmp_path / "short.txt"
    text.write_text("Once upon a time there was a cat.")
    p = run(STORIES, "--text", text, "-o", tmp_path / "im.gguf")
    assert p.returncode == 2 and "need at least 1024" in p.stderr, p.stderr
    assert not (tmp_path / "im.gguf").exists()


def test_bad_in_file(tmp_path):
    bad = tmp_path / "bad.dat"
    bad.write_bytes(b"\x01\x00\x00\x00\x32\x00\x00\x00abc" + bytes(14))  # a 50-byte name in 17 bytes
    p = run("--in-file", bad, "-o", tmp_path / "out.gguf")
    assert p.returncode == 1 and str(bad) in p.stderr and "entry" in p.stderr, p.stderr
    assert not (tmp_path / "out.gguf").exists()
