"""Progress when stderr is not a terminal (issue 12, item 15): whole lines on
stderr, the first and last step and at most one every ~2 s between, with
elapsed time and an ETA; ppl shows its running perplexity; convert, inspect,
error and model loading show theirs; stdout holds only the table or the
JSON; --quiet and LOWBIT_QUIET=1 turn progress off."""
import json
import math
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
STORIES = ROOT / "models/stories260K.bin"
TEXT = ROOT / "models/tinystories-valid-excerpt.txt"
LINE = re.compile(r"^lowbit (\w+): ([a-z ]+) (\d+)/(\d+), (\S+ \S+|\S+) elapsed, ETA (\S+ \S+|\S+)(; (.*))?$")


def run(*args, env=None):
    e = dict(os.environ)
    e.pop("LOWBIT_QUIET", None)
    e.update(env or {})
    # stderr is a pipe here, never a terminal
    return subprocess.run([LOWBIT, *map(str, args)], capture_output=True, text=True, env=e, timeout=300)


def progress(stderr, what):
    rows = [LINE.match(l) for l in stderr.splitlines()]
    return [(int(m.group(3)), int(m.group(4)), m.group(8)) for m in rows if m and m.group(2) == what]


def test_ppl_shows_windows_with_running_perplexity_and_keeps_stdout_clean():
    p = run("ppl", STORIES, "--text", TEXT, "--ctx", 64, "--chunks", 40)
    assert p.returncode == 0, p.stderr
    assert "lowbit" not in p.stdout and "ETA" not in p.stdout  # stdout: the result only
    windows = progress(p.stderr, "window")
    assert windows[0][:2] == (1, 40) and windows[-1][:2] == (40, 40)
    seconds = float(re.search(r"\(([\d.]+) s,", p.stdout).group(1))
    assert 2 <= len(windows) <= 3 + seconds / 2  # first, last, and at most one every 2 s
    # llama.cpp's running perplexity: the last one is the result
    last = re.fullmatch(r"ppl ([\d.]+) \+- ([\d.]+)", windows[-1][2])
    ppl, err = map(float, re.search(r"PPL = ([\d.]+) \+/- ([\d.]+)", p.stdout).groups())
    assert float(last.group(1)) == pytest.approx(ppl, abs=1e-4) and float(last.group(2)) == pytest.approx(err, abs=1e-4)
    first = float(re.fullmatch(r"ppl ([\d.]+) .*", windows[0][2]).group(1))
    assert math.isfinite(first) and first > 1
    layers = progress(p.stderr, "loading layer")
    assert layers[0][:2] == (1, 5) and layers[-1][:2] == (5, 5)
    for line in p.stderr.splitlines():
        assert LINE.match(line), line  # nothing else on stderr here


def test_json_keeps_progress_on_stderr_and_stdout_pure_json():
    p = run("ppl", STORIES, "--text", TEXT, "--ctx", 64, "--chunks", 3, "--json")
    assert p.returncode == 0
    assert json.loads(p.stdout)["chunks"] == 3
    assert progress(p.stderr, "window")[-1][:2] == (3, 3)


@pytest.mark.parametrize("how", ["--quiet", "LOWBIT_QUIET"])
def test_quiet_turns_progress_off(how):
    args = ["ppl", STORIES, "--text", TEXT, "--ctx", 64, "--chunks", 3]
    p = run(*args, "--quiet") if how == "--quiet" else run(*args, env={"LOWBIT_QUIET": "1"})
    assert p.returncode == 0 and p.stderr == "" and "PPL = " in p.stdout
    p = run(*args, env={"LOWBIT_QUIET": "0"})  # 0 is not quiet
    assert progress(p.stderr, "window")


@pytest.mark.parametrize("cmd, args, what, total", [
    ("convert", ["{tmp}/m.gguf"], "tensor", 47),
    ("inspect", [], "tensor", 47),
    ("error", ["--spec", "int8"], "tensor", None),
    ("kld", ["--text", TEXT, "--ctx", 64, "--chunks", 2, "--spec", "int8"], "window", 2),
    ("generate", ["-p", "Once", "-n", 3], "loading layer", 5),
])
def test_other_commands_show_progress(tmp_path, cmd, args, what, total):
    p = run(cmd, STORIES, *[str(a).format(tmp=tmp_path) for a in args])
    assert p.returncode == 0, p.stderr
    steps = progress(p.stderr, what)
    assert steps and steps[-1][0] == steps[-1][1] and (total is None or steps[-1][1] == total), p.stderr
    assert "ETA" not in p.stdout
    if cmd == "generate":
        assert p.stdout.startswith("Once") and "lowbit" not in p.stdout


def test_a_terminal_gets_one_bar_redrawn_in_place_and_cleared():
    import pty
    master, slave = pty.openpty()
    e = dict(os.environ)
    e.pop("LOWBIT_QUIET", None)
    p = subprocess.Popen([LOWBIT, "ppl", str(STORIES), "--text", str(TEXT), "--ctx", "64", "--chunks", "5"],
                         stdout=subprocess.PIPE, stderr=slave, env=e)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        err += chunk
    out = p.stdout.read().decode()
    assert p.wait() == 0
    os.close(master)
    assert "PPL = " in out and "\r" not in out and "ETA" not in out
    assert b"\n" not in err  # no lines on a terminal: one bar, redrawn
    assert b"\rppl [" in err and b"5/5 window" in err and b"ETA" in err and b"ppl " in err
    assert err.endswith(b"\r\x1b[K")  # and cleared at the end


def test_an_error_midway_clears_the_bar_first(tmp_path):
    import json as js
    import pty
    import struct
    nan = struct.pack("<4f", 1, float("nan"), 2, 3)
    hdr = js.dumps({"a.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                    "b.weight": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}}).encode()
    m = tmp_path / "m.safetensors"
    m.write_bytes(struct.pack("<Q", len(hdr)) + hdr + struct.pack("<4f", 1, 2, 3, 4) + nan)
    master, slave = pty.openpty()
    e = dict(os.environ)
    e.pop("LOWBIT_QUIET", None)
    p = subprocess.Popen([LOWBIT, "inspect", str(m)], stdout=subprocess.PIPE, stderr=slave, env=e)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        err += chunk
    assert p.wait() == 1 and p.stdout.read() == b""
    os.close(master)
    assert b"\rinspect [" in err  # the bar stood at the second tensor
    assert b"\r\x1b[Klowbit inspect: " in err and b"b.weight" in err  # cleared, then the message on its own line
