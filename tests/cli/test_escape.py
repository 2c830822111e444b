"""Names from a file are printed escaped (issue 12, item 10): a tensor name
holding a terminal escape sequence must not reach the terminal raw, in
tables or in error messages; valid printable UTF-8 stays as it is; --json
keeps the exact name (controls as \\u escapes)."""
import json
import os
import pathlib
import struct
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
W = struct.pack("<8f", *range(8))


def safetensors(path, tensors):
    hdr, data = {}, b""
    for name, (shape, blob) in tensors.items():
        hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = json.dumps(hdr).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return path


def lowbit(*args):
    return subprocess.run([LOWBIT, *map(str, args)], capture_output=True)


def test_inspect_escapes_control_characters_in_tensor_names(tmp_path):
    m = safetensors(tmp_path / "m.safetensors", {"x\x1b[2Jy": ([2, 4], W), "del\x7f": ([8], W),
                                                 "csi\u009b": ([8], W), "caf\u00e9 \u4e2d": ([8], W)})
    p = lowbit("inspect", m)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert b"\x1b" not in out and b"\x7f" not in out and "\u009b".encode() not in out
    assert b"x\\x1b[2Jy " in out and b"del\\x7f " in out and b"csi\\u009b " in out
    assert "caf\u00e9 \u4e2d ".encode() in out  # printable UTF-8 is not escaped
    # JSON keeps the exact names: parsed back, they are the names in the file
    j = json.loads(lowbit("inspect", m, "--json").stdout)
    assert sorted(t["name"] for t in j["tensors"]) == sorted(["x\x1b[2Jy", "del\x7f", "csi\u009b", "caf\u00e9 \u4e2d"])


def test_error_messages_quoting_a_name_escape_it(tmp_path):
    m = safetensors(tmp_path / "m.safetensors", {"bad\x1b[31m": ([2, 4], W[:16])})  # too few bytes for its shape
    p = lowbit("inspect", m)
    assert p.returncode == 1
    assert b"\x1b" not in p.stderr and b"tensor 'bad\\x1b[31m'" in p.stderr


def test_error_table_escapes_names(tmp_path):
    m = safetensors(tmp_path / "m.safetensors", {"w\x1b]0;title\x07.weight": ([2, 4], W)})
    p = lowbit("error", m, "--spec", "int8")
    assert p.returncode == 0, p.stderr
    assert b"\x1b" not in p.stdout and b"\x07" not in p.stdout and b"w\\x1b]0;title\\x07" in p.stdout


def test_json_string_escapes_every_control_and_stays_valid_json(tmp_path):
    # the name reaches the JSON writer as the file holds it: DEL and C1 are
    # written as \\u escapes, so the output is plain ASCII around valid UTF-8
    m = safetensors(tmp_path / "m.safetensors", {"a\x7fb\u0085c\u202ed": ([8], W)})
    out = lowbit("inspect", m, "--json").stdout
    assert b"\\u007f" in out and b"\\u0085" in out and b"\\u202e" in out
    assert json.loads(out)["tensors"][0]["name"] == "a\x7fb\u0085c\u202ed"


def gguf_one_tensor(path, name):
    """A GGUF v3 file with one f32 tensor of 8 values named by raw bytes."""
    def string(b):
        return struct.pack("<Q", len(b)) + b
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 0)
    head += string(name) + struct.pack("<IQIQ", 1, 8, 0, 0)  # 1 dim of 8, type f32, offset 0
    path.write_bytes(head + b"\0" * (-len(head) % 32) + W)
    return path


def test_bytes_that_are_not_utf8_print_as_hex_in_text_and_json(tmp_path):
    m = gguf_one_tensor(tmp_path / "m.gguf", b"t\xff\xfe\x1b[2J\xc3\xa9")
    p = lowbit("inspect", m)
    assert p.returncode == 0, p.stderr
    assert b"\xff" not in p.stdout and b"\x1b" not in p.stdout
    assert "t\\xff\\xfe\\x1b[2J\u00e9 ".encode() in p.stdout  # the valid "é" stays
    out = lowbit("inspect", m, "--json").stdout
    out.decode("utf-8")  # valid UTF-8, so valid JSON text
    assert json.loads(out)["tensors"][0]["name"] == "t\\xff\\xfe\x1b[2J\u00e9"
