"""ctypes binding of lowbit's model API (lb_model_*), for the model tests."""
import ctypes
import json
import os
import pathlib
import subprocess

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
LOWBIT = str(BUILD / "lowbit")
SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
STORIES = ROOT / "models/stories260K.bin"
MAX_DIMS = 8

DTYPES = ["f32", "f16", "bf16", "f64", "f8_e4m3", "f8_e5m2", "i8", "i16", "i32", "i64", "u8", "bool",
          "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "mxfp4", "nvfp4",
          "iq4_nl", "iq4_xs", "quantized"]


class Tensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("file_name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("n_dims", ctypes.c_int),
        ("shape", ctypes.c_uint64 * MAX_DIMS),
        ("n_elements", ctypes.c_uint64),
        ("n_bytes", ctypes.c_uint64),
        ("data", ctypes.c_void_p),
    ]


class Arch(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 32),
        ("n_layers", ctypes.c_uint32), ("dim", ctypes.c_uint32), ("hidden_dim", ctypes.c_uint32),
        ("n_heads", ctypes.c_uint32), ("n_kv_heads", ctypes.c_uint32), ("head_dim", ctypes.c_uint32),
        ("vocab_size", ctypes.c_uint32), ("max_seq_len", ctypes.c_uint32),
        ("rope_theta", ctypes.c_double), ("norm_eps", ctypes.c_double),
        ("tied_embeddings", ctypes.c_int), ("qkv_bias", ctypes.c_int), ("qk_norm", ctypes.c_int),
        ("rope_layout", ctypes.c_int),
    ]


lib = ctypes.CDLL(str(BUILD / "liblowbit.so"))
lib.lb_last_error.restype = ctypes.c_char_p
lib.lb_model_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
lib.lb_model_close.argtypes = [ctypes.c_void_p]
lib.lb_model_arch.restype = ctypes.POINTER(Arch)
lib.lb_model_arch.argtypes = [ctypes.c_void_p]
lib.lb_model_get_kind.argtypes = [ctypes.c_void_p]
lib.lb_model_tensor_count.restype = ctypes.c_size_t
lib.lb_model_tensor_count.argtypes = [ctypes.c_void_p]
lib.lb_model_tensor.restype = ctypes.POINTER(Tensor)
lib.lb_model_tensor.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
lib.lb_tensor_to_f32.argtypes = [ctypes.POINTER(Tensor), ctypes.c_void_p]
lib.lb_name_from_gguf.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
lib.lb_name_to_gguf.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]


class Model:
    """An open lb_model; tensors as (name, file_name, dtype, shape, fp32 values)."""

    def __init__(self, path):
        h = ctypes.c_void_p()
        st = lib.lb_model_open(str(path).encode(), ctypes.byref(h))
        if st != 0:
            raise OSError(lib.lb_last_error().decode())
        self.h = h

    def close(self):
        if self.h:
            lib.lb_model_close(self.h)
            self.h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def arch(self):
        return lib.lb_model_arch(self.h).contents

    def __len__(self):
        return lib.lb_model_tensor_count(self.h)

    def tensor(self, i):
        return lib.lb_model_tensor(self.h, i).contents

    def tensors(self):
        return [self.tensor(i) for i in range(len(self))]

    def values(self, t):
        out = np.empty(t.n_elements, dtype=np.float32)
        st = lib.lb_tensor_to_f32(ctypes.byref(t), out.ctypes.data)
        assert st == 0, lib.lb_last_error().decode()
        return out.reshape([t.shape[d] for d in range(t.n_dims)])

    def raw(self, t):
        return ctypes.string_at(t.data, t.n_bytes)


def shape(t):
    return tuple(t.shape[d] for d in range(t.n_dims))


def name_from_gguf(name):
    buf = ctypes.create_string_buffer(256)
    mapped = lib.lb_name_from_gguf(name.encode(), buf, 256)
    return buf.value.decode(), mapped


def name_to_gguf(name):
    buf = ctypes.create_string_buffer(256)
    mapped = lib.lb_name_to_gguf(name.encode(), buf, 256)
    return buf.value.decode(), mapped


def run(*args, check=True):
    """Runs the CLI; returns (exit code, stdout, stderr)."""
    p = subprocess.run([LOWBIT, *map(str, args)], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
    return p.returncode, p.stdout, p.stderr


def run_json(*args):
    return json.loads(run(*args)[1])


def permute_to_adjacent(w, n_head):
    """llama.cpp convert_hf_to_gguf's q/k permutation (half-split rotary
    pairs -> adjacent), written from its definition."""
    rows = w.shape[0]
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def permute_to_half(w, n_head):
    rows = w.shape[0]
    return (w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))
