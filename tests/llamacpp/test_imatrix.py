"""lowbit's importance matrices against llama.cpp's own llama-imatrix and
llama-quantize (the pinned build; tests/llamacpp/conftest.py).

On SmolLM2 (its Q4_1 GGUF made F32 by llama-quantize, so both forward passes
compute on the same fp32 weights) and 4 windows of 512 tokens of the
WikiText-2 train excerpt:
- `lowbit imatrix` and llama-imatrix write the same entries, counts and
  imatrix.* KVs, and sums within a small relative difference: with
  llama-imatrix's KV cache fp32 and flash attention off (lowbit's forward
  pass) they differ only by float rounding order (max 1e-4 asked, ~1e-5
  seen); with llama-imatrix's defaults (fp16 KV cache) by that rounding too;
- lowbit reads llama-imatrix's GGUF and its legacy .dat to llama-quantize's
  values, and writes both back as GGUF byte-identical to llama-imatrix;
- llama-quantize --imatrix takes lowbit's file and quantizes to Q4_K_M, to
  the bytes it writes from llama-imatrix's file but for < 0.1% (0.015% seen).
Set LOWBIT_IMATRIX_REPORT=FILE to get the per-kind differences and timings
as JSON."""
import collections
import json
import os
import pathlib
import shutil
import struct
import subprocess
import time

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
LOWBIT = BUILD / "lowbit"
MODEL = ROOT / ".cache" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
CALIB = ROOT / "data" / "wikitext-2-raw" / "wiki.train.excerpt.raw"
CHUNKS, CTX, THREADS = 4, 512, 1  # one thread: llama.cpp's spinning threads crawl on a busy machine
REPORT = {}


def run(cmd, cwd, env=None):
    t0 = time.perf_counter()
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    assert p.returncode == 0, f"{cmd[0]} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p, dt


@pytest.fixture(scope="module")
def work(tmp_path_factory, llamacpp_bin):
    """A folder with the F32 model and calib.txt (both tools get the same relative
    name, so imatrix.datasets agrees)."""
    if not MODEL.exists():
        pytest.skip(f"{MODEL} missing (tests/fetch_smollm2.sh)")
    d = tmp_path_factory.mktemp("imatrix")
    shutil.copy(CALIB, d / "calib.txt")
    run([llamacpp_bin / "llama-quantize", "--allow-requantize", MODEL, d / "f32.gguf", "F32"], d)
    return d


def llama_imatrix(bin_dir, d, out, extra=()):
    return run([bin_dir / "llama-imatrix", "-m", "f32.gguf", "-f", "calib.txt", "-o", out, "--chunks", CHUNKS,
                "-c", CTX, "-t", THREADS, "--no-ppl", *extra], d)


@pytest.fixture(scope="module")
def files(work, llamacpp_bin):
    """llama-imatrix (fp32 KV cache, no flash attention; and its defaults) and lowbit on the same text."""
    _, t_ref32 = llama_imatrix(llamacpp_bin, work, "ref32.gguf", ["-ctk", "f32", "-ctv", "f32", "-fa", "off"])
    _, t_ref = llama_imatrix(llamacpp_bin, work, "ref.gguf")
    _, t_lb = run([LOWBIT, "imatrix", "f32.gguf", "--text", "calib.txt", "-o", "lowbit.gguf", "--chunks", CHUNKS,
                   "--ctx", CTX, "--threads", THREADS, "--quiet"], work)
    REPORT["seconds"] = {"llama-imatrix (f32 KV, fa off)": t_ref32, "llama-imatrix (defaults)": t_ref,
                         "lowbit imatrix": t_lb, "threads": THREADS, "chunks": CHUNKS, "ctx": CTX}
    return work


def read(path):
    r = gguf.GGUFReader(str(path))
    kv = {k: r.fields[k].contents() for k in r.fields if not k.startswith("GGUF.")}
    tensors = {t.name: np.array(t.data, dtype=np.float32).reshape(-1) for t in r.tensors}
    return kv, tensors


def rel_by_kind(a, b):
    kinds = collections.defaultdict(float)
    for name, x in a.items():
        if name.endswith(".in_sum2"):
            x, y = x.astype(np.float64), b[name].astype(np.float64)
            kind = name.split(".")[2]
            kinds[kind] = max(kinds[kind], float(np.max(np.abs(x - y) / np.maximum(x, 1e-30))))
    return dict(sorted(kinds.items()))


def write_report():
    path = os.environ.get("LOWBIT_IMATRIX_REPORT")
    if path:
        pathlib.Path(path).write_text(json.dumps(REPORT, indent=1) + "\n")


@pytest.mark.parametrize("ref, tol", [("ref32.gguf", 1e-4), ("ref.gguf", 5e-3)])
def test_same_entries_counts_and_close_sums(files, ref, tol):
    kv_a, a = read(files / ref)
    kv_b, b = read(files / "lowbit.gguf")
    assert kv_a == kv_b  # general.type, imatrix.datasets, chunk_count, chunk_size
    assert kv_b["imatrix.chunk_count"] == CHUNKS and kv_b["imatrix.chunk_size"] == CTX
    assert list(a) == list(b)  # same tensors in the same (name) order
    assert len(a) == 2 * 7 * 30  # q, k, v, o, gate, up, down of 30 blocks; no output.weight by default
    for name in a:
        if name.endswith(".counts"):
            assert np.array_equal(a[name], b[name]), name
            assert a[name][0] == CHUNKS * CTX
    kinds = rel_by_kind(a, b)
    REPORT.setdefault("max_rel_diff", {})[ref] = kinds
    write_report()
    print(f"\nmax relative difference per kind, lowbit vs llama-imatrix ({ref}):", kinds)
    assert set(kinds) == {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}
    assert max(kinds.values()) < tol, kinds


def oracle_binding():
    """tests/oracle/test_imatrix.py (same module name as this file: loaded by path)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("oracle_test_imatrix", ROOT / "tests" / "oracle" / "test_imatrix.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def quantize_values(kv_tensors):
    """llama-quantize's load_imatrix on a GGUF imatrix: sums / count in fp32."""
    out = {}
    for name, x in kv_tensors.items():
        if name.endswith(".in_sum2"):
            base = name[: -len(".in_sum2")]
            counts = kv_tensors[base + ".counts"]
            cols = x.size // counts.size
            out[base] = np.concatenate([x[m * cols:(m + 1) * cols] / np.float32(c) if c > 0 else
                                        np.ones(cols, np.float32) for m, c in enumerate(counts)])
    return out


def legacy_values(path):
    """llama-quantize's load_imatrix on a legacy .dat: stored values / ncall."""
    data, out, at = path.read_bytes(), {}, 4
    for _ in range(struct.unpack_from("<i", data, 0)[0]):
        (n,) = struct.unpack_from("<i", data, at)
        name = data[at + 4: at + 4 + n].decode()
        ncall, nval = struct.unpack_from("<ii", data, at + 4 + n)
        at += 12 + n
        vals = np.frombuffer(data, "<f4", nval, at)
        at += 4 * nval
        out[name] = vals / np.float32(ncall) if ncall > 0 else vals.copy()
    return out


def test_reads_llama_imatrix_gguf_and_dat(files, llamacpp_bin):
    Imatrix = oracle_binding().Imatrix  # the ctypes binding of the public API

    _, ref = read(files / "ref32.gguf")
    want = quantize_values(ref)
    im = Imatrix(files / "ref32.gguf")
    assert sorted(im.entries) == sorted(want)
    for name, v in want.items():
        assert np.array_equal(im.values(name), v), name
    assert np.array_equal(im.values("model.layers.3.mlp.down_proj.weight"), want["blk.3.ffn_down.weight"])

    run([llamacpp_bin / "llama-imatrix", "-m", "f32.gguf", "--in-file", "ref32.gguf", "--output-format", "dat",
         "-o", "ref32.dat"], files)
    dat = Imatrix(files / "ref32.dat")
    assert dat.info.legacy == 1 and dat.info.chunk_count == CHUNKS and dat.datasets == ["calib.txt"]
    want_dat = legacy_values(files / "ref32.dat")
    assert sorted(dat.entries) == sorted(want_dat)
    worst = 0.0
    for name, v in want_dat.items():
        assert np.array_equal(dat.values(name), v), name
        worst = max(worst, float(np.max(np.abs(v.astype(np.float64) - want[name]) / want[name])))
    assert worst < 1e-6  # the same statistic, through the legacy format's (mean x ncall) / ncall rounding


def test_writes_byte_identical_to_llama_imatrix(files, llamacpp_bin):
    run([LOWBIT, "imatrix", "--in-file", "ref32.gguf", "-o", "copy.gguf"], files)
    assert (files / "copy.gguf").read_bytes() == (files / "ref32.gguf").read_bytes()
    if not (files / "ref32.dat").exists():
        run([llamacpp_bin / "llama-imatrix", "-m", "f32.gguf", "--in-file", "ref32.gguf", "--output-format", "dat",
             "-o", "ref32.dat"], files)
    run([llamacpp_bin / "llama-imatrix", "-m", "f32.gguf", "--in-file", "ref32.dat", "-o", "dat_llama.gguf"], files)
    run([LOWBIT, "imatrix", "--in-file", "ref32.dat", "-o", "dat_lowbit.gguf"], files)
    assert (files / "dat_lowbit.gguf").read_bytes() == (files / "dat_llama.gguf").read_bytes()


def test_llama_quantize_takes_lowbit_imatrix(files, llamacpp_bin):
    p, dt = run([llamacpp_bin / "llama-quantize", "--imatrix", "lowbit.gguf", "f32.gguf", "q4km.gguf", "Q4_K_M",
                 str(THREADS)], files)
    log = p.stdout + p.stderr
    assert "loaded 210 importance matrix entries from lowbit.gguf computed on 4 chunks" in log, log[-2000:]
    missing = [line for line in log.splitlines() if "did not find weights" in line]
    assert not [line for line in missing if "blk." in line], missing  # only token_embd / output may lack one
    r = gguf.GGUFReader(str(files / "q4km.gguf"))
    types = {t.tensor_type.name for t in r.tensors}
    assert "Q4_K" in types, types
    fields = {k: r.fields[k].contents() for k in r.fields}
    assert fields.get("quantize.imatrix.entries_count") == 210
    assert fields.get("quantize.imatrix.file") == "lowbit.gguf"
    REPORT["llama_quantize_q4_k_m_seconds"] = dt
    # the same quantization from llama-imatrix's own file: nearly every byte equal (the imatrices
    # differ by rounding only; the choice of a scale can still flip in a few blocks)
    run([llamacpp_bin / "llama-quantize", "--imatrix", "ref32.gguf", "f32.gguf", "q4km_ref.gguf", "Q4_K_M",
         str(THREADS)], files)
    a = {t.name: np.asarray(t.data).view(np.uint8).reshape(-1) for t in r.tensors}
    b = {t.name: np.asarray(t.data).view(np.uint8).reshape(-1) for t in gguf.GGUFReader(str(files / "q4km_ref.gguf")).tensors}
    assert list(a) == list(b)
    differ = sum(int((a[n] != b[n]).sum()) for n in a)
    total = sum(x.size for x in a.values())
    REPORT["q4_k_m_bytes_differing_vs_llama_imatrix"] = [differ, total]
    write_report()
    assert differ < 1e-3 * total, (differ, total)


def test_process_output_with_a_tied_head(files, llamacpp_bin):
    """SmolLM2's head is token_embd: llama-imatrix --process-output records
    nothing more (its filter wants output.weight), and neither does lowbit."""
    llama_imatrix(llamacpp_bin, files, "ref_po.gguf", ["--process-output", "-ctk", "f32", "-ctv", "f32", "-fa", "off"])
    run([LOWBIT, "imatrix", "f32.gguf", "--text", "calib.txt", "-o", "lowbit_po.gguf", "--chunks", CHUNKS, "--ctx", CTX,
         "--threads", THREADS, "--quiet", "--process-output"], files)
    _, a = read(files / "ref_po.gguf")
    _, b = read(files / "lowbit_po.gguf")
    assert list(a) == list(b) and len(a) == 420
    assert max(rel_by_kind(a, b).values()) < 1e-4
