"""`lowbit quantize --type T` writes the very file `llama-quantize` writes
(issue 14): from SmolLM2 dequantized to F32, for every file type whose
tensors lowbit can write today, with --pure and as the mix, the whole files
are compared byte for byte. Which types lowbit writes is read from the
library (lb_dtype_get(...)->can_write), so types join this test as their
quantizers land. On a difference the test names the first differing byte
and whether it lies in the metadata or in which tensor."""
import ctypes
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
LOWBIT = str(BUILD / "lowbit")
SMOL_Q41 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

FTYPES = ["F32", "F16", "BF16", "Q8_0", "Q5_0", "Q5_1", "Q4_0", "Q4_1", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L",
          "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4_MOE"]


class DtypeInfo(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("name", ctypes.c_char_p), ("st_name", ctypes.c_char_p),
                ("ggml_type", ctypes.c_int), ("block", ctypes.c_uint), ("block_bytes", ctypes.c_uint),
                ("can_read", ctypes.c_int), ("can_write", ctypes.c_int)]


_lib = ctypes.CDLL(str(BUILD / "liblowbit.so"))
_lib.lb_dtype_get.restype = ctypes.POINTER(DtypeInfo)
_lib.lb_dtype_get.argtypes = [ctypes.c_int]
_lib.lb_dtype_from_ggml.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
_lib.lb_ggml_type_by_name.argtypes = [ctypes.c_char_p]


def lowbit_writes(ggml_name):
    """whether the library writes this ggml type (its dtype's can_write)"""
    g = _lib.lb_ggml_type_by_name(ggml_name.encode())
    d = ctypes.c_int()
    return g >= 0 and _lib.lb_dtype_from_ggml(g, ctypes.byref(d)) == 0 and bool(_lib.lb_dtype_get(d.value).contents.can_write)


def chosen_types(model, ftype, *opts):
    r = subprocess.run([LOWBIT, "quantize", str(model), "--type", ftype, "--dry-run", "--json", *opts],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return {t["type"] for t in json.loads(r.stdout)["tensors"]}


def where(path, offset):
    """what of a GGUF file lies at a byte offset"""
    import gguf
    r = gguf.GGUFReader(str(path))
    if offset < r.data_offset:
        return "metadata (header, keys or tensor infos)"
    for t in r.tensors:
        if t.data_offset <= offset < t.data_offset + t.n_bytes:
            return f"tensor {t.name} ({t.tensor_type.name}), byte {offset - t.data_offset} of {t.n_bytes}"
    return "padding or past the last tensor"


def first_difference(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        offset = 0
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                n = min(len(x), len(y))
                k = next((i for i in range(n) if x[i] != y[i]), n)
                return offset + k
            if not x:
                return None
            offset += len(x)


@pytest.fixture(scope="session")
def smol_f32(tmp_path_factory):
    if not SMOL_Q41.exists():
        pytest.skip("SmolLM2 GGUF not fetched (tests/fetch_smollm2.sh)")
    out = tmp_path_factory.mktemp("smolb") / "smol-f32.gguf"
    r = subprocess.run([LOWBIT, "convert", str(SMOL_Q41), str(out), "--dtype", "f32", "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out


def check_identical(llamacpp_bin, model, tmp_path, ftype, *opts, llama_only=()):
    missing = sorted(t for t in chosen_types(model, ftype, *opts) if not lowbit_writes(t))
    if missing:
        pytest.skip(f"lowbit does not write {', '.join(missing)} yet")
    ref, ours = tmp_path / "llama.gguf", tmp_path / "lowbit.gguf"
    r = subprocess.run([str(llamacpp_bin / "llama-quantize"), *llama_only, *opts, str(model), str(ref), ftype, "2"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and ref.exists(), r.stdout[-2000:] + r.stderr[-2000:]
    r = subprocess.run([LOWBIT, "quantize", str(model), "-o", str(ours), "--type", ftype, *opts, "--quiet",
                        "--threads", "2"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    off = first_difference(ref, ours)
    if off is not None:
        sa, sb = ref.stat().st_size, ours.stat().st_size
        pytest.fail(f"{ftype} {opts}: files differ first at byte {off} ({where(ref, off)}); "
                    f"sizes {sa} (llama-quantize) and {sb} (lowbit)")


@pytest.mark.parametrize("ftype", FTYPES)
def test_pure_is_byte_identical(llamacpp_bin, smol_f32, tmp_path, ftype):
    check_identical(llamacpp_bin, smol_f32, tmp_path, ftype, "--pure")


@pytest.mark.parametrize("ftype", FTYPES)
def test_mix_is_byte_identical(llamacpp_bin, smol_f32, tmp_path, ftype):
    check_identical(llamacpp_bin, smol_f32, tmp_path, ftype)


def test_overrides_are_byte_identical(llamacpp_bin, smol_f32, tmp_path):
    check_identical(llamacpp_bin, smol_f32, tmp_path, "Q8_0", "--tensor-type", r"blk\.[0-4]\.ffn=q4_0",
                    "--token-embedding-type", "f16")


@pytest.mark.parametrize("ftype", ["Q8_0", "Q4_0"])
def test_requantized_is_byte_identical(llamacpp_bin, tmp_path, ftype):
    """from the Q4_1 file itself (lowbit dequantizes as ggml does)"""
    if not SMOL_Q41.exists():
        pytest.skip("SmolLM2 GGUF not fetched (tests/fetch_smollm2.sh)")
    check_identical(llamacpp_bin, SMOL_Q41, tmp_path, ftype, llama_only=("--allow-requantize",))


def test_from_hugging_face_same_tensors(smol_f32, tmp_path):
    """a Hugging Face directory (half-split q/k rows) gives the same tensor
    bytes as the GGUF it was converted from: the rows go back to llama.cpp's
    layout before quantizing"""
    import gguf
    hf, a, b = tmp_path / "hf", tmp_path / "a.gguf", tmp_path / "b.gguf"
    for args in (["convert", str(smol_f32), str(hf), "--dtype", "f32"],
                 ["quantize", str(smol_f32), "-o", str(a), "--type", "Q8_0"],
                 ["quantize", str(hf), "-o", str(b), "--type", "Q8_0"]):
        r = subprocess.run([LOWBIT, *args, "--quiet"], capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr
    ta = {t.name: t for t in gguf.GGUFReader(str(a)).tensors}
    tb = {t.name: t for t in gguf.GGUFReader(str(b)).tensors}
    assert set(ta) == set(tb)
    for n in ta:
        assert ta[n].tensor_type == tb[n].tensor_type, n
        assert bytes(ta[n].data.tobytes()) == bytes(tb[n].data.tobytes()), n
    kv = gguf.GGUFReader(str(b)).fields
    assert int(kv["general.file_type"].parts[-1][0]) == 7 and int(kv["general.quantization_version"].parts[-1][0]) == 2
