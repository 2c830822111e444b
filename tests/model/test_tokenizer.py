"""lowbit's tokenizers against the reference implementations.

- SmolLM2 (GPT-2 style byte-level BPE, pre-tokenizer "smollm"): HF
  `tokenizers` (Rust) on a tokenizer.json built here from the GGUF's tokens
  and merges, with SmolLM2's pre-tokenizer Sequence[Digits(individual_digits=
  True), ByteLevel(add_prefix_space=False)]. lowbit reads both the GGUF and
  that tokenizer.json; the ids must equal `tokenizers`' on the whole of
  wiki.test.raw and on adversarial strings.
- tok512 (llama2.c tokenizer, SentencePiece BPE by scores): `sentencepiece`
  with models/tok512.model, on wiki.test.raw split into lines (each line
  encoded on its own, as sentencepiece would see one sentence) and on the
  TinyStories excerpt, whole and by line.
- A synthetic GGUF "llama" tokenizer (tok512's pieces and scores, written with
  the gguf package): the same ids as sentencepiece.

Invalid UTF-8 (byte-level BPE) is lowbit's own rule, because the reference
takes only str: each invalid byte is a code point of its own in the class of
U+FFFD (neither letter, number nor space) and keeps its byte, so the text
splits as `tokenizers` splits the text with each invalid byte replaced by
U+FFFD, and the ids decode back to the exact input bytes."""
import ctypes
import json
import os
import pathlib
import re

import numpy as np
import pytest

tokenizers = pytest.importorskip("tokenizers")
spm = pytest.importorskip("sentencepiece")
gguf = pytest.importorskip("gguf")

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TOK512_BIN = ROOT / "models/tok512.bin"
TOK512_MODEL = ROOT / "models/tok512.model"
STORIES = ROOT / "models/stories260K.bin"
STORIES_TXT = ROOT / "models/tinystories-valid-excerpt.txt"
WIKI = ROOT / "data/wikitext-2-raw/wiki.test.raw"

LB_OK, LB_ERR_ARG, LB_ERR_NOMEM, LB_ERR_IO, LB_ERR_PARSE, LB_ERR_UNSUPPORTED = 0, 1, 4, 5, 6, 7

# ===== ctypes binding of the tokenizer API =====

lib = ctypes.CDLL(str(BUILD / "liblowbit.so"))
libc = ctypes.CDLL(None)
P = ctypes.c_void_p
lib.lb_last_error.restype = ctypes.c_char_p
lib.lb_model_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(P)]
lib.lb_model_close.argtypes = [P]
lib.lb_tokenizer_from_model.argtypes = [P, ctypes.c_char_p, ctypes.POINTER(P)]
lib.lb_tokenizer_from_file.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(P)]
lib.lb_tokenizer_free.argtypes = [P]
lib.lb_tokenizer_vocab_size.argtypes = [P]
lib.lb_tokenizer_vocab_size.restype = ctypes.c_uint32
lib.lb_tokenizer_bos.argtypes = [P]
lib.lb_tokenizer_bos.restype = ctypes.c_int32
lib.lb_tokenizer_eos.argtypes = [P]
lib.lb_tokenizer_eos.restype = ctypes.c_int32
lib.lb_tokenize.argtypes = [P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                            ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)), ctypes.POINTER(ctypes.c_size_t)]
lib.lb_token_bytes.argtypes = [P, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
libc.free.argtypes = [P]


class LowbitError(Exception):
    def __init__(self, status, message):
        super().__init__(f"status {status}: {message}")
        self.status, self.message = status, message


def check(status):
    if status != LB_OK:
        raise LowbitError(status, lib.lb_last_error().decode(errors="replace"))


class Tok:
    """A lowbit tokenizer."""

    def __init__(self, handle):
        self.h = handle
        self.n = lib.lb_tokenizer_vocab_size(handle)
        self._bytes = None

    @classmethod
    def from_file(cls, path, vocab_size=0):
        h = P()
        check(lib.lb_tokenizer_from_file(str(path).encode(), vocab_size, ctypes.byref(h)))
        return cls(h)

    @classmethod
    def from_model(cls, path):
        m = P()
        check(lib.lb_model_open(str(path).encode(), ctypes.byref(m)))
        try:
            h = P()
            check(lib.lb_tokenizer_from_model(m, str(path).encode(), ctypes.byref(h)))
        finally:
            lib.lb_model_close(m)
        return cls(h)

    def __del__(self):
        if getattr(self, "h", None):
            lib.lb_tokenizer_free(self.h)

    @property
    def bos(self):
        return lib.lb_tokenizer_bos(self.h)

    @property
    def eos(self):
        return lib.lb_tokenizer_eos(self.h)

    def encode(self, text, add_bos=False):
        b = text.encode() if isinstance(text, str) else bytes(text)
        ids, n = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
        check(lib.lb_tokenize(self.h, b, len(b), int(add_bos), ctypes.byref(ids), ctypes.byref(n)))
        try:
            return np.ctypeslib.as_array(ids, (n.value,)).tolist() if n.value else []
        finally:
            libc.free(ids)

    def token_bytes(self, i):
        p, n = P(), ctypes.c_size_t()
        check(lib.lb_token_bytes(self.h, i, ctypes.byref(p), ctypes.byref(n)))
        return ctypes.string_at(p, n.value) if n.value else b""

    def decode(self, ids):
        if self._bytes is None:
            self._bytes = [self.token_bytes(i) for i in range(self.n)]
        return b"".join(self._bytes[i] for i in ids)


# ===== references =====

def gpt2_alphabet():
    """GPT-2's bytes_to_unicode, written out from its definition."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def gguf_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


@pytest.fixture(scope="module")
def smollm_vocab():
    if not SMOLLM2.exists():
        pytest.skip("SmolLM2 GGUF not fetched (tests/fetch_smollm2.sh)")
    r = gguf.GGUFReader(str(SMOLLM2))
    tokens = gguf_strings(r, "tokenizer.ggml.tokens")
    merges = gguf_strings(r, "tokenizer.ggml.merges")
    tt = r.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    return tokens, merges, types


def build_hf(tokens, merges, types, individual_digits=True, add_prefix_space=False, digits=True,
             ignore_merges=False, added=None):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == len(tokens)
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges], ignore_merges=ignore_merges)
    tk = Tokenizer(bpe)
    bl = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=individual_digits), bl]) \
        if digits else bl
    tk.decoder = decoders.ByteLevel()
    if added is None:
        added = [AddedToken(tokens[i], special=True, normalized=False) for i, t in enumerate(types) if t == 3]
    tk.add_special_tokens(added)
    return tk


@pytest.fixture(scope="module")
def smollm_json(smollm_vocab, tmp_path_factory):
    tokens, merges, types = smollm_vocab
    d = tmp_path_factory.mktemp("smollm2")
    tk = build_hf(tokens, merges, types)
    tk.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|im_start|>", "eos_token": {
        "content": "<|im_end|>", "special": True}}))
    return d / "tokenizer.json"


@pytest.fixture(scope="module")
def hf(smollm_json):
    return tokenizers.Tokenizer.from_file(str(smollm_json))


@pytest.fixture(scope="module")
def lb_gguf():
    if not SMOLLM2.exists():
        pytest.skip("SmolLM2 GGUF not fetched")
    return Tok.from_file(SMOLLM2)


@pytest.fixture(scope="module")
def lb_json(smollm_json):
    return Tok.from_file(smollm_json)


@pytest.fixture(scope="module")
def wiki():
    return WIKI.read_text(encoding="utf-8")


# SmolLM2's vocabulary lacks 21 byte values (0x04 0x06 0x13 0x14 0x16 0x1D
# 0xC0 0xC1 0xF1 0xF2 0xF5..0xFF: control characters and bytes valid UTF-8
# never or rarely has). HF tokenizers drops such a byte (the model has no unknown
# token) and so does lowbit: the ids decode to the text without them.
MISSING = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2} | set(range(0xF5, 0x100))


def kept(raw):
    return bytes(b for b in raw if b not in MISSING)


def hf_ids(hf, text):
    return hf.encode(text, add_special_tokens=False).ids


# ===== SmolLM2: byte-level BPE =====

def test_smollm_header_values(lb_gguf, lb_json):
    assert (lb_gguf.n, lb_gguf.bos, lb_gguf.eos) == (49152, 1, 2)
    # tokenizer.json: BOS/EOS from tokenizer_config.json beside it (a string, an object)
    assert (lb_json.n, lb_json.bos, lb_json.eos) == (49152, 1, 2)
    assert lb_gguf.encode("hi", add_bos=True)[0] == 1


def test_smollm_wiki_equals_tokenizers(hf, lb_gguf, lb_json, wiki):
    ref = hf_ids(hf, wiki)
    raw = wiki.encode()
    got = lb_gguf.encode(raw)  # its speed is a benchmark's business, not a test's
    assert len(got) == len(ref)
    assert got == ref
    assert lb_json.encode(raw) == ref
    assert lb_gguf.decode(got) == raw  # the ids decode back to the text exactly


ADVERSARIAL = [
    "", " ", "  ", "      ", "\t", "\n", "\n\n\n", " \n \n", "\t\t \t", "\r\n\r\n", "a \n\tb", "  a", "a  ", "a\u00a0 b",
    "\u3000x\u2028y\u2029 z\u0085w\u200bv", "\x1c\x1d\x1e\x1f x",
    "1234567", " 1234567", "12 345.678,9", "x²³ ½ ١٢٣ ๓๔ Ⅻ", "v1.2.3-rc4",
    "don't I'll we've they're she'd it's I'm 'S 'T '", "''s'''ll",
    "😀", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag 👍🏽", "é café naïve", "e\u0301\u0302\u0303 a\u0308",
    "中文字符测试，标点。", "日本語のテキスト", "한국어 텍스트", "Ελληνικά Кириллица עברית العربية",
    "ﬁ ﬀ Ǆ ǅ", "\U00010400\U0001D400\U00020000 \U000E0001",
    "a" * 10000, " " + "b" * 10000, "ab" * 5000, "1" * 3000, "!" * 5000, "\n" * 3000, " " * 4000 + "x",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "<|im_start|><|im_start|>",
    "x<|endoftext|>y", "<|im_start", "<|im_start|", " <|im_end|> ", "<repo_name>a<file_sep>",
    "\x00\x01\x02\x7f", "tab\tsep\tvalues\n", "<s></s>",
]


@pytest.mark.parametrize("i", range(len(ADVERSARIAL)))
def test_smollm_adversarial(hf, lb_gguf, lb_json, i):
    text = ADVERSARIAL[i]
    ref = hf_ids(hf, text)
    assert lb_gguf.encode(text) == ref
    assert lb_json.encode(text) == ref
    assert lb_gguf.decode(ref) == kept(text.encode())


def test_smollm_every_byte_value(hf, lb_gguf, lb_json):
    # each code point 0..255 alone and all together
    for b in range(256):
        ref = hf_ids(hf, chr(b))
        assert lb_gguf.encode(chr(b)) == ref, b
        assert lb_json.encode(chr(b)) == ref, b
    text = "".join(chr(b) for b in range(256))
    assert lb_gguf.encode(text) == hf_ids(hf, text)
    # each byte 0..255 as raw bytes: one token, the byte's own
    alphabet = gpt2_alphabet()
    vocab = hf.get_vocab()
    assert {b for b in range(256) if alphabet[b] not in vocab} == MISSING
    for b in range(256):
        assert lb_gguf.encode(bytes([b])) == ([] if b in MISSING else [vocab[alphabet[b]]]), b


def test_smollm_unicode_classes(hf, lb_gguf):
    """Every assigned code point (Python's Unicode version, that of the
    generated tables) and every 64th unassigned or private-use one, in
    contexts where its class (letter, number, space, other) decides the
    split: the ids equal the reference's, so \\p{L}, \\p{N} and \\s agree with
    Oniguruma's. (Run once over all 1.1M code points: no difference.)"""
    import unicodedata
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and
           (unicodedata.category(chr(c)) not in ("Cn", "Co") or c % 64 == 0)]
    chunk = 4096
    bad = []
    for k in range(0, len(cps), chunk):
        text = "".join(f"a{chr(c)}b {chr(c)}! 1{chr(c)}\n" for c in cps[k:k + chunk])
        if lb_gguf.encode(text) != hf_ids(hf, text):
            for c in cps[k:k + chunk]:
                t = f"a{chr(c)}b {chr(c)}! 1{chr(c)}\n"
                if lb_gguf.encode(t) != hf_ids(hf, t):
                    bad.append(hex(c))
    assert not bad, f"{len(bad)} code points classed differently: {bad[:40]}"


def split_invalid(raw):
    """raw as (character, byte length) pairs, each invalid byte (lowbit's
    rule) a U+FFFD of its own."""
    out, i = [], 0
    while i < len(raw):
        for n in (1, 2, 3, 4):
            try:
                ch = raw[i:i + n].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if len(ch) == 1:
                out.append((ch, n))
                break
        else:
            out.append(("\ufffd", 1))
            n = 1
        i += n
    return out


def test_smollm_invalid_utf8(hf, lb_gguf):
    """Invalid bytes: the ids decode back to the exact bytes (those in the
    vocabulary), and the text
    splits into words where the reference splits the text with each invalid
    byte replaced by U+FFFD (every word boundary is a token boundary)."""
    cases = [b"\xff", b"\x80abc", b"abc \xff def", b"\xe2\x82", b"\xe2\x82 x", b"\xc0\xaf", b"\xed\xa0\x80",
             b"\xf4\x90\x80\x80", b"\xf0\x9f\x98", b"a\xfe\xfeb", b"12\xff34", b"\xc3(", b"caf\xe9 au lait",
             b"it\xff's \xff\xff  \xffx", b"\x80\x80 \xbf\xa0x", b"a\xe2\x82 b\xed\xa0\x80c", b"1\xc3\xc3 2"]
    for raw in cases:
        ids = lb_gguf.encode(raw)
        assert lb_gguf.decode(ids) == kept(raw), raw
        if kept(raw) != raw:
            continue
        chars = split_invalid(raw)
        byte_at = np.concatenate([[0], np.cumsum([n for _, n in chars])])
        words = hf.pre_tokenizer.pre_tokenize_str("".join(c for c, _ in chars))
        ref_bounds = {int(byte_at[end]) for _, (_, end) in words}
        ours, pos = set(), 0
        for i in ids:
            pos += len(lb_gguf.token_bytes(i))
            ours.add(pos)
        assert ref_bounds <= ours, (raw, words, ids)
        # the valid parts around an invalid byte encode as the reference's
    assert lb_gguf.encode(b"abc \xff def")[:1] == hf_ids(hf, "abc")
    assert lb_gguf.encode(b"abc \xff def")[-1:] == hf_ids(hf, " def")


def test_smollm_token_bytes(smollm_vocab, lb_gguf, lb_json):
    tokens, _, types = smollm_vocab
    inv = {v: k for k, v in gpt2_alphabet().items()}
    for i, (tok, ty) in enumerate(zip(tokens, types)):
        want = tok.encode() if ty == 3 else bytes(inv[c] for c in tok)
        assert lb_gguf.token_bytes(i) == want, i
        assert lb_json.token_bytes(i) == want, i
    with pytest.raises(LowbitError) as e:
        lb_gguf.token_bytes(49152)
    assert e.value.status == LB_ERR_ARG and "49152" in e.value.message


def test_smollm_from_model(hf):
    t = Tok.from_model(SMOLLM2)
    text = "The quick brown fox 123 <|im_end|>"
    assert t.encode(text) == hf_ids(hf, text)


VARIANT_TEXT = ("  Hello world, it's 2024!  Numbers 1234 and 56.7\n\n<|im_start|> user   text<|im_end|>  tail ñ 中 "
                "😀 \t x" * 3)


@pytest.mark.parametrize("variant", ["pairs", "grouped_digits", "no_digits", "prefix_space", "ignore_merges",
                                     "strip"])
def test_tokenizer_json_variants(smollm_vocab, tmp_path, variant):
    """tokenizer.json options lowbit reads, each against `tokenizers` with
    the same file: merges as [a, b] pairs, Digits(individual_digits=False),
    ByteLevel alone, add_prefix_space, ignore_merges, and added tokens with
    lstrip / rstrip."""
    from tokenizers import AddedToken
    tokens, merges, types = smollm_vocab
    kw = {}
    if variant == "grouped_digits":
        kw["individual_digits"] = False
    if variant == "no_digits":
        kw["digits"] = False
    if variant == "prefix_space":
        kw["add_prefix_space"] = True
    if variant == "ignore_merges":
        kw["ignore_merges"] = True
    if variant == "strip":
        kw["added"] = [AddedToken("<|im_start|>", special=True, normalized=False, rstrip=True),
                       AddedToken("<|im_end|>", special=True, normalized=False, lstrip=True)]
    tk = build_hf(tokens, merges, types, **kw)
    path = tmp_path / "tokenizer.json"
    tk.save(str(path))
    doc = json.loads(path.read_text())
    if variant == "pairs":
        doc["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in doc["model"]["merges"]]
    else:
        doc["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in doc["model"]["merges"]]
    path.write_text(json.dumps(doc))
    tk = tokenizers.Tokenizer.from_file(str(path))
    t = Tok.from_file(path)
    for text in [VARIANT_TEXT, "x", "", "12", " a  b   c    "]:
        assert t.encode(text) == hf_ids(tk, text), (variant, text)


# ===== llama2.c tokenizer (tok512) against sentencepiece =====

@pytest.fixture(scope="module")
def sp():
    return spm.SentencePieceProcessor(model_file=str(TOK512_MODEL))


@pytest.fixture(scope="module")
def tok512():
    return Tok.from_file(TOK512_BIN, 512)


def test_tok512_header_values(tok512):
    assert (tok512.n, tok512.bos, tok512.eos) == (512, 1, 2)
    assert tok512.encode("hi", add_bos=True)[0] == 1
    assert tok512.token_bytes(3) == b"\x00" and tok512.token_bytes(258) == b"\xff"  # byte fallback ids 3..258


def sp_spaces(text):
    """What sentencepiece's normalizer does to spaces with tok512.model
    (remove_extra_whitespaces): runs of U+0020 become one, and leading and
    trailing ones go. run.c's encode() (lowbit's) keeps every space, so the
    two agree on text already so normalized."""
    return re.sub(" +", " ", text).strip(" ")


def test_tok512_wiki_lines(sp, tok512, wiki):
    lines = wiki.split("\n")
    diff = [ln for ln in lines if tok512.encode(sp_spaces(ln)) != sp.encode(ln)]
    assert not diff, f"{len(diff)} of {len(lines)} lines differ, e.g. {diff[:3]!r}"
    for ln in lines[:2000]:
        if ln:
            assert tok512.decode(tok512.encode(ln)) == b" " + ln.encode()  # the dummy prefix, then the line


def test_tok512_tinystories(sp, tok512):
    text = STORIES_TXT.read_text(encoding="utf-8")
    assert tok512.encode(sp_spaces(text)) == sp.encode(text)
    for ln in text.split("\n"):
        assert tok512.encode(sp_spaces(ln)) == sp.encode(ln)
    assert tok512.decode(tok512.encode(text)) == b" " + text.encode()


def test_tok512_whole_wiki_round_trip(tok512, wiki):
    """the whole of wiki.test.raw in one call (its speed belongs to a benchmark, not a test)"""
    raw = wiki.encode()
    ids = tok512.encode(raw)
    assert tok512.decode(ids) == b" " + raw


TOK512_ADVERSARIAL = ["", " ", "   ", "\t\n", "a", "1234567", "Once upon a time", "😀 👨‍👩‍👧", "中文 é",
                      "e\u0301", "x" * 10000, "the " * 2000, "\x01\x7f", "<s> </s> <unk>", "a \n b", "\u3000a",
                      "ｆｕｌｌ", "a\u00a0b", "\t\ta  b\t"]


@pytest.mark.parametrize("i", range(len(TOK512_ADVERSARIAL)))
def test_tok512_adversarial(sp, tok512, i):
    text = TOK512_ADVERSARIAL[i]
    assert tok512.encode(sp_spaces(text)) == sp.encode(text)


def test_tok512_where_runc_and_sentencepiece_differ(sp, tok512, wiki):
    """run.c's algorithm (lowbit's) and sentencepiece disagree where
    sentencepiece normalizes: (1) it drops leading and trailing spaces and
    collapses runs of spaces (remove_extra_whitespaces in tok512.model),
    run.c keeps every one; (2) a literal U+2581 in the text is a space to
    sentencepiece, but to run.c a character that is not in the vocabulary
    (the .bin stores spaces), so its bytes fall back to byte tokens. A NUL
    byte ends the text for run.c's C string; lowbit encodes it (<0x00>)."""
    space = tok512.encode(" ")  # the dummy prefix and the space: two '▁' tokens
    assert sp.encode(" ") == [] and space == [410, 410]
    assert sp.encode("a  b") == sp.encode("a b") and tok512.encode("a  b") != tok512.encode("a b")
    assert sp.encode(" a ") == sp.encode("a") and tok512.encode(" a ") == [410, 261, 410]
    lines = wiki.split("\n")
    raw_diff = sum(tok512.encode(ln) != sp.encode(ln) for ln in lines)
    assert raw_diff > 4000  # wikitext's lines start and end with a space: nearly all differ unnormalized
    assert sp.encode("a\u2581b") == sp.encode("a b")
    assert tok512.encode("a\u2581b") != tok512.encode("a b")
    assert tok512.decode(tok512.encode("a\u2581b")) == " a\u2581b".encode()
    assert tok512.encode(b"a\x00b")[-2] == 3  # <0x00>


def test_tok512_from_model(sp, tmp_path):
    # stories260K.bin has no tokenizer.bin beside it: tok512.bin is found
    t = Tok.from_model(STORIES)
    assert t.encode("Once upon a time") == sp.encode("Once upon a time")
    # tokenizer.bin comes first
    (tmp_path / "model.bin").symlink_to(STORIES)
    (tmp_path / "tokenizer.bin").write_bytes(TOK512_BIN.read_bytes())
    t = Tok.from_model(tmp_path / "model.bin")
    assert t.n == 512
    os.unlink(tmp_path / "tokenizer.bin")
    with pytest.raises(LowbitError) as e:
        Tok.from_model(tmp_path / "model.bin")
    assert e.value.status == LB_ERR_IO and "tok512.bin" in e.value.message


# ===== GGUF "llama" (SentencePiece) =====

@pytest.fixture(scope="module")
def llama_gguf(sp, tmp_path_factory):
    path = tmp_path_factory.mktemp("llama") / "spm.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    pieces = [sp.id_to_piece(i) for i in range(sp.vocab_size())]
    w.add_token_list(pieces)
    w.add_token_scores([sp.get_score(i) for i in range(sp.vocab_size())])
    types = []
    for i in range(sp.vocab_size()):
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_llama_equals_sentencepiece(sp, llama_gguf):
    t = Tok.from_file(llama_gguf)
    assert (t.n, t.bos, t.eos) == (512, 1, 2)
    text = STORIES_TXT.read_text(encoding="utf-8")
    assert t.encode(sp_spaces(text)) == sp.encode(text)
    for ln in text.split("\n")[:300]:
        assert t.encode(sp_spaces(ln)) == sp.encode(ln)
    assert t.decode(t.encode(text)) == b" " + text.encode()
    # control tokens (type 3) in text are those tokens, and the text after one gets the dummy prefix again
    assert t.encode("<s>Once") == [1] + sp.encode("Once")


# ===== bad input =====

def expect_error(status, fragment, path, vocab=0):
    with pytest.raises(LowbitError) as e:
        Tok.from_file(path, vocab)
    assert e.value.status == status, e.value.message
    assert fragment in e.value.message, e.value.message


def test_bad_files(tmp_path, smollm_json):
    expect_error(LB_ERR_IO, "nope.json", tmp_path / "nope.json")
    expect_error(LB_ERR_ARG, "vocab_size", TOK512_BIN, 0)
    cut = tmp_path / "cut.bin"
    cut.write_bytes(TOK512_BIN.read_bytes()[:5000])
    expect_error(LB_ERR_PARSE, "remain", cut, 512)
    expect_error(LB_ERR_PARSE, "follow", TOK512_BIN, 500)
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": {"type": "BPE", "vocab": {"a": 0,}}}')
    expect_error(LB_ERR_PARSE, "line 1", bad)
    doc = json.loads(smollm_json.read_text())

    def variant(name, edit, status, fragment):
        d = json.loads(json.dumps(doc))
        edit(d)
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(d))
        expect_error(status, fragment, p)

    variant("wordpiece", lambda d: d["model"].update(type="WordPiece"), LB_ERR_UNSUPPORTED, "WordPiece")
    variant("nfc", lambda d: d.update(normalizer={"type": "NFC"}), LB_ERR_UNSUPPORTED, "NFC")
    variant("split", lambda d: d.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": "x"}}),
            LB_ERR_UNSUPPORTED, "Split")
    variant("merge", lambda d: d["model"]["merges"].insert(0, "Ġ zzzqq"), LB_ERR_PARSE, "zzzqq")
    variant("merge3", lambda d: d["model"]["merges"].insert(0, "a b c"), LB_ERR_PARSE, "merges[0]")
    variant("noid", lambda d: d["added_tokens"][0].update(id=-3), LB_ERR_PARSE, "added_tokens")
    variant("novocab", lambda d: d["model"].pop("vocab"), LB_ERR_PARSE, "model.vocab")
    # GGUF without a tokenizer, and with one lowbit does not run
    for name, kv, fragment, status in [("none", {}, "tokenizer.ggml.model", LB_ERR_PARSE),
                                       ("bert", {"model": "bert"}, "bert", LB_ERR_UNSUPPORTED),
                                       ("qwen2", {"model": "gpt2", "pre": "qwen2"}, "qwen2", LB_ERR_UNSUPPORTED),
                                       # llama.cpp's "default" (also what a missing name means) is not GPT-2's regex
                                       ("default", {"model": "gpt2", "pre": "default"}, "'default'",
                                        LB_ERR_UNSUPPORTED),
                                       ("nopre", {"model": "gpt2"}, "absent: 'default'", LB_ERR_UNSUPPORTED)]:
        p = tmp_path / f"{name}.gguf"
        w = gguf.GGUFWriter(str(p), "llama")
        if "model" in kv:
            w.add_tokenizer_model(kv["model"])
            w.add_token_list(["a", "b", "ab"])
            w.add_token_merges(["a b"])
        if "pre" in kv:
            w.add_tokenizer_pre(kv["pre"])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        expect_error(status, fragment, p)


def test_null_arguments():
    h = P()
    assert lib.lb_tokenizer_from_file(None, 0, ctypes.byref(h)) == LB_ERR_ARG
    assert lib.lb_tokenize(None, b"x", 1, 0, ctypes.byref(ctypes.POINTER(ctypes.c_int32)()),
                           ctypes.byref(ctypes.c_size_t())) == LB_ERR_ARG
    assert lib.lb_tokenizer_vocab_size(None) == 0 and lib.lb_tokenizer_bos(None) == -1
    lib.lb_tokenizer_free(None)
