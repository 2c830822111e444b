"""A GGUF that lowbit writes from a Hugging Face directory carries the
tokenizer of its tokenizer.json (src/export/hf_tokenizer_to_gguf*.c), and
llama.cpp itself tokenizes with it exactly as Hugging Face `tokenizers` does:

- ids: `llama-tokenize` on lowbit's GGUF equals `tokenizers` on tokenizer.json
  (with its post-processor, so BOS/EOS as each adds them) on the whole of
  wiki.test.raw as one text, on single lines of it, and on texts with added
  and special tokens in them; for SmolLM2 (byte-level BPE, "smollm"),
  stories260K (SentencePiece-style, "llama"), SmolLM2's vocabulary with
  GPT-2's pre-tokenizer ("gpt-2"), and two synthetic variants of them
  (user-defined and special added tokens, ids beyond the tokenizer's
  padded as convert_hf_to_gguf.py pads them, a BOS template, named chat
  templates);
- keys: the values llama.cpp's convert_hf_to_gguf.py would write for the same
  directory. That script needs torch and transformers, which are not here, so
  its reading is replayed: gguf-py's own SpecialVocab (from the sdist) for
  merges, special ids, add flags and chat template; get_vocab_base's tokens
  and types and get_vocab_base_pre's pre-tokenizer name (the sha256 of the
  ids of its check text, looked up in the script's own table) with
  `tokenizers` standing in for AutoTokenizer. The one documented difference:
  lowbit's "llama" scores follow the merge ranks (the converter's
  tokenizer.json path writes -1000 for every token, which llama.cpp would
  merge differently: test_spm_scores_are_needed shows it);
- the original SmolLM2 GGUF (llama.cpp's converter) and lowbit's GGUF written
  from lowbit's HF directory of it hold the same tokenizer keys, except
  add_eos_token, which lowbit writes (false, llama.cpp's default) and the
  original lacks;
- a tokenizer llama.cpp cannot run identically is refused with a message,
  never written differently;
- llama-perplexity loads the GGUF written from the HF directory and gives the
  original GGUF's perplexity."""
import ast
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LOWBIT_BUILD", "build")
LOWBIT = BUILD / "lowbit"
SMOLLM2 = ROOT / ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
STORIES = ROOT / "models/stories260K.bin"  # tok512.bin beside it
WIKI = ROOT / "data/wikitext-2-raw/wiki.test.raw"
# the sources of the llama.cpp whose tools LOWBIT_LLAMACPP holds (build/bin)
SRC = pathlib.Path(os.environ["LOWBIT_LLAMACPP"]).resolve().parents[1] / "src"
gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")

CONTROL, USER_DEFINED, UNUSED, NORMAL, BYTE = 3, 4, 5, 1, 6
# the texts with added tokens in them (the synthetic tokenizers add <tool> and [[x]])
SPECIAL_TEXTS = ["<|im_start|>user\nHi there<|im_end|>\n", "a<tool>b <tool> c<tool>", "x [[x]] y<|endoftext|>z<|x|>",
                 "<s> once </s>upon<unk>a time", " <|im_start|>  <repo_name>3 4<tool>\n\n"]


def lowbit(*args, ok=True):
    p = subprocess.run([str(LOWBIT), *map(str, args)], capture_output=True, text=True)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def llama_ids(bin_dir, model, text, tmp_path):
    """llama-tokenize's ids for text (read verbatim from a file: no escapes; BOS as the GGUF says)."""
    f = tmp_path / "text.txt"
    f.write_bytes(text.encode("utf-8"))
    p = subprocess.run([str(bin_dir / "llama-tokenize"), "-m", str(model), "-f", str(f), "--ids", "--log-disable",
                        "--no-escape"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]
    return ast.literal_eval(p.stdout.strip().splitlines()[-1])


# ===== the directories and their GGUFs =====

def hf_dir_to_gguf(d):
    out = d.parent / (d.name + ".gguf")
    lowbit("convert", d, out, "--quiet")
    return out


def derive(base, name, edit):
    """A copy of HF directory base (weights linked) whose JSON files edit(files) changes."""
    d = base.parent / name
    d.mkdir()
    os.symlink(base / "model.safetensors", d / "model.safetensors")
    files = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in base.glob("*.json")}
    edit(files)
    for n, j in files.items():
        (d / n).write_text(json.dumps(j, ensure_ascii=False, indent=1), encoding="utf-8")
    return d


def add_tokens(files, first_id, specials):
    """Appends added tokens <tool> (user-defined), [[x]] (special) and <|x|> (not special, but control:
    it looks special to the converter) from first_id."""
    for i, (c, sp) in enumerate([("<tool>", False), ("[[x]]", True), ("<|x|>", False)]):
        files["tokenizer.json"]["added_tokens"].append(
            {"id": first_id + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": sp})
    files["tokenizer_config.json"]["chat_template"] = [{"name": "default", "template": "{{ messages }}"},
                                                       {"name": "tool use", "template": "{{ tools }}"}]


def synth_bpe(files):
    # config.json's vocab_size beyond the tokenizer's ids: [PAD<id>]
    add_tokens(files, 49152, ())
    files["config.json"]["vocab_size"] = 49160
    for a in files["tokenizer.json"]["added_tokens"]:
        if a["content"] == "<repo_name>":
            a["special"] = False  # an added token that is not special and does not look special: user-defined
    # a post-processor that starts every text with <|endoftext|>
    files["tokenizer.json"]["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}}}
    files["tokenizer_config.json"]["bos_token"] = "<|endoftext|>"
    files["tokenizer_config.json"]["add_bos_token"] = True


def synth_gpt2(files):
    # ByteLevel alone (GPT-2's regex, digit runs kept together): "gpt-2"
    files["tokenizer.json"]["pre_tokenizer"] = files["tokenizer.json"]["pre_tokenizer"]["pretokenizers"][1]


def synth_spm(files):
    add_tokens(files, 512, ())
    files["config.json"]["vocab_size"] = 520


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """name -> (HF directory, GGUF lowbit wrote from it)."""
    if not SMOLLM2.exists():
        pytest.skip("SmolLM2 GGUF not fetched (tests/fetch_smollm2.sh)")
    root = tmp_path_factory.mktemp("tok")
    smol, stories = root / "smollm2", root / "stories"
    lowbit("convert", SMOLLM2, smol, "--dtype", "bf16", "--quiet")
    lowbit("convert", STORIES, stories, "--quiet")
    out = {"smollm2": smol, "stories": stories, "synth_bpe": derive(smol, "synth_bpe", synth_bpe),
           "synth_gpt2": derive(smol, "synth_gpt2", synth_gpt2), "synth_spm": derive(stories, "synth_spm", synth_spm)}
    return {k: (d, hf_dir_to_gguf(d)) for k, d in out.items()}


def fields(path):
    r = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in r.fields.items() if k.startswith("tokenizer.")}


def hf_tok(d):
    return tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))


# ===== the same ids =====

MODELS = ["smollm2", "stories", "synth_bpe", "synth_gpt2", "synth_spm"]


@pytest.mark.parametrize("name", MODELS)
def test_wiki_whole_text(llamacpp_bin, dirs, name, tmp_path):
    d, g = dirs[name]
    text = WIKI.read_text(encoding="utf-8")
    ref = hf_tok(d).encode(text).ids
    got = llama_ids(llamacpp_bin, g, text, tmp_path)
    assert len(ref) > 250_000
    if got != ref:
        i = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
        pytest.fail(f"{name}: first difference at token {i}: llama.cpp {got[i:i + 8]} tokenizers {ref[i:i + 8]}")


@pytest.mark.parametrize("name", MODELS)
def test_wiki_lines_and_added_tokens(llamacpp_bin, dirs, name, tmp_path):
    # single lines (each its own text: BOS, the dummy prefix, leading spaces), and added/special tokens in text
    d, g = dirs[name]
    lines = [ln for ln in WIKI.read_text(encoding="utf-8").split("\n") if ln.strip()]
    picks = lines[:: max(1, len(lines) // 12)][:12] + SPECIAL_TEXTS + ["", " ", "\n\n  \t x"]
    tk = hf_tok(d)
    for text in picks:
        assert llama_ids(llamacpp_bin, g, text, tmp_path) == tk.encode(text).ids, (name, text)


# ===== the keys convert_hf_to_gguf.py would write =====

def converter_source():
    return (SRC / "conversion/base.py").read_text(encoding="utf-8")


def converter_pre(tk):
    """get_vocab_base_pre: the sha256 of the ids of chktxt, looked up in the script's table."""
    src = converter_source()
    chktxt = ast.literal_eval(re.search(r"^\s*chktxt = (.*)$", src, re.M).group(1))
    table = dict(re.findall(r'if chkhsh == "([0-9a-f]{64})":\n\s*#[^\n]*\n\s*res = "([^"]+)"', src))
    assert len(table) > 50
    return table.get(hashlib.sha256(str(tk.encode(chktxt).ids).encode()).hexdigest())


def looks_special(t):
    """does_token_look_special of convert_hf_to_gguf.py (checked below to still say this)."""
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (t.startswith("<|") and t.endswith("|>"))
            or (t.startswith("<\uff5c") and t.endswith("\uff5c>")) or (t.startswith("<unused") and t.endswith(">")))


def test_looks_special_is_the_converters():
    src = converter_source()
    for s in ['"<pad>",', '"<mask>", "<2mass>", "[@BOS@]"', 'startswith("<|") and token_text.endswith("|>")',
              'startswith("<unused") and token_text.endswith(">")']:
        assert s in src, s


def converter_vocab(d):
    """get_vocab_base's tokens and types with `tokenizers` for AutoTokenizer."""
    tk = hf_tok(d)
    j = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    n = json.loads((d / "config.json").read_text())["vocab_size"]
    rev = {i: t for t, i in tk.get_vocab(with_added_tokens=True).items()}
    added = {a["id"]: a for a in j["added_tokens"]}
    tokens, types = [], []
    for i in range(n):
        if i not in rev:
            tokens.append(f"[PAD{i}]"), types.append(UNUSED)
        elif i in added:
            tokens.append(rev[i])
            types.append(CONTROL if added[i]["special"] or looks_special(rev[i]) else USER_DEFINED)
        else:
            tokens.append(rev[i]), types.append(NORMAL)
    return tokens, types


SPECIAL_VOCAB = """
import json, sys, gguf
sv = gguf.SpecialVocab(sys.argv[1], load_merges=True, n_vocab=int(sys.argv[2]))
print(json.dumps({"file": gguf.__file__, "merges": sv.merges, "special_token_ids": sv.special_token_ids,
                  "add_special_token": sv.add_special_token, "chat_template": sv.chat_template}))
"""


def special_vocab(d, n_vocab):
    """gguf-py's SpecialVocab of the sdist (the converter's own), run apart so this process keeps its gguf."""
    p = subprocess.run([sys.executable, "-c", SPECIAL_VOCAB, str(d), str(n_vocab)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(SRC / "gguf-py")})
    assert p.returncode == 0, p.stderr[-3000:]
    sv = json.loads(p.stdout.strip().splitlines()[-1])
    assert pathlib.Path(sv["file"]).resolve().is_relative_to(SRC), sv["file"]
    return sv


ID_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id", "sep": "seperator_token_id",
           "pad": "padding_token_id", "mask": "mask_token_id"}


def check_special_vocab(f, sv):
    for typ, key in ID_KEYS.items():
        assert f.get("tokenizer.ggml." + key) == sv["special_token_ids"].get(typ), typ
    for typ in ("bos", "eos", "sep"):
        want = sv["add_special_token"].get(typ)
        # lowbit always says add_bos/add_eos (unsaid: false, what tokenizers does without a post-processor)
        got = f.get(f"tokenizer.ggml.add_{typ}_token")
        assert got == want or (want is None and typ != "sep" and got is False), (typ, got, want)
    tmpl = sv["chat_template"]
    if isinstance(tmpl, list):
        named = {t["name"]: t["template"] for t in tmpl}
        assert f.get("tokenizer.chat_template") == named.pop("default", None)
        for name, t in named.items():
            assert f["tokenizer.chat_template." + re.sub("[^A-Za-z0-9]", "_", name)] == t
        assert sorted(f["tokenizer.chat_templates"]) == sorted(re.sub("[^A-Za-z0-9]", "_", k) for k in named)
    else:
        assert f.get("tokenizer.chat_template") == tmpl


@pytest.mark.parametrize("name", ["smollm2", "synth_bpe", "synth_gpt2"])
def test_bpe_keys_as_converter(dirs, name):
    d, g = dirs[name]
    f = fields(g)
    tokens, types = converter_vocab(d)
    assert f["tokenizer.ggml.model"] == "gpt2"
    if name == "synth_bpe":
        # its BOS template changes the check text's ids, so the converter's hash table does not know it and the
        # converter refuses the directory; without the template the hash is SmolLM's: lowbit names it by its parts
        assert converter_pre(hf_tok(d)) is None
        j = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
        j["post_processor"] = None
        assert converter_pre(tokenizers.Tokenizer.from_str(json.dumps(j))) == "smollm"
    elif name == "synth_gpt2":
        # SmolLM2's vocabulary with GPT-2's pre-tokenizer: no token holds two digits, so the check text's ids,
        # hence the converter's hash, are SmolLM's and it says "smollm" (the same ids here, as test_wiki_* shows
        # for "gpt-2"); lowbit names the pre-tokenizer by what tokenizer.json says
        assert converter_pre(hf_tok(d)) == "smollm"
        assert not any(re.search("[0-9].*[0-9]", t) for t in hf_tok(d).get_vocab())
    else:
        assert converter_pre(hf_tok(d)) == "smollm"
    assert f["tokenizer.ggml.pre"] == ("gpt-2" if name == "synth_gpt2" else "smollm")
    assert f["tokenizer.ggml.tokens"] == tokens
    assert f["tokenizer.ggml.token_type"] == types
    sv = special_vocab(d, len(tokens))
    assert f["tokenizer.ggml.merges"] == sv["merges"] and len(sv["merges"]) > 40000
    check_special_vocab(f, sv)
    if name == "synth_bpe":  # the edges the synthetic directory has
        assert types[3] == USER_DEFINED and types[49152:49155] == [USER_DEFINED, CONTROL, CONTROL]
        assert tokens[49155:] == [f"[PAD{i}]" for i in range(49155, 49160)] and types[49155:] == [UNUSED] * 5
        assert f["tokenizer.ggml.add_bos_token"] is True and f["tokenizer.ggml.bos_token_id"] == 0


def llama_hf_vocab_types(d):
    """LlamaHfVocab's types (the converter's tokenizer.json path for "llama"): <0xNN> byte, the named
    special tokens control, other added tokens user-defined (control when special), the rest normal."""
    j = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    vocab = j["model"]["vocab"]
    named = {cfg[k] if isinstance(cfg[k], str) else cfg[k]["content"]
             for k in ("bos_token", "eos_token", "unk_token", "pad_token") if cfg.get(k)}
    types = {}
    for t, i in vocab.items():
        types[i] = BYTE if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", t) else CONTROL if t in named else NORMAL
    for a in j["added_tokens"]:
        if a["id"] not in types or a["content"] in named:
            types[a["id"]] = CONTROL if a["special"] or a["content"] in named else USER_DEFINED
    return types


@pytest.mark.parametrize("name", ["stories", "synth_spm"])
def test_spm_keys_as_converter(dirs, name):
    d, g = dirs[name]
    f = fields(g)
    n = json.loads((d / "config.json").read_text())["vocab_size"]
    assert f["tokenizer.ggml.model"] == "llama" and f["tokenizer.ggml.pre"] == "default"
    assert len(f["tokenizer.ggml.tokens"]) == n
    tk = hf_tok(d)
    for i, t in enumerate(f["tokenizer.ggml.tokens"]):
        assert t == (tk.id_to_token(i) or f"[PAD{i}]"), i
    want = llama_hf_vocab_types(d)
    assert f["tokenizer.ggml.token_type"] == [want.get(i, UNUSED) for i in range(n)]
    assert f["tokenizer.ggml.add_space_prefix"] is True
    check_special_vocab(f, special_vocab(d, n))
    assert f["tokenizer.ggml.add_bos_token"] is True  # the BOS template of the synthesized tokenizer.json


def test_spm_scores_are_needed(llamacpp_bin, dirs, tmp_path):
    # the converter's tokenizer.json path writes -1000 for every score; llama.cpp then merges leftmost-first,
    # not by HF's ranks: lowbit's ranked scores are what makes test_wiki_* pass
    d, g = dirs["stories"]
    flat = tmp_path / "flat.gguf"
    shutil.copy(g, flat)
    scores = gguf.GGUFReader(str(flat), "r+").fields["tokenizer.ggml.scores"]
    for i in scores.data:
        scores.parts[i][...] = -1000.0
    assert set(fields(flat)["tokenizer.ggml.scores"]) == {-1000.0}
    text = "\n".join(WIKI.read_text(encoding="utf-8").split("\n")[:200])
    assert llama_ids(llamacpp_bin, flat, text, tmp_path) != hf_tok(d).encode(text).ids
    assert llama_ids(llamacpp_bin, g, text, tmp_path) == hf_tok(d).encode(text).ids


def test_original_smollm2_same_keys(dirs):
    # llama.cpp's own conversion of SmolLM2 vs lowbit's GGUF from lowbit's HF directory of it
    a, b = fields(SMOLLM2), fields(dirs["smollm2"][1])
    assert set(b) - set(a) == {"tokenizer.ggml.add_eos_token"} and b["tokenizer.ggml.add_eos_token"] is False
    assert set(a) - set(b) == set()
    for k in a:
        assert a[k] == b[k], k


# ===== refused, never written differently =====

def refuses(base, tmp_path, edit, words, name="tokenizer.json"):
    d = tmp_path / "bad"
    shutil.copytree(base, d, ignore=shutil.ignore_patterns("model.safetensors"))
    os.symlink(base / "model.safetensors", d / "model.safetensors")
    j = json.loads((d / name).read_text(encoding="utf-8"))
    edit(j)
    (d / name).write_text(json.dumps(j), encoding="utf-8")
    p = lowbit("convert", d, tmp_path / "bad.gguf", "--quiet", ok=False)
    assert p.returncode != 0 and not (tmp_path / "bad.gguf").exists()
    for w in words:
        assert w in p.stderr, p.stderr


def test_refused(dirs, tmp_path):
    smol = dirs["smollm2"][0]

    def prefix_space(j):
        j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True
    refuses(smol, tmp_path / "a", prefix_space, ["add_prefix_space", "tokenizer.ggml.pre"])

    def llama3(j):
        j["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": r"\p{N}{1,3}"}, "behavior": "Isolated"}
    refuses(smol, tmp_path / "b", llama3, ["pre_tokenizer Split"])

    def lstrip(j):
        j["added_tokens"][1]["lstrip"] = True
    refuses(smol, tmp_path / "c", lstrip, ["<|im_start|>", "lstrip"])

    def gap(j):  # tokenizers would number it 49152, not 49160
        j["added_tokens"].append({"id": 49160, "content": "<gap>", "special": False, "lstrip": False,
                                  "rstrip": False, "normalized": False, "single_word": False})
    refuses(smol, tmp_path / "e", gap, ["<gap>", "49160", "49152"])

    def fewer_ids(c):  # the embedding would have fewer rows than the tokenizer has ids
        c["vocab_size"] = 49000
    refuses(smol, tmp_path / "f", fewer_ids, ["49152 token ids", "vocab_size is 49000"], "config.json")

    def template(j):
        j["post_processor"] = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}},
                               {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}},
                               {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}], "special_tokens": {}}
    refuses(smol, tmp_path / "d", template, ["TemplateProcessing"])


# ===== llama.cpp runs it =====

def perplexity(bin_dir, model):
    p = subprocess.run([str(bin_dir / "llama-perplexity"), "-m", str(model), "-f", str(WIKI), "--chunks", "2",
                        "-c", "512", "-t", "2"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    return float(re.search(r"Final estimate: PPL = ([0-9.]+)", p.stdout + p.stderr).group(1))


def test_perplexity(llamacpp_bin, tmp_path):
    # the Q4_1 original, its f32 dequantization written directly as GGUF, and the same f32 weights through a
    # Hugging Face directory (tokenizer.json -> tokenizer.ggml.*): the last two equal, the first within 0.5%
    if not SMOLLM2.exists():
        pytest.skip("SmolLM2 GGUF not fetched")
    lowbit("convert", SMOLLM2, tmp_path / "hf", "--dtype", "f32", "--quiet")
    lowbit("convert", tmp_path / "hf", tmp_path / "from_hf.gguf", "--quiet")
    lowbit("convert", SMOLLM2, tmp_path / "direct.gguf", "--dtype", "f32", "--quiet")
    orig, direct, from_hf = (perplexity(llamacpp_bin, m) for m in
                             (SMOLLM2, tmp_path / "direct.gguf", tmp_path / "from_hf.gguf"))
    print(f"PPL Q4_1 original {orig:.4f}, f32 direct {direct:.4f}, f32 from HF {from_hf:.4f}")
    assert from_hf == pytest.approx(direct, rel=1e-4)
    assert from_hf == pytest.approx(orig, rel=5e-3)
