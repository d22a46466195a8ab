"""The reports as a browser shows them (refinery.report.browser, headless Chromium): first the checker itself on
small hand-written pages, then every report the verbs and pipelines write (SNLI and HANS): no script errors, no
page wider than a 1,000-px window, no SVG text over other text or cut off at its figure's edge, no broken image;
the zfilter, upsample, weights, compose, compare and pipeline reports at 1,000 and 1,400 px, with no table
scrolled sideways inside its box either (nothing clipped).
Screenshots: as wide as asked, as tall as the page; ``refinery run --screenshots`` saves one per report."""
import hashlib
import struct
from pathlib import Path

import pytest
import yaml
from conftest import DATA, REPO, SNLI_DEV, SNLI_HARD, SNLI_TEST, run_cli

from refinery.report import browser
from refinery.report.browser import check_page, find_chromium, screenshot, screenshot_reports

if find_chromium() is None:
    pytest.skip("chromium not installed: the browser checks of the reports need it (apt-get install chromium)",
                allow_module_level=True)

HANS = DATA / "hans" / "hans_regenerated.tsv"


def page(tmp_path: Path, body: str, name: str = "page.html", head: str = "") -> Path:
    path = tmp_path / name
    path.write_text(f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>t</title>{head}</head>'
                    f"<body>{body}</body></html>")
    return path


def png_size(path: Path) -> tuple[int, int]:
    data = Path(path).read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def svg(*texts: str, width: int = 400, height: int = 120) -> str:
    return (f'<svg viewBox="0 0 {width} {height}" width="100%" style="max-width:{width}px;height:auto" '
            f'font-family="sans-serif" font-size="12">{"".join(texts)}</svg>')


# ---------------------------------------------------------------- the checker on hand-written pages

def test_a_clean_page_passes(tmp_path):
    report = page(tmp_path, "<h1>Audit</h1><p>Some prose.</p><h2>Figure</h2>"
                  + svg('<text x="10" y="20">left label</text>', '<text x="200" y="20">right label</text>',
                        '<text x="10" y="60">a second line</text>',
                        '<text transform="rotate(-90 14 110)" x="14" y="110">rotated</text>')
                  + '<div style="overflow-x:auto;max-width:100%"><table style="width:1500px"><tr><td>scrolls '
                    "inside its own box</td></tr></table></div>")
    check = check_page(report)
    assert check.ok, check.describe()
    assert (check.svgs, check.texts) == (1, 4) and check.overflow_px <= 0
    assert check.describe().splitlines()[0].endswith(": ok")    # a scroll box is allowed, and named
    assert len(check.scrolled) == 1 and check.scrolled[0].startswith('div "scrolls inside its own box": 1500 px of '
                                                                     "content in "), check.scrolled
    assert check_page(report, width=1600).scrolled == []         # a wider window shows the whole table


def test_a_wide_table_overflows_a_1000_px_window(tmp_path):
    check = check_page(page(tmp_path, '<h1>Wide</h1><table id="big" style="width:1500px"><tr><td>cell</td></tr>'
                                      "</table>"))
    assert not check.ok
    assert 450 <= check.overflow_px <= 520, check.describe()
    assert len(check.overflowing) == 1 and check.overflowing[0].startswith('table#big "cell"'), check.overflowing
    assert "wider than the window" in check.describe()
    assert check_page(tmp_path / "page.html", width=1600).ok     # a wider window holds it


def test_overlapping_svg_text_is_caught_and_separated_text_is_not(tmp_path):
    over = check_page(page(tmp_path, "<h2>Top features</h2>" + svg(
        '<text x="10" y="30">first label here</text>', '<text x="40" y="34">second label</text>'), "over.html"))
    assert not over.ok
    assert len(over.overlaps) == 1 and over.overlaps[0][:2] == ("first label here", "second label")
    assert over.overlaps[0][2].startswith('svg 1 under "Top features"'), over.overlaps
    apart = check_page(page(tmp_path, "<h2>Top features</h2>" + svg(
        '<text x="10" y="30">first label here</text>', '<text x="10" y="50">second label</text>'), "apart.html"))
    assert apart.ok, apart.describe()


def test_rotated_labels_overlap_only_where_their_rotated_boxes_do(tmp_path):
    """Tick labels at −45°: their upright bounding boxes overlap, the labels themselves overlap only when close."""
    def ticks(step):
        return svg(*(f'<text transform="rotate(-45 {x} 20)" x="{x}" y="20" text-anchor="end">label number {i}'
                     "</text>" for i, x in enumerate(range(100, 100 + 3 * step, step))), width=300)
    spaced = check_page(page(tmp_path, ticks(24), "spaced.html"))
    assert spaced.ok, spaced.describe()
    crowded = check_page(page(tmp_path, ticks(6), "crowded.html"))
    assert len(crowded.overlaps) == 3, crowded.describe()


def test_text_outside_its_svg_is_caught(tmp_path):
    check = check_page(page(tmp_path, "<h2>Bars</h2>" + svg('<text x="360" y="60">cut off at the edge</text>',
                                                           '<text x="10" y="4">too high</text>')))
    assert [(o[0], o[2].split()[-1]) for o in check.outside] == [("cut off at the edge", "right"),
                                                                  ("too high", "above")], check.describe()
    assert check.outside[0][1].startswith('svg 1 under "Bars"') and not check.overlaps


def test_script_errors_and_console_errors_are_caught(tmp_path):
    report = page(tmp_path, "<p>hi</p><script>console.log('fine'); console.warn('also fine');"
                            "console.error('bad thing', {rows: 3}); undefinedFunction();</script>"
                            "<script>Promise.reject(new Error('nobody waited'));"
                            "setTimeout(function () { throw new Error('late'); }, 50);</script>")
    check = check_page(report)
    assert not check.ok
    errors = "\n".join(check.console_errors)
    assert 'console.error: bad thing {"rows":3}' in errors
    assert "Uncaught ReferenceError: undefinedFunction is not defined (page.html:1)" in errors   # its own line
    assert "Uncaught (in promise) Error: nobody waited" in errors and "Uncaught Error: late" in errors
    assert len(check.console_errors) == 4, errors                  # the page's report and the log's, once each
    assert "also fine" not in errors and not any(e.endswith("fine") for e in check.console_errors)


def test_uncaught_errors_in_chromiums_log_are_console_errors():
    """Chromium 156 logs console messages at INFO whatever their level; uncaught errors are named as such."""
    log = ('[1:1:1123/203711.670455:INFO:CONSOLE:3] "a log", source: file:///tmp/x/report.html (3)\n'
           '[1:1:1123/203711.676980:INFO:CONSOLE:4] "Uncaught Error: thrown", source: file:///tmp/x/report.html (4)\n'
           '[1:1:1123/203711.676980:ERROR:CONSOLE(7)] "logged at error", source: file:///tmp/x/report.html (7)\n'
           "[1:2:1123/203711.185200:ERROR:dbus/bus.cc:405] Failed to connect to the bus\n")
    assert browser._log_errors(log) == ["Uncaught Error: thrown (report.html:4)", "logged at error (report.html:7)"]


def test_broken_images_are_caught_and_relative_ones_load(tmp_path):
    (tmp_path / "figs").mkdir()
    (tmp_path / "figs" / "dot.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
                                               '<circle cx="5" cy="5" r="4"/></svg>')
    check = check_page(page(tmp_path, '<img src="figs/dot.svg" alt="dot"><img src="figs/missing.png" alt="no">'))
    assert check.broken_images == [f"img {(tmp_path / 'figs' / 'missing.png').as_uri()}"], check.describe()
    assert "resources that did not load (1)" in check.describe()


def test_the_report_is_not_touched(tmp_path):
    report = page(tmp_path, "<h1>Report</h1>" + svg('<text x="10" y="20">label</text>'))
    before = hashlib.sha256(report.read_bytes()).hexdigest()
    check_page(report)
    screenshot(report, tmp_path / "shots" / "report.png")
    assert hashlib.sha256(report.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["page.html", "report.png", "shots"]


def test_screenshot_is_as_wide_as_asked_and_as_tall_as_the_page(tmp_path):
    report = page(tmp_path, '<div style="height:2400px;background:#eef">tall</div>',
                  head="<style>body{margin:0}</style>")
    assert png_size(screenshot(report, tmp_path / "a.png")) == (1000, 2400)
    assert png_size(screenshot(report, tmp_path / "b.png", width=640, height=500)) == (640, 500)
    short = page(tmp_path, "<p>one line</p>", "short.html")
    width, height = png_size(screenshot(short, tmp_path / "c.png"))
    assert width == 1000 and 20 < height < 200                     # the content, not the 1,400-px window


def test_screenshot_reports_names_each_by_its_path(tmp_path):
    for folder in ("01-audit/report", "pipeline"):
        (tmp_path / "run" / folder).mkdir(parents=True)
        page(tmp_path / "run" / folder, f"<h1>{folder}</h1>", "report.html")
    page(tmp_path / "run", "<p>not a report</p>", "other.html")
    publishing = tmp_path / "run" / "pipeline.tmp-4242-20261123T204559-6399605f"   # being written (AtomicDir)
    publishing.mkdir()
    page(publishing, '<div style="height:2000px">the new pipeline report</div>', "report.html")
    pngs = screenshot_reports(tmp_path / "run", tmp_path / "shots")
    assert [p.name for p in pngs] == ["01-audit__report__report.png", "pipeline__report.png"]
    assert all(p.parent == tmp_path / "shots" and png_size(p)[0] == 1000 for p in pngs)
    assert png_size(pngs[1])[1] > 2000 > png_size(pngs[0])[1]     # the report being published, not the old one


def test_a_page_that_never_finishes_is_a_clear_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(browser, "TIMEOUT_S", 3)
    with pytest.raises(TimeoutError, match=r"chromium did not finish loading .*hang.html within 3 s"):
        check_page(page(tmp_path, "<script>while (true) {}</script>", "hang.html"))
    assert check_page(page(tmp_path, "<p>fine</p>")).ok          # the next page loads as usual


def test_find_chromium_follows_refinery_chromium(monkeypatch):
    found = find_chromium()
    monkeypatch.setenv("REFINERY_CHROMIUM", "/nowhere/chromium")
    assert find_chromium() is None
    monkeypatch.setenv("REFINERY_CHROMIUM", found)
    assert find_chromium() == found


# ---------------------------------------------------------------- the reports refinery writes

def _head(src: str, dst: Path, lines: int) -> str:
    with open(src) as fh, open(dst, "w") as out:
        for _, line in zip(range(lines), fh):
            out.write(line)
    return str(dst)


def _pipeline(root: Path, name: str, spec: dict, *args) -> None:
    (root / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    run_cli("run", root / f"{name}.yaml", "--out", root / name, *args)


def _snli_pipeline(root: Path) -> None:
    """examples/snli.yaml (its stages as they are) on the first 3,000 rows of SNLI dev and test."""
    spec = yaml.safe_load((REPO / "examples" / "snli.yaml").read_text())
    spec["input"]["splits"] = {"dev": _head(SNLI_DEV, root / "dev.jsonl", 3000),
                               "test": _head(SNLI_TEST, root / "test.jsonl", 3000)}
    _pipeline(root, "pipeline-snli", spec)


def _hans_pipeline(root: Path) -> None:
    _pipeline(root, "pipeline-hans", {"input": {"paths": [str(HANS)], "preset": "hans"}, "stages": [
        {"audit": {"k": 10}}, {"zfilter": {"k": 10}}, {"upsample": {"k": 5, "iterations": 5}},
        {"confidence": {"model": "ngram", "folds": 2, "tau": 0.2}}]})


# run name → how to make it under the session's folder (each made once, when a test first needs it)
RUNS = {
    "zfilter-snli": lambda r: run_cli("zfilter", SNLI_DEV, "--preset", "snli", "--out", r / "zfilter-snli"),
    "leakage-snli": lambda r: run_cli("leakage", "--input", f"train={SNLI_DEV}", "--input", f"test={SNLI_HARD}",
                                      "--preset", "snli", "--trees", 30, "--out", r / "leakage-snli"),
    "upsample-snli": lambda r: run_cli("upsample", SNLI_DEV, "--preset", "snli", "--k", 10,
                                       "--out", r / "upsample-snli"),
    "compare": lambda r: (run_cli("compare", "--train", f"snli={SNLI_DEV}", "--train",
                                  f"zfiltered={made(r, 'zfilter-snli') / 'kept'}", "--preset", "snli",
                                  "--eval", f"snli-hard={SNLI_HARD}", "--eval", f"hans={HANS}:hans",
                                  "--bootstrap", 200, "--out", r / "compare")),
    "compose-snli": lambda r: run_cli("compose", _head(SNLI_TEST, r / "g.jsonl", 2000), "--original",
                                      _head(SNLI_DEV, r / "d0.jsonl", 2000), "--preset", "snli",
                                      "--out", r / "compose-snli"),
    "pipeline-snli": _snli_pipeline,
    "pipeline-hans": _hans_pipeline,
}
HANS_RUNS = {"compare", "pipeline-hans"}   # the HANS pipeline's stages report its audit and z-filter (2 labels)
# the reports read at every width from 1,000 to 1,400 px (its ends checked), nothing clipped
WIDE = [("zfilter-snli", "report/report.html"), ("upsample-snli", "report/report.html"),
        ("pipeline-snli", "03-weights/report/report.html"), ("compose-snli", "report/report.html"),
        ("compare", "report/report.html"), ("pipeline-snli", "pipeline/report.html")]
WIDTHS = (1000, 1400)
REPORTS = [*WIDE, ("leakage-snli", "report/report.html"),
           *(("pipeline-snli", f"{stage}/report/report.html") for stage in ("01-audit", "02-zfilter")),
           *(("pipeline-hans", f"{stage}/report/report.html") for stage in ("01-audit", "02-zfilter",
                                                                             "03-upsample", "04-confidence")),
           ("pipeline-hans", "pipeline/report.html")]
_made: dict = {}


def made(root: Path, run: str) -> Path:
    """The run's folder, made on first use; a run that failed fails every test that needs it, at once."""
    if run in HANS_RUNS and not HANS.exists():
        pytest.skip(f"HANS data not here ({HANS})")
    if run not in _made:
        try:
            RUNS[run](root)
            _made[run] = root / run
        except Exception as e:       # noqa: BLE001 (kept, so the run is not tried again by the next test)
            _made[run] = e
    if isinstance(_made[run], Exception):
        raise _made[run]
    return _made[run]


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    return lambda run: made(root, run)


CHECKS = [(run, report, width) for run, report in REPORTS for width in (WIDTHS if (run, report) in WIDE else (1000,))]


@pytest.mark.parametrize("run,report,width", CHECKS, ids=[f"{r}/{p}@{w}" for r, p, w in CHECKS])
def test_report_reads_well_in_a_browser(runs, run, report, width):
    path = runs(run) / report
    assert path.is_file(), f"refinery {run} wrote no {report}"
    check = check_page(path, width=width)
    assert check.ok, check.describe()
    if (run, report) in WIDE:
        assert not check.scrolled, check.describe()


def test_every_report_written_is_checked(runs):
    """Reports the list above does not name yet (a stage that starts writing one) are checked here."""
    listed = {(r, p) for r, p in REPORTS}
    problems = []
    for run in RUNS:
        if run in HANS_RUNS and not HANS.exists():
            continue
        folder = runs(run)
        for path in sorted(folder.rglob("report.html")):
            if (run, path.relative_to(folder).as_posix()) not in listed:
                check = check_page(path)
                if not check.ok:
                    problems.append(check.describe())
    assert not problems, "\n".join(problems)


def test_refinery_run_saves_a_screenshot_of_every_report(tmp_path):
    spec = {"input": {"paths": [_head(SNLI_HARD, tmp_path / "hard.jsonl", 1000)], "preset": "snli"},
            "stages": [{"audit": {"k": 5}}, {"zfilter": {"k": 5}}]}
    _pipeline(tmp_path, "shots", spec, "--screenshots")
    out = tmp_path / "shots"
    shots = sorted(p.name for p in (out / "pipeline" / "screenshots").glob("*.png"))
    expected = sorted(p.relative_to(out).as_posix().replace("/", "__")[:-len(".html")] + ".png"
                      for p in out.rglob("report.html"))
    assert shots == expected == ["01-audit__report__report.png", "02-zfilter__report__report.png",
                                 "pipeline__report.png"]
    for name in shots:
        width, height = png_size(out / "pipeline" / "screenshots" / name)
        assert width == 1000 and height > 300, (name, width, height)
