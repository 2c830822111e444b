"""The library for tests that call its internals (lb__*): liblowbit.so
exports only the public API, so these load build/tests/liblowbit_internal.so
(the whole static library, the public API exported, plus a table of
internals: tests/internal_symbols.c). `load()` gives an object used like a
ctypes.CDLL: lib.lb__st_open is the internal, lib.lb_last_error the public
function, both from the same copy of the library (one lb_last_error)."""
import ctypes
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
PATH = BUILD / "tests" / "liblowbit_internal.so"


class InternalLib:
    def __init__(self, path=PATH):
        if not pathlib.Path(path).exists():
            raise FileNotFoundError(f"{path}: build it with `make {pathlib.Path(path).relative_to(ROOT)}`")
        self._dll = ctypes.CDLL(str(path))
        self._dll.lb_test_internal.restype = ctypes.c_void_p
        self._dll.lb_test_internal.argtypes = [ctypes.c_char_p]
        self._fns = {}

    def __getattr__(self, name):
        if not name.startswith("lb__"):
            return getattr(self._dll, name)
        if name not in self._fns:
            addr = self._dll.lb_test_internal(name.encode())
            if not addr:
                raise AttributeError(f"{name} is not in tests/internal_symbols.c's table")
            self._fns[name] = ctypes.CFUNCTYPE(ctypes.c_int)(addr)  # argtypes/restype set by the caller
        return self._fns[name]


_LIB = None


def load():
    global _LIB
    if _LIB is None:
        _LIB = InternalLib()
    return _LIB
