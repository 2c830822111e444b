"""The shared library's interface (issue 12, item 16): liblowbit.so is a
link to liblowbit.so.MAJOR (its SONAME) and on to liblowbit.so.VERSION, and
it exports exactly the functions lowbit.h declares with LB_API: every
dynamic symbol it defines starts with lb_ and is declared there, and every
declaration is there (the internals, lb__*, are hidden)."""
import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
HEADER = (ROOT / "include/lowbit.h").read_text()
VERSION = re.search(r'#define LOWBIT_VERSION_STRING "([^"]+)"', HEADER).group(1)
MAJOR = VERSION.split(".")[0]


def declared():
    """Names of the functions lowbit.h declares, and those with LB_API."""
    text = re.sub(r"/\*.*?\*/", " ", HEADER, flags=re.S)
    decls = [d.strip() for d in re.split(r";", text)]
    names, marked = set(), set()
    for d in decls:
        d = d.split("\n#")[-1] if "#" in d else d
        m = re.search(r"\b(lb_\w+)\s*\(", d)
        if not m or re.search(r"\btypedef\b", d) or "(*" in d:
            continue
        names.add(m.group(1))
        if re.match(r"(?:.*\n)?\s*LB_API\b", d):
            marked.add(m.group(1))
    return names, marked


def exported():
    out = subprocess.run(["nm", "-D", "--defined-only", str(BUILD / "liblowbit.so")], capture_output=True,
                         text=True, check=True).stdout
    syms = {line.split()[-1] for line in out.splitlines() if line.strip()}
    if os.environ.get("LOWBIT_SANITIZED") == "1":  # the sanitizers' own (__asan_*, __odr_asan_*, ...)
        syms = {s for s in syms if not s.startswith("_")}
    return syms


@pytest.mark.skipif(not shutil.which("nm"), reason="needs binutils' nm")
def test_only_the_public_api_is_exported():
    names, marked = declared()
    assert len(names) > 70 and "lb_model_param_count" in names
    assert names == marked, "declared without LB_API (not exported): %s" % sorted(names - marked)
    syms = exported()
    stray = sorted(s for s in syms if not s.startswith("lb_") or s.startswith("lb__") or s not in names)
    assert not stray, "exported but not the public API: %s" % stray[:20]
    assert names <= syms, "declared but not exported: %s" % sorted(names - syms)


@pytest.mark.skipif(not shutil.which("readelf"), reason="needs binutils' readelf")
def test_soname_and_links():
    real = BUILD / f"liblowbit.so.{VERSION}"
    assert real.is_file() and not real.is_symlink()
    assert os.readlink(BUILD / f"liblowbit.so.{MAJOR}") == real.name
    assert os.readlink(BUILD / "liblowbit.so") == f"liblowbit.so.{MAJOR}"
    dyn = subprocess.run(["readelf", "-d", str(real)], capture_output=True, text=True, check=True).stdout
    assert f"Library soname: [liblowbit.so.{MAJOR}]" in dyn
