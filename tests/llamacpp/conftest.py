"""tests/llamacpp checks lowbit's GGUF against llama.cpp itself: the tools
(llama-quantize, llama-perplexity, llama-imatrix, llama-tokenize) and
libggml built from the llama.cpp that the llama-cpp-python sdist vendors
(tests/llamacpp/build_llama_cpp.sh). `make test-llamacpp` builds them (once,
cached under ~/.cache/lowbit) and sets LOWBIT_LLAMACPP to their folder.
Under plain `make test` the directory is skipped."""
import os
import pathlib

import pytest


def pytest_ignore_collect(collection_path, config):
    return None if os.environ.get("LOWBIT_LLAMACPP") else True


@pytest.fixture(scope="session")
def llamacpp_bin():
    """The folder holding llama-quantize & co. and libggml*.so."""
    path = pathlib.Path(os.environ["LOWBIT_LLAMACPP"])
    if not (path / "llama-quantize").exists():
        pytest.fail(f"LOWBIT_LLAMACPP={path} has no llama-quantize: run `make llamacpp`")
    return path
