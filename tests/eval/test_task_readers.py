"""lowbit eval's benchmark readers on the real files (HellaSwag and LAMBADA
in data/evals) and on small files written here in each benchmark's
published layout; prompts as lm-evaluation-harness builds them; malformed
files refused naming the line and the field."""
import json
import re

import pytest

import task_lib as tl

HS = tl.EVALS / "hellaswag/hellaswag_val_full.txt"
LJ = tl.EVALS / "lambada/lambada_test.jsonl"
LP = tl.EVALS / "lambada/lambada_test_plain_text.txt"


def ok(result):
    items, err = result
    assert err is None, err
    return items


def refused(result, *words):
    items, err = result
    assert items is None, "accepted"
    for w in words:
        assert w in err, (w, err)
    return err


# ---- HellaSwag ----

def test_hellaswag_text_form_reads_every_task_of_the_validation_set():
    items = ok(tl.load("hellaswag", HS))
    lines = HS.read_text().split("\n")[:-1]
    assert len(items) == 10042 == len(lines) // 6
    labels = [it["label"] for it in items]
    assert [labels.count(k) for k in range(4)] == [2515, 2485, 2584, 2458]
    for i in (0, 1, 5000, 10041):
        it = items[i]
        assert it["context"] == [lines[6 * i]] * 4
        assert it["label"] == int(lines[6 * i + 1])
        assert it["continuation"] == lines[6 * i + 2:6 * i + 6]
        assert it["line"] == 6 * i + 1
    assert items[0]["context"][0] == "Roof shingle removal: A man is sitting on a roof. he" and items[0]["label"] == 3


def lm_eval_preprocess(text):
    """lm-evaluation-harness's hellaswag preprocess(), as published."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    text = text.replace("  ", " ")
    return text


HS_JSONL = [
    {"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he",
     "ctx": "A man is sitting on a roof. he", "split": "val", "split_type": "indomain", "label": 3,
     "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                 "is holding a rubik's cube.", "starts pulling up roofing on a roof."], "source_id": "x"},
    {"ind": 92, "activity_label": "Home and Garden", "ctx_a": "[header] How to grow tomatoes [title] Pick a spot.",
     "ctx_b": "MAKE sure the SOIL drains", "ctx": "", "split": "val", "split_type": "zeroshot", "label": "1",
     "endings": ["[step] Water  them daily [substeps] and wait.", " Mulch the bed. [title] Stake the plants.  ",
                 "Dig a hole [and] fill it.", "Plant   them deep."], "source_id": "y"},
]


def test_hellaswag_jsonl_is_preprocessed_as_lm_eval():
    text = "\n".join(json.dumps(d) for d in HS_JSONL) + "\n"
    items = ok(tl.parse("hellaswag", text))
    assert len(items) == 2
    for it, d in zip(items, HS_JSONL):
        ctx = lm_eval_preprocess(d["activity_label"] + ": " + d["ctx_a"] + " " + d["ctx_b"].capitalize())
        assert it["context"] == [ctx] * 4
        assert it["continuation"] == [lm_eval_preprocess(e) for e in d["endings"]]
        assert it["label"] == int(d["label"])
    assert items[0]["context"][0] == "Roof shingle removal: A man is sitting on a roof. He"
    assert items[1]["context"][0] == "Home and Garden: How to grow tomatoes. Pick a spot. Make sure the soil drains"


@pytest.mark.parametrize("text,words", [
    ("ctx\n7\na\nb\nc\nd\n", ["line 2", "label"]),
    ("ctx\n1\na\nb\nc\n", ["line 1", "5 lines"]),
    ("ctx\n1\na\n\nc\nd\n", ["line 1", "choice 1 is empty"]),
    ('{"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "label": 0}\n', ["line 1", "'endings'"]),
    ('{"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "endings": ["x", "y"], "label": 2}\n', ["line 1", "'label'"]),
    ('{"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "endings": ["x", 3], "label": 0}\n', ["line 1", "'endings'"]),
    ('{"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "endings": ["x", "y"], "label": 0}\n{"oops"\n', ["line 2"]),
    ("", ["no items"]),
])
def test_hellaswag_malformed(text, words):
    refused(tl.parse("hellaswag", text, what="hs.txt"), "hs.txt", *words)


# ---- LAMBADA ----

def test_lambada_openai_jsonl_splits_at_the_last_space():
    items = ok(tl.load("lambada", LJ))
    texts = [json.loads(line)["text"] for line in LJ.read_text().splitlines()]
    assert len(items) == len(texts) == 5153
    for it, text in zip(items, texts):
        assert len(it["continuation"]) == 1 and it["label"] == 0
        assert it["context"][0] + " " + it["continuation"][0] == text.rstrip(" \t")
        assert it["continuation"][0] == text.rstrip(" \t").split(" ")[-1]


def test_lambada_plain_text_and_the_two_files_agree():
    plain = ok(tl.load("lambada", LP))
    assert len(plain) == 5153
    for it, line in zip(plain, LP.read_text().splitlines()):
        assert it["continuation"][0] == line.rstrip(" \t").split(" ")[-1]
    openai = ok(tl.load("lambada", LJ))
    same = sum(re.sub(r"[^\w]", "", a["continuation"][0].lower()) == b["continuation"][0]
               for a, b in zip(openai, plain))
    assert same >= 5140  # the rest differ in tokenization (data/evals/PROVENANCE.md: "n't", hyphens)


@pytest.mark.parametrize("text,words", [
    ('{"text": "oneword"}\n', ["line 1", "last word"]),
    ('{"txt": "a b"}\n', ["line 1", "'text'"]),
    ('{"text": "a b"}\n[1]\n', ["line 2", "object"]),
])
def test_lambada_malformed(text, words):
    refused(tl.parse("lambada", text, what="l.jsonl"), "l.jsonl", *words)


# ---- ARC, PIQA, Winogrande, MMLU, lowbit's JSONL ----

ARC = [
    {"id": "Mercury_7175875", "question": {"stem": "An astronomer observes that a planet rotates faster. Why?",
     "choices": [{"text": "Planetary density will decrease.", "label": "A"},
                 {"text": "Planetary years will become longer.", "label": "B"},
                 {"text": "Planetary days will become shorter.", "label": "C"},
                 {"text": "Planetary gravity will become stronger.", "label": "D"}]}, "answerKey": "C"},
    {"id": "NYSEDREGENTS_2015_4_8", "question": {"stem": "Which is a solid?", "choices": [
        {"text": "milk", "label": "1"}, {"text": "ice", "label": "2"}, {"text": "steam", "label": "3"}]},
     "answerKey": "2"},
]


def test_arc_jsonl_as_lm_eval_prompts_it():
    items = ok(tl.parse("arc", "\n".join(json.dumps(d) for d in ARC)))
    assert [it["label"] for it in items] == [2, 1]
    for it, d in zip(items, ARC):
        assert it["context"] == ["Question: " + d["question"]["stem"] + "\nAnswer:"] * len(d["question"]["choices"])
        assert it["continuation"] == [c["text"] for c in d["question"]["choices"]]


def test_piqa_reads_its_labels_file(tmp_path):
    qs = [{"goal": "How do I ready a guinea pig cage?", "sol1": "Put sawdust in it.", "sol2": "Put shredded paper."},
          {"goal": "dresser", "sol1": "replace drawer with a bag", "sol2": "can hold a TV"}]
    (tmp_path / "valid.jsonl").write_text("\n".join(json.dumps(q) for q in qs) + "\n")
    (tmp_path / "valid-labels.lst").write_text("1\n0\n")
    items = ok(tl.load("piqa", tmp_path / "valid.jsonl"))
    assert [it["label"] for it in items] == [1, 0]
    assert items[0]["context"] == ["Question: How do I ready a guinea pig cage?\nAnswer:"] * 2
    assert items[1]["continuation"] == ["replace drawer with a bag", "can hold a TV"]
    (tmp_path / "other.lst").write_text("0\n")
    refused(tl.load("piqa", tmp_path / "valid.jsonl", labels=tmp_path / "other.lst"), "more questions than")
    refused(tl.load("piqa", tmp_path / "missing.jsonl"), "missing.jsonl")
    (tmp_path / "bad.lst").write_text("1\n2\n")
    refused(tl.load("piqa", tmp_path / "valid.jsonl", labels=tmp_path / "bad.lst"), "line 2", "0 or 1")


def test_winogrande_partial_scoring_contexts():
    d = {"qID": "3QHITW7OYO7Q6B6ISU2UMJB84ZLAQE-2", "sentence": "Sarah was a much better surgeon than Maria so _ "
         "always got the harder cases.", "option1": "Sarah", "option2": "Maria", "answer": "1"}
    items = ok(tl.parse("winogrande", json.dumps(d) + "\n"))
    it = items[0]
    assert it["label"] == 0
    assert it["context"] == ["Sarah was a much better surgeon than Maria so Sarah",
                             "Sarah was a much better surgeon than Maria so Maria"]
    assert it["continuation"] == ["always got the harder cases."] * 2
    refused(tl.parse("winogrande", json.dumps({**d, "sentence": "no blank"}), what="w"), "w: line 1", "blank")
    refused(tl.parse("winogrande", json.dumps({**d, "answer": ""}), what="w"), "line 1", "'answer'")


MMLU_CSV = ('"Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.",0,1,2,3,B\n'
            '"Statement 1 | A factor group of a non-Abelian group is non-Abelian, ""quoted"".\n'
            'Statement 2 | more, on a second line",True,"False, False",Unknown,4,C\r\n')


def test_mmlu_csv_lettered_and_cloze(tmp_path):
    items = ok(tl.parse("mmlu", MMLU_CSV, what="abstract_algebra_test.csv"))
    assert len(items) == 2 and [it["label"] for it in items] == [1, 2] and [it["line"] for it in items] == [1, 2]
    it = items[1]
    assert it["group"] == "abstract algebra"
    assert it["preamble"] == "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
    q = 'Statement 1 | A factor group of a non-Abelian group is non-Abelian, "quoted".\nStatement 2 | more, on a second line'
    assert it["context"][0] == q + "\nA. True\nB. False, False\nC. Unknown\nD. 4\nAnswer:"
    assert it["continuation"] == ["A", "B", "C", "D"]
    cloze = ok(tl.parse("mmlu", MMLU_CSV, what="abstract_algebra_test.csv", cloze=1))
    assert cloze[1]["context"][0] == "Question: " + q + "\nAnswer:"
    assert cloze[1]["continuation"] == ["True", "False, False", "Unknown", "4"]
    assert cloze[1]["preamble"] == "The following are questions (with answers) about abstract algebra.\n\n"
    (tmp_path / "b_test.csv").write_text(MMLU_CSV)
    (tmp_path / "a_test.csv").write_text("q,1,2,3,4,D\n")
    (tmp_path / "notes.txt").write_text("not a subject")
    both = ok(tl.load("mmlu", tmp_path))
    assert [it["group"] for it in both] == ["a", "b", "b"] and both[0]["label"] == 3


@pytest.mark.parametrize("text,words", [
    ("q,1,2,3,4,E\n", ["line 1", "'answer'"]),
    ("q,1,2,3,4,A\nq,1,2,3,A\n", ["line 2", "5 fields"]),
    ('q,1,2,3,4,A\n"open,1,2,3,4,A\n', ["line 2", "never closed"]),
    ('q,1,"2"x,3,4,A\n', ["line 1", "closing quote"]),
    ("q,1,2,3,4,A,extra\n", ["line 1", "more than 6"]),
    (" ,1,2,3,4,A\n", ["line 1", "'question'"]),
])
def test_mmlu_malformed(text, words):
    refused(tl.parse("mmlu", text, what="x_test.csv"), "x_test.csv", *words)


def test_lowbit_mc_jsonl():
    lines = [{"context": "The capital of France is", "choices": ["Paris", "Rome", "Berlin"], "label": 0},
             {"context": "2 + 2 =", "choices": ["3", "4"], "label": 1}]
    items = ok(tl.parse("mc", "\n\n".join(json.dumps(d) for d in lines) + "\n"))
    assert [it["line"] for it in items] == [1, 3]
    assert items[0]["context"] == ["The capital of France is"] * 3 and items[1]["continuation"] == ["3", "4"]


@pytest.mark.parametrize("obj,words", [
    ({"context": "c", "choices": ["a"], "label": 0}, ["'choices'"]),
    ({"context": "c", "choices": ["a", "b"], "label": 2}, ["'label'"]),
    ({"context": "c", "choices": ["a", "b"], "label": -1}, ["'label'"]),
    ({"context": "c", "choices": ["a", "b"], "label": 0.5}, ["'label'"]),
    ({"context": "", "choices": ["a", "b"], "label": 0}, ["empty context"]),
    ({"choices": ["a", "b"], "label": 0}, ["'context'"]),
    ({"context": "c", "choices": ["a", ""], "label": 0}, ["choice 1 is empty"]),
    ({"context": "c", "choices": [str(i) for i in range(17)], "label": 0}, ["'choices'"]),
])
def test_mc_malformed(obj, words):
    refused(tl.parse("mc", '{"context": "ok", "choices": ["a", "b"], "label": 0}\n' + json.dumps(obj), what="m.jsonl"),
            "m.jsonl: line 2", *words)


def test_arc_malformed():
    d = json.loads(json.dumps(ARC[0]))
    d["answerKey"] = "E"
    refused(tl.parse("arc", json.dumps(d), what="a"), "a: line 1", "'answerKey'")
    del d["question"]["stem"]
    refused(tl.parse("arc", json.dumps(d), what="a"), "line 1", "'stem'")


# ---- --limit and few-shot ----

def test_limit_keeps_the_first_items():
    items = ok(tl.load("hellaswag", HS, limit=7))
    assert len(items) == 7 and items[6]["line"] == 37


def test_fewshot_examples_are_solved_other_items_and_deterministic():
    lines = [{"context": f"Question {i}:", "choices": [f"wrong {i}", f"right {i}"], "label": 1} for i in range(10)]
    text = "\n".join(json.dumps(d) for d in lines)
    a = ok(tl.parse("mc", text, fewshot=(3, 42)))
    b = ok(tl.parse("mc", text, fewshot=(3, 42)))
    c = ok(tl.parse("mc", text, fewshot=(3, 43)))
    assert a == b and a != c
    for i, it in enumerate(a):
        shots, own = it["context"][0].rsplit("\n\n", 1)
        assert own == f"Question {i}:" and it["context"][0] == it["context"][1]
        blocks = shots.split("\n\n")
        assert len(blocks) == 3 and len(set(blocks)) == 3
        for blk in blocks:
            j = int(re.fullmatch(r"Question (\d+): right (\d+)", blk).group(1))
            assert j != i and blk == f"Question {j}: right {j}"
    refused(tl.parse("mc", text, fewshot=(10, 1)), "fewer than the items")
