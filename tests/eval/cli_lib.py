"""What the CLI tests of tests/eval share: running lowbit, and the embedded stories260K in bf16 (so that
the 16-bit default of the weights a recipe leaves alone changes nothing and two runs measure one model)."""
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
STORIES = ROOT / "models/stories260K.bin"


def lowbit(*args, check=True, timeout=900):
    """lowbit with args (str()-ed); asserts exit 0 unless check=False"""
    r = subprocess.run([LOWBIT, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def stories_bf16(tmp_path_factory):
    """stories260K converted to a bf16 safetensors directory (for a module-scoped fixture)"""
    out = tmp_path_factory.mktemp("bf16") / "stories-bf16"
    lowbit("convert", STORIES, out, "--dtype", "bf16")
    return out
