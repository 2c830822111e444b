"""make install puts the library, header, CLI and pkg-config file under
PREFIX, and a program builds against them with pkg-config."""
import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.skipif(os.environ.get("LOWBIT_SANITIZED") == "1", reason="install uses the plain build")
def test_install_and_build_against_pkg_config(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["make", "-s", "install", f"PREFIX={prefix}"], cwd=ROOT, check=True, capture_output=True)
    for rel in ("lib/liblowbit.a", "lib/liblowbit.so", "include/lowbit.h", "bin/lowbit", "lib/pkgconfig/lowbit.pc"):
        assert (prefix / rel).exists(), rel
    # the shared library under its version, its SONAME link and the link the linker finds
    version = re.search(r'LOWBIT_VERSION_STRING "([^"]+)"', (ROOT / "include/lowbit.h").read_text()).group(1)
    major = version.split(".")[0]
    assert (prefix / f"lib/liblowbit.so.{version}").is_file()
    assert os.readlink(prefix / f"lib/liblowbit.so.{major}") == f"liblowbit.so.{version}"
    assert os.readlink(prefix / "lib/liblowbit.so") == f"liblowbit.so.{major}"
    pc = (prefix / "lib/pkgconfig/lowbit.pc").read_text()
    assert f"prefix={prefix}" in pc and "Version: 0." in pc
    if shutil.which("pkg-config"):
        env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib/pkgconfig"))
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "--static", "lowbit"], env=env, check=True,
                               capture_output=True, text=True).stdout.split()
    else:  # the same flags the .pc file states
        flags = [f"-I{prefix}/include", f"-L{prefix}/lib", "-llowbit", "-lm", "-lpthread"]
    exe = tmp_path / "roundtrip"
    subprocess.run(["cc", "-std=c11", str(ROOT / "examples/roundtrip.c"), "-o", str(exe), *flags, "-static-libgcc",
                    f"-Wl,-rpath,{prefix}/lib"], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert out.startswith("fp8_e4m3 (max 448): 1000 values, 1000 bytes, SQNR ")
    assert float(out.split("SQNR ")[1].split()[0]) > 25  # 3 mantissa bits: about 30 dB
    assert subprocess.run([str(prefix / "bin/lowbit"), "--version"], capture_output=True).returncode == 0
    # without an rpath the program finds the library through LD_LIBRARY_PATH (README, "Installing")
    bare = tmp_path / "roundtrip-bare"
    subprocess.run(["cc", "-std=c11", str(ROOT / "examples/roundtrip.c"), "-o", str(bare), f"-I{prefix}/include",
                    f"-L{prefix}/lib", "-llowbit", "-lm", "-lpthread"], check=True)
    if shutil.which("readelf"):
        dyn = subprocess.run(["readelf", "-d", str(bare)], capture_output=True, text=True, check=True).stdout
        assert f"Shared library: [liblowbit.so.{major}]" in dyn
    env = dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib"))
    run = subprocess.run([str(bare)], capture_output=True, text=True, env=env)
    assert run.returncode == 0 and run.stdout == out, run.stderr
