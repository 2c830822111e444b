"""Mixed precision under a budget: lb_mix_choose against an exhaustive search, and
`lowbit quantize --target-bpw / --target-size / --max-kld` on the embedded stories260K:

* every point of the greedy's Pareto front is the least summed KLD any combination of candidates reaches
  within its bits (checked by enumerating all 4^6 combinations of a random cost table: the greedy walks
  the units' convex hulls in order of falling gain, so each point is a Lagrangian optimum);
* the written GGUF and compressed-tensors outputs keep the budget (within 0.01 bpw where the units' steps
  allow), the recipe they write gives the same output byte for byte, the mix measured whole is no worse
  than the best uniform candidate within the same bits -- on the calibration windows (the command's own
  check) and on the evaluation text (lowbit kld on the written files);
* --max-kld, --target-size, the refusals."""
import ctypes
import itertools
import json
import pathlib

import numpy as np
import pytest

from cli_lib import lowbit

ROOT = pathlib.Path(__file__).resolve().parents[2]
STORIES = ROOT / "models/stories260K.bin"
TOKENIZER = ROOT / "models/tok512.bin"
EVAL = ROOT / "models/tinystories-valid-excerpt.txt"
CALIB = ROOT / "data/tinystories/calib-excerpt.txt"
TARGET = ["--calib", CALIB, "--calib-tokens", 1024, "--threads", 2, "--quiet"]




class UnitCost(ctypes.Structure):
    _fields_ = [("measured", ctypes.c_int), ("kld", ctypes.c_double), ("kld_err", ctypes.c_double),
                ("nll", ctypes.c_double), ("bits", ctypes.c_double), ("bits_stored", ctypes.c_double)]


class MixPoint(ctypes.Structure):
    _fields_ = [("bits", ctypes.c_double), ("kld", ctypes.c_double)]


class MixOptions(ctypes.Structure):
    _fields_ = [("budget_bits", ctypes.c_double), ("max_kld", ctypes.c_double)]


class MixResult(ctypes.Structure):
    _fields_ = [("bits", ctypes.c_double), ("kld", ctypes.c_double), ("reached", ctypes.c_int),
                ("front", ctypes.POINTER(MixPoint)), ("n_front", ctypes.c_size_t)]


def mix_choose(bits, kld, budget=0.0, max_kld=0.0):
    from lowbit_ctypes import lib
    n_cands, n_units = bits.shape
    costs = (UnitCost * (n_cands * n_units))()
    for c in range(n_cands):
        for u in range(n_units):
            costs[c * n_units + u] = UnitCost(1, kld[c, u], 0, 0, bits[c, u], 16)
    choice = (ctypes.c_size_t * n_units)()
    res = MixResult()
    lib.lb_mix_choose.argtypes = [ctypes.POINTER(UnitCost), ctypes.c_size_t, ctypes.c_size_t,
                                  ctypes.POINTER(MixOptions), ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(MixResult)]
    lib.lb_mix_choose.restype = ctypes.c_int
    st = lib.lb_mix_choose(costs, n_cands, n_units, ctypes.byref(MixOptions(budget, max_kld)), choice, ctypes.byref(res))
    if st != 0:
        return st, None, None
    front = [(res.front[k].bits, res.front[k].kld) for k in range(res.n_front)]
    lib.lb_mix_result_free.argtypes = [ctypes.POINTER(MixResult)]
    lib.lb_mix_result_free(ctypes.byref(res))
    return 0, list(choice), (res.bits, res.kld, res.reached, front)


@pytest.mark.parametrize("seed", range(5))
def test_every_front_point_is_the_exhaustive_optimum_for_its_bits(seed):
    rng = np.random.default_rng(seed)
    n_cands, n_units = 4, 6
    bits = np.sort(rng.integers(1, 40, size=(n_cands, n_units)), axis=0).astype(float) * 100
    kld = np.sort(rng.random((n_cands, n_units)), axis=0)[::-1] * rng.random(n_units)  # more bits, less KLD
    kld[rng.random((n_cands, n_units)) < 0.2] *= 1.5  # some points above the hull, some dominated
    st, choice, (tb, tk, reached, front) = mix_choose(bits, kld, budget=1e12)
    assert st == 0 and reached
    combos = [(sum(bits[c, u] for u, c in enumerate(cs)), sum(kld[c, u] for u, c in enumerate(cs)))
              for cs in itertools.product(range(n_cands), repeat=n_units)]
    cb = np.array([b for b, _ in combos]); ck = np.array([k for _, k in combos])
    assert all(a[0] < b[0] and a[1] > b[1] for a, b in zip(front, front[1:]))
    for b, k in front:
        assert k == pytest.approx(ck[cb <= b + 1e-9].min(), abs=1e-12)
    # the last point is the least KLD of all; the choice is what it says
    assert tk == pytest.approx(ck.min(), abs=1e-12)
    assert tb == pytest.approx(sum(bits[c, u] for u, c in enumerate(choice)))
    # a budget: within it, and no worse than the front point just below it
    budget = (front[0][0] + front[-1][0]) / 2
    st, choice, (tb, tk, _, front2) = mix_choose(bits, kld, budget=budget)
    assert tb <= budget and tk <= max(k for b, k in front if b <= budget) + 1e-12
    # the largest KLD: the fewest bits of the front reaching it
    target = front[len(front) // 2][1]
    st, choice, (tb, tk, reached, _) = mix_choose(bits, kld, max_kld=target)
    assert reached and tk <= target and tb == pytest.approx(front[len(front) // 2][0])


def test_budget_below_the_cheapest_and_bad_costs_are_refused():
    bits = np.array([[10.0, 10.0], [20.0, 20.0]]); kld = np.array([[1.0, 1.0], [0.5, 0.5]])
    st, _, _ = mix_choose(bits, kld, budget=19)
    assert st == 1
    kld[1, 1] = np.nan
    st, _, _ = mix_choose(bits, kld, budget=100)
    assert st == 1
    st, _, _ = mix_choose(bits, np.abs(kld), budget=0, max_kld=0)  # neither a budget nor a largest KLD
    assert st == 1


def quantize_json(*args):
    return json.loads(lowbit("quantize", STORIES, *args, "--json").stdout)


@pytest.fixture(scope="module")
def gguf_mix(tmp_path_factory):
    d = tmp_path_factory.mktemp("mix")
    out = d / "mix.gguf"
    return d, quantize_json("-o", out, "--target-bpw", 7.5, *TARGET)


def test_gguf_target_bpw_budget_recipe_and_uniform(gguf_mix, tmp_path):
    d, r = gguf_mix
    mix = r["mix"]
    assert abs(r["bits_per_weight"] - 7.5) <= 0.01 and r["bits_per_weight"] <= 7.5 + 1e-9
    assert mix["bpw"] == pytest.approx(r["bits_per_weight"], abs=1e-9)
    front = mix["front"]
    assert all(a[0] < b[0] and a[1] > b[1] for a, b in zip(front, front[1:]))
    assert mix["bpw"] == pytest.approx(front[-1][0]) and mix["kld_predicted"] == pytest.approx(front[-1][1])
    # the command's own check: the whole mix against the best uniform candidate within the bits
    u = mix["uniform"]
    assert u is not None and u["bpw"] <= 7.5 and mix["kld_measured"] <= u["kld_measured"]
    # the recipe gives the same file, byte for byte
    recipe = pathlib.Path(mix["recipe"])
    assert recipe == d / "mix.gguf.recipe.json"
    again = tmp_path / "again.gguf"
    lowbit("quantize", STORIES, "-o", again, "--recipe", recipe, "--quiet")
    assert again.read_bytes() == (d / "mix.gguf").read_bytes()
    # on the evaluation text, by lowbit kld on the written files: no uniform type within 7.5 bpw does better
    def kld_of(path):
        return json.loads(lowbit("kld", STORIES, path, "--tokenizer", TOKENIZER, "--text", EVAL, "--ctx", 256,
                                 "--json", "--quiet").stdout)["kld_mean"]
    mixed = kld_of(d / "mix.gguf")
    for cand in mix["candidates"]:
        if cand["bpw"] <= 7.5:
            uni = tmp_path / f"{cand['name']}.gguf"
            lowbit("quantize", STORIES, "-o", uni, "--type", cand["name"], "--pure", "--quiet")
            assert mixed <= kld_of(uni), cand


def test_gguf_recipe_is_editable_and_strict(gguf_mix, tmp_path):
    d, r = gguf_mix
    recipe = json.loads((d / "mix.gguf.recipe.json").read_text())
    assert recipe["format"] == "gguf" and len(recipe["rules"]) == len(r["mix"]["weights"])
    recipe["rules"][0]["ggml"] = "q8_0"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(recipe))
    out = tmp_path / "edited.gguf"
    lowbit("quantize", STORIES, "-o", out, "--recipe", edited, "--quiet")
    assert out.read_bytes() != (d / "mix.gguf").read_bytes()
    recipe["rules"][0]["gguf"] = "typo"
    edited.write_text(json.dumps(recipe))
    bad = lowbit("quantize", STORIES, "-o", tmp_path / "bad.gguf", "--recipe", edited, check=False)
    assert bad.returncode == 2 and "rule 1" in bad.stderr and not (tmp_path / "bad.gguf").exists()


def test_max_kld_and_target_size(tmp_path):
    a = quantize_json("-o", tmp_path / "a.gguf", "--max-kld", 0.03, *TARGET)["mix"]
    assert a["kld_predicted"] <= 0.03
    # fewer bits would not do: the front point before the chosen one predicts more than 0.03
    front = a["front"]
    k = [p[0] for p in front].index(pytest.approx(a["bpw"]))
    assert k == 0 or front[k - 1][1] > 0.03
    b = quantize_json("-o", tmp_path / "b.gguf", "--target-size", "230KB", *TARGET)
    tensors = json.loads(lowbit("inspect", tmp_path / "b.gguf", "--json").stdout)
    data = sum(t["bytes"] for t in tensors["tensors"])
    assert data <= 230_000 and b["mix"]["uniform"] is not None


def test_compressed_tensors_target(tmp_path):
    cands = "int4:channel:scale=bf16:range=full,int8:channel:scale=bf16,keep"
    r = quantize_json("-o", tmp_path / "ct", "--target-bpw", 10, "--candidates", cands, *TARGET)
    mix = r["mix"]
    assert mix["bpw"] <= 10 and {w["candidate"] for w in mix["weights"]} <= set(cands.split(","))
    lowbit("quantize", STORIES, "-o", tmp_path / "ct2", "--recipe", mix["recipe"], "--quiet")
    for f in (tmp_path / "ct").iterdir():
        assert f.read_bytes() == (tmp_path / "ct2" / f.name).read_bytes(), f.name
    # the compressed-tensors config holds one group per spec
    cfg = json.loads((tmp_path / "ct" / "config.json").read_text())["quantization_config"]
    assert len(cfg["config_groups"]) == len({w["candidate"] for w in mix["weights"]} - {"keep"})


def test_refusals(tmp_path):
    def fails(*args, msg):
        r = lowbit("quantize", STORIES, "-o", tmp_path / "x.gguf", *args, check=False)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
        assert not (tmp_path / "x.gguf").exists()
    fails("--target-bpw", 7.5, msg="give --calib FILE")
    fails("--target-bpw", 5, *TARGET, msg="below the cheapest the candidates reach")
    fails("--target-bpw", 7.5, "--type", "Q4_K_M", *TARGET, msg="the target chooses every weight's type")
    fails("--target-bpw", 7.5, "--target-size", "1MB", *TARGET, msg="one of --target-bpw")
    fails("--candidates", "q4_0,q8_0", msg="go with --target-bpw")
    fails("--target-bpw", 7.5, "--candidates", "q4_0,bogus", *TARGET, msg="'bogus' is not a ggml type")
    fails("--target-bpw", 7.5, "--method", "awq", *TARGET, msg="folds scales into the norms")


def test_sweep_file_serves_several_budgets(tmp_path):
    sweep = tmp_path / "sweep.json"
    a = quantize_json("-o", tmp_path / "a.gguf", "--target-bpw", 7.5, "--sweep", sweep, *TARGET)["mix"]
    assert sweep.exists()
    before = sweep.read_bytes()
    b = quantize_json("-o", tmp_path / "b.gguf", "--target-bpw", 7.5, "--sweep", sweep, *TARGET)["mix"]
    assert sweep.read_bytes() == before  # read, not written again
    assert b["weights"] == a["weights"] and b["front"] == a["front"]
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()
    c = quantize_json("-o", tmp_path / "c.gguf", "--target-bpw", 8, "--sweep", sweep, *TARGET)["mix"]
    assert 7.99 <= c["bpw"] <= 8
    # a sweep of another run is refused, never silently reused
    r = lowbit("quantize", STORIES, "-o", tmp_path / "d.gguf", "--target-bpw", 8, "--sweep", sweep,
               "--candidates", "Q4_0,Q8_0", *TARGET, check=False)
    assert r.returncode == 2 and "not the same candidates" in r.stderr


def test_the_readme_gguf_recipe_runs(tmp_path):
    import re
    text = (ROOT / "README.md").read_text()
    block = [b for b in re.findall(r"```json\n(.*?)```", text, re.S) if '"format": "gguf"' in b][0]
    recipe = json.loads(block)
    im = tmp_path / recipe["imatrix"]
    lowbit("imatrix", STORIES, "--text", CALIB, "-o", im, "--ctx", 128, "--quiet")
    recipe["imatrix"] = str(im)
    f = tmp_path / "r.json"
    f.write_text(json.dumps(recipe))
    out = tmp_path / "o.gguf"
    lowbit("quantize", STORIES, "-o", out, "--recipe", f, "--quiet")
    from gguf import GGUFReader
    types = {t.name: t.tensor_type.name for t in GGUFReader(str(out)).tensors}
    assert types["token_embd.weight"] == "Q5_1" and types["blk.0.attn_q.weight"] == "Q4_0"
    fields = GGUFReader(str(out)).fields
    assert bytes(fields["quantize.imatrix.file"].parts[-1]).decode() == str(im)
