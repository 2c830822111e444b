"""llm-compressor's SmoothQuant, AWQ and round-to-nearest on this CPU, on the model and calibration text
lowbit's methods use, so that BENCHMARKS.md can put lowbit's time, peak memory and KLD next to them
(issue 15, "Measured"). Runs in the llm-compressor environment (make bench-llmcompressor).

usage: python bench/llmcompressor_baseline.py OUT [--lowbit build/lowbit] [--gguf GGUF | --model HF_DIR]
           [--calib FILE] [--windows 128] [--seqlen 512] [--test FILE] [--chunks 40] [--threads 2]
           [--group 64] [--methods m1,m2,...] [--lowbit-methods m1,m2,...] [--reuse] [--no-eval] [--json]

The reference. SmolLM2-135M-Instruct exists here only as a Q4_1 GGUF, so the unquantized model is that
GGUF's dequantized values: `lowbit convert GGUF OUT/reference` writes them as an fp32 Hugging Face
directory (safetensors, config, tokenizer). llm-compressor quantizes that directory and every KLD is
against it (--model takes another directory instead).

Calibration windows. The calibration text (default: the WikiText-2 *train* excerpt, never the evaluation
text) is tokenized whole by the reference's tokenizer (add_special_tokens=False: SmolLM2's tokenizer
adds no BOS anyway) and cut into consecutive non-overlapping windows of --seqlen tokens from its start:
window i is tokens [i*seqlen, (i+1)*seqlen); the first --windows of them, or all whole windows when the
text holds fewer (the table says how many were used); the tail shorter than a window is dropped. Each
window is one calibration sample (attention mask all ones, batch size 1) and oneshot sees all of them.

Methods (--methods; each a fresh process, so its wall time and peak RSS are the whole run as a user
sees it: importing torch, loading, calibrating, saving):
  sq-w8a8-static   SmoothQuantModifier(smoothing_strength=0.5) then QuantizationModifier: int8 weights
                   per output channel (symmetric), int8 inputs per tensor, STATIC: one input_scale per
                   layer from calibration, by llm-compressor's default observer for static inputs, "minmax":
                   a moving average (constant 0.01) of each window's min and max, started at the first
                   window's; --act-observer static_minmax takes the min and max over all windows instead
  rtn-w8a8-static  the same quantization without SmoothQuant (the RTN reference for SmoothQuant)
  sq-w8a8-dynamic  SmoothQuant then the W8A8 preset: int8 inputs per token, dynamic (no calibrated scale)
  rtn-w8a8-dynamic the W8A8 preset alone (data-free)
  awq-w4a16        AWQModifier with the W4A16_ASYM scheme (llm-compressor's documented AWQ scheme: int4,
                   asymmetric, one scale and zero point per --group inputs)
  awq-w4a16-sym    AWQModifier with W4A16 (symmetric int4, --group)
  rtn-w4a16        QuantizationModifier W4A16_ASYM alone (data-free), the RTN reference for AWQ
  rtn-w4a16-sym    QuantizationModifier W4A16 alone
  gptq-w4a16-sym   GPTQModifier with W4A16 (symmetric int4, --group) and its defaults: block 128, dampening
                   0.01 of the mean diagonal, actorder "static" (columns in decreasing Hessian diagonal,
                   group scales fixed before; issue 16)
  awq-gptq-w4a16-sym  AWQModifier, then the GPTQModifier above
Default: sq-w8a8-static,rtn-w8a8-static,sq-w8a8-dynamic,awq-w4a16,rtn-w4a16. All as llm-compressor
0.14.0.1 does them by default: oneshot's sequential pipeline (layer by layer, calibrate then propagate;
each modifier that needs data gets its own pass); SmoothQuant's inferred Llama mappings (input_layernorm
-> q/k/v, post_attention_layernorm -> gate/up; down_proj and o_proj are not smoothed); AWQ's default
mappings, n_grid 20, duo_scaling True (s = x^a / w^(1-a)), its grid search over all calibration windows,
no clipping search; its v_proj -> o_proj mapping is skipped on SmolLM2 ("30 mappings were skipped due to
incompatible shapes": 3 KV heads, v_proj has 192 rows for o_proj's 576 inputs). On a machine without
CUDA, AWQ needs one work-around (cpu_patches, recorded in the results as "patches"). lm_head (tied to the
embeddings) is left unquantized, as lowbit does. --group: 64 by default because SmolLM2's 576-wide
layers (all but down_proj) are not a multiple of 128, and llmcompressor 0.14.0.1 cannot do group 128 on
them: its check refuses ("ValueError: The following layers have weight column counts not divisible by
group_size. ...", 180 layers), and with bypass_divisibility_checks=True its weight observer fails
("RuntimeError: unflatten: Provided sizes [-1, 128] don't multiply up to the size of dim 1 (576)").

lowbit beside it on exactly the same tokens (--lowbit-methods, after llm-compressor's rows): rtn-w4a16-sym,
awq-w4a16-sym, gptq-w4a16-sym and awq-gptq-w4a16-sym as `lowbit quantize REFERENCE -o OUT/lowbit-<method>
--scheme W4A16:g<group> [--method awq|gptq|awq+gptq] --calib OUT/calib-prefix.txt --calib-seqs N
--calib-len L` (its defaults otherwise: AWQ's clipping search, GPTQ's mse scales and act order), timed and
measured the same way. OUT/calib-prefix.txt is the calibration text cut 8 tokens past the last whole window
llm-compressor used, so lowbit, which takes every window slot in order when the text holds no more than it
asks for (src/algo/calib_pass.h, lb__calib_windows), calibrates on the same N x L tokens (the driver checks
that lowbit's tokenizer gives the same ids).

Quality: `lowbit kld REFERENCE CHECKPOINT --text TEST --chunks N` (windows of 512 of wiki.test.raw, the
second half of each scored), which runs each compressed-tensors checkpoint as an engine does (its int8
or int4 codes and scales; its static input_scale or per-token dynamic activation quantization). The
reference's distributions are computed once (--save-base) and reused (--base).

Time: "time s" is the method's process from start to exit (wall; imports, load, calibration, oneshot,
save), "CPU s" its user + system CPU time, "oneshot s" the oneshot call alone, "peak MiB" its peak RSS
(wait4's ru_maxrss); the 1-minute load average before and after each is in the results (the machine is
shared: the wall times move with the load, the CPU times much less).

Output: OUT/<method>/ (the checkpoint), OUT/<method>.log (the method's output), OUT/<method>.kld.json,
OUT/results.json; a table on stdout (--json: the results as JSON instead). --reuse keeps a method's
checkpoint and measurements when OUT/results.json already has them (to resume a run).
"""
import argparse
import json
import os
import subprocess
import sys
import time

DEFAULT_METHODS = "sq-w8a8-static,rtn-w8a8-static,sq-w8a8-dynamic,awq-w4a16,rtn-w4a16"
ALL_METHODS = ("sq-w8a8-static", "rtn-w8a8-static", "sq-w8a8-dynamic", "rtn-w8a8-dynamic",
               "awq-w4a16", "awq-w4a16-sym", "rtn-w4a16", "rtn-w4a16-sym", "gptq-w4a16-sym", "awq-gptq-w4a16-sym")
HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)


# ---- the child: one method, one process ----------------------------------------------------------------

def calib_windows(tok, path, windows, seqlen):
    with open(path, encoding="utf-8") as f:
        ids = tok(f.read(), add_special_tokens=False)["input_ids"]
    n = min(windows, len(ids) // seqlen)
    if n == 0:
        raise SystemExit(f"{path}: {len(ids)} tokens, not one window of {seqlen}")
    return [ids[i * seqlen:(i + 1) * seqlen] for i in range(n)], len(ids)


def recipe_for(method, group, act_observer):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme, preset_name_to_scheme
    from llmcompressor.modifiers.gptq import GPTQModifier
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform import AWQModifier, SmoothQuantModifier

    def int8_static():
        return QuantizationScheme(
            targets=["Linear"],
            weights=QuantizationArgs(num_bits=8, type="int", strategy="channel", symmetric=True, dynamic=False),
            input_activations=QuantizationArgs(num_bits=8, type="int", strategy="tensor", symmetric=True,
                                               dynamic=False, observer=act_observer))

    def int4(preset):
        s = preset_name_to_scheme(preset, ["Linear"])
        s.weights.group_size = group
        return s

    def quant(scheme):
        return QuantizationModifier(config_groups={"group_0": scheme}, ignore=["lm_head"])

    def gptq(scheme):
        return GPTQModifier(config_groups={"group_0": scheme}, ignore=["lm_head"])

    def smooth():
        return SmoothQuantModifier(smoothing_strength=0.5)

    # AWQ is a transform in llm-compressor 0.14: it searches and folds the scales, with the weight
    # quantization of the QuantizationModifier after it; that modifier then quantizes (no clipping search).
    table = {
        "sq-w8a8-static": lambda: ([smooth(), quant(int8_static())], True),
        "rtn-w8a8-static": lambda: ([quant(int8_static())], True),
        "sq-w8a8-dynamic": lambda: ([smooth(), quant(preset_name_to_scheme("W8A8", ["Linear"]))], True),
        "rtn-w8a8-dynamic": lambda: ([quant(preset_name_to_scheme("W8A8", ["Linear"]))], False),
        "awq-w4a16": lambda: ([AWQModifier(), quant(int4("W4A16_ASYM"))], True),
        "awq-w4a16-sym": lambda: ([AWQModifier(), quant(int4("W4A16"))], True),
        "rtn-w4a16": lambda: ([quant(int4("W4A16_ASYM"))], False),
        "rtn-w4a16-sym": lambda: ([quant(int4("W4A16"))], False),
        "gptq-w4a16-sym": lambda: ([gptq(int4("W4A16"))], True),
        "awq-gptq-w4a16-sym": lambda: ([AWQModifier(), gptq(int4("W4A16"))], True),
    }
    return table[method]()


def cpu_patches():
    """Work-arounds llm-compressor 0.14.0.1 needs on a machine without CUDA; each is named in the results."""
    import torch
    if torch.cuda.is_available():
        return []
    from llmcompressor.pipelines.cache import IntermediatesCache
    # AWQ pins its cached layer inputs (pin_memory) before the grid search, for faster host-to-GPU copies;
    # without a CUDA driver that raises "RuntimeError: Found no NVIDIA driver on your system" (AWQModifier
    # _apply_smoothing -> IntermediatesCache.pin_memory). On CPU nothing is copied: skipping it changes
    # no value.
    IntermediatesCache.pin_memory = lambda self, batch_index, input_names=None: None
    return ["IntermediatesCache.pin_memory is a no-op (on CPU it raises: Found no NVIDIA driver)"]


def child(a):
    t0 = time.time()
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    from datasets import Dataset
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer
    patches = cpu_patches()
    t_import = time.time() - t0
    t1 = time.time()
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    recipe, needs_data = recipe_for(a.child, a.group, a.act_observer)
    kw, n_windows, n_tokens = {}, 0, 0
    if needs_data:
        rows, n_tokens = calib_windows(tok, a.calib, a.windows, a.seqlen)
        n_windows = len(rows)
        kw = dict(dataset=Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * len(r) for r in rows]}),
                  max_seq_length=a.seqlen, num_calibration_samples=n_windows, shuffle_calibration_samples=False)
    t_load = time.time() - t1
    t2 = time.time()
    oneshot(model=model, recipe=recipe, **kw)
    t_oneshot = time.time() - t2
    t3 = time.time()
    model.save_pretrained(a.save, save_compressed=True)
    tok.save_pretrained(a.save)
    t_save = time.time() - t3
    import compressed_tensors
    import llmcompressor
    import transformers
    print("LLMC_RESULT " + json.dumps({
        "import_s": t_import, "load_s": t_load, "oneshot_s": t_oneshot, "save_s": t_save,
        "calib_windows": n_windows, "calib_text_tokens": n_tokens, "torch_threads": torch.get_num_threads(),
        "patches": patches,
        "versions": {"llmcompressor": llmcompressor.__version__, "compressed_tensors": compressed_tensors.__version__,
                     "torch": torch.__version__, "transformers": transformers.__version__}}), flush=True)


# ---- the driver ------------------------------------------------------------------------------------------

def log(msg):
    print(f"llmcompressor_baseline: {msg}", file=sys.stderr, flush=True)


def run_method(a, method, ref, out):
    """One method in its own process: wall time, CPU time and peak RSS from wait4 (that process alone)."""
    save = os.path.join(out, method)
    logf = os.path.join(out, f"{method}.log")
    subprocess.run(["rm", "-rf", save], check=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads),
               TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, os.path.abspath(__file__), out, "--child", method, "--model", ref, "--save", save,
           "--calib", a.calib, "--windows", str(a.windows), "--seqlen", str(a.seqlen), "--threads", str(a.threads),
           "--group", str(a.group)] + (["--act-observer", a.act_observer] if a.act_observer else [])
    log(f"{method}: oneshot -> {save} (log {logf})")
    load_before = os.getloadavg()[0]
    t0 = time.time()
    with open(logf, "w") as lf:
        p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    r = {"method": method, "wall_s": time.time() - t0, "cpu_s": ru.ru_utime + ru.ru_stime,
         "peak_rss_mib": ru.ru_maxrss / 1024, "rc": p.returncode, "checkpoint": save,
         "loadavg_1min": [load_before, os.getloadavg()[0]]}
    with open(logf) as lf:
        text = lf.read()
    for line in text.splitlines():
        if line.startswith("LLMC_RESULT "):
            r.update(json.loads(line[len("LLMC_RESULT "):]))
    if p.returncode != 0:
        tail = [ln for ln in text.splitlines() if ln.strip()][-15:]
        r["error"] = "\n".join(tail)
        log(f"{method} failed (rc {p.returncode}):\n" + r["error"])
    return r


LOWBIT_METHODS = {"rtn-w4a16-sym": [], "awq-w4a16-sym": ["--method", "awq"], "gptq-w4a16-sym": ["--method", "gptq"],
                  "awq-gptq-w4a16-sym": ["--method", "awq+gptq"]}


def calib_prefix(a, ref, out):
    """OUT/calib-prefix.txt: the calibration text up to 8 tokens past the windows llm-compressor takes
    (calib_windows), and how many windows that is; checked against lowbit's own tokenizer."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(ref)
    with open(a.calib, encoding="utf-8") as f:
        text = f.read()
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    n = min(a.windows, len(ids) // a.seqlen)
    end = n * a.seqlen + 8
    cut = offsets[end][0] if end < len(ids) else len(text)
    path = os.path.join(out, "calib-prefix.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:cut])
    got = lowbit_tokens(a, ref, text[:cut])
    if got[:n * a.seqlen] != ids[:n * a.seqlen] or len(got) < n * a.seqlen or len(got) >= (n + 1) * a.seqlen:
        raise SystemExit(f"{path}: lowbit's {len(got)} tokens are not the reference tokenizer's first "
                         f"{n} x {a.seqlen}")
    return path, n


def lowbit_tokens(a, ref, text):
    """The ids lowbit's quantize --calib takes from text (lb_tokenize as the CLI calls it: the model's
    BOS rule), through the liblowbit.so beside --lowbit."""
    import ctypes
    lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(a.lowbit)), "liblowbit.so"))
    P = ctypes.c_void_p
    lib.lb_model_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(P)]
    lib.lb_model_close.argtypes = [P]
    lib.lb_tokenizer_from_model.argtypes = [P, ctypes.c_char_p, ctypes.POINTER(P)]
    lib.lb_tokenizer_free.argtypes = [P]
    lib.lb_tokenizer_add_bos.argtypes = [P]
    lib.lb_tokenize.argtypes = [P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)), ctypes.POINTER(ctypes.c_size_t)]
    model, tok = P(), P()
    if lib.lb_model_open(ref.encode(), ctypes.byref(model)) != 0:
        raise SystemExit(f"lowbit cannot open {ref}")
    try:
        if lib.lb_tokenizer_from_model(model, ref.encode(), ctypes.byref(tok)) != 0:
            raise SystemExit(f"lowbit has no tokenizer for {ref}")
        b = text.encode()
        ids, n = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
        if lib.lb_tokenize(tok, b, len(b), lib.lb_tokenizer_add_bos(tok), ctypes.byref(ids), ctypes.byref(n)) != 0:
            raise SystemExit("lb_tokenize failed")
        out = ids[:n.value]
        ctypes.CDLL(None).free(ctypes.cast(ids, P))
        lib.lb_tokenizer_free(tok)
        return out
    finally:
        lib.lb_model_close(model)


def run_lowbit(a, method, ref, out, prefix, n):
    """lowbit quantize on the same tokens, timed like run_method (wait4 of that process)."""
    save = os.path.join(out, f"lowbit-{method}")
    cmd = [a.lowbit, "quantize", ref, "-o", save, "--scheme", f"W4A16:g{a.group}", *LOWBIT_METHODS[method],
           "--threads", str(a.threads), "--quiet", "--force"]
    if LOWBIT_METHODS[method]:
        cmd += ["--calib", prefix, "--calib-seqs", str(n), "--calib-len", str(a.seqlen)]
    log("lowbit: " + " ".join(cmd))
    load_before = os.getloadavg()[0]
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    r = {"method": f"lowbit {method}", "wall_s": time.time() - t0, "cpu_s": ru.ru_utime + ru.ru_stime,
         "peak_rss_mib": ru.ru_maxrss / 1024, "rc": rc, "checkpoint": save, "command": cmd,
         "calib_windows": n if LOWBIT_METHODS[method] else 0, "loadavg_1min": [load_before, os.getloadavg()[0]]}
    if rc != 0:
        r["error"] = p.stderr.read()[-2000:]
        log(f"lowbit {method} failed (rc {rc}):\n" + r["error"])
    return r


def run_kld(a, ref, ckpt, base, kjson, first):
    cmd = [a.lowbit, "kld", ref, ckpt, "--text", a.test, "--chunks", str(a.chunks), "--threads", str(a.threads),
           "--json", "--quiet", "--force"]
    cmd += ["--save-base", base] if first else ["--base", base]
    log("kld: " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return {"kld_error": (p.stderr or p.stdout).strip()}
    with open(kjson, "w") as f:
        f.write(p.stdout)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--lowbit", default=os.path.join(TOP, "build", "lowbit"))
    ap.add_argument("--gguf", default=os.path.join(TOP, ".cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--model", help="reference Hugging Face directory (default: OUT/reference from --gguf)")
    ap.add_argument("--calib", default=os.path.join(TOP, "data/wikitext-2-raw/wiki.train.excerpt.raw"))
    ap.add_argument("--windows", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=512)
    ap.add_argument("--test", default=os.path.join(TOP, "data/wikitext-2-raw/wiki.test.raw"))
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--methods", default=DEFAULT_METHODS)
    ap.add_argument("--lowbit-methods", default="", help="lowbit's rows on the same tokens: " + ",".join(LOWBIT_METHODS))
    ap.add_argument("--act-observer", help="observer of the static int8 input scales (default: llm-compressor's, "
                    "'minmax'; 'static_minmax' takes the absolute max over all windows)")
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=ALL_METHODS, help=argparse.SUPPRESS)
    ap.add_argument("--save", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    if not os.path.exists(a.test):
        a.test = os.path.join(TOP, "data/wikitext-2-raw/wiki.test.raw")
    methods = [m for m in a.methods.split(",") if m]
    lowbit_methods = [m for m in a.lowbit_methods.split(",") if m]
    for m in methods:
        if m not in ALL_METHODS:
            raise SystemExit(f"unknown method '{m}' ({', '.join(ALL_METHODS)})")
    for m in lowbit_methods:
        if m not in LOWBIT_METHODS:
            raise SystemExit(f"unknown lowbit method '{m}' ({', '.join(LOWBIT_METHODS)})")
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    ref = a.model
    if not ref:
        ref = os.path.join(out, "reference")
        if not os.path.exists(os.path.join(ref, "model.safetensors")):
            log(f"lowbit convert {a.gguf} -> {ref} (fp32: the GGUF's dequantized values)")
            subprocess.run([a.lowbit, "convert", a.gguf, ref, "--quiet", "--force"], check=True)
    ref = os.path.abspath(ref)
    resf = os.path.join(out, "results.json")
    old = {}
    if a.reuse and os.path.exists(resf):
        with open(resf) as f:
            old = {r["method"]: r for r in json.load(f)["rows"]}
    base = os.path.join(out, "reference.kldb")
    have_base = a.reuse and os.path.exists(base)
    rows = []
    prefix, n_prefix = calib_prefix(a, ref, out) if lowbit_methods else (None, 0)
    for m in methods + [f"lowbit {m}" for m in lowbit_methods]:
        r = old.get(m)
        if not (r and r.get("rc") == 0 and os.path.exists(os.path.join(r["checkpoint"], "config.json"))):
            r = run_lowbit(a, m[len("lowbit "):], ref, out, prefix, n_prefix) if m.startswith("lowbit ") \
                else run_method(a, m, ref, out)
        if r.get("rc") == 0 and not a.no_eval and "scored_tokens" not in r:
            k = run_kld(a, ref, r["checkpoint"], base, os.path.join(out, f"{m.replace(' ', '-')}.kld.json"),
                        not have_base)
            if "kld_error" in k:
                r["kld_error"] = k["kld_error"]
                log(f"{m}: lowbit kld failed: {k['kld_error']}")
            else:
                have_base = True
                r.update(kld=k["kld_mean"], kld_err=k["kld_err"], ppl=k["ppl"], ppl_ref=k["ppl_base"],
                         top1=k["top1_agreement"], scored_tokens=k["scored_tokens"])
        rows.append(r)
        with open(resf, "w") as f:
            json.dump({"reference": ref, "calib": a.calib, "test": a.test, "chunks": a.chunks,
                       "threads": a.threads, "group": a.group, "rows": rows}, f, indent=1)
    if a.json:
        with open(resf) as f:
            print(f.read())
        return
    fmt = "{:<26} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7}"
    print(fmt.format("method", "time s", "CPU s", "oneshot s", "peak MiB", "KLD", "PPL", "top-1 %", "windows"))
    for r in rows:
        def f(v, p, scale=1):
            return "-" if v is None else f"{v * scale:.{p}f}"
        print(fmt.format(r["method"], f(r.get("wall_s"), 1), f(r.get("cpu_s"), 1), f(r.get("oneshot_s"), 1),
                         f(r.get("peak_rss_mib"), 0), f(r.get("kld"), 5), f(r.get("ppl"), 4),
                         f(r.get("top1"), 2, 100), r.get("calib_windows", "-") if r.get("rc") == 0 else "FAILED"))
    ppl_ref = next((r["ppl_ref"] for r in rows if r.get("ppl_ref") is not None), None)
    if ppl_ref is not None:
        print(f"reference (fp32, dequantized GGUF) PPL {ppl_ref:.4f}; KLD/PPL over {a.chunks} windows of 512 of {a.test}")


if __name__ == "__main__":
    main()
