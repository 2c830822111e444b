"""lowbit quantize --format gguf picks, tensor for tensor, the ggml type
llama-quantize picks (issue 14): for every file type, with and without
llama-quantize's overrides, on SmolLM2 dequantized to F32 and on synthetic
llama GGUFs of other shapes (GQA, 9 and 16 layers, a width 256 divides, one
only 32 divides, tied and untied output). Both tools are asked for their
choice without writing: `llama-quantize --dry-run` and
`lowbit quantize --dry-run --json`."""
import json
import os
import pathlib
import re
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
SMOL_Q41 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

# every file type both tools offer (NVFP4 is lowbit's alone: tested below)
FTYPES = ["F32", "F16", "BF16", "Q8_0", "Q5_0", "Q5_1", "Q4_0", "Q4_1", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L",
          "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4_MOE"]

LINE = re.compile(r"^\[\s*\d+/\s*\d+\]\s+(\S+)\s+- \[[^\]]*\], type =\s*(\S+), size =[^(]*(?:\((\S+)\))?\s*$")


def llama_types(bin_dir, model, ftype, *opts):
    r = subprocess.run([str(bin_dir / "llama-quantize"), "--dry-run", *opts, str(model), ftype],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    types = {}
    for line in (r.stdout + r.stderr).splitlines():
        m = LINE.match(line.strip())
        if m:
            types[m.group(1)] = m.group(3) or m.group(2)
    assert types, "no tensor lines in llama-quantize's output:\n" + r.stdout[-2000:]
    return types


def lowbit_types(model, ftype, *opts):
    r = subprocess.run([LOWBIT, "quantize", str(model), "--type", ftype, "--dry-run", "--json", *opts],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return {t["name"]: t["type"] for t in json.loads(r.stdout)["tensors"]}


# llama.cpp's fallback for rows a type's block does not divide
BLOCK = {"q2_K": 256, "q3_K": 256, "q4_K": 256, "q5_K": 256, "q6_K": 256, "iq4_xs": 256}
FALLBACK = {"q2_K": "q4_0", "q3_K": "q4_0", "q4_K": "q5_0", "q5_K": "q5_1", "q6_K": "q8_0", "iq4_xs": "iq4_nl"}


def ncols(model):
    import gguf
    return {t.name: int(t.shape[0]) for t in gguf.GGUFReader(str(model)).tensors}


def compare(bin_dir, model, ftype, *opts):
    want, got = llama_types(bin_dir, model, ftype, *opts), lowbit_types(model, ftype, *opts)
    assert set(want) == set(got)
    if "--token-embedding-type" in opts or "--output-tensor-type" in opts:
        # llama-quantize takes these as given, and then fails writing a row
        # the block does not fit; lowbit falls back as for any other type
        cols = ncols(model)
        for n, t in want.items():
            if n in ("token_embd.weight", "output.weight") and cols[n] % BLOCK.get(t, 1):
                want[n] = FALLBACK[t]
    diff = {n: (want[n], got[n]) for n in want if want[n] != got[n]}
    assert not diff, f"{ftype} {opts}: (llama-quantize, lowbit) differ on {len(diff)} tensors: {sorted(diff.items())[:8]}"


@pytest.fixture(scope="session")
def smol_f32(tmp_path_factory):
    if not SMOL_Q41.exists():
        pytest.skip("SmolLM2 GGUF not fetched (tests/fetch_smollm2.sh)")
    out = tmp_path_factory.mktemp("smol") / "smol-f32.gguf"
    r = subprocess.run([LOWBIT, "convert", str(SMOL_Q41), str(out), "--dtype", "f32", "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out


def synthetic(path, n_layer, n_head, n_kv, dim, ffn, vocab, tied):
    """a llama GGUF llama-quantize and lowbit both open (random weights)"""
    import gguf
    w = gguf.GGUFWriter(str(path), "llama")
    hd = dim // n_head
    w.add_context_length(256)
    w.add_embedding_length(dim)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(ffn)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    rng = np.random.default_rng(n_layer * 1000 + dim)

    def t(name, *shape):  # shape outermost first, as numpy
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    t("token_embd.weight", vocab, dim)
    t("output_norm.weight", dim)
    if not tied:
        t("output.weight", vocab, dim)
    for i in range(n_layer):
        t(f"blk.{i}.attn_norm.weight", dim)
        t(f"blk.{i}.attn_q.weight", dim, dim)
        t(f"blk.{i}.attn_k.weight", n_kv * hd, dim)
        t(f"blk.{i}.attn_v.weight", n_kv * hd, dim)
        t(f"blk.{i}.attn_output.weight", dim, dim)
        t(f"blk.{i}.ffn_norm.weight", dim)
        t(f"blk.{i}.ffn_gate.weight", ffn, dim)
        t(f"blk.{i}.ffn_up.weight", ffn, dim)
        t(f"blk.{i}.ffn_down.weight", dim, ffn)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="session")
def synth_gqa(tmp_path_factory):
    # GQA 4, 9 layers, width 512 (256 divides), ffn 1376 (only 32 divides), own output
    return synthetic(tmp_path_factory.mktemp("s1") / "gqa.gguf", 9, 8, 2, 512, 1376, 320, tied=False)


@pytest.fixture(scope="session")
def synth_tied(tmp_path_factory):
    # no GQA, 16 layers, width 160 (only 32 divides), ffn 512 (256 divides), tied output
    return synthetic(tmp_path_factory.mktemp("s2") / "tied.gguf", 16, 4, 4, 160, 512, 300, tied=True)


@pytest.mark.parametrize("ftype", FTYPES)
def test_smollm2_types_match(llamacpp_bin, smol_f32, ftype):
    compare(llamacpp_bin, smol_f32, ftype)


@pytest.mark.parametrize("ftype", FTYPES)
def test_synthetic_gqa_types_match(llamacpp_bin, synth_gqa, ftype):
    compare(llamacpp_bin, synth_gqa, ftype)


@pytest.mark.parametrize("ftype", FTYPES)
def test_synthetic_tied_types_match(llamacpp_bin, synth_tied, ftype):
    compare(llamacpp_bin, synth_tied, ftype)


OVERRIDES = [
    ("--pure",),
    ("--output-tensor-type", "q8_0"),
    ("--token-embedding-type", "q4_K"),
    ("--output-tensor-type", "f16", "--token-embedding-type", "q5_1"),
    ("--tensor-type", "attn_v=q8_0"),
    ("--tensor-type", r"blk\.[0-3]\.ffn_down=q4_0", "--tensor-type", "ffn=q6_K"),
    ("--tensor-type", "ATTN_Q=iq4_nl", "--pure"),
    ("--leave-output-tensor",),
]


@pytest.mark.parametrize("ftype", ["Q4_K_M", "Q3_K_S", "Q8_0", "F16"])
@pytest.mark.parametrize("opts", OVERRIDES, ids=lambda o: " ".join(o))
def test_overrides_match(llamacpp_bin, synth_gqa, smol_f32, ftype, opts):
    compare(llamacpp_bin, synth_gqa, ftype, *opts)
    compare(llamacpp_bin, smol_f32, ftype, *opts)


def test_nvfp4_mix_is_the_generic_rules(synth_gqa):
    """NVFP4 (lowbit's own: llama-quantize has no target): weights NVFP4,
    the output Q6_K as any mix gives it, rows 64 does not divide Q8_0"""
    got = lowbit_types(synth_gqa, "NVFP4")
    assert got["blk.0.attn_q.weight"] == "nvfp4" and got["output.weight"] == "q6_K"
    assert got["blk.0.ffn_down.weight"] == "q8_0"  # 1376 % 64 != 0
    assert got["blk.0.attn_norm.weight"] == "f32"


def test_unknown_type_is_a_usage_error(synth_gqa):
    r = subprocess.run([LOWBIT, "quantize", str(synth_gqa), "--type", "Q4_K_Z", "--dry-run"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "Q4_K_Z" in r.stderr and "Q4_K_M" in r.stderr
