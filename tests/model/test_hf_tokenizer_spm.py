"""SentencePiece-style tokenizers in the Hugging Face directories lowbit
writes (src/export/hf_tokenizer_spm.c), judged by Hugging Face `tokenizers`
and by `sentencepiece` with models/tok512.model (the oracle).

- llama2.c: `lowbit convert models/stories260K.bin DIR` (and `quantize`)
  synthesize tokenizer.json from tok512.bin found beside the model.
  `tokenizers` loading it gives, on every line of the TinyStories excerpt
  and of wiki.test.raw, with and without BOS: the ids of lowbit's own
  tokenizer (run.c's algorithm) on the line, and the ids of sentencepiece
  on the line once sentencepiece's whitespace normalization is applied
  (tok512.model has remove_extra_whitespaces; run.c and HF's legacy Llama
  tokenizer keep every space); decode(encode(x)) == x on every line and on
  unusual characters (byte fallback).
- A GGUF "llama" tokenizer (tok512's pieces, scores and token types, written
  here with the gguf package onto stories260K's weights): the same.
- Hugging Face -> GGUF: the written directory converted back to GGUF has
  tokenizer.ggml.model "llama" with tok512's pieces, and lowbit's
  tokenizer reading it gives the same ids.
- What cannot be said exactly is refused with a message and nothing written.

Where HF's Llama tokenizer itself differs from run.c (and the tests say so):
the text of an added token (<unk>, <s>, </s>) is that token to HF, and a
literal U+2581 is a space to HF and sentencepiece, bytes to run.c."""
import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from model_lib import LOWBIT, ROOT, STORIES

tokenizers = pytest.importorskip("tokenizers")
spm = pytest.importorskip("sentencepiece")
gguf = pytest.importorskip("gguf")
from test_tokenizer import LB_ERR_UNSUPPORTED, TOK512_ADVERSARIAL, LowbitError, Tok, sp_spaces  # noqa: E402

TOK512_BIN = ROOT / "models/tok512.bin"
TOK512_MODEL = ROOT / "models/tok512.model"
STORIES_TXT = ROOT / "models/tinystories-valid-excerpt.txt"
WIKI = ROOT / "data/wikitext-2-raw/wiki.test.raw"
FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"]
U2581 = "\u2581"


def run(*args, ok=True):
    p = subprocess.run([LOWBIT, *map(str, args)], capture_output=True, text=True)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def sp():
    return spm.SentencePieceProcessor(model_file=str(TOK512_MODEL))


@pytest.fixture(scope="module")
def lb():
    return Tok.from_file(TOK512_BIN, 512)


@pytest.fixture(scope="module")
def stories_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("spm") / "stories"
    run("convert", STORIES, out, "--quiet")
    return out


@pytest.fixture(scope="module")
def hf(stories_dir):
    return tokenizers.Tokenizer.from_file(str(stories_dir / "tokenizer.json"))


@pytest.fixture(scope="module")
def lines():
    return STORIES_TXT.read_text(encoding="utf-8").split("\n") + WIKI.read_text(encoding="utf-8").split("\n")


def unusual():
    """byte fallback: characters tok512 has no piece for, controls, NUL, astral planes"""
    cps = [c for c in range(1, 0x800) if c != 0x2581] + [0x3000, 0x4E2D, 0xFEFF, 0xFFFD, 0x1F600, 0x1F468, 0x10FFFF]
    text = "".join(chr(c) for c in cps)
    extra = [t for t in TOK512_ADVERSARIAL if "<" not in t]
    return extra + [text, text[::-1], "a\x00b", "\x00", "é" * 50 + " x", "\r\n\r\n", "😀😀 😀"]


def compare(hf, ref, sp, texts, bos_id=1):
    """the differences between HF and lowbit (ref) / sentencepiece, and failed round trips"""
    bad = []
    for x in texts:
        ids = hf.encode(x, add_special_tokens=False).ids
        if ids != ref.encode(x):
            bad.append(("lowbit", x))
        if hf.encode(x).ids != ref.encode(x, add_bos=True) or hf.encode(x).ids[:1] != [bos_id]:
            bad.append(("lowbit+bos", x))
        if sp and "\x00" not in x:
            y = sp_spaces(x)
            if hf.encode(y, add_special_tokens=False).ids != sp.encode(x):
                bad.append(("sentencepiece", x))
            if hf.encode(y).ids != sp.encode(x, add_bos=True):
                bad.append(("sentencepiece+bos", x))
        if hf.decode(ids) != x:
            bad.append(("decode", x))
    return bad


# ===== llama2.c (stories260K + tok512.bin) -> Hugging Face =====

def test_files_written(stories_dir):
    names = sorted(p.name for p in stories_dir.iterdir())
    assert names == sorted(["config.json", "model.safetensors"] + FILES)


def test_tokenizer_json_structure(stories_dir, sp):
    doc = json.loads((stories_dir / "tokenizer.json").read_text(encoding="utf-8"))
    m = doc["model"]
    assert (m["type"], m["byte_fallback"], m["unk_token"]) == ("BPE", True, "<unk>")
    assert m["vocab"] == {sp.id_to_piece(i): i for i in range(sp.vocab_size())}
    assert [n["type"] for n in doc["normalizer"]["normalizers"]] == ["Prepend", "Replace"]
    assert doc["pre_tokenizer"] is None
    assert [d["type"] for d in doc["decoder"]["decoders"]] == ["Replace", "ByteFallback", "Fuse", "Strip"]
    assert [(a["id"], a["content"], a["special"]) for a in doc["added_tokens"]] == \
        [(0, "<unk>", True), (1, "<s>", True), (2, "</s>", True)]
    # merges: every split of a piece into two pieces, the best score first (HF's converter's rule)
    vocab = m["vocab"]
    want = sorted(((p[:k], p[k:], sp.get_score(i)) for p, i in vocab.items() for k in range(1, len(p))
                   if p[:k] in vocab and p[k:] in vocab), key=lambda x: (-x[2], -len(x[0]), -len(x[1])))
    assert [tuple(x) for x in m["merges"]] == [(a, b) for a, b, _ in want]


def test_every_line_equals_lowbit_and_sentencepiece(hf, lb, sp, lines):
    assert len(lines) > 4500
    bad = compare(hf, lb, sp, lines)
    assert not bad, f"{len(bad)} differences, e.g. {bad[:3]!r}"


def test_unusual_characters_byte_fallback(hf, lb, sp):
    texts = unusual()
    bad = compare(hf, lb, sp, texts)
    assert not bad, bad[:3]
    ids = hf.encode("a\x00b\U0001F600", add_special_tokens=False).ids
    assert ids[1] == 3 and ids[-4:] == [3 + b for b in "\U0001F600".encode()]  # ▁a <0x00> b, then the emoji's bytes


def test_where_hf_differs_from_runc(hf, lb, sp):
    # an added token's text is that token to HF (the text after it gets the dummy prefix again)
    assert hf.encode("<s>Once", add_special_tokens=False).ids == [1] + lb.encode("Once")
    assert lb.encode("<s>Once") != [1] + lb.encode("Once")
    # a literal U+2581 is a space to HF and to sentencepiece
    assert hf.encode("a\u2581b", add_special_tokens=False).ids == hf.encode("a b", add_special_tokens=False).ids
    assert hf.encode("a\u2581b", add_special_tokens=False).ids == sp.encode("a\u2581b")
    assert lb.encode("a\u2581b") != lb.encode("a b")
    # special tokens are skipped in decoding
    assert hf.decode([1] + lb.encode("Hi") + [2]) == "Hi"


def test_config_files(stories_dir):
    cfg = json.loads((stories_dir / "tokenizer_config.json").read_text())
    assert cfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (cfg["bos_token"], cfg["eos_token"], cfg["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert cfg["add_bos_token"] is True and cfg["add_eos_token"] is False
    assert {int(k): v["content"] for k, v in cfg["added_tokens_decoder"].items()} == {0: "<unk>", 1: "<s>", 2: "</s>"}
    stm = json.loads((stories_dir / "special_tokens_map.json").read_text())
    assert stm == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    gen = json.loads((stories_dir / "generation_config.json").read_text())
    assert gen == {"bos_token_id": 1, "eos_token_id": 2}


def test_quantize_writes_the_same_files(stories_dir, tmp_path):
    out = tmp_path / "q"
    run("quantize", STORIES, "-o", out, "--scheme", "W8A8-INT8", "--quiet")
    for name in FILES:
        assert (out / name).read_bytes() == (stories_dir / name).read_bytes(), name


def test_lowbit_reads_the_written_directory(stories_dir, lb, lines):
    t = Tok.from_model(stories_dir)
    assert (t.n, t.bos, t.eos) == (512, 1, 2)
    text = "\n".join(lines)
    assert t.encode(text, add_bos=True) == lb.encode(text, add_bos=True)


def test_tokenizers_own_save_reads_the_same(hf, lb, tmp_path):
    # the file as `tokenizers` itself writes it back is read by lowbit too
    p = tmp_path / "tokenizer.json"
    hf.save(str(p))
    t = Tok.from_file(p)
    text = WIKI.read_text(encoding="utf-8")[:100000]
    assert t.encode(text) == lb.encode(text)


def test_no_tokenizer_beside_the_model(tmp_path):
    (tmp_path / "m").mkdir()
    shutil.copy(STORIES, tmp_path / "m/model.bin")
    run("convert", tmp_path / "m/model.bin", tmp_path / "out", "--quiet")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "model.safetensors"]


# ===== GGUF "llama" -> Hugging Face =====

def spm_types(sp):
    return [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1
            for i in range(sp.vocab_size())]


def gguf_with_tokenizer(sp, src, dst, tokens=None, scores=None, model="llama", template=None):
    """stories260K's GGUF (src) with tok512's tokenizer as tokenizer.ggml.* keys"""
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), "llama")
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        w.add_key_value(name, f.contents(), f.types[0])
    w.add_tokenizer_model(model)
    w.add_token_list(tokens or [sp.id_to_piece(i) for i in range(sp.vocab_size())])
    w.add_token_scores(scores or [sp.get_score(i) for i in range(sp.vocab_size())])
    w.add_token_types(spm_types(sp))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    if template:
        w.add_chat_template(template)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


TEMPLATE = "{% for m in messages %}{{ bos_token + m['content'] + eos_token }}{% endfor %}"


@pytest.fixture(scope="module")
def plain_gguf(tmp_path_factory):
    p = tmp_path_factory.mktemp("gguf") / "plain.gguf"
    run("convert", STORIES, p, "--quiet")
    return p


@pytest.fixture(scope="module")
def spm_gguf(sp, plain_gguf):
    return gguf_with_tokenizer(sp, plain_gguf, plain_gguf.parent / "spm.gguf", template=TEMPLATE)


def test_gguf_llama_to_hf(sp, spm_gguf, lines, tmp_path):
    out = tmp_path / "hf"
    run("convert", spm_gguf, out, "--quiet")
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    t = Tok.from_file(spm_gguf)
    bad = compare(hf, t, sp, lines + unusual())
    assert not bad, f"{len(bad)} differences, e.g. {bad[:3]!r}"
    # control tokens (type 3) are matched in text by both
    assert hf.encode("<s>Once", add_special_tokens=False).ids == t.encode("<s>Once") == [1] + sp.encode("Once")
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    assert cfg["chat_template"] == TEMPLATE and cfg["model_max_length"] == 512
    assert json.loads((out / "generation_config.json").read_text()) == {"bos_token_id": 1, "eos_token_id": 2}


# ===== Hugging Face -> GGUF =====

def test_hf_to_gguf(sp, stories_dir, lb, lines, tmp_path):
    out = tmp_path / "back.gguf"
    run("convert", stories_dir, out, "--quiet")
    f = gguf.GGUFReader(str(out)).fields
    assert f["tokenizer.ggml.model"].contents() == "llama"
    assert f["tokenizer.ggml.tokens"].contents() == [sp.id_to_piece(i) for i in range(sp.vocab_size())]
    types = f["tokenizer.ggml.token_type"].contents()
    assert types == [3, 3, 3] + [6] * 256 + [1] * 253  # <unk> too is control: HF matches its text
    assert [f[f"tokenizer.ggml.{k}_token_id"].contents() for k in ("bos", "eos", "unknown")] == [1, 2, 0]
    assert f["tokenizer.ggml.add_bos_token"].contents() is True
    # the scores order the merged pieces as tok512.model's do
    scores = f["tokenizer.ggml.scores"].contents()
    merged = [i for i in range(259, 512) if len(sp.id_to_piece(i)) > 1]
    assert sorted(merged, key=lambda i: -scores[i]) == sorted(merged, key=lambda i: -sp.get_score(i))
    t = Tok.from_file(out)
    text = "\n".join(lines)
    assert t.encode(text, add_bos=True) == lb.encode(text, add_bos=True)
    assert (t.bos, t.eos) == (1, 2)


# ===== refused: an error that says why, nothing written =====

def refused(src, out, *fragments):
    p = run("convert", src, out, "--quiet", ok=False)
    assert p.returncode == 1, p.stderr
    for fr in fragments:
        assert fr in p.stderr, p.stderr
    assert not out.exists()
    assert not [x for x in out.parent.iterdir() if x.name.startswith(out.name + ".")]  # no temporary left


def test_gguf_without_all_byte_tokens_refused(sp, plain_gguf, tmp_path):
    tokens = [sp.id_to_piece(i) for i in range(sp.vocab_size())]
    tokens[3 + 0x41] = "<0x41>!"
    g = gguf_with_tokenizer(sp, plain_gguf, tmp_path / "nobyte.gguf", tokens=tokens)
    refused(g, tmp_path / "out", "<0x41>", "byte")


def test_gguf_empty_bos_refused(sp, plain_gguf, tmp_path):
    tokens = [sp.id_to_piece(i) for i in range(sp.vocab_size())]
    tokens[1] = ""
    g = gguf_with_tokenizer(sp, plain_gguf, tmp_path / "nobos.gguf", tokens=tokens)
    refused(g, tmp_path / "out", "BOS token (id 1) is empty")


def test_gguf_equal_scores_refused(sp, plain_gguf, tmp_path):
    scores = [sp.get_score(i) for i in range(sp.vocab_size())]
    scores[260] = scores[259]  # 'he' and '▁t': two merged pieces, one score
    g = gguf_with_tokenizer(sp, plain_gguf, tmp_path / "ties.gguf", scores=scores)
    refused(g, tmp_path / "out", "same score")


def test_gguf_unigram_refused(sp, plain_gguf, tmp_path):
    g = gguf_with_tokenizer(sp, plain_gguf, tmp_path / "t5.gguf", model="t5")
    refused(g, tmp_path / "out", "t5", "not supported")


def edited_dir(stories_dir, tmp_path, edit):
    d = tmp_path / "src"
    shutil.copytree(stories_dir, d)
    doc = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    edit(doc)
    (d / "tokenizer.json").write_text(json.dumps(doc), encoding="utf-8")
    return d


def set_pre_metaspace(doc):
    doc["normalizer"] = None
    doc["pre_tokenizer"] = {"type": "Metaspace", "replacement": U2581, "prepend_scheme": "always", "split": False}


def drop_byte(doc):
    del doc["model"]["vocab"]["<0x41>"]


@pytest.mark.parametrize("edit,fragment", [
    (set_pre_metaspace, "Metaspace"),
    (lambda d: d["model"].update(byte_fallback=False), "byte_fallback"),
    (drop_byte, "<0x41>"),
    (lambda d: d["model"].update(type="Unigram"), "Unigram"),
    (lambda d: d["normalizer"]["normalizers"].pop(1), "normalizer Sequence"),
])
def test_tokenizer_json_refused(stories_dir, tmp_path, edit, fragment):
    """what lowbit cannot run as HF does: refused when read, and by convert to GGUF"""
    d = edited_dir(stories_dir, tmp_path, edit)
    with pytest.raises(LowbitError) as e:
        Tok.from_file(d / "tokenizer.json")
    assert e.value.status == LB_ERR_UNSUPPORTED and fragment in e.value.message, e.value.message
    refused(d, tmp_path / "x.gguf", fragment)


def drop_merge(doc):
    doc["model"]["merges"].pop(0)  # '▁t' is then never merged, though '▁' and 't' are pieces


def split_merges(doc):
    """one piece's two merges apart: the first to the front of the list"""
    m = doc["model"]["merges"]
    made = {}
    for k, (a, b) in enumerate(m):
        made.setdefault(a + b, []).append(k)
    k = next(ks[-1] for ks in made.values() if len(ks) > 1)
    m.insert(0, m.pop(k))


@pytest.mark.parametrize("edit,fragment", [(drop_merge, "no merge makes it"), (split_merges, "not adjacent")])
def test_hf_to_gguf_refused_when_scores_cannot_say_it(stories_dir, tmp_path, edit, fragment):
    """merges HF runs (and lowbit reads) but GGUF scores cannot order"""
    d = edited_dir(stories_dir, tmp_path, edit)
    hf = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
    text = STORIES_TXT.read_text(encoding="utf-8")
    assert Tok.from_file(d / "tokenizer.json").encode(text) == hf.encode(text, add_special_tokens=False).ids
    refused(d, tmp_path / "x.gguf", fragment, "no tokenizer written")
