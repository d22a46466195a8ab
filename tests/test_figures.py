"""The report's figures (refinery.report.figures): well-formed standalone SVG, no wider than the report body,
responsive (no fixed pixel width), and no text over other text or outside the figure, by the module's own
text-box estimates (DejaVu Sans widths, the widest common system-ui font)."""
import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from conftest import DATA, SNLI_DEV
from svg_checks import text_boxes, text_outside, text_overlaps
from refinery.core import stats as zstats
from refinery.report import figures as F
from refinery.report.figures.canvas import BLUE, MAX_WIDTH, PALETTE, lighter
from refinery.report.figures.measure import fit, text_width

SVG = "{http://www.w3.org/2000/svg}"
HANS = DATA / "hans" / "hans_regenerated.tsv"
STEPS = ["input", "01-audit", "02-zfilter", "03-confidence", "04-weights", "final"]


def check(svg: str) -> ET.Element:
    """What every figure must be: parseable XML, a viewBox ≤ 940 wide, width 100%, readable text."""
    root = ET.fromstring(svg)
    assert root.tag == SVG + "svg"
    x, y, w, h = map(float, root.get("viewBox").split())
    assert (x, y) == (0, 0) and 0 < w <= MAX_WIDTH and h > 0
    assert root.get("width") == "100%"
    assert not re.search(r'\s(width|height)="[\d.]+(px)?"', svg[:svg.index(">")])    # no fixed pixel size
    assert root.get("height") is None
    assert f"max-width:{int(w)}px" in root.get("style") and "height:auto" in root.get("style")
    assert "system-ui" in root.get("font-family")
    assert text_overlaps(svg) == []
    assert text_outside(svg) == []
    assert len(text_boxes(svg)) == len(root.findall(f".//{SVG}text"))
    return root


def texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(SVG + "text")]


def synthetic(C: int, F_: int = 2_000, seed: int = 1, labels=None) -> zstats.ZStats:
    rng = np.random.default_rng(seed)
    n = np.maximum(10, (rng.pareto(1.2, F_) * 12).astype(int))
    p = rng.dirichlet(np.ones(C) * 3, F_)
    counts = np.array([rng.multinomial(k, q) for k, q in zip(n, p)], dtype=float)
    names = [f"feature_{i}@{'premise' if i % 2 else 'hypothesis'}" for i in range(F_)]
    return zstats.from_matrix(names, labels or [f"label-{chr(97 + i)}" for i in range(C)], counts,
                              np.full(C, 1 / C), 10, 0.01)


# ------------------------------------------------------------------------------------------------ the checker

def test_the_checker_sees_overlaps_and_overflow():
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 50" width="100%" font-size="12">'
           '<text x="10" y="20">overlapping</text><text x="30" y="22">text</text>'
           '<text x="95" y="45" text-anchor="start">out</text>'
           '<text x="50" y="48" transform="rotate(-90 50 48)">vertical text</text></svg>')
    assert ("overlapping", "text") in text_overlaps(svg)
    assert "out" in text_outside(svg) and "vertical text" in text_outside(svg)
    x0, y0, x1, y1, _ = text_boxes(svg)[3]
    assert x1 - x0 < 20 < y1 - y0                      # a rotated label is tall and narrow


def test_text_width_is_conservative_and_truncation_fits():
    assert text_width("mmmm", 10) > text_width("iiii", 10)
    assert text_width("p̂", 10) == text_width("p", 10)      # the combining hat takes no room
    cut = fit("a_really_long_feature_name@hypothesis", 80, 11)
    assert cut.endswith("…") and text_width(cut, 11) <= 80


# ------------------------------------------------------------------------------------------------ z-plot

@pytest.fixture(scope="module")
def snli_stats():
    from refinery.io.schema import PRESETS
    from refinery.methods.audit.counting import audit
    return audit([SNLI_DEV], PRESETS["snli"]).stats


def test_zplot_of_an_snli_audit(snli_stats):
    svg = F.zplot(snli_stats, title="snli_dev.jsonl")
    root = check(svg)
    words = texts(root)
    assert words[0] == "snli_dev.jsonl"                          # the corpus names the figure
    assert {"contradiction", "entailment", "neutral"} <= set(words)
    assert any(w.startswith("Bonferroni α=0.01 (z* > ") for w in words)
    top = snli_stats.top_k(8)
    for label, entries in top.items():                             # the top 5 listed under each panel
        for rank, e in enumerate(entries[:5], 1):
            assert f"{rank} {e['feature']}" in words
    assert "1k" in words and "10" in words and "1.0" in words     # x at powers of ten, y 0–1
    assert float(root.get("viewBox").split()[2]) == 940           # three panels in one row, no wider
    assert len(svg) < 400_000


@pytest.mark.skipif(not HANS.exists(), reason="HANS data not here")
def test_zplot_of_two_labels_fills_the_width():
    from refinery.io.schema import PRESETS
    from refinery.methods.audit.counting import audit
    stats = audit([str(HANS)], PRESETS["hans"]).stats
    root = check(F.zplot(stats, title="hans_regenerated.tsv"))
    width = float(root.get("viewBox").split()[2])
    heads = {("".join(t.itertext())): float(t.get("x")) for t in root.iter(SVG + "text")
             if "".join(t.itertext()) in stats.labels}
    assert set(heads) == {"entailment", "non-entailment"}
    centres = sorted(heads.values())                               # each panel half the width: no empty slot
    assert centres[1] - centres[0] == pytest.approx(width / 2, abs=1)
    assert centres[1] > width / 2


def test_zplot_of_five_labels_centres_the_last_row():
    stats = synthetic(5)
    root = check(F.zplot(stats, title="five labels"))
    heads = {t.text: (float(t.get("x")), float(t.get("y"))) for t in root.iter(SVG + "text") if t.text in stats.labels}
    rows = sorted({y for _, y in heads.values()})
    assert len(rows) == 2
    first = sorted(x for x, y in heads.values() if y == rows[0])
    last = [x for x, y in heads.values() if y == rows[1]]
    assert len(first) == 3 and len(last) == 2 and np.mean(last) == pytest.approx(first[1], abs=1)
    assert check(F.zplot(synthetic(4, seed=2)))                    # 2 × 2
    assert check(F.zplot(synthetic(6, seed=3)))                    # 3 × 2


def test_zplot_numbers_crowded_top_features_without_overlap():
    stats = synthetic(3, seed=4, labels=["a", "b", "c"])
    for i in range(8):                      # eight top features of label a on almost the same spot
        stats.counts[i] = [2995 + i % 3, 3, 2]
        stats.n[i] = 3000 + i % 3
    stats.features = zstats.pa.array([f"word{i} a_very_long_feature_name_that_goes_on_and_on@hypothesis" if i < 8
                                      else f"f{i}" for i in range(len(stats.n))])
    root = check(F.zplot(stats, k=8))
    words = texts(root)
    listed = [w.split(" ", 1)[1] for w in words if re.match(r"[1-5] word\d", w)]
    assert len(listed) == 5 and all("…" in w and w.endswith("@hypothesis") for w in listed)   # cut in the middle
    assert len(set(listed)) == 5                                   # still told apart


def test_zplot_without_features_or_threshold_draws_empty_panels():
    stats = zstats.from_matrix(["x", "y"], ["pos", "neg"], np.array([[1.0, 2.0], [0.0, 3.0]]), np.array([0.5, 0.5]))
    stats.threshold = math.inf
    svg = F.zplot(stats, title="tiny <corpus> & friends")
    root = check(svg)
    words = texts(root)
    assert "tiny <corpus> & friends" in words                     # escaped in the SVG, intact when parsed
    assert "no significance threshold" in words and words.count("no feature in ≥ 10 rows") == 2
    assert "<polyline" not in svg


# ------------------------------------------------------------------------------------------------ bars

def bar_rects(root):
    return {r.find(SVG + "title").text: float(r.get("height")) for r in root.iter(SVG + "rect")
            if r.find(SVG + "title") is not None}


def test_bars_start_at_zero_so_a_bar_is_as_long_as_its_value():
    """The compare chart's axis started at 55%, making 2.5 points look three times their size."""
    svg = F.bars(["snli_test", "snli_test_hard"], ["original", "z-filtered"], [[0.801, 0.690], [0.811, 0.700]],
                 low=[[0.795, 0.68], [0.805, 0.69]], high=[[0.807, 0.70], [0.817, 0.71]], reference=[0.34, 0.35],
                 title="accuracy by evaluation set")
    root = check(svg)
    words = texts(root)
    assert {"80.1%", "81.1%", "69.0%", "70.0%", "majority class", "original", "z-filtered", "0%"} <= set(words)
    heights = bar_rects(root)
    assert heights["z-filtered · snli_test: 81.1%"] / heights["original · snli_test: 80.1%"] == \
        pytest.approx(0.811 / 0.801, rel=1e-3)
    close = F.bars(["dev"], ["a", "b"], [[0.575], [0.60]])
    root = check(close)
    ticks = [float(w[:-1]) for w in texts(root) if w.endswith("%") and w not in ("57.5%", "60.0%")]
    assert min(ticks) == 0
    heights = bar_rects(root)
    assert heights["b · dev: 60.0%"] / heights["a · dev: 57.5%"] == pytest.approx(0.60 / 0.575, rel=1e-3)


def test_histogram_draws_every_mark_it_names_and_a_long_title_whole():
    """A --clip beyond the largest weight was named in the legend and not drawn; the mean and the cap shared one
    style; a long corpus name cut the title short ("…: rows per…")."""
    title = "runs/mnli_dev_matched_hard_copy_for_a_long_name/03-confidence/kept: rows per weight"
    svg = F.histogram([0.5, 0.8, 1.0, 1.3], [10, 40, 5], title=title, x_label="weight", log_x=True,
                      marks=((1.0, "mean weight 1"), (2.0, "--clip 2")))
    root = check(svg)
    words = texts(root)
    assert title.split(": ")[0] + ":" in words and "rows per weight" in words and "2" in words
    dashed = [e for e in root.iter() if e.tag.endswith("line") and e.get("stroke-dasharray") == "5 3"
              and float(e.get("y2")) - float(e.get("y1")) > 50]   # the plot's marks, not the legend's
    assert len(dashed) == 2 and len({e.get("stroke") for e in dashed}) == 2
    xs = sorted(float(e.get("x1")) for e in dashed)
    assert xs[1] - xs[0] > 100                          # the cap drawn, to the right of the mean


def test_paired_bars_give_a_pair_one_hue_its_second_bar_lighter():
    svg = F.bars(["not@hypothesis → contradiction", "nobody@hypothesis → contradiction"],
                 ["dev: its label", "dev: other labels", "zfilter: its label", "zfilter: other labels"],
                 [[0.9, 0.95], [0.3, None], [0.8, 0.85], [0.5, 0.4]], paired=True)
    root = check(svg)
    fills = {r.find(SVG + "title").text.split(" · ")[0]: r.get("fill") for r in root.iter(SVG + "rect")
             if r.find(SVG + "title") is not None}
    assert fills["dev: its label"] == PALETTE[0] and fills["zfilter: its label"] == PALETTE[1]
    assert fills["dev: other labels"] == lighter(PALETTE[0]) != PALETTE[0]
    assert len(bar_rects(root)) == 7                                # no bar where there is no value


def test_bars_drop_value_labels_that_do_not_fit():
    rng = np.random.default_rng(0)
    svg = F.bars([f"evaluation set {i}" for i in range(8)], [f"corpus {i}" for i in range(6)],
                 rng.uniform(0.6, 0.9, (6, 8)).tolist(), reference=[0.5] * 8, percent=False, y_label="F1")
    root = check(svg)
    assert not any(re.fullmatch(r"0\.\d{3}", w) for w in texts(root))
    assert len(bar_rects(root)) == 48
    transposed = F.bars(["a", "b", "c"], ["x", "y"], [[0.5, 0.6], [0.55, 0.65], [0.7, 0.8]])   # G × S
    assert "y · c: 80.0%" in bar_rects(check(transposed))


# ------------------------------------------------------------------------------------------------ heatmap

def test_heatmap_crops_empty_rows_and_columns():
    m = np.full((30, 30), np.nan)                                  # NaN: no data, cropped at the high end
    m[:5, :5] = np.arange(25).reshape(5, 5) * 97.0 + 1
    m[4, :] = 0.0                                                  # a share of 0 is data: row 4 stays, not column 29
    m[4, 5:] = np.nan
    m[2, 3] = np.nan
    svg = F.heatmap(m, [f"r{i}" for i in range(30)], [f"c{i}" for i in range(30)], title="mostly empty",
                    x_label="columns", y_label="rows", value_label="count")
    root = check(svg)
    cells = [r for r in root.iter(SVG + "rect") if r.find(SVG + "title") is not None]
    assert len(cells) == 25
    words = set(texts(root))
    assert {"r4", "c4", "no value", "count"} <= words and not {"r5", "c5", "r29"} & words
    assert {"1,844", "0"} <= words                                 # cell values with separators: 19 × 97 + 1
    big = np.random.default_rng(1).random((40, 60))
    root = check(F.heatmap(big, [f"row label {i}" for i in range(40)], [f"column label {i}" for i in range(60)]))
    shown = [w for w in texts(root) if w.startswith("column label")]
    assert 5 < len(shown) < 60                                     # thinned, not dropped
    assert not any(re.fullmatch(r"0\.\d+", w) for w in texts(root) if w not in ("0.0", "0.2", "0.4", "0.6", "0.8"))
    check(F.heatmap(np.zeros((3, 3)), ["a", "b", "c"], ["x", "y", "z"]))


# ------------------------------------------------------------------------------------------------ small multiples

def test_small_multiples_with_gaps():
    series = {"nobody@hypothesis": [16.5, 16.5, 3.1, None, 2.0, 1.2],
              "sleeping@hypothesis": [14.2, 14.2, 2.5, 2.4, 2.1, 2.0],
              "a very long feature name that has to be cut short@premise": [9.0, 9.0, None, None, 4.0, 3.0],
              "cat@hypothesis": [-2.0, -2.0, 0.5, 0.4, 0.3, 0.1],
              "outdoors@hypothesis": [7.0, 7.0, 4.0, 5.1, 4.4, 4.9]}
    svg = F.small_multiples(series, STEPS, [4.82, 4.82, 4.6, 4.6, 4.5, 4.5], title="z* across the pipeline")
    root = check(svg)
    words = texts(root)
    assert any(w.startswith("n<min") for w in words)
    hollow = [c for c in root.iter(SVG + "circle") if c.get("fill") == "#ffffff" and c.get("stroke") == BLUE]
    assert len(hollow) == 3 + 1                                    # three gaps, and the legend's marker
    assert any(w.startswith("a very long feature") and "…" in w and w.endswith("@premise") for w in words)
    assert "−5" in words or "-5" in words                          # the scale goes below 0 for cat
    for step in STEPS:                                             # under the bottom panel of each column
        assert words.count(step) == 3
    one = F.small_multiples({"nobody@hypothesis": [16.5, None, 3.1]}, ["input", "02-zfilter", "final"], 4.82)
    assert "02-zfilter" in texts(check(one))
    many = {f"feature {i}": [float(i), i + 1.0, None, 2.0] for i in range(9)}
    check(F.small_multiples(many, ["input", "01-audit", "02-zfilter", "final"], 4.0))


# ------------------------------------------------------------------------------------------------ row flow

def test_row_flow_labels_a_tiny_segment_outside():
    steps = [{"name": "input", "rows_in": 20000, "parts": {"kept": 19666, "input rejects": 334}, "passes": "kept"},
             {"name": "01-audit", "rows_in": 19666, "parts": {"counted": 19666}, "passes": None},
             {"name": "02-zfilter", "rows_in": 19666,
              "parts": {"kept": 12771, "filtered out": 6895, "input rejects": 0}, "passes": "kept"},
             {"name": "03-confidence", "rows_in": 12771, "parts": {"kept": 12768, "low confidence": 3},
              "passes": "kept"},
             {"name": "04-upsample", "rows_in": 12768, "parts": {"kept": 12768, "added": 2100}, "passes": "kept"},
             {"name": "05-dedupe", "rows_in": 14868,
              "parts": {"kept": 14000, "duplicates": 800, "too long": 50, "empty": 18}, "passes": "kept"}]
    svg = F.row_flow(steps)
    root = check(svg)
    words = texts(root)
    assert {"12,771 kept", "6,895 filtered out", "3 low confidence", "2,100 added", "18 empty",
            "19,666 counted", "20,000 rows in"} <= set(words)
    assert not any("input rejects" in w and w.startswith("0") for w in words)
    widths = {r.find(SVG + "title").text: float(r.get("width")) for r in root.iter(SVG + "rect")
              if r.find(SVG + "title") is not None}
    assert widths["03-confidence: 3 low confidence"] >= 2          # visible
    assert widths["input: 19,666 kept"] == pytest.approx(widths["01-audit: 19,666 counted"], abs=0.2)
    assert widths["02-zfilter: 12,771 kept"] / widths["input: 19,666 kept"] == pytest.approx(12771 / 19666, rel=1e-3)
    assert svg.count("<polygon") == len(steps) - 1                 # a connector between consecutive steps
    check(F.row_flow([]))


# ------------------------------------------------------------------------------------------------ shares

def test_shares_per_step():
    rows = {"input": {"entailment": 6880, "neutral": 6531, "contradiction": 6255},
            "02-zfilter": {"contradiction": 3971, "entailment": 4500, "neutral": 4300},
            "03-confidence": {"entailment": 4500, "neutral": 4300, "contradiction": 3968, "-": 1},
            "an empty step": {}}
    svg = F.shares(rows, title="label shares")
    root = check(svg)
    words = texts(root)
    assert {"35.0%", "33.2%", "31.8%", "19,666 rows", "12,771 rows", "no rows", "entailment", "-"} <= set(words)
    colour = {}
    for r in root.iter(SVG + "rect"):                              # a label keeps its colour in every bar
        title = r.find(SVG + "title")
        if title is not None:
            label = title.text.split(" · ")[1].split(":")[0]
            assert colour.setdefault(label, r.get("fill")) == r.get("fill")
    assert len(set(colour.values())) == 4
