"""An independent numpy reference of the Llama forward pass: the oracle that
lowbit's runner (lb_runner_forward) is tested against.

Written from the published definitions, not from lowbit's C code:

* Karpathy's llama2.c `run.c` for legacy llama2.c checkpoints: a header of
  7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size --
  negative when the classifier is not shared with the embedding --,
  seq_len), then fp32 arrays in a fixed order; rotary embedding on
  ADJACENT pairs (2i, 2i+1) of each head with theta 10000.
* Hugging Face transformers' `LlamaForCausalLM` (modeling_llama.py) for a
  directory with config.json and safetensors: rotary embedding on
  HALF-SPLIT pairs (i, i + head_dim/2) (`rotate_half`), `rope_theta` and
  `rms_norm_eps` from config.json, a tied or untied head, optional q/k/v
  biases (Qwen2), per-head q/k RMSNorm (Qwen3), and Llama-3 rope scaling.

Both are the same network otherwise -- RMSNorm, causal grouped-query
attention (query head h reads KV head h // (n_heads / n_kv_heads)),
SwiGLU MLP -- so they share one forward pass that only differs in which
pairs the rotary embedding turns.

Arithmetic is float64 throughout. The weights are read as the file stores
them (fp32, fp16 or bf16, all exactly representable in float64); the
runner under test computes in fp32. An fp32 oracle would add rounding of
the same size as the implementation's own, so a difference could come
from either side; in float64 the oracle's error is ~1e-16 relative and
every measured difference is the tested code's. The cost -- twice the
memory and time of fp32 -- is small for the models the tests use (1 GiB
for SmolLM2-135M).
"""
import json
import math
import pathlib
import re
from dataclasses import dataclass, field

import numpy as np

F = np.float64


@dataclass
class Config:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    max_seq_len: int
    norm_eps: float
    rope_theta: float
    rope_pairs: str                  # "adjacent" (llama2.c, GGUF) or "half" (Hugging Face)
    rope_scaling: dict = None        # config.json's rope_scaling (llama3 only), or None


@dataclass
class Layer:
    attn_norm: np.ndarray            # [dim]
    wq: np.ndarray                   # [n_heads * head_dim, dim]  (out, in)
    wk: np.ndarray                   # [n_kv_heads * head_dim, dim]
    wv: np.ndarray                   # [n_kv_heads * head_dim, dim]
    wo: np.ndarray                   # [dim, n_heads * head_dim]
    ffn_norm: np.ndarray             # [dim]
    w_gate: np.ndarray               # [hidden, dim]  llama2.c w1
    w_up: np.ndarray                 # [hidden, dim]  llama2.c w3
    w_down: np.ndarray               # [dim, hidden]  llama2.c w2
    bq: np.ndarray = None            # biases, where the checkpoint has them
    bk: np.ndarray = None
    bv: np.ndarray = None
    bo: np.ndarray = None
    q_norm: np.ndarray = None        # [head_dim] (Qwen3)
    k_norm: np.ndarray = None


@dataclass
class Weights:
    config: Config
    embed: np.ndarray                # [vocab, dim]
    layers: list
    final_norm: np.ndarray           # [dim]
    head: np.ndarray                 # [vocab, dim]; the embedding itself when tied
    extra: dict = field(default_factory=dict)  # anything else read (llama2.c's stored rotary tables)


# ---------------------------------------------------------------- llama2.c

def load_llama2c(path):
    """A legacy llama2.c checkpoint (run.c's layout), as float64 Weights."""
    path = pathlib.Path(path)
    header = np.fromfile(path, dtype="<i4", count=7)
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = (int(v) for v in header)
    shared = vocab > 0  # run.c: a negative vocab_size means the file ends with wcls
    vocab = abs(vocab)
    hs = dim // n_heads
    kv_dim = n_kv * hs
    data = np.fromfile(path, dtype="<f4", offset=7 * 4)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = math.prod(shape)
        if pos + n > data.size:
            raise ValueError(f"{path}: ends at float {data.size}, needs {pos + n} for shape {shape}")
        out = data[pos:pos + n].reshape(shape).astype(F)
        pos += n
        return out

    embed = take(vocab, dim)
    rms_att = take(n_layers, dim)
    wq = take(n_layers, dim, dim)          # matmul(q, x, wq, dim, dim): rows are outputs
    wk = take(n_layers, kv_dim, dim)
    wv = take(n_layers, kv_dim, dim)
    wo = take(n_layers, dim, dim)
    rms_ffn = take(n_layers, dim)
    w1 = take(n_layers, hidden, dim)
    w2 = take(n_layers, dim, hidden)
    w3 = take(n_layers, hidden, dim)
    rms_final = take(dim)
    freq_real = take(seq_len, hs // 2)     # run.c skips these and recomputes them
    freq_imag = take(seq_len, hs // 2)
    head = embed if shared else take(vocab, dim)
    if pos != data.size:
        raise ValueError(f"{path}: {data.size - pos} floats left after the last tensor")

    cfg = Config(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
                 head_dim=hs, vocab_size=vocab, max_seq_len=seq_len, norm_eps=1e-5,
                 rope_theta=10000.0, rope_pairs="adjacent")
    layers = [Layer(attn_norm=rms_att[i], wq=wq[i], wk=wk[i], wv=wv[i], wo=wo[i], ffn_norm=rms_ffn[i],
                    w_gate=w1[i], w_up=w3[i], w_down=w2[i]) for i in range(n_layers)]
    return Weights(cfg, embed, layers, rms_final, head,
                   extra={"freq_cis_real": freq_real, "freq_cis_imag": freq_imag, "shared_classifier": shared})


def load_llama2c_tokenizer(path, vocab_size):
    """llama2.c's tokenizer.bin: int32 max_token_length, then per token a
    float32 score, an int32 length and the bytes. Returns the pieces."""
    raw = pathlib.Path(path).read_bytes()
    off = 4
    pieces = []
    for _ in range(vocab_size):
        length = int(np.frombuffer(raw, "<i4", 1, off + 4)[0])
        pieces.append(raw[off + 8:off + 8 + length])
        off += 8 + length
    return pieces


def decode_llama2c(pieces, tokens, bos=1):
    """Tokens to bytes as run.c's decode prints them: after BOS a piece's
    leading space is dropped; <0xNN> pieces are the raw byte."""
    out = b""
    prev = bos
    for t in tokens:
        piece = pieces[t]
        if prev == bos and piece.startswith(b" "):
            piece = piece[1:]
        m = re.fullmatch(rb"<0x([0-9A-Fa-f]{2})>", piece)
        out += bytes([int(m.group(1), 16)]) if m else piece
        prev = t
    return out


# ---------------------------------------------------------- Hugging Face

def read_safetensors_dir(directory):
    """name -> numpy array for every tensor of a Hugging Face directory
    (model.safetensors, or the shards model.safetensors.index.json names)."""
    from safetensors.numpy import load_file

    directory = pathlib.Path(directory)
    index = directory / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() \
        else ["model.safetensors"]
    tensors = {}
    for f in files:
        tensors.update(load_file(str(directory / f)))
    return tensors


def load_hf(directory):
    """A Hugging Face Llama-family directory (llama, mistral, qwen2, qwen3)
    as float64 Weights, following LlamaForCausalLM's definition."""
    directory = pathlib.Path(directory)
    c = json.loads((directory / "config.json").read_text())
    if c.get("hidden_act", "silu") != "silu":
        raise NotImplementedError(f"hidden_act {c['hidden_act']}")
    scaling = c.get("rope_scaling")
    if scaling is not None:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind == "default":
            scaling = None
        elif kind != "llama3":
            raise NotImplementedError(f"rope_scaling type {kind}")
    n_heads = c["num_attention_heads"]
    cfg = Config(dim=c["hidden_size"], hidden_dim=c["intermediate_size"], n_layers=c["num_hidden_layers"],
                 n_heads=n_heads, n_kv_heads=c.get("num_key_value_heads") or n_heads,
                 head_dim=c.get("head_dim") or c["hidden_size"] // n_heads, vocab_size=c["vocab_size"],
                 max_seq_len=c.get("max_position_embeddings", 0), norm_eps=float(c.get("rms_norm_eps", 1e-6)),
                 rope_theta=float(c.get("rope_theta", 10000.0)), rope_pairs="half", rope_scaling=scaling)
    t = read_safetensors_dir(directory)

    def get(name, required=True):
        if name not in t:
            if required:
                raise KeyError(f"{directory}: no tensor {name}")
            return None
        return np.asarray(t[name]).astype(F)

    layers = []
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}."
        layers.append(Layer(
            attn_norm=get(p + "input_layernorm.weight"),
            wq=get(p + "self_attn.q_proj.weight"), wk=get(p + "self_attn.k_proj.weight"),
            wv=get(p + "self_attn.v_proj.weight"), wo=get(p + "self_attn.o_proj.weight"),
            bq=get(p + "self_attn.q_proj.bias", False), bk=get(p + "self_attn.k_proj.bias", False),
            bv=get(p + "self_attn.v_proj.bias", False), bo=get(p + "self_attn.o_proj.bias", False),
            q_norm=get(p + "self_attn.q_norm.weight", False), k_norm=get(p + "self_attn.k_norm.weight", False),
            ffn_norm=get(p + "post_attention_layernorm.weight"),
            w_gate=get(p + "mlp.gate_proj.weight"), w_up=get(p + "mlp.up_proj.weight"),
            w_down=get(p + "mlp.down_proj.weight")))
    embed = get("model.embed_tokens.weight")
    # LlamaConfig's default is untied; an untied model without lm_head would
    # be randomly initialised by transformers -- no oracle for that.
    head = embed if c.get("tie_word_embeddings", False) else get("lm_head.weight")
    return Weights(cfg, embed, layers, get("model.norm.weight"), head)


# ------------------------------------------------------------ the network

def rms_norm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last axis"""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    """x * sigmoid(x), with the sigmoid computed without overflow"""
    return x * np.exp(-np.logaddexp(0.0, -x))


def rope_frequencies(cfg):
    """Angle per position of each rotary pair j: theta^(-2j/head_dim)
    (run.c: 1/10000^((i % head_size)/head_size) for even i; HF: inv_freq),
    then Llama-3 scaling where config.json asks for it."""
    j = np.arange(cfg.head_dim // 2, dtype=F)
    inv = cfg.rope_theta ** (-2.0 * j / cfg.head_dim)
    s = cfg.rope_scaling
    if s is not None:  # rope_type "llama3": long wavelengths slowed by factor, a smooth ramp between
        factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
        old_ctx = float(s["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        smooth = (old_ctx / wavelen - low) / (high - low)
        scaled = np.where(wavelen > old_ctx / low, inv / factor, inv)
        medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
        inv = np.where(medium, (1 - smooth) * inv / factor + smooth * inv, scaled)
    return inv


def apply_rope(x, positions, inv_freq, pairs):
    """Rotates each pair of x [n, heads, head_dim] by position * frequency.
    adjacent: pair j is (2j, 2j+1); half: pair j is (j, j + head_dim/2)."""
    ang = positions.astype(inv_freq.dtype)[:, None] * inv_freq[None, :]
    c = np.cos(ang)[:, None, :]
    s = np.sin(ang)[:, None, :]
    if pairs == "adjacent":
        a, b = x[..., 0::2], x[..., 1::2]
    elif pairs == "half":
        h = x.shape[-1] // 2
        a, b = x[..., :h], x[..., h:]
    else:
        raise ValueError(pairs)
    ra, rb = a * c - b * s, a * s + b * c
    out = np.empty_like(x)
    if pairs == "adjacent":
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., :h], out[..., h:] = ra, rb
    return out


def linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


class Transformer:
    """The forward pass with a KV cache: forward() runs tokens after those
    already cached, as lb_runner_forward does, and returns every position's
    logits [n, vocab] (float64). dtype=np.float32 runs the same arithmetic
    in fp32 instead: the tests use it to show their bounds leave room for
    an fp32 implementation's rounding."""

    def __init__(self, weights, dtype=F):
        self.dt = np.dtype(dtype)
        if self.dt != F:
            weights = cast_weights(weights, self.dt)
        self.w = weights
        self.cfg = weights.config
        self.inv_freq = rope_frequencies(self.cfg).astype(self.dt)
        self.reset()

    def reset(self):
        shape = (0, self.cfg.n_kv_heads, self.cfg.head_dim)
        self.k = [np.zeros(shape, self.dt) for _ in self.w.layers]
        self.v = [np.zeros(shape, self.dt) for _ in self.w.layers]

    @property
    def position(self):
        return self.k[0].shape[0] if self.k else 0

    def forward(self, tokens):
        cfg, w = self.cfg, self.w
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if tokens.size == 0:
            return np.zeros((0, cfg.vocab_size), self.dt)
        if tokens.min() < 0 or tokens.max() >= cfg.vocab_size:
            raise ValueError("token id out of range")
        n, start = tokens.size, self.position
        positions = np.arange(start, start + n)
        H, KV, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        rep = H // KV
        x = w.embed[tokens]                                     # [n, dim]
        # query at position start+i sees keys at positions 0..start+i
        visible = np.arange(start + n)[None, :] <= positions[:, None]   # [n, T]
        for li, L in enumerate(w.layers):
            h = rms_norm(x, L.attn_norm, cfg.norm_eps)
            q = linear(h, L.wq, L.bq).reshape(n, H, hd)
            k = linear(h, L.wk, L.bk).reshape(n, KV, hd)
            v = linear(h, L.wv, L.bv).reshape(n, KV, hd)
            if L.q_norm is not None:
                q = rms_norm(q, L.q_norm, cfg.norm_eps)
            if L.k_norm is not None:
                k = rms_norm(k, L.k_norm, cfg.norm_eps)
            q = apply_rope(q, positions, self.inv_freq, cfg.rope_pairs)
            k = apply_rope(k, positions, self.inv_freq, cfg.rope_pairs)
            self.k[li] = K = np.concatenate([self.k[li], k])    # [T, KV, hd]
            self.v[li] = V = np.concatenate([self.v[li], v])
            qg = q.reshape(n, KV, rep, hd)                      # query head h -> KV head h // rep
            scores = np.einsum("ngrd,tgd->grnt", qg, K) / self.dt.type(math.sqrt(hd))
            scores = np.where(visible[None, None], scores, -np.inf)
            scores -= scores.max(axis=-1, keepdims=True)
            p = np.exp(scores)
            p /= p.sum(axis=-1, keepdims=True)
            att = np.einsum("grnt,tgd->ngrd", p, V).reshape(n, H * hd)
            x = x + linear(att, L.wo, L.bo)
            h = rms_norm(x, L.ffn_norm, cfg.norm_eps)
            x = x + linear(silu(linear(h, L.w_gate)) * linear(h, L.w_up), L.w_down)
        x = rms_norm(x, w.final_norm, cfg.norm_eps)
        return x @ w.head.T


def cast_weights(w, dtype):
    """a copy of w with every array in dtype (the head stays the embedding
    when tied)"""
    def c(a):
        return None if a is None else a.astype(dtype)
    layers = [Layer(**{k: c(v) for k, v in vars(L).items()}) for L in w.layers]
    embed = c(w.embed)
    return Weights(w.config, embed, layers, c(w.final_norm), embed if w.head is w.embed else c(w.head), w.extra)


def greedy(model, prompt, n_new):
    """The prompt, then n_new tokens each the argmax of the last logits (the
    lowest id on an exact tie, as numpy's argmax). Returns (tokens, the
    logits each choice was made from [n_new, vocab])."""
    model.reset()
    logits = model.forward(prompt)[-1]
    out, seen = list(prompt), []
    for i in range(n_new):
        seen.append(logits)
        t = int(np.argmax(logits))
        out.append(t)
        if i + 1 < n_new:
            logits = model.forward([t])[-1]
    return out, np.array(seen)


def permute_adjacent_to_half(w, n_heads):
    """q/k projection rows from adjacent rotary pairs to half-split ones:
    within each head, row 2j goes to j and row 2j+1 to j + head_dim/2, so
    that HF's rotate_half turns the same pairs run.c turns."""
    rows, cols = w.shape
    hd = rows // n_heads
    return w.reshape(n_heads, hd // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)
