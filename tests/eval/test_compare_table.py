"""lowbit compare (issue 12, item 19): --spec-embed/--spec-head apply to every
row (never to the model as stored) and count in bits, size and SQNR; KLD
comes with its standard error (a +/- column, kld_err in JSON, equal to
lowbit kld's); the table stays aligned for long spec names; progress
between rows."""
import json
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
STORIES = ROOT / "models/stories260K.bin"
TEXT = ROOT / "models/tinystories-valid-excerpt.txt"
WINDOWS = ["--text", TEXT, "--ctx", 64, "--chunks", 4]


def lowbit(*args):
    p = subprocess.run([LOWBIT, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p


def as_json(*args):
    return json.loads(lowbit(*args, "--json").stdout)


def test_spec_embed_applies_to_the_rows_not_to_the_model_as_stored():
    plain = as_json("compare", STORIES, *WINDOWS, "--spec", "int8")
    embed = as_json("compare", STORIES, *WINDOWS, "--spec", "int8", "--spec-embed", "int4:g32")
    stored = as_json("ppl", STORIES, *WINDOWS)
    assert embed["ppl"] == stored["ppl"] == plain["ppl"]  # the first row is the model as stored
    assert embed["spec_embed"] == "int4:g32" and plain["spec_embed"] == ""
    row, ref = embed["specs"][0], plain["specs"][0]
    # the row runs as ppl runs it with the same options
    assert row["ppl"] == as_json("ppl", STORIES, *WINDOWS, "--spec", "int8", "--spec-embed", "int4:g32")["ppl"]
    assert row["kld_mean"] > ref["kld_mean"]
    # the embedding (512 x 64 fp32, tied: it is the head too) counts in size, bits and SQNR:
    # int4:g32 holds 4 bits per weight and an fp32 scale per 32
    emb = 512 * 64
    assert ref["size_bytes"] - row["size_bytes"] == pytest.approx(emb * 4 - emb * (4 + 32 / 32) / 8, rel=1e-9)
    assert row["bits_per_weight"] < ref["bits_per_weight"] and row["sqnr_db"] < ref["sqnr_db"]


def test_spec_head_of_a_tied_model_is_the_embedding_spec():
    # stories260K ties its head to the embedding: the runner applies --spec-embed to it, so --spec-head changes nothing
    a = as_json("compare", STORIES, *WINDOWS, "--spec", "int8", "--spec-head", "int4:g32")
    b = as_json("compare", STORIES, *WINDOWS, "--spec", "int8")
    assert a["spec_head"] == "int4:g32"
    assert a["specs"][0]["size_bytes"] == b["specs"][0]["size_bytes"] and a["specs"][0]["kld_mean"] == b["specs"][0]["kld_mean"]


def test_kld_has_its_standard_error_as_lowbit_kld_reports_it():
    row = as_json("compare", STORIES, *WINDOWS, "--spec", "int4:g32")["specs"][0]
    kld = as_json("kld", STORIES, *WINDOWS, "--spec", "int4:g32")
    assert row["kld_err"] == pytest.approx(kld["kld_err"], rel=1e-9) and row["kld_err"] > 0
    assert row["kld_mean"] == pytest.approx(kld["kld_mean"], rel=1e-9)


def test_table_is_aligned_for_long_spec_names():
    specs = "int8,int4:g128:affine:clip=mse,mxfp4"
    out = lowbit("compare", STORIES, *WINDOWS, "--spec", specs).stdout
    lines = out.splitlines()
    head = next(i for i, l in enumerate(lines) if l.startswith("spec "))
    header, stored, rows = lines[head], lines[head + 1], lines[head + 2:head + 5]
    assert [r.split()[0] for r in rows] == specs.split(",")
    # every column ends where its header ends (numbers are right-aligned)
    ends = lambda line: [m.end() for m in re.finditer(r"\S+", line)][1:]
    header_ends = [m.end() for m in re.finditer(r"\S+(?: \S+)?(?=\s{2,}|$)", header)][1:]
    assert "KLD       +/-" in header
    for r in rows:
        assert len(r) == len(header) and ends(r) == header_ends, (r, header)
    assert stored.startswith("(as stored) ") and ends(stored)[1:] == [header_ends[i] for i in (1, 3, 4)]
    kld_err = float(rows[1].split()[-2])
    assert kld_err > 0


def test_progress_between_rows():
    p = lowbit("compare", STORIES, *WINDOWS, "--spec", "int8,int4:g32")
    rows = re.findall(r"^lowbit compare: spec (\d+)/(\d+), .* elapsed, ETA .*; (\S+)$", p.stderr, re.M)
    assert rows == [("1", "2", "int8"), ("2", "2", "int4:g32")], p.stderr
    windows = re.findall(r"^lowbit compare: window (\d+)/4, .*; spec (\d)/2 (\S+)$", p.stderr, re.M)
    assert ("4", "1", "int8") in windows and ("4", "2", "int4:g32") in windows


def test_the_header_says_a_tied_head_takes_no_spec_of_its_own():
    out = lowbit("compare", STORIES, *WINDOWS, "--spec", "int8", "--spec-head", "int4:g32").stdout
    assert "head tied to the embedding (--spec-head has none to quantize)" in out.splitlines()[0]
