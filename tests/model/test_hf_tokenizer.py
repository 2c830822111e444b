"""The tokenizer files of the Hugging Face directories lowbit writes
(src/export/hf_tokenizer*.c), judged by Hugging Face `tokenizers`.

- From a GGUF (SmolLM2, byte-level BPE, pre-tokenizer "smollm"): `lowbit
  convert X.gguf DIR` synthesizes tokenizer.json from tokenizer.ggml.*; HF
  `tokenizers` loading it gives the same ids as lowbit's GGUF tokenizer on
  the whole of wiki.test.raw and on the adversarial strings of
  test_tokenizer.py; special tokens encode to their ids and decode back;
  tokenizer_config.json, special_tokens_map.json and generation_config.json
  carry the fields transformers reads, with the GGUF's values.
- From a Hugging Face input: the files beside it are copied byte for byte.
- llama2.c inputs: the tokenizer beside the model is synthesized (SentencePiece;
  test_hf_tokenizer_spm.py); without one, nothing is written."""
import json
import shutil

import pytest

from model_lib import LOWBIT, SMOLLM2, STORIES, ROOT
import subprocess

tokenizers = pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")
from test_tokenizer import ADVERSARIAL, Tok  # noqa: E402  (lowbit's tokenizer binding)

WIKI = ROOT / "data/wikitext-2-raw/wiki.test.raw"
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "chat_template.jinja"]


def run(*args):
    p = subprocess.run([LOWBIT, *map(str, args)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def smol_dir(tmp_path_factory):
    if not SMOLLM2.exists():
        pytest.skip("SmolLM2 GGUF not fetched (tests/fetch_smollm2.sh)")
    out = tmp_path_factory.mktemp("hf") / "smol"
    run("convert", SMOLLM2, out, "--dtype", "bf16", "--quiet")
    return out


@pytest.fixture(scope="module")
def hf(smol_dir):
    return tokenizers.Tokenizer.from_file(str(smol_dir / "tokenizer.json"))


@pytest.fixture(scope="module")
def lb():
    return Tok.from_file(SMOLLM2)


@pytest.fixture(scope="module")
def meta():
    r = gguf.GGUFReader(str(SMOLLM2))

    def val(key):
        f = r.fields[key]
        return f.contents()
    return val


def test_files_written(smol_dir):
    names = sorted(p.name for p in smol_dir.iterdir())
    assert names == sorted(["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                            "special_tokens_map.json", "generation_config.json"])


def test_wiki_same_ids_as_gguf(hf, lb):
    text = WIKI.read_text(encoding="utf-8")
    ref = lb.encode(text)
    got = hf.encode(text, add_special_tokens=False).ids
    assert len(got) == len(ref) > 250000
    assert got == ref
    # with the post-processor: SmolLM2 adds no BOS (tokenizer.ggml.add_bos_token false)
    assert hf.encode("Hello world").ids == lb.encode("Hello world", add_bos=False)


@pytest.mark.parametrize("i", range(len(ADVERSARIAL)))
def test_adversarial(hf, lb, i):
    assert hf.encode(ADVERSARIAL[i], add_special_tokens=False).ids == lb.encode(ADVERSARIAL[i])


def test_special_tokens(hf, lb, meta):
    tokens = meta("tokenizer.ggml.tokens")
    types = meta("tokenizer.ggml.token_type")
    control = [i for i, t in enumerate(types) if t == 3]
    assert len(control) == 17
    for i in control:
        assert hf.encode(tokens[i], add_special_tokens=False).ids == [i]
        assert hf.token_to_id(tokens[i]) == i
        assert hf.decode([i], skip_special_tokens=False) == tokens[i]
        assert hf.decode([i], skip_special_tokens=True) == ""
    chat = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    ids = hf.encode(chat, add_special_tokens=False).ids
    assert ids == lb.encode(chat)
    assert hf.decode(ids, skip_special_tokens=False) == chat
    # byte-level decoding of ordinary text
    text = "Grüße, 世界! 12345 café\n\tend"
    assert hf.decode(hf.encode(text, add_special_tokens=False).ids) == text


def test_config_files(smol_dir, meta):
    tokens = meta("tokenizer.ggml.tokens")
    bos, eos, pad, unk = (meta(f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "padding", "unknown"))
    cfg = json.loads((smol_dir / "tokenizer_config.json").read_text())
    assert cfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (cfg["bos_token"], cfg["eos_token"], cfg["pad_token"]) == (tokens[bos], tokens[eos], tokens[pad])
    # the GGUF's unknown token is named (HF's byte-level BPE model has none; a GGUF written back keeps it)
    assert cfg["unk_token"] == tokens[unk] and cfg["add_prefix_space"] is False
    assert cfg["add_bos_token"] is bool(meta("tokenizer.ggml.add_bos_token"))
    assert cfg["chat_template"] == meta("tokenizer.chat_template")
    assert cfg["model_max_length"] == meta("llama.context_length")
    dec = cfg["added_tokens_decoder"]
    assert {int(k): v["content"] for k, v in dec.items()} == {i: tokens[i] for i in range(17)}
    assert all(v["special"] for v in dec.values())
    stm = json.loads((smol_dir / "special_tokens_map.json").read_text())
    assert stm == {"bos_token": tokens[bos], "eos_token": tokens[eos], "pad_token": tokens[pad],
                   "unk_token": tokens[unk]}
    gen = json.loads((smol_dir / "generation_config.json").read_text())
    assert gen == {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad}


def test_lowbit_reads_the_written_directory(smol_dir, lb):
    # the directory is a model lowbit opens with its tokenizer: the same ids again
    t = Tok.from_model(smol_dir)
    text = WIKI.read_text(encoding="utf-8")[:200000]
    assert t.encode(text) == lb.encode(text)
    assert (t.bos, t.eos) == (lb.bos, lb.eos)


def test_copied_from_hf_input(smol_dir, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(smol_dir, src)
    extra = {"merges.txt": "#version: 0.2\n", "vocab.json": "{}\n", "chat_template.jinja": "{{ messages }}\n"}
    for name, text in extra.items():
        (src / name).write_text(text)
    out = tmp_path / "out"
    run("convert", src, out, "--quiet")
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            assert (out / name).read_bytes() == (src / name).read_bytes(), name
    # a .safetensors input: the files beside it
    out2 = tmp_path / "out2"
    run("convert", src / "model.safetensors", out2, "--quiet")
    assert (out2 / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
    # --force replaces a directory that holds them
    run("convert", src, out, "--quiet", "--force")


def test_llama2c_input_without_tokenizer_writes_none(tmp_path):
    (tmp_path / "m").mkdir()
    shutil.copy(STORIES, tmp_path / "m/stories.bin")  # no tokenizer.bin / tok512.bin beside it
    out = tmp_path / "stories"
    run("convert", tmp_path / "m/stories.bin", out, "--quiet")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]


# ===== Hugging Face -> GGUF: the tokenizer kept as tokenizer.ggml.* =====

def test_hf_to_gguf_keeps_tokenizer(smol_dir, lb, meta, tmp_path):
    out = tmp_path / "back.gguf"
    run("convert", smol_dir, out, "--quiet")
    r = gguf.GGUFReader(str(out))
    f = r.fields
    assert f["tokenizer.ggml.model"].contents() == "gpt2"
    assert f["tokenizer.ggml.pre"].contents() == "smollm"
    for key in ["tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.chat_template"]:
        assert f[key].contents() == meta(key), key
    assert bool(f["tokenizer.ggml.add_bos_token"].contents()) == bool(meta("tokenizer.ggml.add_bos_token"))
    # lowbit reads it back and gives the ids it gave before the round trip
    t = Tok.from_file(out)
    text = WIKI.read_text(encoding="utf-8")
    assert t.encode(text) == lb.encode(text)
    assert (t.bos, t.eos) == (lb.bos, lb.eos)


def test_hf_to_gguf_without_tokenizer(tmp_path):
    # an HF directory with no tokenizer.json: a GGUF without tokenizer keys, as before
    (tmp_path / "m").mkdir()
    shutil.copy(STORIES, tmp_path / "m/stories.bin")
    d = tmp_path / "stories"
    run("convert", tmp_path / "m/stories.bin", d, "--quiet")
    out = tmp_path / "s.gguf"
    run("convert", d, out, "--quiet")
    assert not any(k.startswith("tokenizer.") for k in gguf.GGUFReader(str(out)).fields)
