"""compare's file of the base model's distributions (issue 12 item 13): its size is said up front on stderr,
it goes where --tmpdir says, it is refused before any work when it cannot fit, and one spec needs none."""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "model"))
import model_lib as ml  # noqa: E402

TEXT = ml.ROOT / "models/tinystories-valid-excerpt.txt"
ARGS = ["--text", TEXT, "--ctx", 64, "--chunks", 4, "--json"]


def compare(*args, env=None, preexec=None):
    return subprocess.run([ml.LOWBIT, "compare", ml.STORIES, *map(str, args)], capture_output=True, text=True,
                          env=env, preexec_fn=preexec)


def test_size_is_said_first_and_the_file_goes_to_tmpdir(tmp_path):
    p = compare(*ARGS, "--spec", "int8:channel,int4:g32", "--tmpdir", tmp_path)
    assert p.returncode == 0, p.stderr
    want = 32 + 4 * (64 - 1 - 32) * (8 + 2 * 512)  # header + windows x scored x (8 + 2 vocab)
    m = re.search(r"go to (\S+): [\d.]+ MB \((\d+) bytes: 4 windows x 31 scored tokens x \(8 \+ 2 x 512\) bytes\)",
                  p.stderr)
    assert m and int(m.group(2)) == want, p.stderr
    assert m.group(1).startswith(str(tmp_path) + "/lowbit-compare-")
    assert os.listdir(tmp_path) == []  # removed at the end
    rows = json.loads(p.stdout)["specs"]
    assert len(rows) == 2 and all(r["kld_mean"] > 0 for r in rows)


def test_one_spec_keeps_no_file(tmp_path):
    p = compare(*ARGS, "--spec", "int8:channel", "--tmpdir", tmp_path / "absent")
    assert p.returncode == 0 and "distributions" not in p.stderr, p.stderr


def test_a_directory_that_cannot_take_it_is_refused_before_any_work(tmp_path):
    p = compare(*ARGS, "--spec", "int8:channel,int4:g32", "--tmpdir", tmp_path / "absent")
    assert p.returncode == 2 and "absent" in p.stdout and "not a writable directory" in p.stdout


def test_a_file_beyond_the_size_limit_is_refused_before_any_work(tmp_path):
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (10000, 10000))
    p = compare(*ARGS, "--spec", "int8:channel,int4:g32", "--tmpdir", tmp_path, preexec=limit)
    assert p.returncode == 1, p.stdout
    err = json.loads(p.stdout)["error"]["message"]
    assert "needs 128000 bytes" in err and "file size limit of 10000 bytes" in err
    assert os.listdir(tmp_path) == []
