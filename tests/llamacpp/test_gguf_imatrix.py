"""`lowbit quantize --imatrix FILE --type T` writes the very file
`llama-quantize --imatrix FILE` writes (issue 14): from SmolLM2 dequantized
to F32, with an importance matrix llama-imatrix computed on 4 windows of 512
tokens of the WikiText-2 train excerpt (never the test text), the whole
files are compared byte for byte: every tensor quantized with its entry,
the mixes' imatrix rules, and the quantize.imatrix.* keys in their place.
llama-imatrix's GGUF file and its legacy .dat (converted by llama-imatrix
itself) both; --pure, --include-weights and --exclude-weights too. The
comparison (first differing byte, and what of the file holds it) is
test_gguf_bytes.py's."""
import shutil
import subprocess

import pytest

from test_gguf_bytes import ROOT, check_identical, smol_f32  # noqa: F401 (a fixture)

CALIB = ROOT / "data" / "wikitext-2-raw" / "wiki.train.excerpt.raw"
TYPES = ["Q4_K_M", "Q4_K_S", "Q3_K_M", "Q2_K", "Q5_K_M", "Q6_K", "IQ4_XS", "IQ4_NL", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]


@pytest.fixture(scope="module")
def imatrices(smol_f32, llamacpp_bin, tmp_path_factory):
    """llama-imatrix's GGUF imatrix of the F32 model, and the legacy .dat it
    converts it to (paths as given on both tools' command lines)."""
    d = tmp_path_factory.mktemp("gguf_imatrix")
    shutil.copy(CALIB, d / "calib.txt")
    im, dat = d / "x.imatrix", d / "x.dat"
    for cmd in ([llamacpp_bin / "llama-imatrix", "-m", smol_f32, "-f", "calib.txt", "--chunks", "4", "-c", "512",
                 "-o", im, "-t", "2", "--no-ppl"],
                [llamacpp_bin / "llama-imatrix", "-m", smol_f32, "--in-file", im, "--output-format", "dat", "-o", dat]):
        r = subprocess.run([str(c) for c in cmd], cwd=d, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return {"gguf": str(im), "dat": str(dat)}


@pytest.mark.parametrize("ftype", TYPES)
def test_imatrix_is_byte_identical(llamacpp_bin, smol_f32, imatrices, tmp_path, ftype):
    check_identical(llamacpp_bin, smol_f32, tmp_path, ftype, "--imatrix", imatrices["gguf"])


@pytest.mark.parametrize("ftype", ["Q4_K_M", "IQ4_XS", "Q4_0"])
def test_pure_with_imatrix_is_byte_identical(llamacpp_bin, smol_f32, imatrices, tmp_path, ftype):
    check_identical(llamacpp_bin, smol_f32, tmp_path, ftype, "--pure", "--imatrix", imatrices["gguf"])


@pytest.mark.parametrize("ftype", ["Q4_K_M", "IQ4_NL", "Q5_1"])
def test_legacy_dat_is_byte_identical(llamacpp_bin, smol_f32, imatrices, tmp_path, ftype):
    check_identical(llamacpp_bin, smol_f32, tmp_path, ftype, "--imatrix", imatrices["dat"])


@pytest.mark.parametrize("select", [("--include-weights", "attn"), ("--include-weights", "ffn_down"),
                                    ("--exclude-weights", "blk.1"), ("--include-weights", "no_such_tensor")])
def test_selected_entries_are_byte_identical(llamacpp_bin, smol_f32, imatrices, tmp_path, select):
    """entries_count counts the kept ones; none kept is no imatrix at all
    (IQ4_XS: the mix's first-layers rule depends on one)"""
    check_identical(llamacpp_bin, smol_f32, tmp_path, "IQ4_XS", "--imatrix", imatrices["gguf"], *select)


def test_requantized_keys_move_to_the_end(llamacpp_bin, smol_f32, imatrices, tmp_path):
    """from a file that already records an imatrix: its quantize.imatrix.*
    keys are set again, at the end (ggml's gguf_set_* moves a key it sets)"""
    src = tmp_path / "src.gguf"
    r = subprocess.run([str(llamacpp_bin / "llama-quantize"), "--imatrix", imatrices["gguf"], str(smol_f32), str(src),
                        "Q4_K_M", "2"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    check_identical(llamacpp_bin, src, tmp_path, "Q8_0", "--imatrix", imatrices["dat"],
                    llama_only=("--allow-requantize",))
