"""The report builder: numbers for people, dicts as tables, a header naming the corpus, date, machine and version."""
import re

import pytest

from refinery.io.corpus_writer import write_table
from refinery.report import format as fmt
from refinery.report.page import Report, config_table, corpus_name, fields, table


@pytest.mark.parametrize("value, text", [
    (4.8979474568930215, "4.9"), (0.5603815709356607, "0.56"), (150.73999999999978, "151"), (12345.6, "12,346"),
    (12771, "12,771"), (0.0, "0"), (1.0, "1"), (-2.345, "-2.35"), (None, "—"), (True, "true"), (float("inf"), "∞")])
def test_numbers_read_as_people_write_them(value, text):
    assert fmt.number(value) == text


def test_percent_seconds_and_sizes():
    assert fmt.percent(0.12345) == "12.3%" and fmt.z(16.4812) == "16.48"
    assert [fmt.seconds(s) for s in (0.42, 95, 4000)] == ["0.4 s", "1 min 35 s", "1 h 6 min"]
    assert [fmt.size(b) for b in (512, 1_234_567, 3.2e9)] == ["512 B", "1.23 MB", "3.2 GB"]


def test_dicts_become_tables_with_formatted_numbers():
    html = fields({"labels": {"NOT ENOUGH INFO": 6666, "SUPPORTS": 12}, "threshold": 4.8979474568930215,
                   "error_bounds": {"mode": "exact", "count_error": 0}, "cached": None, "ok": True})
    assert "{" not in html and "4.8979" not in html and "6,666" in html and "NOT ENOUGH INFO" in html
    assert ">true<" in html and "—" in html and "True" not in html and "None" not in html
    grid = fields({"nobody": {"before": 0.91, "after": 0.4}, "sleeping": {"before": 0.88, "after": 0.35}})
    assert grid.count("<tr>") == 3 and "<th class=\"num\">before</th>" in grid     # one row per key, a column each


def test_table_right_aligns_numbers_and_applies_formats():
    html = table([{"label": "a", "share": 0.25, "rows": 1200}, {"label": "b", "share": 0.75, "rows": 3600}],
                 formats={"share": fmt.percent})
    assert "25.0%" in html and "3,600" in html and html.count('class="num"') == 2 + 4


def test_config_is_flattened_to_dotted_settings():
    html = config_table({"features": {"tokenizer": {"lowercase": True}, "families": ["unigram", "null"]}, "k": 20,
                         "update": None})
    assert "features.tokenizer.lowercase" in html and "unigram, null" in html and "{" not in html


def test_header_names_corpus_followed_through_manifests_date_machine_and_version(tmp_path):
    import pyarrow as pa

    (tmp_path / "snli_dev.jsonl").write_text('{"sentence1": "a", "sentence2": "b", "gold_label": "x"}\n')
    write_table(pa.table({"id": ["1"], "text_a": ["a"], "label": ["x"]}), str(tmp_path / "c"),
                inputs=[str(tmp_path / "snli_dev.jsonl")])
    assert corpus_name([tmp_path / "c"]) == "snli_dev.jsonl"
    page = Report("Audit", corpus_name([tmp_path / "c"]), [str(tmp_path / "c")]).section("S", "<p>x</p>").html()
    header = page.split("<header>")[1].split("</header>")[0]
    assert "snli_dev.jsonl" in header and "refinery " in header and " cores" in header
    assert re.search(r"<time>\d{4}-\d\d-\d\d \d\d:\d\d UTC</time>", header)


def test_weight_histogram_counts_from_zero_and_labels_a_tail_of_one_row():
    from refinery.report.figures import histogram
    from svg_checks import text_outside

    svg = histogram([0.5, 1, 2, 100, 300], [4000, 5000, 0, 1], title="rows per weight", log_x=True,
                    marks=((1.0, "mean weight 1"),))
    labels = re.findall(r">([^<>]+)</text>", svg)
    assert "0" in labels and "1" in labels            # the count axis starts at zero; the one heavy row is labelled
    assert "1 to 300" not in svg and "100 to 300: 1 rows" in svg and not text_outside(svg)


def test_pipeline_report_shows_weighted_z_and_each_stages_verdict(tmp_path):
    """After weights the pipeline's audit is weighted (its max z* are the weights verdict's), and each stage's
    verdict (here confidence's and weights') has its line in the report."""
    import json

    import yaml
    from conftest import run_cli

    from refinery.io.synth import SynthSpec
    from refinery.io.synth import write as write_synth

    write_synth(SynthSpec(rows=3_000, premise_pool=200, planted={}, seed=3), str(tmp_path / "corpus"))
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"input": {"paths": [str(tmp_path / "corpus")]}, "stages": [
        {"confidence": {"model": "ngram", "folds": 2, "tau": 0.2}}, {"weights": {"folds": 3}}]}))
    run_cli("run", tmp_path / "p.yaml", "--out", tmp_path / "o")
    receipt = json.loads((tmp_path / "o" / "pipeline" / "receipt.json").read_text())
    steps = {s["stage"]: s for s in receipt["steps"]}
    weights = steps["weights"]
    verdict = json.loads((tmp_path / "o" / weights["step"] / "report" / "report.json").read_text())["verdict"]
    assert weights["audit"]["weighted"] and "weighted" not in steps["confidence"]["audit"]
    assert weights["audit"]["max_z"] == pytest.approx({l: m["after"] for l, m in verdict["max_z"].items()}, abs=1e-3)
    assert {s: set(steps[s]["verdicts"]) for s in ("confidence", "weights")} == {"confidence": {""}, "weights": {""}}
    page = (tmp_path / "o" / "pipeline" / "report.html").read_text()
    assert "Each stage&#x27;s verdict" in page or "Each stage's verdict" in page
    assert "a row of weight w counts as w rows" in page and verdict["line"].split(":")[0] in page


def test_top_features_mark_significance_against_the_threshold():
    from refinery.report.page import top_features
    from refinery.report.terminal import topk as console_topk

    topk = {"contradiction": [{"feature": "nobody@hypothesis", "z": 9.5, "n": 40, "p": 0.9},
                              {"feature": "cat@hypothesis", "z": 3.2, "n": 12, "p": 0.6}],
            "entailment": [{"feature": "outdoors@hypothesis", "z": 4.1, "n": 30, "p": 0.6}]}
    page = top_features(topk, 4.5)
    assert re.findall(r"<td>(yes|no)</td>", page) == ["yes", "no", "no"]
    assert "1 of the 3 features listed are significant (z* &gt; 4.50" in page
    lines = console_topk(topk, threshold=4.5).splitlines()
    assert lines[1].startswith(" *") and lines[2].startswith("  ") and lines[-1].startswith("* = significant; 1 of")
    calm = top_features(topk, 10.0)
    assert "No feature is significant" in calm and "Nothing here is a bias" in calm and "<td>yes</td>" not in calm
    assert "significant" not in top_features(topk)                  # no threshold: the table as it was
