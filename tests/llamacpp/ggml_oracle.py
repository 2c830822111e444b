"""Both quantizers side by side, for the tests and the speed report:
libggml-base.so's ggml_quantize_chunk (the pinned llama.cpp, through
ctypes) and lowbit's lb__ggml_quantize_rows (tests/internal_lib.py)."""
import ctypes
import pathlib
import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as G

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import internal_lib  # noqa: E402

LB_OK, LB_ERR_ARG, LB_ERR_NAN, LB_ERR_UNSUPPORTED = 0, 1, 3, 7


class Ggml:
    def __init__(self, bin_dir):
        self.dll = ctypes.CDLL(str(pathlib.Path(bin_dir) / "libggml-base.so"))
        f = self.dll.ggml_quantize_chunk
        f.restype = ctypes.c_size_t
        f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                      ctypes.c_void_p]

    def quantize(self, name, x, imatrix=None):
        """x: rows x cols fp32; the bytes ggml writes."""
        x = np.ascontiguousarray(x, np.float32)
        rows, cols = x.shape
        block, nbytes = GGML_QUANT_SIZES[G[name.upper()]]
        out = np.zeros(rows * cols // block * nbytes, np.uint8)
        im = None if imatrix is None else np.ascontiguousarray(imatrix, np.float32)
        n = self.dll.ggml_quantize_chunk(int(G[name.upper()]), x.ctypes.data, out.ctypes.data, 0, rows, cols,
                                         None if im is None else im.ctypes.data)
        assert n == out.size, (name, n, out.size)
        return out


class Lowbit:
    def __init__(self):
        self.lib = internal_lib.load()
        f = self.lib.lb__ggml_quantize_rows
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p,
                      ctypes.c_void_p]
        self.lib.lb_dtype_by_name.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
        self.lib.lb_last_error.restype = ctypes.c_char_p
        self.lib.lb_dtype_from_f32.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]

    def dtype(self, name):
        out = ctypes.c_int(-1)
        assert self.lib.lb_dtype_by_name(name.encode(), ctypes.byref(out)) == LB_OK, name
        return out.value

    def error(self):
        return self.lib.lb_last_error().decode()

    def quantize(self, name, x, imatrix=None, expect=LB_OK):
        """(status, bytes) of lb__ggml_quantize_rows."""
        x = np.ascontiguousarray(x, np.float32)
        rows, cols = x.shape
        block, nbytes = GGML_QUANT_SIZES[G[name.upper()]]
        out = np.zeros(rows * cols // block * nbytes, np.uint8)
        im = None if imatrix is None else np.ascontiguousarray(imatrix, np.float32)
        st = self.lib.lb__ggml_quantize_rows(self.dtype(name), x.ctypes.data, rows, cols,
                                             None if im is None else im.ctypes.data, out.ctypes.data)
        return st, out

    def from_f32(self, name, x):
        x = np.ascontiguousarray(x, np.float32).reshape(-1)
        block, nbytes = GGML_QUANT_SIZES[G[name.upper()]]
        out = np.zeros(x.size // block * nbytes, np.uint8)
        st = self.lib.lb_dtype_from_f32(self.dtype(name), x.ctypes.data, x.size, out.ctypes.data)
        assert st == LB_OK, self.error()
        return out
