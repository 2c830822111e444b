"""Outputs that lose nothing (issue 12 items 1, 4, 5, 11): no command writes
over one of its inputs, an existing output needs --force (which keeps the
old file's mode and refuses hard links and other users' files), SIGINT and
SIGTERM leave no temporary behind, and a mapped input truncated under a
running command fails with a message naming it instead of "Bus error"."""
import hashlib
import os
import pathlib
import shutil
import signal
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOWBIT = str(ROOT / os.environ.get("LOWBIT_BUILD", "build") / "lowbit")
STORIES = ROOT / "models/stories260K.bin"
TOK = ROOT / "models/tok512.bin"
TEXT = ROOT / "models/tinystories-valid-excerpt.txt"
SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def run(*args, cwd=None, env=None):
    return subprocess.run([LOWBIT, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def digest(p):
    return hashlib.sha256(pathlib.Path(p).read_bytes()).hexdigest()


def temps(d):
    """every temporary output under d (files or directories)"""
    return sorted(str(p) for p in pathlib.Path(d).rglob("*") if ".lowbit-tmp." in p.name)


@pytest.fixture
def work(tmp_path):
    """a model with its tokenizer beside it and a text, copied where a test may try to write over them"""
    shutil.copy(STORIES, tmp_path / "stories260K.bin")
    shutil.copy(TOK, tmp_path / "tok512.bin")
    (tmp_path / "text.txt").write_bytes(TEXT.read_bytes()[:20000])
    return tmp_path


KLD = ("kld", "stories260K.bin", "--spec", "int8", "--text", "text.txt", "--ctx", "64", "--chunks", "2")


@pytest.mark.parametrize("dest,names", [
    ("stories260K.bin", "BASE ('stories260K.bin')"),
    ("./stories260K.bin", "BASE ('stories260K.bin')"),
    ("link-to-model", "BASE ('stories260K.bin')"),
    ("text.txt", "the --text file ('text.txt')"),
    ("tok512.bin", "the tokenizer ('./tok512.bin')"),  # found beside the model, not named on the command line
    ("calib.txt", "the --calib file ('calib.txt')"),
])
@pytest.mark.parametrize("force", [False, True])
def test_kld_save_base_never_writes_over_an_input(work, dest, names, force):
    (work / "link-to-model").symlink_to("stories260K.bin")
    shutil.copy(work / "text.txt", work / "calib.txt")
    before = {p.name: digest(p) for p in work.iterdir()}
    extra = ["--force"] if force else []
    if dest == "calib.txt":
        extra += ["--act", "int8", "--calib", "calib.txt"]
    r = run(*KLD, "--save-base", dest, *extra, cwd=work)
    # the tokenizer is known only once the model is open: without --force
    # the earlier existing-file check is what stops it
    if dest == "tok512.bin" and not force:
        assert r.returncode == 2 and "'tok512.bin' already exists" in r.stderr, r.stderr
    else:
        assert r.returncode == 2 and f"refusing to write '{dest}': it is the same file as {names}" in r.stderr, r.stderr
    assert r.stdout == ""
    assert {p.name: digest(p) for p in work.iterdir()} == before
    assert temps(work) == []


def test_kld_save_base_onto_the_base_file_it_reads(work):
    run(*KLD, "--save-base", "b.kld", cwd=work)
    before = digest(work / "b.kld")
    r = run("kld", "stories260K.bin", "--spec", "int4", "--text", "text.txt", "--ctx", "64", "--chunks", "2",
            "--base", "b.kld", "--save-base", "b.kld", cwd=work)
    assert r.returncode == 2 and "exclude each other" in r.stderr
    assert digest(work / "b.kld") == before


def test_convert_never_writes_over_its_input(work):
    assert run("convert", "stories260K.bin", "m.gguf", cwd=work).returncode == 0
    before = digest(work / "m.gguf")
    for dest in ("m.gguf", "./m.gguf"):
        r = run("convert", "m.gguf", dest, "--force", cwd=work)
        assert r.returncode == 2 and f"refusing to write '{dest}': it is the same file as IN ('m.gguf')" in r.stderr, \
            r.stderr
    (work / "hf").mkdir()
    assert run("convert", "stories260K.bin", "hf", "--force", cwd=work).returncode == 0
    r = run("convert", "hf", "hf", "--force", cwd=work)
    assert r.returncode == 2 and "refusing to write 'hf': it is the same file as IN ('hf')" in r.stderr, r.stderr
    assert digest(work / "m.gguf") == before and (work / "hf/model.safetensors").exists()


@pytest.mark.parametrize("name", ["out.gguf", "out.safetensors", "out.kld"])
def test_an_existing_file_needs_force_and_keeps_its_mode(work, name):
    def write(*extra):
        if name.endswith(".kld"):
            return run(*KLD, "--save-base", name, *extra, cwd=work)
        return run("convert", "stories260K.bin", name, *extra, cwd=work)

    out = work / name
    out.write_bytes(b"precious")
    out.chmod(0o600)
    r = write()
    assert r.returncode == 2 and f"'{name}' already exists: not replacing it (--force does)" in r.stderr, r.stderr
    assert out.read_bytes() == b"precious" and temps(work) == []
    r = write("--force")
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() != b"precious" and (out.stat().st_mode & 0o777) == 0o600
    assert temps(work) == []


def test_force_refuses_hard_links_symlinks_and_other_users_files(work):
    out = work / "out.gguf"
    out.write_bytes(b"precious")
    os.link(out, work / "other-name.gguf")
    r = run("convert", "stories260K.bin", "out.gguf", "--force", cwd=work)
    assert r.returncode == 2 and "'out.gguf' has 2 hard links" in r.stderr, r.stderr
    os.unlink(work / "other-name.gguf")
    (work / "target.gguf").write_bytes(b"target")
    (work / "sym.gguf").symlink_to("target.gguf")
    r = run("convert", "stories260K.bin", "sym.gguf", "--force", cwd=work)
    assert r.returncode == 2 and "'sym.gguf' is a symbolic link" in r.stderr, r.stderr
    assert (work / "target.gguf").read_bytes() == b"target" and (work / "sym.gguf").is_symlink()
    if os.geteuid() == 0:  # only root can hand a file to another user
        os.chown(out, 12345, 12345)
        r = run("convert", "stories260K.bin", "out.gguf", "--force", cwd=work)
        assert r.returncode == 2 and "'out.gguf' belongs to user 12345, not to you" in r.stderr, r.stderr
    assert out.read_bytes() == b"precious" and temps(work) == []


def test_a_model_directory_is_one_rule_too(work):
    hf = work / "hf"
    assert run("convert", "stories260K.bin", "hf", cwd=work).returncode == 0
    hf.chmod(0o700)
    (hf / "config.json").chmod(0o600)
    before = digest(hf / "config.json")
    r = run("convert", "stories260K.bin", "hf", "--dtype", "bf16", cwd=work)
    assert r.returncode == 2 and "is a directory that is not empty" in r.stderr and "--force" in r.stderr
    r = run("convert", "stories260K.bin", "hf", "--dtype", "bf16", "--force", cwd=work)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in hf.iterdir()) == ["config.json", "generation_config.json", "model.safetensors",
                                                    "special_tokens_map.json", "tokenizer.json",
                                                    "tokenizer_config.json"]  # tokenizer files: from tok512.bin
    assert digest(hf / "config.json") != before  # torch_dtype changed
    assert (hf.stat().st_mode & 0o777) == 0o700 and ((hf / "config.json").stat().st_mode & 0o777) == 0o600
    (hf / "notes.txt").write_text("mine")
    r = run("convert", "stories260K.bin", "hf", "--force", cwd=work)
    assert r.returncode == 2 and "holds 'notes.txt', which lowbit does not write there" in r.stderr, r.stderr
    assert (hf / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in work.iterdir()) == ["hf", "stories260K.bin", "text.txt", "tok512.bin"]


def wait_for_temp(p, d, inside=False, timeout=60):
    """polls until a temporary output appears under d (with inside: a file in a temporary directory)"""
    t0 = time.time()
    while time.time() - t0 < timeout:
        found = [t for t in temps(d) if not inside or ".lowbit-tmp." in str(pathlib.Path(t).parent)]
        if found:
            return found
        if p.poll() is not None:
            pytest.fail(f"finished before a temporary appeared: {p.communicate()}")
        time.sleep(0.002)
    pytest.fail("no temporary output appeared")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_kld_save_base_leaves_nothing(work, sig):
    (work / "long.txt").write_bytes(TEXT.read_bytes() * 4)  # windows for several seconds
    p = subprocess.Popen([LOWBIT, "kld", "stories260K.bin", "--spec", "int4", "--text", "long.txt", "--ctx", "64",
                          "--save-base", "b.kld"], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = wait_for_temp(p, work)
    assert all(pathlib.Path(t).name.startswith("b.kld.lowbit-tmp.%d." % p.pid) for t in seen), seen
    time.sleep(0.05)
    p.send_signal(sig)
    p.communicate(timeout=30)
    assert p.returncode == -sig  # died of the signal, as a shell expects
    assert temps(work) == [] and not (work / "b.kld").exists()


@pytest.mark.skipif(not SMOLLM2.exists(), reason="SmolLM2 not fetched (make test fetches it)")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_convert_to_a_directory_leaves_nothing(tmp_path, sig):
    p = subprocess.Popen([LOWBIT, "convert", str(SMOLLM2), "hf"], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    seen = wait_for_temp(p, tmp_path, inside=True)  # model.safetensors being written in the temporary directory
    p.send_signal(sig)
    p.communicate(timeout=30)
    assert p.returncode == -sig, seen
    assert list(tmp_path.iterdir()) == [], seen


@pytest.mark.skipif(not SMOLLM2.exists(), reason="SmolLM2 not fetched (make test fetches it)")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_quantize_streams_leaves_nothing(tmp_path, sig):
    """quantize writes shard after shard, one tensor at a time, into a temporary directory: a signal
    while a shard is half-written leaves neither it, the shards before it, nor the directory"""
    p = subprocess.Popen([LOWBIT, "quantize", str(SMOLLM2), "-o", "q", "--scheme", "W8A8-INT8", "--max-shard-size",
                          "20MB"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = wait_for_temp(p, tmp_path, inside=True)
    p.send_signal(sig)
    p.communicate(timeout=30)
    assert p.returncode == -sig, seen
    assert list(tmp_path.iterdir()) == [], seen


def test_a_signal_while_replacing_keeps_the_old_file(work):
    (work / "long.txt").write_bytes(TEXT.read_bytes() * 4)
    (work / "b.kld").write_bytes(b"old")
    p = subprocess.Popen([LOWBIT, "kld", "stories260K.bin", "--spec", "int4", "--text", "long.txt", "--ctx", "64",
                          "--save-base", "b.kld", "--force"], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for_temp(p, work)
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=30)
    assert p.returncode == -signal.SIGINT
    assert temps(work) == [] and (work / "b.kld").read_bytes() == b"old"


@pytest.mark.parametrize("out", ["out.gguf", "hf"])
def test_a_mapped_input_truncated_under_convert_is_named(work, out):
    env = dict(os.environ, LOWBIT_TEST_PAUSE_AFTER_OPEN="1")
    p = subprocess.Popen([LOWBIT, "convert", "stories260K.bin", out], cwd=work, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, text=True)
    assert p.stderr.readline().startswith("lowbit: test pause")  # the model is open (mapped) now
    os.truncate(work / "stories260K.bin", 4096)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1, err
    assert "lowbit convert: 'stories260K.bin' changed while it was being read" in err, err
    assert "Bus error" not in err and temps(work) == [] and not (work / out).exists()


def test_a_mapped_input_truncated_under_kld_is_named(work):
    env = dict(os.environ, LOWBIT_TEST_PAUSE_AFTER_OPEN="1")
    p = subprocess.Popen([LOWBIT, *KLD, "--save-base", "b.kld"], cwd=work, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, text=True)
    assert p.stderr.readline().startswith("lowbit: test pause")
    os.truncate(work / "stories260K.bin", 4096)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1, err
    assert "lowbit kld: 'stories260K.bin' changed while it was being read" in err, err
    assert temps(work) == [] and not (work / "b.kld").exists()


@pytest.mark.parametrize("out", ["out.gguf", "hf", "b.kld"])
def test_a_temporary_left_by_a_killed_run_is_named(work, out):
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process id that is no longer in use
    left = work / f"{out}.lowbit-tmp.{gone.pid}.0"
    left.write_bytes(b"half")
    (work / f"{out}.lowbit-tmp.{os.getpid()}.0").write_bytes(b"alive")  # a live process's: not mentioned
    if out.endswith(".kld"):
        r = run(*KLD, "--save-base", out, cwd=work)
    else:
        r = run("convert", "stories260K.bin", out, cwd=work)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("note:") == 1
    assert f"note: '{left.name}' is a temporary output left by an earlier run (process {gone.pid} is gone" in r.stderr
    assert "safe to delete" in r.stderr and left.read_bytes() == b"half"  # named, not removed


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_compare_removes_its_base_file(work, sig):
    (work / "long.txt").write_bytes(TEXT.read_bytes() * 4)
    tmp = work / "tmpdir"
    tmp.mkdir()
    p = subprocess.Popen([LOWBIT, "compare", "stories260K.bin", "--spec", "int8,int4,int4:g32", "--text", "long.txt",
                          "--ctx", "64"], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=dict(os.environ, TMPDIR=str(tmp)))
    want = tmp / f"lowbit-compare-{p.pid}.kld"
    t0 = time.time()
    # The file is complete once the base pass is done: seconds natively, over a minute under the
    # sanitizers on a loaded machine, so the wait is bounded by the process, not by a short clock.
    while not want.exists() and p.poll() is None and time.time() - t0 < 900:
        time.sleep(0.002)
    assert want.exists(), p.communicate()
    p.send_signal(sig)
    p.communicate(timeout=30)
    assert p.returncode == -sig and list(tmp.iterdir()) == []
