"""A safetensors header of many tiny tensors costs a small record per tensor
(issue 12, item 12): 1 M tensors used to cost 954 MB to inspect (a JSON tree
of the whole header, a second tensor table, the header's pages), now at most
200 bytes per tensor besides its name."""
import json
import os
import struct
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
import model_lib as ml  # noqa: E402

N = 200_000


def write_tiny_tensors(path, n):
    """n F16 tensors of shape [1] (2 bytes each), header built by hand."""
    names = ["model.layers.%d.t%d.weight" % (i % 97, i) for i in range(n)]
    parts = ['"%s":{"dtype":"F16","shape":[1],"data_offsets":[%d,%d]}' % (nm, 2 * i, 2 * i + 2)
             for i, nm in enumerate(names)]
    head = ('{"__metadata__":{"format":"pt"},' + ",".join(parts) + "}").encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        f.write(b"\x00\x3c" * n)  # 1.0
    return names


def peak_rss(*args):
    """Peak resident bytes of `lowbit ARGS`, measured in a fresh process (so
    no earlier child of this one counts), and its stdout."""
    probe = ("import resource, subprocess, sys\n"
             "p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)\n"
             "sys.stderr.write('%d %d\\n' % (p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
             "sys.stdout.buffer.write(p.stdout)\n")
    p = subprocess.run([sys.executable, "-c", probe, ml.LOWBIT, *map(str, args)], capture_output=True, check=True)
    rc, kb = map(int, p.stderr.decode().split()[-2:])
    assert rc == 0, p.stderr.decode()
    return kb * 1024, p.stdout


@pytest.mark.skipif(os.environ.get("LOWBIT_SANITIZED") == "1",
                    reason="AddressSanitizer's shadow memory and quarantine make resident memory meaningless")
def test_inspecting_many_tiny_tensors_costs_little_per_tensor(tmp_path):
    big, small = tmp_path / "many.safetensors", tmp_path / "one.safetensors"
    names = write_tiny_tensors(big, N)
    write_tiny_tensors(small, 1)
    base, _ = peak_rss("inspect", small, "--json")
    peak, out = peak_rss("inspect", big, "--json")
    info = json.loads(out)
    assert len(info["tensors"]) == N and info["parameters"] == N and info["bytes"] == 2 * N
    assert {t["name"] for t in info["tensors"][:5]} <= set(names) and info["tensors"][7]["absmax"] == 1.0
    allowed = 200 * N + sum(len(nm) + 1 for nm in names)
    per = (peak - base - sum(len(nm) + 1 for nm in names)) / N
    assert peak - base <= allowed, "%.0f bytes per tensor besides its name (at most 200)" % per
    print("%.0f bytes per tensor besides its name" % per)
