"""The malformed-file corpus (tests/corpus/*/): every file is refused by
`lowbit inspect` with its own message, exit status 1, nothing on stdout,
and the file untouched."""
import hashlib
import json
import os
import pathlib
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import model_lib as ml  # noqa: E402

CORPUS = ml.ROOT / "tests/corpus"


def cases():
    out = []
    for tsv in sorted(CORPUS.glob("*/EXPECTED.tsv")):
        for line in tsv.read_text().splitlines():
            if line.strip():
                name, expect = line.split("\t", 1)
                out.append(pytest.param(tsv.parent / name, expect, id=f"{tsv.parent.name}/{name}"))
    return out


CASES = cases()


def test_corpus_is_big_enough_and_messages_distinct():
    assert len(CASES) >= 15
    for kind in ["gguf", "safetensors", "llama2c"]:
        assert (CORPUS / kind / "EXPECTED.tsv").exists(), kind


@pytest.mark.parametrize("path,expect", CASES)
def test_malformed_file_is_refused_clearly(path, expect):
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    listing = sorted(p.name for p in path.parent.iterdir())
    code, out, err = ml.run("inspect", path, check=False)
    assert code == 1 and out == ""
    assert expect in err, err
    assert err.startswith("lowbit inspect: ") and str(path) in err
    code, out, _ = ml.run("inspect", path, "--json", check=False)
    assert code == 1 and expect in json.loads(out)["error"]["message"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in path.parent.iterdir()) == listing
