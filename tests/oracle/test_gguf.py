"""GGUF reader and writer against the gguf package (the reference reader).

- The SmolLM2 model file: every KV (key, type, value; arrays element by
  element) and every tensor (name, type, shape, offset, bytes) equal
  gguf.GGUFReader's; a lowbit rewrite of it reads back equal too.
- Files lowbit writes (every KV type, F32/F16/Q8_0/Q4_0 tensors, alignment
  32 and 64) load in gguf.GGUFReader with equal keys, values and tensors;
  write -> parse -> write is byte-identical; a failing fill leaves no file.
- Files the gguf package's GGUFWriter writes read in lowbit.
- The malformed corpus (tests/corpus/gguf) is refused with its message.

The internal lb__gguf_* functions come from build/tests/liblowbit_internal.so
(tests/internal_lib.py: liblowbit.so exports only the public API); the
bindings below are this file's own."""
import ctypes
import hashlib
import importlib.util
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import GGUFValueType as VT  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
MODEL = ROOT / ".cache" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
CORPUS = ROOT / "tests" / "corpus" / "gguf"

LB_OK, LB_ERR_ARG, LB_ERR_IO, LB_ERR_PARSE = 0, 1, 5, 6
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
NP_TYPES = {U8: np.uint8, I8: np.int8, U16: np.uint16, I16: np.int16, U32: np.uint32, I32: np.int32,
            F32: np.float32, BOOL: np.uint8, U64: np.uint64, I64: np.int64, F64: np.float64}
# lb_dtype ids of the tensor types these tests write (include/lowbit.h order).
DT_F32, DT_F16, DT_Q4_0, DT_Q8_0 = 0, 1, 12, 16


class Mapped(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class Scalar(ctypes.Union):
    _fields_ = [("u", ctypes.c_uint64), ("i", ctypes.c_int64), ("f", ctypes.c_double)]


class KV(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("type", ctypes.c_int), ("arr_type", ctypes.c_int),
                ("n", ctypes.c_uint64), ("v", Scalar), ("str", ctypes.c_void_p), ("str_len", ctypes.c_uint64),
                ("arr", ctypes.c_void_p), ("priv", ctypes.c_void_p), ("raw", ctypes.c_void_p),
                ("file_offset", ctypes.c_uint64)]


class Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("ggml_type", ctypes.c_int), ("dtype", ctypes.c_int),
                ("n_dims", ctypes.c_int), ("ne", ctypes.c_uint64 * 4), ("n_elements", ctypes.c_uint64),
                ("n_bytes", ctypes.c_uint64), ("offset", ctypes.c_uint64), ("data", ctypes.c_void_p)]


class File(ctypes.Structure):
    _fields_ = [("map", Mapped), ("version", ctypes.c_uint32), ("alignment", ctypes.c_uint64),
                ("n_kv", ctypes.c_size_t), ("kv", ctypes.POINTER(KV)), ("n_tensors", ctypes.c_size_t),
                ("tensors", ctypes.POINTER(Tensor)), ("data", ctypes.c_void_p), ("data_size", ctypes.c_uint64),
                ("data_offset", ctypes.c_uint64), ("priv", ctypes.c_void_p)]


FILL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_uint64)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import internal_lib  # noqa: E402

lib = internal_lib.load()
lib.lb_last_error.restype = ctypes.c_char_p
lib.lb__gguf_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(File)]
lib.lb__gguf_parse.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.POINTER(File)]
lib.lb__gguf_close.argtypes = [ctypes.POINTER(File)]
lib.lb__gguf_close.restype = None
lib.lb__gguf_find.argtypes = [ctypes.POINTER(File), ctypes.c_char_p]
lib.lb__gguf_find.restype = ctypes.POINTER(KV)
lib.lb__gguf_find_tensor.argtypes = [ctypes.POINTER(File), ctypes.c_char_p]
lib.lb__gguf_find_tensor.restype = ctypes.POINTER(Tensor)
lib.lb__gguf_arr_str.argtypes = [ctypes.POINTER(KV), ctypes.c_uint64, ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.POINTER(ctypes.c_uint64)]
lib.lb__gguf_arr_f64.argtypes = [ctypes.POINTER(KV), ctypes.c_uint64, ctypes.POINTER(ctypes.c_double)]
lib.lb__gguf_arr_i64.argtypes = [ctypes.POINTER(KV), ctypes.c_uint64, ctypes.POINTER(ctypes.c_int64)]
lib.lb__gguf_get_u64.argtypes = [ctypes.POINTER(File), ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)]
lib.lb__gguf_get_f64.argtypes = [ctypes.POINTER(File), ctypes.c_char_p, ctypes.POINTER(ctypes.c_double)]
lib.lb__gguf_get_str.argtypes = [ctypes.POINTER(File), ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.POINTER(ctypes.c_uint64)]
W = ctypes.c_void_p
lib.lb__gguf_writer_new.argtypes = [ctypes.POINTER(W)]
lib.lb__gguf_writer_free.argtypes = [W]
lib.lb__gguf_writer_free.restype = None
lib.lb__gguf_set_u32.argtypes = [W, ctypes.c_char_p, ctypes.c_uint32]
lib.lb__gguf_set_str.argtypes = [W, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64]
lib.lb__gguf_set_scalar.argtypes = [W, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p]
lib.lb__gguf_set_arr.argtypes = [W, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64]
lib.lb__gguf_set_arr_str.argtypes = [W, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p),
                                     ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint64]
lib.lb__gguf_copy_kv.argtypes = [W, ctypes.POINTER(KV)]
lib.lb__gguf_add_tensor.argtypes = [W, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
lib.lb__gguf_write.argtypes = [W, ctypes.c_char_p, FILL, ctypes.c_void_p]


def last_error():
    return lib.lb_last_error().decode()


class Parsed:
    """An lb__gguf_file opened from a path, closed on exit."""

    def __init__(self, path):
        self.f = File()
        self.status = lib.lb__gguf_open(str(path).encode(), ctypes.byref(self.f))
        self.error = last_error() if self.status != LB_OK else ""

    def __enter__(self):
        assert self.status == LB_OK, self.error
        return self

    def __exit__(self, *exc):
        lib.lb__gguf_close(ctypes.byref(self.f))

    def kvs(self):
        return [self.f.kv[i] for i in range(self.f.n_kv)]

    def tensors(self):
        return [self.f.tensors[i] for i in range(self.f.n_tensors)]


def kv_value(kv):
    """A parsed KV as Python: scalars, bytes for strings, a list or array for arrays."""
    t = kv.type
    if t == STRING:
        return ctypes.string_at(kv.str, kv.str_len)
    if t in (U8, U16, U32, U64, BOOL):
        return kv.v.u
    if t in (I8, I16, I32, I64):
        return kv.v.i
    if t in (F32, F64):
        return kv.v.f
    assert t == ARRAY
    if kv.arr_type == STRING:
        out = []
        s, n = ctypes.c_void_p(), ctypes.c_uint64()
        for i in range(kv.n):
            assert lib.lb__gguf_arr_str(ctypes.byref(kv), i, ctypes.byref(s), ctypes.byref(n))
            out.append(ctypes.string_at(s, n.value) if n.value else b"")
        return out
    dt = np.dtype(NP_TYPES[kv.arr_type]).newbyteorder("<")
    return np.frombuffer(ctypes.string_at(kv.arr, kv.n * dt.itemsize), dtype=dt) if kv.n else np.zeros(0, dt)


def reader_value(field):
    """The same from a gguf.ReaderField, raw (bytes for strings)."""
    main = field.types[0]
    if main == VT.STRING:
        return bytes(field.parts[-1])
    if main != VT.ARRAY:
        return field.parts[-1][0].item()
    sub = field.types[-1] if len(field.types) > 1 else None
    if sub == VT.STRING:
        return [bytes(field.parts[i]) for i in field.data]
    if not field.data:
        return None
    return np.concatenate([field.parts[i] for i in field.data])


def compare_with_reader(path):
    """Every KV and tensor of path: lowbit equals gguf.GGUFReader."""
    r = gguf.GGUFReader(path)
    fields = [f for f in r.fields.values() if not f.name.startswith("GGUF.")]
    with Parsed(path) as p:
        kvs = p.kvs()
        assert [kv.key.decode() for kv in kvs] == [f.name for f in fields]
        for kv, field in zip(kvs, fields):
            assert kv.type == int(field.types[0]), kv.key
            want, got = reader_value(field), kv_value(kv)
            if kv.type == ARRAY:
                if kv.n:
                    assert kv.arr_type == int(field.types[-1]), kv.key
                assert kv.n == int(field.parts[4][0]), kv.key  # key len, key, type, element type, count
                assert len(got) == (len(want) if want is not None else 0), kv.key
                if kv.arr_type == STRING:
                    assert got == want, kv.key
                elif kv.n:
                    assert got.tobytes() == want.astype(got.dtype).tobytes(), kv.key
                    # The typed accessors agree with the raw elements.
                    d, i64 = ctypes.c_double(), ctypes.c_int64()
                    for j in sorted({0, kv.n // 2, kv.n - 1}):
                        assert lib.lb__gguf_arr_f64(ctypes.byref(kv), j, ctypes.byref(d))
                        assert d.value == float(got[j]) or (np.isnan(d.value) and np.isnan(got[j]))
                        if kv.arr_type not in (F32, F64, BOOL) and int(got[j]) < 2**63:
                            assert lib.lb__gguf_arr_i64(ctypes.byref(kv), j, ctypes.byref(i64))
                            assert i64.value == int(got[j])
            elif kv.type in (F32, F64):
                assert got == want or (np.isnan(got) and np.isnan(want)), kv.key
            else:
                assert got == want, kv.key
        tensors = p.tensors()
        assert len(tensors) == len(r.tensors)
        assert p.f.alignment == r.alignment and p.f.data_offset == r.data_offset
        for t, rt in zip(tensors, r.tensors):
            assert t.name.decode() == rt.name
            assert t.ggml_type == int(rt.tensor_type)
            assert list(t.ne)[: t.n_dims] == [int(x) for x in rt.shape]
            assert t.n_dims == len(rt.shape)
            assert t.n_elements == rt.n_elements and t.n_bytes == rt.n_bytes
            assert p.f.data_offset + t.offset == rt.data_offset
            assert t.data == p.f.map.data + rt.data_offset
            mine = hashlib.sha256(ctypes.string_at(t.data, t.n_bytes)).hexdigest()
            assert mine == hashlib.sha256(rt.data.tobytes()).hexdigest(), t.name
            assert lib.lb__gguf_find_tensor(ctypes.byref(p.f), t.name).contents.offset == t.offset
    return r


# ---------------------------------------------------------------- writing helpers

class Writer:
    def __init__(self):
        self.w = W()
        assert lib.lb__gguf_writer_new(ctypes.byref(self.w)) == LB_OK
        self.blobs = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        lib.lb__gguf_writer_free(self.w)

    def ok(self, st):
        assert st == LB_OK, last_error()

    def scalar(self, key, vtype, value):
        raw = np.array([value], dtype=np.dtype(NP_TYPES[vtype]).newbyteorder("<")).tobytes()
        buf = ctypes.create_string_buffer(raw, len(raw))
        self.ok(lib.lb__gguf_set_scalar(self.w, key.encode(), vtype, buf))

    def string(self, key, s):
        self.ok(lib.lb__gguf_set_str(self.w, key.encode(), s, len(s)))

    def array(self, key, vtype, values):
        raw = np.asarray(values, dtype=np.dtype(NP_TYPES[vtype]).newbyteorder("<")).tobytes()
        buf = ctypes.create_string_buffer(raw, max(len(raw), 1))
        self.ok(lib.lb__gguf_set_arr(self.w, key.encode(), vtype, buf, len(values)))

    def strings(self, key, values):
        arr = (ctypes.c_char_p * len(values))(*values)
        lens = (ctypes.c_uint64 * len(values))(*[len(v) for v in values])
        self.ok(lib.lb__gguf_set_arr_str(self.w, key.encode(), arr, lens, len(values)))

    def tensor(self, name, dtype, ne):
        ne4 = (ctypes.c_uint64 * 4)(*(list(ne) + [1] * (4 - len(ne))))
        self.ok(lib.lb__gguf_add_tensor(self.w, name.encode(), dtype, len(ne), ne4))

    def write(self, path, blobs, fail_at=-1):
        """Writes with tensor i's bytes = blobs[i]; returns the status."""
        def fill(ctx, i, dst, n):
            if i == fail_at:
                return LB_ERR_IO
            assert n == len(blobs[i])
            ctypes.memmove(dst, blobs[i], n)
            return LB_OK
        return lib.lb__gguf_write(self.w, str(path).encode(), FILL(fill), None)


def copy_file(src, dst):
    """Parses src with lowbit and writes every KV and tensor to dst."""
    with Parsed(src) as p, Writer() as w:
        for kv in p.kvs():
            w.ok(lib.lb__gguf_copy_kv(w.w, ctypes.byref(kv)))
        ts = p.tensors()
        for t in ts:
            w.ok(lib.lb__gguf_add_tensor(w.w, t.name, t.dtype, t.n_dims, t.ne))

        def fill(ctx, i, dst_, n):
            ctypes.memmove(dst_, ts[i].data, n)
            return LB_OK
        w.ok(lib.lb__gguf_write(w.w, str(dst).encode(), FILL(fill), None))


RNG = np.random.default_rng(1234)
SCALARS = [("t.u8", U8, 250), ("t.i8", I8, -100), ("t.u16", U16, 65000), ("t.i16", I16, -30000),
           ("t.u32", U32, 4000000000), ("t.i32", I32, -2000000000), ("t.f32", F32, 0.1), ("t.bool", BOOL, 1),
           ("t.u64", U64, 2**64 - 5), ("t.i64", I64, -2**62), ("t.f64", F64, -1e300)]
ARRAYS = [("a.u8", U8, [0, 1, 255]), ("a.i8", I8, [-128, 0, 127]), ("a.u16", U16, [1, 65535]),
          ("a.i16", I16, [-32768, 5]), ("a.u32", U32, [7, 2**32 - 1]), ("a.i32", I32, [-(2**31), 2**31 - 1]),
          ("a.f32", F32, [0.5, -2.25, 1e-30]), ("a.bool", BOOL, [1, 0, 1]), ("a.u64", U64, [2**63, 1]),
          ("a.i64", I64, [-1, 2**62]), ("a.f64", F64, [3.5, -0.0])]
STRS = [b"<s>", b"", "h\u00e9llo w\u00f6rld".encode(), b"x" * 300]
TENSORS = [("tok_embd.weight", DT_F32, QT.F32, (6, 3), 4 * 18), ("norm.weight", DT_F16, QT.F16, (10,), 20),
           ("blk.0.q8", DT_Q8_0, QT.Q8_0, (64, 3), 6 * 34), ("blk.0.q4", DT_Q4_0, QT.Q4_0, (32, 2, 2), 4 * 18)]


def sample_blobs():
    return [RNG.integers(0, 256, n, dtype=np.uint8).tobytes() for *_, n in TENSORS]


def write_sample(path, alignment=None, fail_at=-1, blobs=None):
    """The sample file through lowbit's writer: every KV type, four tensors."""
    blobs = blobs or sample_blobs()
    with Writer() as w:
        w.string("general.architecture", b"llama")
        if alignment:
            w.ok(lib.lb__gguf_set_u32(w.w, b"general.alignment", alignment))
        for key, vt, v in SCALARS:
            w.scalar(key, vt, v)
        w.string("t.str", "\u00fcnicode".encode())
        for key, vt, v in ARRAYS:
            w.array(key, vt, v)
        w.strings("a.str", STRS)
        for name, dt, _, ne, _n in TENSORS:
            w.tensor(name, dt, ne)
        st = w.write(path, blobs, fail_at)
    return st, blobs


# ---------------------------------------------------------------- the model file

@pytest.fixture(scope="module")
def model():
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is absent")
    return MODEL


def test_smollm2_equals_gguf_reader(model):
    r = compare_with_reader(model)
    assert len(r.tensors) == 272
    with Parsed(model) as p:
        assert p.f.n_kv == 33 and p.f.version == 3
        toks = lib.lb__gguf_find(ctypes.byref(p.f), b"tokenizer.ggml.tokens").contents
        assert toks.type == ARRAY and toks.arr_type == STRING and toks.n == 49152
        u = ctypes.c_uint64()
        assert lib.lb__gguf_get_u64(ctypes.byref(p.f), b"llama.block_count", ctypes.byref(u)) and u.value == 30
        s, n = ctypes.c_void_p(), ctypes.c_uint64()
        assert lib.lb__gguf_get_str(ctypes.byref(p.f), b"general.architecture", ctypes.byref(s), ctypes.byref(n))
        assert ctypes.string_at(s, n.value) == b"llama"
        types = {t.ggml_type for t in p.tensors()}
        assert types == {int(QT.Q4_1), int(QT.Q8_0), int(QT.F32)}


def test_smollm2_rewrite(model, tmp_path):
    """Parse -> copy every KV and tensor -> write: the gguf package reads the
    copy equal to the original, and a second rewrite is byte-identical."""
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    copy_file(model, a)
    ra, ro = compare_with_reader(a), gguf.GGUFReader(model)
    assert [t.name for t in ra.tensors] == [t.name for t in ro.tensors]
    for ta, to in zip(ra.tensors, ro.tensors):
        assert ta.data_offset == to.data_offset and np.array_equal(ta.data, to.data)
    copy_file(a, b)
    assert a.read_bytes() == b.read_bytes()
    # The original came from the gguf package's writer; lowbit lays files
    # out the same way, so the copy is the original byte for byte.
    assert a.stat().st_size == model.stat().st_size
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(model.read_bytes()).digest()


# ---------------------------------------------------------------- lowbit writes, gguf reads

@pytest.mark.parametrize("alignment", [None, 32, 64, 4096])
def test_written_file_loads_in_gguf_reader(tmp_path, alignment):
    path = tmp_path / "w.gguf"
    st, blobs = write_sample(path, alignment)
    assert st == LB_OK, last_error()
    r = compare_with_reader(path)
    assert r.alignment == (alignment or 32)
    assert r.data_offset % r.alignment == 0 and path.stat().st_size % r.alignment == 0
    f = r.fields
    for key, vt, v in SCALARS:
        assert f[key].types == [VT(vt)]
        got = f[key].contents()
        assert got == pytest.approx(np.float32(v)) if vt == F32 else bool(got) == bool(v) if vt == BOOL else got == v
    assert f["t.str"].contents() == "\u00fcnicode"
    for key, vt, v in ARRAYS:
        assert f[key].types == [VT.ARRAY, VT(vt)]
        got = np.array(f[key].contents(), dtype=NP_TYPES[vt])
        assert np.array_equal(got, np.array(v, dtype=NP_TYPES[vt]))
    assert [s.encode() for s in f["a.str"].contents()] == STRS
    for (name, _, qt, ne, n), rt, blob in zip(TENSORS, r.tensors, blobs):
        assert rt.name == name and rt.tensor_type == qt and list(rt.shape) == list(ne) and rt.n_bytes == n
        assert rt.data.tobytes() == blob
        assert (rt.data_offset - r.data_offset) % r.alignment == 0


@pytest.mark.parametrize("alignment", [None, 64])
def test_write_parse_write_is_byte_identical(tmp_path, alignment):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    assert write_sample(a, alignment)[0] == LB_OK
    copy_file(a, b)
    assert a.read_bytes() == b.read_bytes()


def test_failed_fill_leaves_no_file(tmp_path):
    path = tmp_path / "w.gguf"
    st, _ = write_sample(path, fail_at=2)
    assert st == LB_ERR_IO and "filling tensor 2 ('blk.0.q8'" in last_error()
    assert list(tmp_path.iterdir()) == []
    # Over an existing file: refused unless replacing is allowed (--force);
    # when it is, a failed fill leaves the file as it was.
    path.write_bytes(b"old")
    st, _ = write_sample(path, fail_at=0)
    assert st == LB_ERR_ARG and "already exists" in last_error() and path.read_bytes() == b"old"
    lib.lb_output_allow_replace(1)
    try:
        st, _ = write_sample(path, fail_at=0)
    finally:
        lib.lb_output_allow_replace(0)
    assert st == LB_ERR_IO and path.read_bytes() == b"old" and len(list(tmp_path.iterdir())) == 1


def test_writer_refuses(tmp_path):
    with Writer() as w:
        w.ok(lib.lb__gguf_set_u32(w.w, b"k", 1))
        assert lib.lb__gguf_set_u32(w.w, b"k", 2) == LB_ERR_ARG and "set twice" in last_error()
        assert lib.lb__gguf_set_u32(w.w, b"general.alignment", 24) == LB_ERR_ARG
        ne = (ctypes.c_uint64 * 4)(33, 1, 1, 1)
        assert lib.lb__gguf_add_tensor(w.w, b"q", DT_Q8_0, 1, ne) == LB_ERR_ARG
        assert lib.lb__gguf_add_tensor(w.w, b"n" * 64, DT_F32, 1, ne) == LB_ERR_ARG


# ---------------------------------------------------------------- gguf writes, lowbit reads

@pytest.mark.parametrize("alignment", [None, 64])
def test_gguf_writer_writes_the_same_bytes(tmp_path, alignment):
    """The sample file through the gguf package's GGUFWriter: lowbit reads
    it equal, and lowbit's writer, given the same content, writes the same
    bytes."""
    blobs = sample_blobs()
    ours, theirs = tmp_path / "ours.gguf", tmp_path / "theirs.gguf"
    assert write_sample(ours, alignment, blobs=blobs)[0] == LB_OK, last_error()
    w = gguf.GGUFWriter(str(theirs), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    for key, vt, v in SCALARS:
        w.add_key_value(key, v, VT(vt))
    w.add_string("t.str", "\u00fcnicode")
    for key, vt, v in ARRAYS:
        w.add_key_value(key, v, VT.ARRAY, sub_type=VT(vt))
    w.add_key_value("a.str", STRS, VT.ARRAY, sub_type=VT.STRING)
    for (name, _, qt, ne, n), blob in zip(TENSORS, blobs):
        if qt == QT.F32:
            w.add_tensor(name, np.frombuffer(blob, np.float32).reshape(ne[::-1]))
        elif qt == QT.F16:
            w.add_tensor(name, np.frombuffer(blob, np.float16).reshape(ne[::-1]))
        else:
            block, size = gguf.GGML_QUANT_SIZES[qt]
            byte_shape = tuple(ne[::-1][:-1]) + (ne[0] // block * size,)
            w.add_tensor(name, np.frombuffer(blob, np.uint8).reshape(byte_shape), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    compare_with_reader(theirs)
    with Parsed(theirs) as p:
        for t, blob in zip(p.tensors(), blobs):
            assert ctypes.string_at(t.data, t.n_bytes) == blob
    assert ours.read_bytes() == theirs.read_bytes()


def test_reads_gguf_writer_output(tmp_path):
    path = tmp_path / "p.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_custom_alignment(64)
    w.add_uint8("p.u8", 3)
    w.add_int8("p.i8", -3)
    w.add_uint16("p.u16", 300)
    w.add_int16("p.i16", -300)
    w.add_uint32("p.u32", 70000)
    w.add_int32("p.i32", -70000)
    w.add_float32("p.f32", 2.5)
    w.add_uint64("p.u64", 2**40)
    w.add_int64("p.i64", -(2**40))
    w.add_float64("p.f64", 1.0 / 3.0)
    w.add_bool("p.bool", True)
    w.add_string("p.str", "hello")
    w.add_array("p.strs", ["a", "bc", "d\u00e9f"])
    w.add_key_value("p.f32s", [1.0, 2.0, -3.5], VT.ARRAY, sub_type=VT.FLOAT32)
    w.add_key_value("p.i32s", [1, -2, 3], VT.ARRAY, sub_type=VT.INT32)
    w.add_key_value("p.bools", [True, False], VT.ARRAY, sub_type=VT.BOOL)
    f32 = RNG.standard_normal((3, 5)).astype(np.float32)
    f16 = RNG.standard_normal((4,)).astype(np.float16)
    q8 = RNG.integers(0, 256, (2, 2 * 34), dtype=np.uint8)
    q4 = RNG.integers(0, 256, (1, 18), dtype=np.uint8)
    w.add_tensor("f32", f32)
    w.add_tensor("f16", f16)
    w.add_tensor("q8", q8, raw_dtype=QT.Q8_0)
    w.add_tensor("q4", q4, raw_dtype=QT.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    compare_with_reader(path)
    with Parsed(path) as p:
        assert p.f.alignment == 64
        d = ctypes.c_double()
        assert lib.lb__gguf_get_f64(ctypes.byref(p.f), b"p.f64", ctypes.byref(d)) and d.value == 1.0 / 3.0
        t = {x.name.decode(): x for x in p.tensors()}
        assert list(t["f32"].ne)[:2] == [5, 3] and t["f32"].dtype == DT_F32
        assert ctypes.string_at(t["f32"].data, t["f32"].n_bytes) == f32.tobytes()
        assert ctypes.string_at(t["f16"].data, 8) == f16.tobytes() and t["f16"].dtype == DT_F16
        assert list(t["q8"].ne)[:2] == [64, 2] and t["q8"].dtype == DT_Q8_0
        assert ctypes.string_at(t["q8"].data, t["q8"].n_bytes) == q8.tobytes()
        assert list(t["q4"].ne)[:2] == [32, 1] and ctypes.string_at(t["q4"].data, 18) == q4.tobytes()
    # lowbit lays the file out exactly as the gguf package does.
    copy = tmp_path / "c.gguf"
    copy_file(path, copy)
    assert copy.read_bytes() == path.read_bytes()


# ---------------------------------------------------------------- malformed corpus

def corpus_entries():
    lines = (CORPUS / "EXPECTED.tsv").read_text().splitlines()
    return [tuple(line.split("\t", 1)) for line in lines if line and not line.startswith("#")]


def test_corpus_is_complete():
    names = {n for n, _ in corpus_entries()}
    assert len(names) >= 10
    assert names == {p.name for p in CORPUS.glob("*.gguf")}


@pytest.mark.parametrize("name,message", corpus_entries())
def test_corpus_file_is_refused(name, message):
    p = Parsed(CORPUS / name)
    try:
        assert p.status == LB_ERR_PARSE, (name, p.status)
        assert message in p.error, (name, p.error)
        assert str(CORPUS / name) in p.error
        assert p.f.n_kv == 0 and p.f.n_tensors == 0 and not p.f.priv
    finally:
        lib.lb__gguf_close(ctypes.byref(p.f))


def test_corpus_base_file_is_valid(tmp_path):
    """The unbroken file every corpus case starts from reads in both readers."""
    spec = importlib.util.spec_from_file_location("make_gguf_corpus", ROOT / "tests" / "corpus" / "make_gguf_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = tmp_path / "base.gguf"
    path.write_bytes(mod.model())
    compare_with_reader(path)


def test_corpus_regenerates_identically(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tests" / "corpus" / "make_gguf_corpus.py"), str(tmp_path)],
                   check=True)
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(p.name for p in CORPUS.iterdir())
    for n in made:
        assert (tmp_path / n).read_bytes() == (CORPUS / n).read_bytes(), n
