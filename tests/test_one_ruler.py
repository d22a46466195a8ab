"""One ruler: a refining stage's verdict is two audits, its input's and its output's, each exactly what `refinery
audit` prints for that corpus with its defaults; and a stage's output is audited with the prior rule its input's
audit took (recorded in the output's manifest), so the next audit agrees with the verdict."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import assert_kept_audit_is_a_fresh_one, assert_verdict_is_two_audits, fresh_audit

from refinery.cli.main import main

IMBALANCED = ("--label-shares", "0.45,0.4,0.15", "--planted", "nobody:contradiction:0.9,sleeping:contradiction:0.5")


def _cli(*args) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def sick_like(tmp_path_factory):
    """6,000 planted rows with SICK's imbalance (45/40/15): the audit's auto prior is empirical."""
    path = tmp_path_factory.mktemp("ruler") / "sick_like"
    _cli("synth", "--rows", 6000, *IMBALANCED, "--out", path)
    return path


STAGES = {   # a refining stage's command line after its input, and the corpus it passes on
    "zfilter": ((), "kept"),
    "confidence": (("--model", "ngram", "--tau", "0.5"), "kept"),
    "upsample": (("--band-max", "0.2"), "corpus"),
    "aflite": (("--partitions", "16"), "kept"),
    "datamap": (("--epochs", "3"), "kept"),
}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_stage_verdict_is_the_audit_a_user_runs_next(stage, sick_like, tmp_path):
    """The verdict's two sides are fresh audits of the input and the output, and the output keeps its audit."""
    options, part = STAGES[stage]
    _cli(stage, sick_like, "--out", tmp_path / stage, *options)
    verdict = json.loads((tmp_path / stage / "report" / "report.json").read_text())["verdict"]
    before, after = fresh_audit(sick_like, tmp_path / "a_in"), fresh_audit(tmp_path / stage / part, tmp_path / "a_out")
    assert before["prior"].startswith("empirical") and after["prior"].startswith("empirical"), after["prior"]
    assert "recorded with the corpus" in after["prior"]          # the rule of the input's audit, carried
    assert_verdict_is_two_audits(verdict, before, after)
    assert_kept_audit_is_a_fresh_one(tmp_path / stage / part, tmp_path / "a_out")   # kept with it: nothing recounts
    still = sum(after["significant"].values())
    assert still or stage in ("zfilter", "aflite", "datamap")
    if verdict["ok"] and still:   # an ok that is no debiasing says so, with what is left
        assert f"nothing worse, not debiased: {still:,} feature(s) still over the threshold" in verdict["line"]


def test_a_filter_moving_the_shares_into_the_balanced_band_keeps_its_input_rule(tmp_path):
    """55/25/20 is audited with its label shares (contradiction under 1/(1.5·3)); z-filtering an entailment shortcut
    keeps 40/33/27, inside the band where auto picks 1/C: the kept rows stay audited with their shares, as the
    verdict judged them, unless the user asks for another prior."""
    corpus = tmp_path / "flip"
    _cli("synth", "--rows", 6000, "--label-shares", "0.55,0.25,0.20", "--planted", "outdoors:entailment:0.5",
         "--out", corpus)
    _cli("zfilter", corpus, "--out", tmp_path / "zf")
    kept = json.loads((tmp_path / "zf" / "kept" / ".refinery" / "manifest.json").read_text())
    shares = [n / sum(kept["labels"].values()) for n in kept["labels"].values()]
    assert all(1 / 4.5 <= s <= 1.5 / 3 for s in shares), shares   # within the band: auto alone would say uniform
    assert kept["audit_prior"]["name"] == "empirical"
    audited = fresh_audit(tmp_path / "zf" / "kept", tmp_path / "a")
    verdict = json.loads((tmp_path / "zf" / "report" / "report.json").read_text())["verdict"]
    assert audited["prior"].startswith("empirical (recorded with the corpus")
    assert {l: m["after"] for l, m in verdict["max_z"].items()} == pytest.approx(audited["max_z"], abs=1e-3)
    assert fresh_audit(tmp_path / "zf" / "kept", tmp_path / "u", "--prior", "uniform")["prior"].startswith("uniform")


def test_the_weighted_audit_kept_with_the_weights_is_the_pipeline_reports(sick_like, tmp_path):
    """weights keeps its weighted audit (its verdict's after side) with corpus/: the figures the pipeline's report
    would count from the weighted rows, and the verdict's."""
    from refinery.core import audit_record
    from refinery.core.audit_record import AuditRecord
    from refinery.io.corpus import Corpus
    from refinery.io.read_options import ReadOptions
    from refinery.methods.audit.config import AuditConfig
    from refinery.pipeline.step_audits import _measure_weighted

    _cli("weights", sick_like, "--out", tmp_path / "w", "--folds", 2)
    corpus = Corpus.open(str(tmp_path / "w" / "corpus"))
    record = AuditRecord.from_table(corpus.attached(audit_record.KEY))
    counted = _measure_weighted(corpus.url, ReadOptions(), AuditConfig(), (None, False),
                                ["text_a", "text_b", "label", "weight"], None)
    assert record.weighted and record.matches(counted.settings, weighted=True)
    assert record.figures(20) == counted.figures(20)
    assert record.stats.counts == pytest.approx(counted.stats.counts)
    assert record.stats.n == pytest.approx(counted.stats.n)
    verdict = json.loads((tmp_path / "w" / "report" / "report.json").read_text())["verdict"]
    assert {l: m["after"] for l, m in verdict["max_z"].items()} == pytest.approx(record.figures(20).max_z, abs=1e-3)
