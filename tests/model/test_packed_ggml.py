"""The runner on a GGUF's ggml block types held packed (lb__qmat_from_ggml,
the file's bytes read in place): a small random Llama whose matrices are in
every ggml block type lowbit reads, with an untied Q8_0 embedding and an
NVFP4 head, and llama.cpp's per-tensor ".scale" tensors (NVFP4's second
level) on some of them.

 - the logits of lb_runner_forward match the float64 reference
   (reference_llama.py) run on gguf's dequantization of the same bytes,
   each product times its tensor's scale, both for one prefill pass and for
   single-token decode steps (the decode kernels, gdot.h);
 - prefill on the packed weights equals, bit for bit, the runner holding
   fp32 copies (fake = 1): the panels are the same values;
 - lb_runner_memory counts the file's bytes of the matrices, all packed;
 - a tied head with an output scale is refused, as llama.cpp refuses it."""
import ctypes
import os
import pathlib
import sys

import gguf
import gguf.quants
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import reference_llama as ref  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
TOL = 1e-4  # max |diff| / range of the reference logits at each position (test_forward_reference's bound)
Q = gguf.GGMLQuantizationType

DIM, HIDDEN, LAYERS, HEADS, KV, VOCAB = 256, 512, 2, 4, 2, 300
HD = DIM // HEADS

# (type, magnitude of its fp16 scale fields) so that values stay near 1/sqrt(in)
FP16_FIELDS = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0], Q.Q2_K: [80, 82],
               Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}
SCALE_OF = {Q.Q4_0: 0.008, Q.Q4_1: 0.005, Q.Q5_0: 0.004, Q.Q5_1: 0.003, Q.Q8_0: 5e-4, Q.Q2_K: 1.5e-3,
            Q.Q3_K: 5e-4, Q.Q4_K: 1e-4, Q.Q5_K: 5e-5, Q.Q6_K: 2e-5}

# per layer: q, k, v, o, gate, up, down; a second member is the tensor's .scale
LAYER_TYPES = [
    [(Q.Q4_K, None), (Q.Q6_K, None), (Q.Q5_K, None), (Q.Q8_0, None), (Q.Q4_0, None), (Q.NVFP4, 0.37),
     (Q.MXFP4, None)],
    [(Q.Q2_K, None), (Q.Q3_K, None), (Q.Q5_0, 1.5), (Q.Q5_1, None), (Q.Q4_1, None), (Q.Q6_K, None),
     (Q.NVFP4, 2.25)],
]
NAMES = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def random_blocks(rng, qtype, rows, cols):
    """rows x cols of qtype as random codes with scales of a sane size: the
    byte image a GGUF stores, and gguf's dequantization of it."""
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, cols // block, nbytes), dtype=np.uint8)
    if qtype in FP16_FIELDS:
        for off in FP16_FIELDS[qtype]:
            d = (SCALE_OF[qtype] * rng.uniform(0.5, 1.5, size=raw.shape[:2])).astype(np.float16)
            if qtype in (Q.Q4_1, Q.Q5_1) and off == 2:  # the minimum: about -16 steps
                d = (-16 * SCALE_OF[qtype] * rng.uniform(0.5, 1.5, size=raw.shape[:2])).astype(np.float16)
            raw[:, :, off:off + 2] = d.view(np.uint8).reshape(rows, cols // block, 2)
    elif qtype == Q.MXFP4:
        raw[:, :, 0] = rng.integers(119, 123, size=raw.shape[:2])  # 2^-8 .. 2^-5, halved by the format
    elif qtype == Q.NVFP4:
        raw[:, :, 0:4] = rng.integers(0x08, 0x20, size=raw.shape[:2] + (4,))  # ue4m3 2^-6 .. 2^-3
    raw = raw.reshape(rows, -1)
    return raw, gguf.quants.dequantize(raw, qtype).astype(np.float64).reshape(rows, cols)


def build(path, tied_head_scale=False):
    """The GGUF at path and the reference's float64 weights."""
    rng = np.random.default_rng(14)
    w = gguf.GGUFWriter(str(path), "llama")
    for k, v in {"block_count": LAYERS, "embedding_length": DIM, "feed_forward_length": HIDDEN,
                 "attention.head_count": HEADS, "attention.head_count_kv": KV, "context_length": 256,
                 "vocab_size": VOCAB, "rope.dimension_count": HD}.items():
        w.add_uint32(f"llama.{k}", v)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32("llama.rope.freq_base", 10000.0)

    def norm(n):
        return (1 + 0.2 * rng.normal(size=n)).astype(np.float32)

    def matrix(name, qtype, rows, cols, scale):
        raw, values = random_blocks(rng, qtype, rows, cols)
        w.add_tensor(name + ".weight", raw, raw_dtype=qtype)
        if scale is not None:
            w.add_tensor(name + ".scale", np.array([scale], dtype=np.float32))
            values = values * np.float64(np.float32(scale))
        return values

    embed_raw, embed = random_blocks(rng, Q.Q8_0, VOCAB, DIM)
    embed *= 40  # Q8_0 values near 0.06: rows of a sane norm before the first RMSNorm
    embed_raw = gguf.quants.quantize(embed.astype(np.float32), Q.Q8_0)
    embed = gguf.quants.dequantize(embed_raw, Q.Q8_0).astype(np.float64)
    w.add_tensor("token_embd.weight", embed_raw, raw_dtype=Q.Q8_0)
    layers = []
    shapes = [(HEADS * HD, DIM), (KV * HD, DIM), (KV * HD, DIM), (DIM, HEADS * HD), (HIDDEN, DIM), (HIDDEN, DIM),
              (DIM, HIDDEN)]
    for i in range(LAYERS):
        an, fn = norm(DIM), norm(DIM)
        w.add_tensor(f"blk.{i}.attn_norm.weight", an)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", fn)
        m = [matrix(f"blk.{i}.{NAMES[j]}", t, *shapes[j], s) for j, (t, s) in enumerate(LAYER_TYPES[i])]
        layers.append(ref.Layer(attn_norm=an.astype(np.float64), wq=m[0], wk=m[1], wv=m[2], wo=m[3],
                                ffn_norm=fn.astype(np.float64), w_gate=m[4], w_up=m[5], w_down=m[6]))
    fnorm = norm(DIM)
    w.add_tensor("output_norm.weight", fnorm)
    if tied_head_scale:
        w.add_tensor("output.scale", np.array([0.5], dtype=np.float32))
        head = embed
    else:
        head = matrix("output", Q.NVFP4, VOCAB, DIM, 0.8)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    cfg = ref.Config(dim=DIM, hidden_dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, n_kv_heads=KV, head_dim=HD,
                     vocab_size=VOCAB, max_seq_len=256, norm_eps=1e-5, rope_theta=10000.0, rope_pairs="adjacent")
    return ref.Weights(cfg, embed, layers, fnorm.astype(np.float64), head)


class RunnerOptions(ctypes.Structure):
    _fields_ = [("threads", ctypes.c_int), ("attn", ctypes.c_void_p), ("mlp", ctypes.c_void_p),
                ("embed", ctypes.c_void_p), ("head", ctypes.c_void_p), ("max_ctx", ctypes.c_uint32),
                ("fake", ctypes.c_int), ("act", ctypes.c_int), ("kv", ctypes.c_int), ("progress", ctypes.c_void_p),
                ("progress_ctx", ctypes.c_void_p), ("ggml_act", ctypes.c_int),
                ("decode_act", ctypes.c_int)]


class Memory(ctypes.Structure):
    """lb_runner_memory"""
    _fields_ = [(n, ctypes.c_uint64) for n in ("weights", "weights_fp32", "other", "kv_cache", "packed_matrices",
                                               "fp32_matrices")] + [("decode_act", ctypes.c_int),
                                                                    ("int8_act_matrices", ctypes.c_uint64),
                                                                    ("int8_kernels", ctypes.c_char_p)]


lib = ctypes.CDLL(str(BUILD / "liblowbit.so"))
lib.lb_last_error.restype = ctypes.c_char_p
lib.lb_model_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
lib.lb_model_close.argtypes = [ctypes.c_void_p]
lib.lb_runner_new.argtypes = [ctypes.c_void_p, ctypes.POINTER(RunnerOptions), ctypes.POINTER(ctypes.c_void_p)]
lib.lb_runner_free.argtypes = [ctypes.c_void_p]
lib.lb_runner_forward.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.c_void_p,
                                  ctypes.c_int]
lib.lb_runner_reset.argtypes = [ctypes.c_void_p]
lib.lb_runner_memory_get.argtypes = [ctypes.c_void_p, ctypes.POINTER(Memory)]


class Runner:
    def __init__(self, path, fake=0, max_ctx=256, vocab=VOCAB):
        self.model, self.h, self.vocab = ctypes.c_void_p(), ctypes.c_void_p(), vocab
        assert lib.lb_model_open(str(path).encode(), ctypes.byref(self.model)) == 0, lib.lb_last_error()
        opts = RunnerOptions(threads=2, max_ctx=max_ctx, fake=fake)
        self.status = lib.lb_runner_new(self.model, ctypes.byref(opts), ctypes.byref(self.h))
        self.error = lib.lb_last_error().decode() if self.status else ""

    def forward(self, tokens):
        toks = np.ascontiguousarray(tokens, dtype=np.int32)
        out = np.full((toks.size, self.vocab), np.nan, dtype=np.float32)
        st = lib.lb_runner_forward(self.h, toks.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), toks.size,
                                   out.ctypes.data, 0)
        assert st == 0, lib.lb_last_error().decode()
        return out

    def reset(self):
        lib.lb_runner_reset(self.h)

    def memory(self):
        m = Memory()
        lib.lb_runner_memory_get(self.h, ctypes.byref(m))
        return m

    def close(self):
        if self.h:
            lib.lb_runner_free(self.h)
        lib.lb_model_close(self.model)


def rel_err(got, want):
    return float((np.abs(got - want) / np.ptp(want, axis=1)[:, None]).max())


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("packed") / "mixed.gguf"
    weights = build(path)
    toks = np.random.default_rng(3).integers(0, VOCAB, 40).tolist()
    return path, weights, toks, ref.Transformer(weights).forward(toks)


def test_prefill_and_decode_match_the_reference(model):
    path, _, toks, want = model
    r = Runner(path)
    try:
        assert r.status == 0, r.error
        prefill = r.forward(toks)
        lib.lb_runner_free(r.h)
        r.h = ctypes.c_void_p()
        opts = RunnerOptions(threads=2, max_ctx=256)
        assert lib.lb_runner_new(r.model, ctypes.byref(opts), ctypes.byref(r.h)) == 0
        decode = np.concatenate([r.forward([t]) for t in toks])
    finally:
        r.close()
    assert np.isfinite(prefill).all() and np.isfinite(decode).all()
    e1, e2 = rel_err(prefill, want), rel_err(decode, want)
    print(f"prefill {e1:.3g}, decode {e2:.3g} of the logits' range")
    assert e1 < TOL and e2 < TOL, (e1, e2)


def test_the_scales_matter(model, tmp_path):
    """the check above could not pass with the .scale tensors ignored"""
    _, _, toks, want = model
    unscaled = build(tmp_path / "same.gguf")  # the same bytes (same seed)
    for i, row in enumerate(LAYER_TYPES):
        for j, (_, s) in enumerate(row):
            if s is not None:
                attr = ["wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"][j]
                setattr(unscaled.layers[i], attr, getattr(unscaled.layers[i], attr) / np.float64(np.float32(s)))
    unscaled.head = unscaled.head / np.float64(np.float32(0.8))
    assert rel_err(ref.Transformer(unscaled).forward(toks), want) > 100 * TOL


def test_prefill_equals_fp32_copies_bit_for_bit(model):
    path, _, toks, _ = model
    got = {}
    for fake in (0, 1):
        r = Runner(path, fake=fake)
        try:
            assert r.status == 0, r.error
            got[fake] = r.forward(toks)
            mem = r.memory()
        finally:
            r.close()
        if fake == 0:
            packed = mem
    assert np.array_equal(got[0].view(np.uint32), got[1].view(np.uint32))
    reader = gguf.GGUFReader(str(path))
    matrices = [t for t in reader.tensors if len(t.shape) == 2 and t.name != "token_embd.weight"]
    assert packed.packed_matrices == len(matrices) == 7 * LAYERS + 1 and packed.fp32_matrices == 0
    assert packed.weights == sum(int(t.n_bytes) for t in matrices)
    assert packed.weights_fp32 == sum(4 * int(t.n_elements) for t in matrices)
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    # the embedding held as its Q8_0 bytes (the rest: norms and rotary tables), not as an fp32 copy
    assert int(embd.n_bytes) <= packed.other < int(embd.n_bytes) + 2 * VOCAB * DIM


def test_tied_head_with_an_output_scale_is_refused(tmp_path):
    path = tmp_path / "tied.gguf"
    build(path, tied_head_scale=True)
    r = Runner(path)
    try:
        assert r.status != 0 and "lm_head.scale" in r.error, r.error
    finally:
        r.close()


SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.skipif(not SMOLLM2.exists(), reason=f"{SMOLLM2} absent (make test fetches it)")
def test_smollm2_decode_steps_match_its_prefill():
    """SmolLM2's own Q4_1/Q8_0 blocks: 24 single-token decode steps (the
    register kernels) against one prefill of the same tokens (dequantized
    panels), within the decode order's rounding."""
    toks = [1, 504, 3458, 282, 2030, 314, 253, 1345, 28, 260, 2427, 7116, 282, 1112, 30, 378, 1078, 314, 3564, 288,
            3421, 253, 6005, 30]
    r = Runner(SMOLLM2, max_ctx=64, vocab=49152)
    try:
        assert r.status == 0, r.error
        m = r.memory()
        assert m.packed_matrices == 211 and m.fp32_matrices == 0
        prefill = r.forward(toks)
        r.reset()
        decode = np.concatenate([r.forward([t]) for t in toks])
    finally:
        r.close()
    err = rel_err(decode.astype(np.float64), prefill.astype(np.float64))
    print(f"SmolLM2 decode vs prefill: {err:.3g} of the logits' range")
    assert 0 < err < TOL  # not equal (another summation order), and close
