"""tests/interop needs the real readers (torch, compressed-tensors, ...):
`make test-interop` runs it in their environment. Under plain `make test`
(no torch) the whole directory is skipped, unless LOWBIT_INTEROP=1 says the
environment must be there (then a missing package fails loudly)."""
import importlib.util
import os


def pytest_ignore_collect(collection_path, config):
    if os.environ.get("LOWBIT_INTEROP") == "1":
        return None
    return True if importlib.util.find_spec("torch") is None else None
