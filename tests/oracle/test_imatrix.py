"""The imatrix reader (lb_imatrix_load) on files written by the gguf package
(the GGUF imatrix llama-imatrix writes) and by hand (the legacy .dat), and
its refusals of broken files; the writer read back by the gguf package.

Values are checked against llama-quantize's rule (tools/quantize/quantize.cpp,
load_imatrix): GGUF sums / count per matrix in fp32 (count 0: 1.0), legacy
sums / ncall (ncall 0: the sums). Through the public API of liblowbit.so."""
import ctypes
import math
import os
import pathlib
import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
LB_OK, LB_ERR_ARG, LB_ERR_IO, LB_ERR_PARSE = 0, 1, 5, 6


class Entry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("cols", ctypes.c_size_t), ("n_mat", ctypes.c_size_t),
                ("sums", ctypes.POINTER(ctypes.c_float)), ("counts", ctypes.POINTER(ctypes.c_int64)),
                ("values", ctypes.POINTER(ctypes.c_float))]


class Info(ctypes.Structure):
    _fields_ = [("entries", ctypes.c_size_t), ("chunk_count", ctypes.c_uint32), ("chunk_size", ctypes.c_uint32),
                ("legacy", ctypes.c_int), ("n_datasets", ctypes.c_size_t), ("has_metadata", ctypes.c_int)]


lib = ctypes.CDLL(str(BUILD / "liblowbit.so"))
lib.lb_last_error.restype = ctypes.c_char_p
lib.lb_imatrix_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
lib.lb_imatrix_free.argtypes = [ctypes.c_void_p]
lib.lb_imatrix_count.argtypes = [ctypes.c_void_p]
lib.lb_imatrix_count.restype = ctypes.c_size_t
lib.lb_imatrix_get_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(Info)]
lib.lb_imatrix_dataset.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
lib.lb_imatrix_dataset.restype = ctypes.c_char_p
lib.lb_imatrix_entry_at.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(Entry)]
lib.lb_imatrix_find.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(Entry)]
lib.lb_imatrix_values.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_float)),
                                  ctypes.POINTER(ctypes.c_size_t)]
lib.lb_imatrix_save.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.lb_output_allow_replace.argtypes = [ctypes.c_int]


class Imatrix:
    """A loaded imatrix as plain Python data."""

    def __init__(self, path):
        h = ctypes.c_void_p()
        st = lib.lb_imatrix_load(str(path).encode(), ctypes.byref(h))
        if st != LB_OK:
            raise LoadError(st, lib.lb_last_error().decode())
        self.h = h
        info = Info()
        lib.lb_imatrix_get_info(h, ctypes.byref(info))
        self.info = info
        self.datasets = [lib.lb_imatrix_dataset(h, i).decode() for i in range(info.n_datasets)]
        self.entries = {}
        for i in range(lib.lb_imatrix_count(h)):
            e = Entry()
            assert lib.lb_imatrix_entry_at(h, i, ctypes.byref(e)) == LB_OK
            n = e.cols * e.n_mat
            self.entries[e.name.decode()] = dict(
                cols=e.cols, n_mat=e.n_mat, sums=np.ctypeslib.as_array(e.sums, (n,)).copy(),
                counts=np.ctypeslib.as_array(e.counts, (e.n_mat,)).copy(),
                values=np.ctypeslib.as_array(e.values, (n,)).copy())

    def values(self, name):
        p, n = ctypes.POINTER(ctypes.c_float)(), ctypes.c_size_t()
        found = lib.lb_imatrix_values(self.h, name.encode(), ctypes.byref(p), ctypes.byref(n))
        return np.ctypeslib.as_array(p, (n.value,)).copy() if found else None

    def save(self, path):
        st = lib.lb_imatrix_save(self.h, str(path).encode())
        assert st == LB_OK, lib.lb_last_error().decode()

    def __del__(self):
        if getattr(self, "h", None):
            lib.lb_imatrix_free(self.h)


class LoadError(Exception):
    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


def write_gguf(path, entries, datasets=("calib.txt",), chunk_count=4, chunk_size=512, sums_dtype=np.float32,
               skip=()):
    """entries: name -> (sums[n_mat, cols], counts[n_mat]) as llama-imatrix lays them out."""
    w = gguf.GGUFWriter(str(path), arch="imatrix")
    w.add_string("general.type", "imatrix")
    if "datasets" not in skip:
        w.add_array("imatrix.datasets", list(datasets))
    if "chunk_count" not in skip:
        w.add_uint32("imatrix.chunk_count", chunk_count)
    if "chunk_size" not in skip:
        w.add_uint32("imatrix.chunk_size", chunk_size)
    for name, (sums, counts) in sorted(entries.items()):
        if sums is not None:
            w.add_tensor(name + ".in_sum2", np.asarray(sums, dtype=sums_dtype))
        if counts is not None:
            w.add_tensor(name + ".counts", np.asarray(counts, dtype=np.float32).reshape(-1, 1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def legacy_bytes(entries, trailer=(4, b"calib.txt")):
    """entries: list of (name, ncall, values); trailer (chunks, dataset) or None."""
    b = struct.pack("<i", len(entries))
    for name, ncall, values in entries:
        nb = name.encode()
        b += struct.pack("<i", len(nb)) + nb + struct.pack("<ii", ncall, len(values))
        b += np.asarray(values, dtype="<f4").tobytes()
    if trailer is not None:
        b += struct.pack("<ii", trailer[0], len(trailer[1])) + trailer[1]
    return b


RNG = np.random.default_rng(14)


def sample_entries():
    return {
        "blk.0.attn_q.weight": (RNG.random((1, 64), dtype=np.float32) * 100, [2048]),
        "blk.0.ffn_down.weight": (RNG.random((1, 96), dtype=np.float32) * 1e4, [2048]),
        "blk.1.ffn_up_exps.weight": (RNG.random((3, 32), dtype=np.float32), [7, 0, 1999]),  # an expert no token reached
    }


def test_gguf_from_gguf_package(tmp_path):
    ents = sample_entries()
    path = tmp_path / "im.gguf"
    write_gguf(path, ents, datasets=("a.txt", "b.txt"), chunk_count=5, chunk_size=256)
    im = Imatrix(path)
    assert im.info.legacy == 0 and im.info.chunk_count == 5 and im.info.chunk_size == 256
    assert im.datasets == ["a.txt", "b.txt"]
    assert list(im.entries) == sorted(ents)
    for name, (sums, counts) in ents.items():
        e = im.entries[name]
        sums = np.asarray(sums, np.float32)
        assert (e["cols"], e["n_mat"]) == (sums.shape[1], sums.shape[0])
        assert np.array_equal(e["sums"], sums.reshape(-1))
        assert list(e["counts"]) == counts
        want = np.stack([sums[m] / np.float32(c) if c > 0 else np.ones_like(sums[m]) for m, c in enumerate(counts)])
        assert np.array_equal(e["values"], want.reshape(-1).astype(np.float32)), name
        assert np.array_equal(im.values(name), e["values"])


def test_lookup_by_either_name(tmp_path):
    path = tmp_path / "im.gguf"
    write_gguf(path, sample_entries())
    im = Imatrix(path)
    a = im.values("blk.0.attn_q.weight")
    assert a is not None and a.size == 64
    assert np.array_equal(im.values("model.layers.0.self_attn.q_proj.weight"), a)
    assert np.array_equal(im.values("model.layers.0.mlp.down_proj.weight"), im.values("blk.0.ffn_down.weight"))
    assert im.values("model.layers.1.self_attn.q_proj.weight") is None
    assert im.values("token_embd.weight") is None


def test_legacy_by_hand(tmp_path):
    vals = [RNG.random(16, dtype=np.float32) * 50 for _ in range(3)]
    path = tmp_path / "im.dat"
    path.write_bytes(legacy_bytes([("blk.0.attn_k.weight", 4, vals[0]), ("blk.0.attn_q.weight", 0, vals[1]),
                                   ("output.weight", 3, vals[2])]))
    im = Imatrix(path)
    assert im.info.legacy == 1 and im.info.chunk_count == 4 and im.info.chunk_size == 0
    assert im.datasets == ["calib.txt"]
    assert np.array_equal(im.values("blk.0.attn_k.weight"), vals[0] / np.float32(4))
    assert np.array_equal(im.values("blk.0.attn_q.weight"), vals[1])  # ncall 0: the values as stored
    assert np.array_equal(im.values("lm_head.weight"), vals[2] / np.float32(3))
    assert list(im.entries["output.weight"]["counts"]) == [3]


@pytest.mark.parametrize("trailer", [None, (2, b"")])
def test_legacy_trailer_optional(tmp_path, trailer):
    path = tmp_path / "im.dat"
    path.write_bytes(legacy_bytes([("blk.0.attn_k.weight", 1, [1.0, 2.0])], trailer=trailer))
    im = Imatrix(path)
    assert im.datasets == [] and im.info.chunk_count == (trailer[0] if trailer else 0)


def test_save_reads_back_in_gguf_package(tmp_path):
    ents = sample_entries()
    src, out = tmp_path / "src.gguf", tmp_path / "out.gguf"
    write_gguf(src, ents, datasets=("t.txt",), chunk_count=3, chunk_size=128)
    Imatrix(src).save(out)
    r = gguf.GGUFReader(str(out))
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    assert keys == ["general.type", "imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"]
    assert int(r.fields["imatrix.chunk_count"].parts[-1][0]) == 3
    assert int(r.fields["imatrix.chunk_size"].parts[-1][0]) == 128
    names = [t.name for t in r.tensors]
    assert names == [n + s for n in sorted(ents) for s in (".in_sum2", ".counts")]
    for t in r.tensors:
        base, kind = t.name.rsplit(".", 1)
        sums, counts = ents[base]
        want = np.asarray(sums, np.float32) if kind == "in_sum2" else np.asarray(counts, np.float32).reshape(-1, 1)
        assert t.tensor_type == gguf.GGMLQuantizationType.F32
        assert np.array_equal(np.asarray(t.data).reshape(want.shape), want), t.name
        # ggml's dimension count: a dense weight's tensors are 1-D, an expert stack's 2-D
        assert len(t.shape) == (2 if want.shape[0] > 1 else 1)
    # and the copy reads back to the same entries, byte-identical when written again
    again = tmp_path / "again.gguf"
    Imatrix(out).save(again)
    assert again.read_bytes() == out.read_bytes()


def test_legacy_saved_as_llama_imatrix_converts_it(tmp_path):
    vals = RNG.random(8, dtype=np.float32)
    path, out = tmp_path / "im.dat", tmp_path / "out.gguf"
    path.write_bytes(legacy_bytes([("blk.0.attn_k.weight", 3, vals), ("blk.0.attn_v.weight", 5, vals)]))
    Imatrix(path).save(out)
    im = Imatrix(out)
    assert im.info.chunk_size == 512 and im.info.chunk_count == 5  # the largest ncall
    e = im.entries["blk.0.attn_k.weight"]
    assert np.array_equal(e["sums"], vals * np.float32(512)) and list(e["counts"]) == [3 * 512]


# ---- refusals: each a clean LB_ERR_PARSE naming the file (and the entry) ----

def refused(path, *words):
    with pytest.raises(LoadError) as ei:
        Imatrix(path)
    assert ei.value.status == LB_ERR_PARSE, ei.value
    assert str(path) in ei.value.message, ei.value.message
    for w in words:
        assert w in ei.value.message, ei.value.message
    return ei.value.message


def test_truncated_files_refused(tmp_path):
    good_gguf, good_dat = tmp_path / "g.gguf", tmp_path / "g.dat"
    write_gguf(good_gguf, sample_entries())
    dat_entries = [("blk.0.attn_k.weight", 4, [1.0, 2.0, 3.0]), ("blk.0.attn_q.weight", 4, [4.0])]
    good_dat.write_bytes(legacy_bytes(dat_entries))
    no_trailer = len(legacy_bytes(dat_entries, trailer=None))  # a whole file: the trailer is optional
    for good in (good_gguf, good_dat):
        data = good.read_bytes()
        Imatrix(good)
        cut = tmp_path / ("cut" + good.suffix)
        # every prefix of the legacy file; the GGUF file's header and tensor region at a stride
        lengths = range(len(data)) if good.suffix == ".dat" else list(range(0, 600, 7)) + [len(data) - 1]
        for n in lengths:
            if good.suffix == ".gguf" and n >= len(data) - 1 - 31:
                continue  # only the trailing padding cut
            if good.suffix == ".dat" and n == no_trailer:
                continue
            cut.write_bytes(data[:n])
            with pytest.raises(LoadError) as ei:
                Imatrix(cut)
            assert ei.value.status == LB_ERR_PARSE and str(cut) in ei.value.message, (n, ei.value.message)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_bad_sum_refused(tmp_path, bad):
    ents = sample_entries()
    sums = ents["blk.0.attn_q.weight"][0].copy()
    sums[0, 5] = bad
    ents["blk.0.attn_q.weight"] = (sums, [2048])
    path = tmp_path / "im.gguf"
    write_gguf(path, ents)
    refused(path, "blk.0.attn_q.weight", "sum 5")
    dat = tmp_path / "im.dat"
    dat.write_bytes(legacy_bytes([("blk.0.attn_k.weight", 4, [1.0, bad])]))
    refused(dat, "blk.0.attn_k.weight", "value 1")


@pytest.mark.parametrize("count", [math.nan, -3.0, 2.5, math.inf])
def test_bad_count_refused(tmp_path, count):
    ents = sample_entries()
    ents["blk.1.ffn_up_exps.weight"] = (ents["blk.1.ffn_up_exps.weight"][0], [7, count, 1])
    path = tmp_path / "im.gguf"
    write_gguf(path, ents)
    refused(path, "blk.1.ffn_up_exps.weight", "count 1")


def test_structure_refused(tmp_path):
    ents = sample_entries()
    p = tmp_path / "a.gguf"
    write_gguf(p, dict(ents, **{"blk.2.x.weight": (None, [1])}))
    refused(p, "blk.2.x.weight", "no blk.2.x.weight.in_sum2")
    write_gguf(p, dict(ents, **{"blk.2.x.weight": (np.ones((1, 4)), None)}))
    refused(p, "blk.2.x.weight", "no blk.2.x.weight.counts")
    write_gguf(p, {"blk.0.a.weight": (np.ones((1, 10)), [1, 2, 3])})  # 10 sums, 3 matrices
    refused(p, "blk.0.a.weight", "10 sums")
    write_gguf(p, {"blk.0.a.weight": (np.ones((1, 4)), [1])}, sums_dtype=np.float16)
    refused(p, "blk.0.a.weight", "F32")
    w = gguf.GGUFWriter(str(p), arch="imatrix")
    w.add_uint32("imatrix.chunk_count", 1)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    refused(p, "without tensors")
    w = gguf.GGUFWriter(str(p), arch="imatrix")
    w.add_int32("imatrix.chunk_size", 512)  # llama.cpp reads it as u32 only
    w.add_tensor("blk.0.a.weight.in_sum2", np.ones(4, np.float32))
    w.add_tensor("blk.0.a.weight.counts", np.ones(1, np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    refused(p, "imatrix.chunk_size", "u32")


def test_legacy_structure_refused(tmp_path):
    p = tmp_path / "a.dat"
    cases = [
        (struct.pack("<i", 0), "0 entries"),
        (struct.pack("<i", -5), "-5 entries"),
        (struct.pack("<i", 1000) + bytes(40), "1000 entries"),
        (legacy_bytes([("blk.0.a.weight", 1, [1.0]), ("blk.0.a.weight", 1, [2.0])]), "appears twice"),
        (legacy_bytes([("blk.0.a.weight", -1, [1.0])]), "ncall -1"),
        (legacy_bytes([("blk.0.a.weight", 1, [1.0])], trailer=None) + b"xyz", "cut short"),
        (legacy_bytes([("blk.0.a.weight", 1, [1.0])], trailer=(1, b"abc")) + b"zz", "2 bytes after"),
        (legacy_bytes([("blk.0\0a.weight", 1, [1.0])]), "NUL"),
        (legacy_bytes([("b" * 56, 1, [1.0])]), "name length 56"),
        (legacy_bytes([("blk.0.a.weight", 1, [])]), "0 values"),
    ]
    for data, words in cases:
        p.write_bytes(data)
        refused(p, words)


def test_missing_file_is_io_error(tmp_path):
    with pytest.raises(LoadError) as ei:
        Imatrix(tmp_path / "none.gguf")
    assert ei.value.status == LB_ERR_IO
