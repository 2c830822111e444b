"""lowbit report: one self-contained HTML page drawn from the --json results of inspect (--histogram),
error, compare, sensitivity, quantize (a target's mix), eval and bench, and a kld --save-tokens file, on
the embedded stories260K:

* the page is well-formed (a strict XML parser reads it whole, and Python's HTML parser finds every
  element closed);
* every chart holds the data points it claims (data-points = the elements of class "pt") and as many as
  its input has: one bar per unit, one cell per tensor and spec, one marker per spec, one point per front
  step and candidate, 64 bins per histogram with one grid line per value of the spec's grid, the
  tokens' KLD counts summing to the tokens with a KLD above 0;
* nothing in it reaches out (no script, link, image, font or url); headless Chromium renders it with
  every network request blocked and logged -- none is made -- and its screenshot is not blank;
* a file that is no result is refused, naming it, and nothing is written."""
import json
import os
import pathlib
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from html.parser import HTMLParser

import pytest

from cli_lib import lowbit

ROOT = pathlib.Path(__file__).resolve().parents[2]
M = ROOT / "models/stories260K.bin"
T = ROOT / "models/tinystories-valid-excerpt.txt"
C = ROOT / "data/tinystories/calib-excerpt.txt"
HELLASWAG = ROOT / "data/evals/hellaswag/hellaswag_val_full.txt"
SVG = "{http://www.w3.org/2000/svg}"




@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    runs = {
        "inspect.json": ["inspect", M, "--json", "--histogram", "--spec", "int4", "--quiet"],
        "error.json": ["error", M, "--spec", "int4:g32,int8:channel,nvfp4", "--json"],
        "compare.json": ["compare", M, "--text", T, "--ctx", 128, "--chunks", 2, "--spec", "int4:g32,int8:channel,mxfp4",
                         "--json", "--quiet"],
        "sensitivity.json": ["sensitivity", M, "--text", T, "--ctx", 128, "--chunks", 2, "--scheme", "W4A16:g32",
                             "--unit", "all", "--proxy-text", C, "--json", "--quiet"],
        "quantize.json": ["quantize", M, "-o", d / "mix.gguf", "--target-bpw", 7.5, "--calib", C, "--calib-tokens", 512,
                          "--json", "--quiet"],
        "eval.json": ["eval", M, "--task", "hellaswag", "--data", HELLASWAG, "--limit", 20, "--spec", "int4:g32",
                      "--resamples", 200, "--json", "--quiet"],
        "bench.json": ["bench", "--quick", "--no-model", "--json"],
    }
    for name, args in runs.items():
        (d / name).write_text(lowbit(*args).stdout)
    lowbit("kld", M, "--spec", "int4:g32", "--text", T, "--ctx", 128, "--chunks", 4, "--save-tokens", d / "tokens.tsv",
           "--quiet")
    inputs = [d / n for n in runs] + [d / "tokens.tsv"]
    out = d / "report.html"
    lowbit("report", *inputs, "-o", out, "--title", "stories260K & <friends>")
    return d, out


def charts(path):
    root = ET.parse(path).getroot()  # strict: fails on anything not well-formed
    return root, list(root.iter(SVG + "svg"))


def points(svg):
    return [e for e in svg.iter() if "pt" in e.get("class", "").split()]


def test_well_formed_and_every_chart_holds_its_points(results):
    d, out = results
    root, svgs = charts(out)

    class Balance(HTMLParser):
        def __init__(self):
            super().__init__()
            self.stack, self.errors = [], []

        def handle_starttag(self, tag, attrs):
            if tag not in ("meta", "br"):
                self.stack.append(tag)

        def handle_startendtag(self, tag, attrs):
            pass

        def handle_endtag(self, tag):
            if not self.stack or self.stack.pop() != tag:
                self.errors.append(tag)
    b = Balance()
    b.feed(out.read_text())
    assert not b.errors and not b.stack
    assert root.find("{http://www.w3.org/1999/xhtml}head/{http://www.w3.org/1999/xhtml}title").text == \
        "stories260K & <friends>"
    for svg in svgs:
        assert int(svg.get("data-points")) == len(points(svg)), svg.find(SVG + "title").text
    by_kind = {}
    for svg in svgs:
        by_kind.setdefault(svg.get("data-kind"), []).append(svg)

    sens = json.loads((d / "sensitivity.json").read_text())
    bars = [s for s in by_kind["bars"] if "KLD per" in s.find(SVG + "title").text]
    for kind, svg in zip(("tensor", "layer", "class"), bars):
        units = [u for u in sens["units"] if u["kind"] == kind]
        assert len(points(svg)) == min(30, len(units))
        assert [p.find(SVG + "title").text.split(":")[0] for p in points(svg)] == [u["name"] for u in units[:30]]

    err = json.loads((d / "error.json").read_text())
    (heat,) = by_kind["heatmap"]
    assert len(points(heat)) == len(err["tensors"]) * len(err["specs"])

    cmp_ = json.loads((d / "compare.json").read_text())
    q = json.loads((d / "quantize.json").read_text())["mix"]
    scatter_compare, scatter_mix = by_kind["scatter"]
    assert len(points(scatter_compare)) == len(cmp_["specs"])
    assert len(points(scatter_mix)) == len(q["front"]) + len(q["candidates"]) + 2

    ev = json.loads((d / "eval.json").read_text())
    acc, diff = by_kind["intervals"]
    assert len(points(acc)) == 2 * len(ev["tasks"]) and len(points(diff)) == len(ev["tasks"])

    bench = json.loads((d / "bench.json").read_text())
    matvec = [s for s in by_kind["bars"] if "Matvec" in s.find(SVG + "title").text][0]
    assert len(points(matvec)) == len(bench["matvec"]["rows"])
    assert any("read bandwidth" == (t.text or "") for t in matvec.iter(SVG + "text"))

    ins = json.loads((d / "inspect.json").read_text())
    with_hist = [t for t in ins["tensors"] if "histogram" in t]
    hists = [s for s in by_kind["histogram"] if "Per-token" not in s.find(SVG + "title").text]
    assert len(hists) == min(12, len(with_hist))
    for svg in hists:
        name = svg.find(SVG + "title").text.split()[0]
        (t,) = [t for t in with_hist if t["name"] == name]
        bins = points(svg)
        assert len(bins) == 64
        assert sum(int(p.find(SVG + "title").text.split(": ")[1]) for p in bins) == sum(t["histogram"]["counts"])
        grid = [e for e in svg.iter(SVG + "line") if e.get("class") == "grid"]
        assert len(grid) == len(t["grid"])

    (tok,) = [s for s in by_kind["histogram"] if "Per-token" in s.find(SVG + "title").text]
    rows = [l.split("\t") for l in (d / "tokens.tsv").read_text().splitlines() if not l.startswith("#")]
    positive = sum(float(r[2]) > 0 for r in rows)
    assert sum(int(p.find(SVG + "title").text.split(": ")[1]) for p in points(tok)) == positive


def test_self_contained(results):
    _, out = results
    html = out.read_text()
    for needle in ("<script", "<link", "<img", "<iframe", "@import", "url(", "@font-face", "href=", "src="):
        assert needle not in html.lower(), needle
    # the only "http" strings are the XML namespaces
    assert html.count("http") == html.count("http://www.w3.org/")


def png_pixels(path):
    """RGB(A) pixels of an 8-bit non-interlaced PNG (what Chromium writes), decoded with zlib only"""
    b = pathlib.Path(path).read_bytes()
    assert b[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(b):
        (n,), kind = struct.unpack(">I", b[pos:pos + 4]), b[pos + 4:pos + 8]
        data = b[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", data)
            assert depth == 8 and color in (2, 6) and interlace == 0
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += data
        pos += 12 + n
    raw, stride, prev, out = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + prev[i]) & 255
            elif f == 3: line[i] = (line[i] + (a + prev[i]) // 2) & 255
            elif f == 4:
                p = a + prev[i] - c
                pa, pb, pc = abs(p - a), abs(p - prev[i]), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else prev[i] if pb <= pc else c)) & 255
        out.append(bytes(line))
        prev = line
    return w, h, bpp, out


def test_chromium_renders_it_offline_and_not_blank(results, tmp_path):
    _, out = results
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is needed (make test installs it: make chromium)"
    shot, netlog = tmp_path / "shot.png", tmp_path / "net.json"
    # the browser's own chatter (component updates, time checks) off, so that any request left is the page's
    quiet = ["--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync",
             "--disable-default-apps", "--disable-domain-reliability", "--disable-client-side-phishing-detection",
             "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,Translate"]
    r = subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *quiet,
                        "--window-size=900,1400", "--host-resolver-rules=MAP * ~NOTFOUND", f"--log-net-log={netlog}",
                        f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", out.as_uri()],
                       capture_output=True, text=True, timeout=180,
                       env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})  # the sanitizer run's, not chromium's
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    w, h, bpp, rows = png_pixels(shot)
    assert (w, h) == (900, 1400)
    colors, ink = set(), 0
    for row in rows[::4]:
        for x in range(0, w * bpp, bpp * 4):
            px = row[x:x + 3]
            colors.add(px)
            ink += px != b"\xff\xff\xff"
    assert len(colors) > 20 and ink > 0.05 * (h // 4) * (w // 4), (len(colors), ink)
    # no request initiated by a document: the browser's own (component updates, time checks: initiator
    # "not an origin") are not the page's; anything the page asked for would carry its origin
    log = json.loads(netlog.read_text())
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    jobs = [e["params"] for e in log["events"] if e["type"] == start and "params" in e]
    from_page = [j["url"] for j in jobs if "url" in j and j.get("initiator") != "not an origin"]
    assert all(u.startswith(("file:", "data:")) for u in from_page), from_page


def test_refuses_what_is_no_result(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    out = tmp_path / "r.html"
    r = lowbit("report", bad, "-o", out, check=False)
    assert r.returncode == 2 and "bad.json" in r.stderr and not out.exists()
    r = lowbit("report", T, "-o", out, check=False)
    assert r.returncode == 2 and "neither JSON" in r.stderr and not out.exists()
    r = lowbit("report", bad, "-o", bad, check=False)  # never over an input
    assert r.returncode == 2 and bad.read_text() == '{"hello": 1}'
