"""Fuzzing the files the CLI itself reads (issue 18's new formats): GGUF recipes (quantize --recipe), sweep
files (quantize --sweep) and the results lowbit report draws. A deterministic structure-aware mutation loop
(keys dropped, values swapped for other types, huge and negative numbers, deep nesting, truncated and
flipped bytes) from valid seeds: every run must either succeed or be refused with exit code 2 and a message
naming the file -- never crash (a signal, a sanitizer's report), never leave a half-written output."""
import copy
import json
import os
import pathlib
import random
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
M = ROOT / "models/stories260K.bin"
C = ROOT / "data/tinystories/calib-excerpt.txt"
T = ROOT / "models/tinystories-valid-excerpt.txt"
CASES = int(os.environ.get("LOWBIT_FUZZ_CASES", "120"))
ODD = [None, True, -1, 0, 1e308, -1e308, 2**64, "", "x" * 300, [], {}, [[[[]]]], {"a": {"b": []}}, "q4_0", 0.5]


def lowbit(*args):
    return subprocess.run([LOWBIT, *map(str, args)], capture_output=True, text=True, timeout=300)


def mutate(value, rng):
    """one random structural change somewhere in value (a JSON tree), returned as a new tree"""
    v = copy.deepcopy(value)
    paths = []

    def walk(x, path):
        paths.append(path)
        if isinstance(x, dict):
            for k in x:
                walk(x[k], path + [k])
        elif isinstance(x, list):
            for i, e in enumerate(x[:8]):
                walk(e, path + [i])
    walk(v, [])
    path = rng.choice(paths)
    if not path:
        return rng.choice(ODD)
    parent = v
    for p in path[:-1]:
        parent = parent[p]
    key, op = path[-1], rng.random()
    if op < 0.25 and isinstance(parent, dict):
        del parent[key]
    elif op < 0.35 and isinstance(parent, list):
        parent.pop(key)
    elif op < 0.45 and isinstance(parent, dict):
        parent["unknown_" + str(rng.randint(0, 9))] = rng.choice(ODD)
    else:
        parent[key] = rng.choice(ODD)
    return v


def hostile_bytes(seed_text, rng):
    """the seed's text mutated as bytes: truncated, a byte flipped, or a chunk duplicated"""
    b = bytearray(seed_text.encode())
    op = rng.random()
    if op < 0.4:
        return bytes(b[:rng.randint(0, len(b))])
    if op < 0.8:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
        return bytes(b)
    i = rng.randrange(len(b))
    return bytes(b[:i] + b[i:i + 64] * rng.randint(2, 50) + b[i:])


def cases(seed, n, rng):
    text = json.dumps(seed)
    for k in range(n):
        if k % 3 == 2:
            yield hostile_bytes(text, rng)
        else:
            tree = seed
            for _ in range(rng.randint(1, 3)):
                tree = mutate(tree, rng)
            yield json.dumps(tree).encode()


def check(r, path, out=None):
    assert r.returncode in (0, 2), (r.returncode, r.stderr[-1500:], path.read_bytes()[:400])
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr[-1500:]
    if r.returncode == 2:
        assert r.stderr.strip(), "a refusal says why"
        if out is not None:
            assert not pathlib.Path(out).exists() and not list(pathlib.Path(out).parent.glob("*lowbit-tmp*"))


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    d = tmp_path_factory.mktemp("seeds")
    r = lowbit("quantize", M, "-o", d / "mix.gguf", "--target-bpw", 7.5, "--calib", C, "--calib-tokens", 512,
               "--sweep", d / "sweep.json", "--json", "--quiet")
    assert r.returncode == 0, r.stderr
    (d / "quantize.json").write_text(r.stdout)
    s = lowbit("sensitivity", M, "--text", T, "--ctx", 128, "--chunks", 1, "--scheme", "W4A16:g32", "--unit", "all",
               "--json", "--quiet")
    assert s.returncode == 0, s.stderr
    (d / "sensitivity.json").write_text(s.stdout)
    return d


def test_gguf_recipes(seeds, tmp_path):
    rng = random.Random(1)
    seed = json.loads((seeds / "mix.gguf.recipe.json").read_text())
    for k, data in enumerate(cases(seed, CASES, rng)):
        path, out = tmp_path / f"r{k}.json", tmp_path / f"o{k}.gguf"
        path.write_bytes(data)
        r = lowbit("quantize", M, "-o", out, "--recipe", path, "--quiet")
        check(r, path, out)
        if r.returncode == 2:
            assert str(path) in r.stderr or "rule" in r.stderr or "--recipe" in r.stderr or "lowbit_recipe" in r.stderr, \
                r.stderr
        out.unlink(missing_ok=True)


def test_sweep_files(seeds, tmp_path):
    rng = random.Random(2)
    seed = json.loads((seeds / "sweep.json").read_text())
    for k, data in enumerate(cases(seed, CASES // 2, rng)):
        path, out = tmp_path / f"s{k}.json", tmp_path / f"o{k}.gguf"
        path.write_bytes(data)
        r = lowbit("quantize", M, "-o", out, "--target-bpw", 7.5, "--calib", C, "--calib-tokens", 512, "--sweep", path,
                   "--quiet")
        check(r, path, out)
        if r.returncode == 0:
            assert path.read_bytes() == data  # a sweep file is read, never rewritten
        out.unlink(missing_ok=True)
        pathlib.Path(str(out) + ".recipe.json").unlink(missing_ok=True)


@pytest.mark.parametrize("name", ["quantize.json", "sensitivity.json"])
def test_report_inputs(seeds, tmp_path, name):
    rng = random.Random(3)
    seed = json.loads((seeds / name).read_text())
    for k, data in enumerate(cases(seed, CASES, rng)):
        path, out = tmp_path / f"i{k}.json", tmp_path / f"r{k}.html"
        path.write_bytes(data)
        r = lowbit("report", path, "-o", out)
        check(r, path, out)
        out.unlink(missing_ok=True)
