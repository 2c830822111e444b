"""The lowbit CLI: output, --json, help, and bad input (clear error, right
exit code, nothing on stdout)."""
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
NAMES = ["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz", "fp6_e2m3",
         "fp6_e3m2", "fp4_e2m1", "e8m0", "ue4m3", "int8", "uint8", "int4", "uint4"]


def run(*args, stdin=None):
    return subprocess.run([LOWBIT, *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_version_and_help():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("lowbit 0.")
    r = run("--help")
    assert r.returncode == 0
    for cmd in ("formats", "cast", "grid"):
        assert cmd in r.stdout
    for args in (("help", "cast"), ("cast", "--help"), ("cast", "-h")):
        r = run(*args)
        assert r.returncode == 0 and r.stdout.startswith("usage: lowbit cast"), args
    assert run("help", "grid").stdout.startswith("usage: lowbit grid")
    assert run("formats", "--help").stdout.startswith("usage: lowbit formats")


def test_no_command_and_unknown_command_are_usage_errors():
    r = run()
    assert r.returncode == 2 and r.stdout == "" and "usage" in r.stderr
    r = run("frobnicate")
    assert r.returncode == 2 and r.stdout == "" and "unknown command 'frobnicate'" in r.stderr
    r = run("help", "frobnicate")
    assert r.returncode == 2 and r.stdout == ""


def test_formats_table_lists_every_format():
    r = run("formats")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["name", "bits", "s/e/m"]
    assert [l.split()[0] for l in lines[1:]] == NAMES
    e4m3 = next(l for l in lines if l.startswith("fp8_e4m3 "))
    assert e4m3.split()[1:4] == ["8", "1/4/3", "7"] and " 448 " in e4m3 and e4m3.split()[-1] == "253"


def test_formats_json():
    r = run("formats", "--json")
    assert r.returncode == 0
    rows = {f["name"]: f for f in json.loads(r.stdout)["formats"]}
    assert list(rows) == NAMES
    assert rows["fp8_e4m3"]["max_finite"] == 448 and rows["fp8_e4m3"]["specials"] == "fn"
    assert rows["fp8_e5m2"]["max_finite"] == 57344 and rows["fp8_e5m2"]["specials"] == "ieee"
    assert rows["fp8_e4m3fnuz"]["max_finite"] == 240 and rows["fp8_e4m3fnuz"]["bias"] == 8
    assert rows["fp6_e2m3"]["max_finite"] == 7.5 and rows["fp6_e3m2"]["max_finite"] == 28
    assert rows["fp4_e2m1"]["finite_values"] == 15 and rows["fp4_e2m1"]["bytes_per_1024"] == 512
    assert rows["e8m0"]["min_subnormal"] == 2.0**-127 and rows["e8m0"]["max_finite"] == 2.0**127
    assert rows["bf16"]["min_subnormal"] == 2.0**-133
    assert rows["int4"]["min_finite"] == -8 and rows["uint4"]["max_finite"] == 15
    assert run("formats", "--bogus").returncode == 2


def test_cast_answers_the_example_question():
    r = run("cast", "--to", "fp8_e4m3", "237.4")
    assert r.returncode == 0, r.stderr
    row = r.stdout.splitlines()[2].split()
    assert row[:3] == ["237.4", "0x77", "240"]
    assert float(row[3]) == pytest.approx(2.6) and float(row[4]) == pytest.approx(2.6 / 237.4, rel=1e-5)


def test_cast_json_and_modes():
    r = run("cast", "--to", "fp8_e4m3", "--json", "464", "464.0001", "-0", "1e-9", "nan", "inf")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["mode"] == "saturate"
    assert [x["code"] for x in out["results"]] == ["0x7E", "0x7E", "0x80", "0x00", "0x7F", "0x7E"]
    assert out["results"][5]["decoded"] == 448 and out["results"][5]["abs_error"] == "inf"
    r = run("cast", "--to", "fp8_e4m3", "--mode", "ieee", "--json", "464", "464.0001", "inf")
    assert [x["code"] for x in json.loads(r.stdout)["results"]] == ["0x7E", "0x7F", "0x7F"]
    r = run("cast", "--to=fp16", "--mode=ieee", "--json", "65520", "2049", "2051")
    assert [x["code"] for x in json.loads(r.stdout)["results"]] == ["0x7C00", "0x6800", "0x6802"]
    r = run("cast", "--to", "fp4_e2m1", "--json", "2.5", "3.5", "-7", "0x1.8p1")
    res = json.loads(r.stdout)["results"]
    assert [x["code"] for x in res] == ["0x4", "0x6", "0xF", "0x5"] and res[2]["decoded"] == -6


def test_cast_reads_stdin():
    r = run("cast", "--to", "bf16", "--json", stdin="1.0 3.14159\n-2\n")
    assert r.returncode == 0
    assert [x["code"] for x in json.loads(r.stdout)["results"]] == ["0x3F80", "0x4049", "0xC000"]
    r = run("cast", "--to", "bf16", stdin="")
    assert r.returncode == 2 and r.stdout == "" and "no values" in r.stderr


def test_cast_negative_values_are_not_options():
    r = run("cast", "--to", "int8", "--json", "-3.5", "-inf", "--", "-2.5")
    assert [x["code"] for x in json.loads(r.stdout)["results"]] == ["0xFC", "0x80", "0xFE"]


@pytest.mark.parametrize("args,code,needle", [
    (("cast", "--to", "fp9", "1"), 2, "unknown format 'fp9'"),
    (("cast", "--to", "fp8_e4m3", "abc"), 2, "'abc' is not a number"),
    (("cast", "--to", "fp8_e4m3", "1.5x"), 2, "'1.5x' is not a number"),
    (("cast", "1"), 2, "--to FORMAT is required"),
    (("cast", "--to"), 2, "--to needs a value"),
    (("cast", "--to", "fp16", "--mode", "round", "1"), 2, "unknown --mode 'round'"),
    (("cast", "--to", "fp16", "--frob", "1"), 2, "unknown option '--frob'"),
    (("cast", "--to", "fp4_e2m1", "nan"), 1, "NaN cannot be encoded in fp4_e2m1"),
    (("grid", "fp9"), 2, "unknown format 'fp9'"),
    (("grid", "fp16"), 2, "8 bits or fewer"),
    (("grid",), 2, "which format"),
])
def test_bad_input_errors(args, code, needle):
    r = run(*args)
    assert r.returncode == code
    assert r.stdout == ""  # nothing on stdout in error cases
    assert needle in r.stderr and r.stderr.startswith("lowbit ")
    if "unknown format" in needle:
        for name in NAMES:  # the error lists the valid names
            assert name in r.stderr
    rj = run(*args, "--json")
    assert rj.returncode == code
    err = json.loads(rj.stdout)["error"]
    assert needle in err["message"] and err["exit_code"] == code


def test_grid_fp4_in_order():
    r = run("grid", "fp4_e2m1")
    assert r.returncode == 0
    rows = [l.split() for l in r.stdout.splitlines()[2:]]
    values = [float(v) for _, v in rows]
    assert values == [-6, -4, -3, -2, -1.5, -1, -0.5, -0.0, 0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert rows[7] == ["0x8", "-0"] and rows[8] == ["0x0", "0"]


@pytest.mark.parametrize("name,values,nans", [
    ("fp8_e4m3", 254, 2), ("fp8_e5m2", 250, 6), ("fp8_e4m3fnuz", 255, 1), ("fp6_e3m2", 64, 0),
    ("e8m0", 255, 1), ("ue4m3", 127, 129), ("int4", 16, 0), ("uint8", 256, 0),
])
def test_grid_json_every_code_once(name, values, nans):
    g = json.loads(run("grid", name, "--json").stdout)
    vals = [v["value"] for v in g["values"]]
    assert len(vals) == values and len(g["nan_codes"]) == nans
    nums = [float(v) if not isinstance(v, str) else float(v.replace("inf", "Infinity")) for v in vals]
    assert nums == sorted(nums)
    assert len({v["code"] for v in g["values"]} | set(g["nan_codes"])) == g["codes"]
    if name == "fp8_e5m2":
        assert vals[0] == "-inf" and vals[-1] == "inf"


# ---------------------------------------------------------------- quant

OUTLIERS = " ".join(f"{((i * 37) % 200 - 100) / 100:.2f}" for i in range(64)) + " 100"


def test_quant_outlier_lesson_table():
    r = run("quant", "--spec", "int8:tensor,int8:g16,int8:g4", stdin=OUTLIERS)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "65 values (1 x 65)" and lines[1].split()[:3] == ["spec", "bits/val", "MSE"]
    rows = {l.split()[0]: l.split() for l in lines[2:]}
    mse = [float(rows[s][2]) for s in ("int8:tensor", "int8:g16", "int8:g4")]
    assert mse[0] > mse[1] > mse[2]


def test_quant_json_print_and_shape(tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("1 2 3 4\n-1 -2 -3 -4\n")
    r = run("quant", "--spec", "int8:channel,mxfp4", "--shape", "2x4", "--print", "--stats", "--json", str(f))
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["rows"] == 2 and out["cols"] == 4
    a, b = out["results"]
    assert a["spec"] == "int8:channel" and a["canonical"] == "int8:channel"
    assert a["dequantized"][3] == pytest.approx(4.0) and len(a["dequantized"]) == 8
    assert b["canonical"] == "mxfp4" and b["stats"]["bits_per_value"] == 4 + 8 * 2 / 8
    r = run("quant", "--spec", "int8:channel", "--shape", "2x4", "--print", str(f))
    # 1 / (4/127) = 31.75 -> 32 -> 32 * 4/127
    assert r.stdout.splitlines()[1].split()[0] == "1.007874" and len(r.stdout.splitlines()) == 3


def test_quant_raw_input(tmp_path):
    import struct
    f = tmp_path / "x.f32"
    f.write_bytes(struct.pack("<6f", 0.5, -1.0, 2.0, 1.5, 3.0, -6.0))
    r = run("quant", "--spec", "fp4_e2m1:tensor", "--raw", "--print", "--json", str(f))
    assert json.loads(r.stdout)["results"][0]["dequantized"] == [0.5, -1, 2, 1.5, 3, -6]
    f.write_bytes(b"\0" * 7)
    r = run("quant", "--spec", "int8:tensor", "--raw", str(f))
    assert r.returncode == 2 and "multiple of 4" in r.stderr and r.stdout == ""
    # a header to skip, then a slice
    f.write_bytes(b"HEAD" + struct.pack("<5f", 9.0, 1.0, 2.0, 3.0, 9.0))
    r = run("quant", "--spec", "fp8_e4m3:tensor", "--raw", "--skip", "8", "--count", "3", "--print", "--json", str(f))
    assert json.loads(r.stdout)["results"][0]["dequantized"] == pytest.approx([1, 2, 3], rel=0.05)
    r = run("quant", "--spec", "int8:tensor", "--raw", "--skip", "8", "--count", "9", str(f))
    assert r.returncode == 2 and "not --count 9" in r.stderr
    r = run("quant", "--spec", "int8:tensor", "--raw", "--skip", "99", str(f))
    assert r.returncode == 2 and "shorter than --skip 99" in r.stderr
    r = run("quant", "--spec", "int8:tensor", "--skip", "4", str(f))
    assert r.returncode == 2 and "apply to --raw" in r.stderr


@pytest.mark.parametrize("args,stdin,needle", [
    (("--spec", "int9:g32"), "1 2", "'int9' is neither a format nor a preset"),
    (("--spec", "int8:g0"), "1 2", "block size must be at least 1"),
    (("--spec", "int8:g32:frob"), "1 2", "unknown part 'frob'"),
    (("--spec", "fp8_e4m3:affine"), "1 2", "affine (zero point) is defined for integer elements only"),
    (("--spec", "int8:tensor"), "1 nan 3", "element 1 (row 0, column 1) is NaN"),
    (("--spec", "int8:tensor"), "1 2 inf", "is infinite"),
    (("--spec", "int8:tensor"), "", "holds no values"),
    (("--spec", "int8:tensor"), "1 two 3", "'two', is not a number"),
    (("--spec", "int8:tensor", "--shape", "2x2"), "1 2 3", "--shape 2x2 is 4 values but the input has 3"),
    (("--spec", "int8:tensor", "--shape", "2by2"), "1 2 3 4", "--shape takes ROWSxCOLS"),
    (("--shape", "1x2"), "1 2", "--spec is required"),
    (("--spec", "int8:tensor"), "1." + "0" * 300, "longer than 255 characters"),
    (("--spec", "int8:tensor"), "1e39 2", "'1e39', overflows fp32"),
    (("--spec", "int8:tensor", "--shape", "-1x-4"), "1 2 3 4", "--shape takes ROWSxCOLS"),
    (("--spec", "int8:tensor", "--shape", "4294967296x4294967297"), "1 2", "--shape takes ROWSxCOLS"),
    (("--spec", "int8:tensor", "--shape", " 2x2"), "1 2 3 4", "--shape takes ROWSxCOLS"),
    (("--spec", "int8:tensor", "--threads", " 3"), "1 2", "--threads takes 0..64 (0: one per CPU)"),
    (("--spec", "int8:tensor", "--threads", ""), "1 2", "--threads takes 0..64 (0: one per CPU)"),
    (("--spec", "int8,,int4:g2"), "1 2", "has an empty item"),
    (("--spec", ","), "1 2", "has an empty item"),
    (("--spec", "int8:g18446744073709551615"), "1 2 3", "bad block size"),
    (("--spec", "int8:g2000000000"), "1 2 3", "above the limit"),
    (("--spec", "uint8:tensor"), "1 2", "needs :affine"),
])
def test_quant_bad_input(args, stdin, needle):
    r = run("quant", *args, stdin=stdin)
    assert r.returncode == 2 and r.stdout == "" and needle in r.stderr, r.stderr
    rj = run("quant", *args, "--json", stdin=stdin)
    assert rj.returncode == 2 and needle in json.loads(rj.stdout)["error"]["message"]


def test_quant_demo_reads_real_weights():
    model = ROOT / "models" / "stories260K.bin"
    r = run("quant", "--raw", "--skip", "132380", "--count", "20480", "--shape", "320x64", "--json",
            "--spec", "int8:channel,int4:g32,mxfp4,nvfp4", str(model))
    res = {x["spec"]: x["stats"] for x in json.loads(r.stdout)["results"]}
    assert res["int8:channel"]["sqnr_db"] > 40 and 15 < res["mxfp4"]["sqnr_db"] < res["int8:channel"]["sqnr_db"]
    assert res["nvfp4"]["bits_per_value"] == pytest.approx(4 + (8 * 320 * 4 + 32) / 20480)


def test_quant_missing_file_and_read_errors(tmp_path):
    r = run("quant", "--spec", "int8:tensor", "/nonexistent/x.txt")
    assert r.returncode == 1 and "cannot open '/nonexistent/x.txt'" in r.stderr and r.stdout == ""
    r = run("quant", "--spec", "int8:tensor", str(tmp_path))  # a directory
    assert r.returncode == 1 and "cannot read" in r.stderr and r.stdout == ""


def test_quant_raw_count_and_skip_are_digits(tmp_path):
    f = tmp_path / "x.f32"
    f.write_bytes(b"\0" * 16)
    for opt in ("--count", "--skip"):
        r = run("quant", "--spec", "int8:tensor", "--raw", opt, " -1", str(f))
        assert r.returncode == 2 and "takes a byte or value count" in r.stderr
    r = run("quant", "--spec", "int8:tensor", "--raw", "--count", "9", str(f))
    assert r.returncode == 2 and "holds 4 values, not --count 9" in r.stderr


def test_make_demo_script_runs_the_main_job():
    """`make demo` (tests/demo.sh) on the embedded model: the compare table, then the rest."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    p = subprocess.run(["sh", "tests/demo.sh", LOWBIT], capture_output=True, text=True, cwd=root)
    assert p.returncode == 0, p.stderr
    for spec in ["bf16", "int8:channel", "int4:g128:affine", "mxfp4", "nvfp4"]:
        assert any(line.startswith(spec + " ") for line in p.stdout.splitlines()), spec
    assert "top-1 %" in p.stdout and "Once upon a time, there was" in p.stdout
