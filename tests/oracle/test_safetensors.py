"""safetensors reader and writer against the `safetensors` package.

- Files the package writes (many dtypes, shapes, metadata) read back in
  lowbit with the same names, dtypes, shapes, offsets and bytes.
- Files lowbit writes load in the package with equal values and metadata;
  they are byte-deterministic, and write -> read -> write is byte-identical.
- A failed write leaves no file and no temporary; an existing destination
  survives it untouched.
- The malformed corpus (tests/corpus/safetensors, EXPECTED.tsv) is refused
  with the expected words, the generator reproduces it byte for byte, and
  the package refuses the same files except the ones lowbit is stricter on.

Drives the library's internal lb__st_* functions through ctypes, from
build/tests/liblowbit_internal.so (tests/internal_lib.py: liblowbit.so
exports only the public API)."""
import ctypes
import json
import os
import pathlib
import struct
import subprocess
import sys

import ml_dtypes as md
import numpy as np
import pytest
from safetensors import deserialize, safe_open
from safetensors.numpy import load_file, save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
CORPUS = ROOT / "tests" / "corpus" / "safetensors"
GENERATOR = ROOT / "tests" / "corpus" / "make_safetensors_corpus.py"

LB_OK, LB_ERR_ARG, LB_ERR_IO, LB_ERR_PARSE = 0, 1, 5, 6
MAX_DIMS = 8

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import internal_lib  # noqa: E402

lib = internal_lib.load()


class Mapped(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class StTensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("n_dims", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_uint64)),  # n_dims values
        ("n_elements", ctypes.c_uint64),
        ("begin", ctypes.c_uint64),
        ("end", ctypes.c_uint64),
        ("data", ctypes.c_void_p),
    ]


class StFile(ctypes.Structure):
    _fields_ = [
        ("map", Mapped),
        ("n_tensors", ctypes.c_size_t),
        ("tensors", ctypes.POINTER(StTensor)),
        ("n_meta", ctypes.c_size_t),
        ("meta_keys", ctypes.POINTER(ctypes.c_char_p)),
        ("meta_values", ctypes.POINTER(ctypes.c_char_p)),
        ("data", ctypes.c_void_p),
        ("data_size", ctypes.c_uint64),
        ("priv", ctypes.c_void_p),
    ]


class StOutTensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("n_dims", ctypes.c_int),
        ("shape", ctypes.c_uint64 * MAX_DIMS),
    ]


sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from lowbit_ctypes import DtypeInfo  # noqa: E402  (the struct, shared by the oracle tests)


FILL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_uint64)

lib.lb_last_error.restype = ctypes.c_char_p
lib.lb_dtype_get.restype = ctypes.POINTER(DtypeInfo)
lib.lb_dtype_get.argtypes = [ctypes.c_int]
lib.lb__st_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(StFile)]
lib.lb__st_parse.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.POINTER(StFile)]
lib.lb__st_close.argtypes = [ctypes.POINTER(StFile)]
lib.lb__st_close.restype = None
lib.lb__st_find.argtypes = [ctypes.POINTER(StFile), ctypes.c_char_p]
lib.lb__st_find.restype = ctypes.POINTER(StTensor)
lib.lb__st_write.argtypes = [
    ctypes.c_char_p, ctypes.POINTER(StOutTensor), ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
    ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t, FILL, ctypes.c_void_p]


def _dtype_ids():
    ids = {}
    for i in range(64):
        p = lib.lb_dtype_get(i)
        if not p:
            break
        if p.contents.st_name:
            ids[p.contents.st_name.decode()] = (i, p.contents.block_bytes)
    return ids


DTYPE_IDS = _dtype_ids()  # safetensors name -> (lb_dtype, bytes per element)
DTYPE_NAMES = {v[0]: k for k, v in DTYPE_IDS.items()}

NP_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": md.bfloat16,
    "F8_E4M3": md.float8_e4m3fn, "F8_E5M2": md.float8_e5m2, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
# Those safetensors.numpy.load_file can return (it has no bf16 or fp8).
LOAD_FILE_DTYPES = {"F64", "F32", "F16", "I64", "I32", "I16", "I8", "U8", "BOOL"}


def last_error():
    return lib.lb_last_error().decode("utf-8", "replace")


# ------------------------------------------------------------------ helpers

class Opened:
    """lb__st_open as a context manager, read into plain Python values."""

    def __init__(self, path):
        self.f = StFile()
        self.status = lib.lb__st_open(str(path).encode(), ctypes.byref(self.f))
        self.error = last_error() if self.status != LB_OK else ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        lib.lb__st_close(ctypes.byref(self.f))

    def tensors(self):
        out = {}
        for i in range(self.f.n_tensors):
            t = self.f.tensors[i]
            n = t.end - t.begin
            out[t.name.decode()] = {
                "dtype": DTYPE_NAMES[t.dtype],
                "shape": [t.shape[d] for d in range(t.n_dims)],
                "n_elements": t.n_elements,
                "offsets": [t.begin, t.end],
                "bytes": ctypes.string_at(t.data, n) if n else b"",
                "index": i,
            }
        return out

    def names(self):
        return [self.f.tensors[i].name.decode() for i in range(self.f.n_tensors)]

    def metadata(self):
        return {self.f.meta_keys[i].decode(): self.f.meta_values[i].decode() for i in range(self.f.n_meta)}


def header_of(path):
    raw = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), n


def out_tensors(specs):
    """specs: [(name, st_dtype, shape)] -> ctypes array."""
    arr = (StOutTensor * max(len(specs), 1))()
    for i, (name, dtype, shape) in enumerate(specs):
        arr[i].name = name.encode()
        arr[i].dtype = DTYPE_IDS[dtype][0]
        arr[i].n_dims = len(shape)
        for d, s in enumerate(shape):
            arr[i].shape[d] = s
    return arr


def write(path, specs, payloads, metadata=None, fail_at=None, calls=None):
    """lb__st_write; payloads[i] is bytes for specs[i]. Returns the status."""
    metadata = metadata or {}
    keys = (ctypes.c_char_p * max(len(metadata), 1))(*[k.encode() for k in metadata])
    values = (ctypes.c_char_p * max(len(metadata), 1))(*[v.encode() for v in metadata.values()])

    def fill(_ctx, i, dst, n):
        if calls is not None:
            calls.append(i)
        if fail_at is not None and i == fail_at:
            return LB_ERR_IO
        assert n == len(payloads[i])
        if n:
            ctypes.memmove(dst, payloads[i], n)
        return LB_OK

    cb = FILL(fill)
    return lib.lb__st_write(str(path).encode(), out_tensors(specs), len(specs), keys, values, len(metadata), cb, None)


def sample(dtype, shape, seed):
    """Deterministic values of each dtype, specials included for floats."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    npd = NP_DTYPES[dtype]
    if dtype == "BOOL":
        v = rng.integers(0, 2, n).astype(np.bool_)
    elif dtype in ("I64", "I32", "I16", "I8", "U8"):
        info = np.iinfo(npd)
        v = rng.integers(info.min, info.max, n, dtype=npd, endpoint=True)
    else:
        v = (rng.standard_normal(n) * 8).astype(np.float32).astype(npd)
        specials = [0.0, -0.0, 1.0, -2.5]
        if dtype != "F8_E4M3":
            specials += [np.inf, -np.inf]
        for k, s in enumerate(specials[: n // 3]):
            v[k] = s
    return np.ascontiguousarray(v.reshape(shape))


SHAPES = [(), (0,), (3, 0), (1,), (7,), (2, 3), (2, 3, 4), (2, 1, 3, 2)]


def all_dtypes_tensors(seed=0):
    out = {}
    k = 0
    for dtype in NP_DTYPES:
        for shape in SHAPES:
            out[f"{dtype.lower()}.{len(shape)}d.{k}"] = (dtype, sample(dtype, shape, seed + k))
            k += 1
    return out


def same_array(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ------------------------------------------------------- package -> lowbit

@pytest.mark.parametrize("dtype", list(NP_DTYPES))
def test_reads_package_files_per_dtype(tmp_path, dtype):
    tensors = {f"t{i}": sample(dtype, s, i) for i, s in enumerate(SHAPES)}
    meta = {"format": "np", "dtype": dtype, "note": "caf\u00e9 \"quoted\"\n"}
    path = tmp_path / "a.safetensors"
    save_file(tensors, path, metadata=meta)
    hdr, _ = header_of(path)
    with Opened(path) as f:
        assert f.status == LB_OK, f.error
        got = f.tensors()
        assert f.names() == sorted(tensors, key=lambda s: s.encode())
        assert f.metadata() == meta
        for name, arr in tensors.items():
            t = got[name]
            assert t["dtype"] == dtype
            assert t["shape"] == list(arr.shape)
            assert t["n_elements"] == arr.size
            assert t["offsets"] == hdr[name]["data_offsets"]
            assert t["bytes"] == arr.tobytes()


def test_reads_package_file_all_dtypes_and_shapes(tmp_path):
    specs = all_dtypes_tensors()
    tensors = {k: v for k, (_, v) in specs.items()}
    path = tmp_path / "all.safetensors"
    save_file(tensors, path, metadata={"k": "v"})
    hdr, _ = header_of(path)
    ref = dict(deserialize(path.read_bytes()))
    with Opened(path) as f:
        assert f.status == LB_OK, f.error
        got = f.tensors()
        assert len(got) == len(tensors) == f.f.n_tensors
        for name, (dtype, arr) in specs.items():
            assert got[name]["dtype"] == dtype == ref[name]["dtype"]
            assert got[name]["shape"] == list(arr.shape) == list(ref[name]["shape"])
            assert got[name]["offsets"] == hdr[name]["data_offsets"]
            assert got[name]["bytes"] == bytes(ref[name]["data"]) == arr.tobytes()
        # lb__st_find finds each by binary search, and nothing else.
        for name in tensors:
            p = lib.lb__st_find(ctypes.byref(f.f), name.encode())
            assert p and p.contents.name.decode() == name
        for absent in ["", "x", "zzz", "f32.0d.0x"]:
            assert not lib.lb__st_find(ctypes.byref(f.f), absent.encode())


def test_reads_package_file_without_tensors(tmp_path):
    for meta in (None, {"only": "metadata"}):
        path = tmp_path / "empty.safetensors"
        save_file({}, path, metadata=meta)
        with Opened(path) as f:
            assert f.status == LB_OK, f.error
            assert f.f.n_tensors == 0 and f.metadata() == (meta or {})


def test_parse_from_buffer(tmp_path):
    path = tmp_path / "b.safetensors"
    arr = np.arange(12, dtype=np.int32).reshape(3, 4)
    save_file({"x": arr}, path)
    blob = path.read_bytes()
    f = StFile()
    assert lib.lb__st_parse(blob, len(blob), b"buffer", ctypes.byref(f)) == LB_OK, last_error()
    assert f.map.data is None and f.n_tensors == 1
    assert ctypes.string_at(f.tensors[0].data, 48) == arr.tobytes()
    lib.lb__st_close(ctypes.byref(f))
    # One byte short: the message names what the caller called it.
    assert lib.lb__st_parse(blob, len(blob) - 1, b"buffer", ctypes.byref(f)) == LB_ERR_PARSE
    assert "'buffer'" in last_error() and "reach past the end of the file" in last_error()


# ------------------------------------------------------- lowbit -> package

def lowbit_write_all(path, specs, metadata=None):
    names = list(specs)
    spec_list = [(n, specs[n][0], specs[n][1].shape) for n in names]
    payloads = [specs[n][1].tobytes() for n in names]
    return write(path, spec_list, payloads, metadata), names


def test_written_files_load_in_package(tmp_path):
    specs = all_dtypes_tensors(seed=100)
    meta = {"format": "pt", "z": "last", "\u00e9": "tab\there", "empty": ""}
    path = tmp_path / "lb.safetensors"
    st, _ = lowbit_write_all(path, specs, meta)
    assert st == LB_OK, last_error()
    # Every dtype through the package's own validating reader...
    ref = dict(deserialize(path.read_bytes()))
    assert set(ref) == set(specs)
    for name, (dtype, arr) in specs.items():
        assert ref[name]["dtype"] == dtype
        assert list(ref[name]["shape"]) == list(arr.shape)
        got = np.frombuffer(bytes(ref[name]["data"]), dtype=NP_DTYPES[dtype]).reshape(arr.shape)
        assert same_array(got, arr), name
    # ...and the numpy loader for the dtypes it has.
    plain = {k: v for k, v in specs.items() if v[0] in LOAD_FILE_DTYPES}
    plain_path = tmp_path / "plain.safetensors"
    assert lowbit_write_all(plain_path, plain, meta)[0] == LB_OK, last_error()
    loaded = load_file(plain_path)
    assert set(loaded) == set(plain)
    for name, (_, arr) in plain.items():
        assert same_array(loaded[name], arr), name
    with safe_open(str(path), framework="np") as f:
        assert f.metadata() == meta


def test_written_layout(tmp_path):
    """Header: __metadata__ first, then names in byte order, data in the
    same order and contiguous, padded with spaces to a multiple of 8."""
    specs = {"b": ("F32", np.ones(3, np.float32)), "a": ("I8", np.arange(5, dtype=np.int8)),
             "B": ("U8", np.zeros((0, 2), np.uint8)), "\u00e9": ("F64", np.array(1.5))}
    path = tmp_path / "layout.safetensors"
    assert lowbit_write_all(path, specs, {"m": "1"})[0] == LB_OK, last_error()
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    head = raw[8:8 + n]
    body = head.rstrip(b" ")
    assert n % 8 == 0 and n - len(body) < 8 and head == body + b" " * (n - len(body))
    text = head.decode()
    hdr = json.loads(text, object_pairs_hook=list)
    keys = [k for k, _ in hdr]
    assert keys == ["__metadata__", "B", "a", "b", "\u00e9"]
    at = 0
    for k, v in hdr[1:]:
        v = dict(v)
        assert list(v) == ["dtype", "shape", "data_offsets"]
        assert v["data_offsets"][0] == at
        at = v["data_offsets"][1]
    assert len(raw) == 8 + n + at
    assert ", " not in text and ": " not in text  # compact, as the package writes
    assert "\u00e9" in text  # UTF-8 as is, not \u escapes


def test_write_is_deterministic_and_round_trips(tmp_path):
    specs = all_dtypes_tensors(seed=7)
    meta = {"a": "1", "b": "\u2603"}
    p1, p2, p3 = (tmp_path / f"{k}.safetensors" for k in "123")
    assert lowbit_write_all(p1, specs, meta)[0] == LB_OK, last_error()
    assert lowbit_write_all(p2, dict(reversed(list(specs.items()))), dict(reversed(list(meta.items()))))[0] == LB_OK
    assert p1.read_bytes() == p2.read_bytes()  # input order does not matter
    # write -> read -> write: the reread file's tensors, filled from its mapping.
    with Opened(p1) as f:
        assert f.status == LB_OK, f.error
        got = f.tensors()
        names = list(got)
        spec_list = [(n, got[n]["dtype"], got[n]["shape"]) for n in names]
        assert write(p3, spec_list, [got[n]["bytes"] for n in names], f.metadata()) == LB_OK, last_error()
    assert p3.read_bytes() == p1.read_bytes()


def test_package_file_rewritten_by_lowbit(tmp_path):
    """package -> lowbit read -> lowbit write -> package read: same tensors."""
    specs = all_dtypes_tensors(seed=3)
    src, dst = tmp_path / "src.safetensors", tmp_path / "dst.safetensors"
    save_file({k: v for k, (_, v) in specs.items()}, src, metadata={"x": "y"})
    with Opened(src) as f:
        got = f.tensors()
        names = list(got)
        assert write(dst, [(n, got[n]["dtype"], got[n]["shape"]) for n in names],
                     [got[n]["bytes"] for n in names], f.metadata()) == LB_OK, last_error()
    a, b = dict(deserialize(src.read_bytes())), dict(deserialize(dst.read_bytes()))
    assert set(a) == set(b)
    for k in a:
        assert a[k]["dtype"] == b[k]["dtype"] and list(a[k]["shape"]) == list(b[k]["shape"])
        assert bytes(a[k]["data"]) == bytes(b[k]["data"])


def test_fill_called_once_per_tensor_in_name_order(tmp_path):
    specs = [("c", "F32", (2,)), ("a", "U8", (0,)), ("b", "I16", ())]
    calls = []
    payloads = [b"\0" * 8, b"", b"\1\2"]
    assert write(tmp_path / "o.safetensors", specs, payloads, calls=calls) == LB_OK, last_error()
    assert calls == [1, 2, 0]


# ------------------------------------------------------- failures leave nothing

def test_failed_fill_leaves_nothing(tmp_path):
    specs = [("a", "F32", (4,)), ("b", "F16", (2, 2)), ("c", "U8", (5,))]
    payloads = [b"\0" * 16, b"\0" * 8, b"\0" * 5]
    path = tmp_path / "out.safetensors"
    for fail_at in range(3):
        st = write(path, specs, payloads, fail_at=fail_at)
        assert st == LB_ERR_IO
        assert f"tensor '{'abc'[fail_at]}'" in last_error() and str(path) in last_error()
        assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary


def test_failed_write_keeps_existing_destination(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"keep": np.arange(4, dtype=np.float32)}, path)
    before = path.read_bytes()
    specs = [("a", "F32", (4,)), ("b", "U8", (3,))]
    # Refused unless replacing is allowed (the CLI's --force).
    assert write(path, specs, [b"\0" * 16, b"\0" * 3]) == LB_ERR_ARG and "already exists" in last_error()
    assert path.read_bytes() == before
    lib.lb_output_allow_replace(1)
    try:
        _failed_write_keeps_existing_destination(tmp_path, path, before, specs)
    finally:
        lib.lb_output_allow_replace(0)


def _failed_write_keeps_existing_destination(tmp_path, path, before, specs):
    assert write(path, specs, [b"\0" * 16, b"\0" * 3], fail_at=1) == LB_ERR_IO
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
    # Refused before starting (a duplicate name): the same.
    assert write(path, [("a", "F32", (1,)), ("a", "F32", (1,))], [b"\0" * 4] * 2) == LB_ERR_ARG
    assert "appears twice" in last_error()
    assert path.read_bytes() == before and len(list(tmp_path.iterdir())) == 1
    # And a successful write replaces it.
    assert write(path, specs, [b"\1" * 16, b"\2" * 3]) == LB_OK, last_error()
    assert set(dict(deserialize(path.read_bytes()))) == {"a", "b"}
    assert len(list(tmp_path.iterdir())) == 1


# ------------------------------------------------------- malformed corpus

def expected():
    rows = []
    for line in (CORPUS / "EXPECTED.tsv").read_text(encoding="utf-8").splitlines():
        name, want = line.split("\t")
        rows.append((name, want))
    return rows


def test_corpus_is_complete():
    listed = [n for n, _ in expected()]
    assert len(listed) >= 10 and len(listed) == len(set(listed))
    on_disk = sorted(p.name for p in CORPUS.glob("*.safetensors"))
    assert sorted(listed) == on_disk


@pytest.mark.parametrize("name,want", expected())
def test_corpus_refused(name, want):
    path = CORPUS / name
    with Opened(path) as f:
        assert f.status == LB_ERR_PARSE, (name, f.status)
        assert want in f.error, f.error
        assert str(path) in f.error
        assert f.f.n_tensors == 0 and not f.f.priv and not f.f.map.data


def test_corpus_regenerates_identically(tmp_path):
    subprocess.run([sys.executable, str(GENERATOR), str(tmp_path)], check=True)
    for p in sorted(CORPUS.iterdir()):
        assert (tmp_path / p.name).read_bytes() == p.read_bytes(), p.name
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted(x.name for x in CORPUS.iterdir())


def _reference_accepts():
    sys.path.insert(0, str(GENERATOR.parent))
    try:
        import make_safetensors_corpus as gen
    finally:
        sys.path.pop(0)
    return gen.REFERENCE_ACCEPTS


@pytest.mark.parametrize("name,want", expected())
def test_corpus_against_reference_reader(name, want):
    """The package refuses every corpus file except the few lowbit is
    deliberately stricter on (and those it does load)."""
    blob = (CORPUS / name).read_bytes()
    stricter = _reference_accepts()
    try:
        deserialize(blob)
        accepted = True
    except Exception:  # the package raises SafetensorError (or others) on bad input
        accepted = False
    assert accepted == (name in stricter), name
