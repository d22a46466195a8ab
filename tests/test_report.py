"""The report builder: numbers for people, dicts as tables, a header naming the corpus, date, machine and version."""
import re

import pytest

from refinery.io.corpus import write_table
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
