"""ctypes access to lowbit's benchmark readers and paired statistics
(public API only). Signatures are set on every call: other test modules
share these ctypes function objects."""
import ctypes
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
lib = ctypes.CDLL(str(BUILD / "liblowbit.so"))
EVALS = ROOT / "data/evals"
KINDS = {"hellaswag": 1, "arc": 2, "mmlu": 3, "piqa": 4, "winogrande": 5, "lambada": 6, "mc": 7}
MAX_CHOICES = 16


class Item(ctypes.Structure):
    _fields_ = [("n_choices", ctypes.c_uint32), ("label", ctypes.c_uint32), ("preamble", ctypes.c_char_p),
                ("context", ctypes.c_char_p * MAX_CHOICES), ("continuation", ctypes.c_char_p * MAX_CHOICES),
                ("group", ctypes.c_char_p), ("line", ctypes.c_uint64)]


class Options(ctypes.Structure):
    _fields_ = [("mmlu_cloze", ctypes.c_int), ("labels", ctypes.c_char_p)]


class Paired(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint64), ("mean_a", ctypes.c_double), ("mean_b", ctypes.c_double),
                ("diff", ctypes.c_double), ("diff_se", ctypes.c_double), ("ci_lo", ctypes.c_double),
                ("ci_hi", ctypes.c_double), ("only_a", ctypes.c_uint64), ("only_b", ctypes.c_uint64),
                ("p_mcnemar", ctypes.c_double), ("mde", ctypes.c_double), ("significant", ctypes.c_int)]


def last_error():
    lib.lb_last_error.restype = ctypes.c_char_p
    lib.lb_last_error.argtypes = []
    return lib.lb_last_error().decode()


def _items(handle):
    lib.lb_task_size.restype = ctypes.c_size_t
    lib.lb_task_size.argtypes = [ctypes.c_void_p]
    lib.lb_task_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(Item)]
    out = []
    for i in range(lib.lb_task_size(handle)):
        it = Item()
        assert lib.lb_task_get(handle, i, ctypes.byref(it)) == 0
        n = it.n_choices
        out.append({"label": it.label, "preamble": it.preamble.decode(), "group": it.group.decode(), "line": it.line,
                    "context": [it.context[c].decode() for c in range(n)],
                    "continuation": [it.continuation[c].decode() for c in range(n)]})
    return out


def _finish(st, handle, limit=None, fewshot=None):
    if st != 0:
        return None, last_error()
    try:
        if limit is not None:
            lib.lb_task_limit.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            lib.lb_task_limit(handle, limit)
        if fewshot is not None:
            k, seed = fewshot
            lib.lb_task_fewshot.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64]
            st = lib.lb_task_fewshot(handle, handle, k, seed)
            if st != 0:
                return None, last_error()
        return _items(handle), None
    finally:
        lib.lb_task_free.argtypes = [ctypes.c_void_p]
        lib.lb_task_free(handle)


def parse(kind, text, labels=None, what="test", cloze=0, **kw):
    """(items, None) or (None, the error message)."""
    data = text if isinstance(text, bytes) else text.encode()
    lab = labels if labels is None or isinstance(labels, bytes) else labels.encode()
    lib.lb_task_parse.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.c_char_p, ctypes.POINTER(Options), ctypes.POINTER(ctypes.c_void_p)]
    h = ctypes.c_void_p()
    o = Options(cloze, None)
    st = lib.lb_task_parse(KINDS[kind], data, len(data), lab, len(lab) if lab else 0, what.encode(), ctypes.byref(o),
                           ctypes.byref(h))
    return _finish(st, h, **kw)


def load(kind, path, labels=None, cloze=0, **kw):
    lib.lb_task_load.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(Options), ctypes.POINTER(ctypes.c_void_p)]
    h = ctypes.c_void_p()
    o = Options(cloze, str(labels).encode() if labels else None)
    st = lib.lb_task_load(KINDS[kind], str(path).encode(), ctypes.byref(o), ctypes.byref(h))
    return _finish(st, h, **kw)


def mcnemar(b, c):
    lib.lb_mcnemar_exact.restype = ctypes.c_double
    lib.lb_mcnemar_exact.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    return lib.lb_mcnemar_exact(b, c)


def binomial_se(k, n):
    lib.lb_binomial_se.restype = ctypes.c_double
    lib.lb_binomial_se.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    return lib.lb_binomial_se(k, n)


def paired(a, b, binary, resamples=0, seed=0):
    import numpy as np
    a = np.ascontiguousarray(a, dtype=np.float64)
    b = np.ascontiguousarray(b, dtype=np.float64)
    P = ctypes.POINTER(ctypes.c_double)
    lib.lb_paired_compare.argtypes = [P, P, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64,
                                      ctypes.POINTER(Paired)]
    r = Paired()
    st = lib.lb_paired_compare(a.ctypes.data_as(P), b.ctypes.data_as(P), a.size, binary, resamples, seed, ctypes.byref(r))
    return (r if st == 0 else None), (None if st == 0 else last_error())
