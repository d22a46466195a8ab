"""Configs reject bad values when built (API, CLI, pipeline file); defaults a careful user would choose:
the audit's ``auto`` prior, ``null`` as the label prior, AUDAC's left-out tokens, the weights' ESS warning."""
import json

import numpy as np
import pytest
import yaml
from conftest import SNLI_DEV, SNLI_HARD, SNLI_TEST, run_cli

from refinery.core.features import FeatureConfig
from refinery.core.stats import choose_prior
from refinery.io.corpus import Corpus
from refinery.methods.audit.config import AuditConfig
from refinery.methods.confidence.config import ConfidenceConfig
from refinery.methods.generate.config import GenerationConfig
from refinery.methods.ibadr.config import IbadrConfig
from refinery.models.leakage_settings import ForestConfig, GraphConfig
from refinery.methods.razor.config import RazorConfig
from refinery.methods.upsample.config import UpsampleConfig
from refinery.methods.weights.config import WeightsConfig
from refinery.methods.weights.ips import low_ess_warning
from refinery.methods.zfilter.stage import ComposeConfig, ZFilterConfig
from refinery.models.generate import Backend, Sampling
from refinery.pipeline.config import ConfigError, InputSpec, PipelineSpec, parse_pipeline

SICK_HEADER = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"
SICK_SHARES = {"neutral": 5700, "entailment": 2900, "contradiction": 1400}   # SICK's 57/29/14%


@pytest.fixture(scope="module")
def sick_like(tmp_path_factory):
    """Real SNLI pairs subsampled to SICK's label shares, in SICK's TSV layout (read with --preset sick)."""
    lines, taken = [SICK_HEADER], dict.fromkeys(SICK_SHARES, 0)
    for i, line in enumerate(open(SNLI_DEV).read().splitlines() + open(SNLI_TEST).read().splitlines()):
        r = json.loads(line)
        label = r["gold_label"]
        if label in SICK_SHARES and taken[label] < SICK_SHARES[label]:
            taken[label] += 1
            lines.append(f"{i}\t{r['sentence1']}\t{r['sentence2']}\t3.5\t{label.upper()}")
    assert taken == SICK_SHARES
    path = tmp_path_factory.mktemp("sick") / "SICK_like.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("build, message", [
    (lambda: AuditConfig(k=-5), "k must be a positive integer, got -5"),
    (lambda: AuditConfig(k=0), "k must be a positive integer, got 0"),
    (lambda: AuditConfig(min_count=0), "min_count must be a positive integer, got 0"),
    (lambda: AuditConfig(alpha=1.5), r"alpha must be a number in \(0, 1\), got 1.5"),
    (lambda: AuditConfig(prior="emprical"), "prior must be one of auto, uniform, empirical, got 'emprical'"),
    (lambda: AuditConfig(counting="fast"), "counting must be one of exact, sketch, got 'fast'"),
    (lambda: AuditConfig(probe_folds=1), "probe_folds must be an integer of at least 2, got 1"),
    (lambda: PipelineSpec(InputSpec(paths=["x"]), [], memory_budget="lots"), "memory budget 'lots'"),
    (lambda: FeatureConfig(families=("unigram", "trigram")), "families must be a non-empty list of unigram"),
    (lambda: ZFilterConfig(batch_size=0), "batch_size must be a positive integer, got 0"),
    (lambda: ZFilterConfig(warmup=-1), "warmup must be a non-negative integer, got -1"),
    (lambda: ZFilterConfig(k="5"), "k must be a positive integer, got '5'"),
    (lambda: ZFilterConfig(shuffle_seed=-1), "shuffle_seed must be a non-negative integer or none, got -1"),
    (lambda: ComposeConfig(composition="zsum"), "composition must be one of zaug, parz, seqz, got 'zsum'"),
    (lambda: UpsampleConfig(step=0), r"step must be a number in \(0, 1\], got 0"),
    (lambda: UpsampleConfig(band_min=0.02, band_max=0.002), "band_min=0.02 must be less than band_max=0.002"),
    (lambda: UpsampleConfig(band_min=-1), "band_min must be a number ≥ 0, got -1"),
    (lambda: WeightsConfig(clip=0.5), "clip must be a number > 1, auto or none, got 0.5"),
    (lambda: WeightsConfig(folds=1), "folds must be an integer of at least 2, got 1"),
    (lambda: WeightsConfig(features="fancy"), "features must be one of basic, advanced, got 'fancy'"),
    (lambda: ForestConfig(trees=0), "trees must be a positive integer, got 0"),
    (lambda: GraphConfig(node_key="qid"), "node_key must be one of auto, id, text, got 'qid'"),
    (lambda: ConfidenceConfig(tau=1.0, model="ngram"), r"tau must be auto or a number in \[0, 1\), got 1.0"),
    (lambda: RazorConfig(verify_mode="vote"), "verify_mode must be one of answer, choice, got 'vote'"),
    (lambda: RazorConfig(verify_mode="choice", backend=Backend("vllm")), "choice needs the transformers backend"),
    (lambda: IbadrConfig(groups=1), "groups must be an integer of at least 2, got 1"),
    (lambda: IbadrConfig(train_precision="fp8"), "train_precision must be one of auto, float32"),
    (lambda: GenerationConfig(template="Premise: {premise}"), "template must be a prompt over {id} {text_a}"),
    (lambda: Sampling(top_p=0), r"top_p must be a number in \(0, 1\], got 0"),
    (lambda: Backend(tensor_parallel=0), "tensor_parallel must be a positive integer, got 0"),
])
def test_every_config_rejects_a_bad_value_naming_key_value_and_what_is_allowed(build, message):
    with pytest.raises(ValueError, match=message) as refused:
        build()
    assert refused.value.code == CONFLICTING.get(message, "invalid-setting"), refused.value


# the refusals above of settings given together (the rest are a setting's value out of its range or choices)
CONFLICTING = {"choice needs the transformers backend": "conflicting-settings"}


@pytest.mark.parametrize("args, message", [   # named by the option the user typed, not the config's key
    (["audit", "--k", "-5"], "--k must be a positive integer, got -5"),
    (["audit", "--k", "0"], "--k must be a positive integer, got 0"),
    (["zfilter", "--batch-size", "0"], "--batch-size must be a positive integer, got 0"),
    (["confidence", "--tau", "1.5"], "--tau must be auto or a number in [0, 1), got 1.5"),
    (["weights", "--trees", "0"], "--trees must be a positive integer, got 0"),   # a nested config's option
    (["upsample", "--band-min", "0.02", "--band-max", "0.002"], "--band-min 0.02 must be less than --band-max 0.002"),
])
def test_cli_bad_value_is_one_line_before_any_work(tmp_path, args, message):
    proc = run_cli(args[0], SNLI_DEV, "--preset", "snli", *args[1:], "--out", tmp_path / "o", check=False)
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {message} [invalid-setting]", proc.stderr
    assert not (tmp_path / "o").exists()


def test_a_misspelt_choice_is_refused_naming_the_closest(tmp_path):
    from click.testing import CliRunner

    from refinery.cli.main import main

    refused = CliRunner().invoke(main, ["audit", SNLI_DEV, "--preset", "snl", "--prior", "uniform", "--out",
                                        str(tmp_path / "o")])
    assert refused.exit_code == 2 and "'snl' is not one of" in refused.output
    assert "Did you mean 'snli'?" in refused.output and not (tmp_path / "o").exists()


def test_pipeline_file_is_validated_whole_before_the_first_stage(tmp_path):
    path = tmp_path / "bad.yaml"
    for bad, message in (({"k": -5}, "k must be a positive integer, got -5"),
                         ({"prior": "emprical"}, "prior must be one of auto, uniform, empirical, got 'emprical'; "
                                                 "did you mean 'empirical'?")):
        path.write_text(yaml.safe_dump({"input": {"paths": [SNLI_HARD], "preset": "snli"},
                                        "stages": [{"audit": {"k": 20}}, {"zfilter": bad}]}))
        proc = run_cli("run", path, "--out", tmp_path / "o", check=False)
        assert proc.returncode == 2 and proc.stderr.strip() == \
            f"error: {path}: stage 2 (zfilter): {message} [invalid-setting]"
        assert not (tmp_path / "o").exists() and proc.stdout == ""
    with pytest.raises(ConfigError, match=r"pipeline: stage 1 \(compose\)\.zfilter: min_count must be a positive"
                       ) as refused:
        parse_pipeline({"input": {"paths": [SNLI_HARD]}, "stages": [{"compose": {"zfilter": {"min_count": 0}}}]})
    assert refused.value.code == "invalid-setting"
    with pytest.raises(ConfigError, match="pipeline: input: batch_rows must be a positive integer, got 0") as refused:
        parse_pipeline({"input": {"paths": [SNLI_HARD], "batch_rows": 0}, "stages": ["audit"]})
    assert refused.value.code == "invalid-setting"
    for data, code in (({"input": {"paths": [SNLI_HARD], "preset": "snli", "map": {"text_a": "a"}}, "stages": ["audit"]},
                        "conflicting-settings"),   # a key the run does not know, or one that excludes another
                       ({"input": {"paths": [SNLI_HARD]}, "stages": ["audit"], "stage": []}, "unknown-setting"),
                       ({"input": {"paths": [SNLI_HARD]}}, "missing-setting"),
                       ({"input": {"paths": [SNLI_HARD]}, "stages": ["audit"], "engine": "spark"}, "invalid-setting")):
        with pytest.raises(ConfigError) as refused:
            parse_pipeline(data)
        assert refused.value.code == code, refused.value


def test_auto_prior_is_uniform_on_balanced_snli_and_empirical_on_sick_shares(tmp_path, sick_like):
    snli_dev = {"entailment": 3329, "neutral": 3235, "contradiction": 3278}
    assert choose_prior("auto", snli_dev).name == "uniform"
    assert choose_prior("auto", {"a": 60, "b": 40}).name == "uniform"      # 0.6 ≤ 1.5/2
    assert choose_prior("auto", {"a": 80, "b": 20}).name == "empirical"    # 0.2 < 1/(1.5·2)
    out = run_cli("audit", SNLI_DEV, "--preset", "snli", "--out", tmp_path / "snli").stdout
    assert "prior: uniform (auto: label shares 0.34–0.33 are within 1.5× of 1/3)" in out
    out = run_cli("audit", sick_like, "--preset", "sick", "--out", tmp_path / "sick").stdout
    expected = "empirical (auto: label shares 0.57–0.14 are not within 1.5× of 1/3)"
    assert f"prior: {expected}" in out
    summary = json.loads((tmp_path / "sick" / "report" / "summary.json").read_text())
    assert summary["prior"] == expected and summary["config"]["prior"] == "auto"
    assert summary["label_prior"]["neutral"] == {"share": 0.57, "p0": 0.57, "z": 0.0}
    assert expected in (tmp_path / "sick" / "report" / "report.html").read_text()


def test_imbalanced_corpus_ranks_content_words_and_shows_null_apart(tmp_path, sick_like):
    run_cli("audit", sick_like, "--preset", "sick", "--out", tmp_path / "auto")
    top = json.loads((tmp_path / "auto" / "report" / "topk.json").read_text())
    function_tokens = {"null", "a@premise", "a@hypothesis", ".@premise", ".@hypothesis"}
    assert not function_tokens & {e["feature"] for es in top.values() for e in es[:5]}
    assert "sleeping@hypothesis" in [e["feature"] for e in top["contradiction"][:3]]
    # under the uniform prior (the old default) the majority label's commonest tokens are over the threshold by the
    # label shares' drift from p0 alone (p̂(neutral|x) ≈ neutral's share): the label prior, not ranked as shortcuts,
    # as null is never ranked
    out = run_cli("audit", sick_like, "--preset", "sick", "--prior", "uniform", "--out", tmp_path / "uniform").stdout
    top = json.loads((tmp_path / "uniform" / "report" / "topk.json").read_text())
    assert not {".@premise", "a@premise"} & {e["feature"] for e in top["neutral"]}
    assert "null" not in {e["feature"] for es in top.values() for e in es}
    assert "label prior (the null feature, not ranked): contradiction 0.140 (z* -41.0)" in out


def test_zfilter_auto_prior_keeps_the_label_shares_of_an_imbalanced_corpus(tmp_path, sick_like):
    out = run_cli("zfilter", sick_like, "--preset", "sick", "--out", tmp_path / "z").stdout
    assert "prior empirical (auto: label shares 0.57–0.14" in out
    report = json.loads((tmp_path / "z" / "report" / "report.json").read_text())
    kept = report["kept_by_label"]
    assert kept["neutral"] / sum(kept.values()) > 0.45 and "null" not in report["top_rejecting_features"]


def test_upsample_names_the_top_tokens_its_band_and_stopwords_leave_out(tmp_path):
    out = run_cli("upsample", SNLI_DEV, SNLI_TEST, "--preset", "snli", "--out", tmp_path / "u").stdout
    report = json.loads((tmp_path / "u" / "report" / "report.json").read_text())
    why = {e["token"]: e["reason"] for e in report["left_out"]}
    assert why["outside@hypothesis"].startswith("n outside the band 40–393; 87 contradiction rows contain")
    assert why["for@hypothesis"].startswith("a stopword")
    assert report["band"] == [40, 393] and report["band_hint"] == "0.002,0.1072"
    assert "left out of the top 10 tokens by z*" in out
    assert "--band-min 0.002 --band-max 0.1072 would take in" in out
    lower, upper = report["band_hint"].split(",")
    run_cli("upsample", SNLI_DEV, SNLI_TEST, "--preset", "snli", "--band-min", lower, "--band-max", upper,
            "--out", tmp_path / "wider")
    wider = json.loads((tmp_path / "wider" / "report" / "report.json").read_text())
    assert "outside@hypothesis" in wider["tokens"] and wider["band_hint"] is None


def test_weights_warn_when_a_few_rows_carry_the_weight(tmp_path, sick_like):
    # SICK-like's rarest cell makes the largest weight depend on the forest's seed: most seeds give it about
    # 565× the mean (effective sample size ~255), a few about 157× (~1,100-1,400), for a forest grown row by
    # row as for one grown on cells; seed 1 is one of the many
    proc = run_cli("weights", "--input", f"all={sick_like}", "--preset", "sick", "--seed", 1, "--clip", "none",
                   "--out", tmp_path / "w")   # the paper's letter: no cap (the default caps at half the rows' ESS)
    warning = Corpus.open(str(tmp_path / "w" / "corpus")).manifest.body["weights"]["low_ess_warning"]
    assert warning["effective_sample_size"] < 1000 and warning["clip"] == 10
    assert warning["clipped_effective_sample_size"] > 1000
    assert f"warning: {warning['message']}" in proc.stderr and "--clip 10 gives" in warning["message"]
    clipped = run_cli("weights", "--input", f"all={sick_like}", "--preset", "sick", "--seed", 1, "--clip", "10",
                      "--out", tmp_path / "w10")
    assert "is under 10% of the" not in clipped.stderr   # no ESS warning (the verdict may warn about words)
    d = Corpus.open(str(tmp_path / "w10" / "corpus")).manifest.body["weights"]["diagnostics"]
    assert d["effective_sample_size"] == pytest.approx(warning["clipped_effective_sample_size"])   # what it said
    assert low_ess_warning(np.ones(100), None) is None


@pytest.mark.parametrize("flag, value", [("--batch-rows", "0"), ("--max-chars", "-1")])
def test_read_options_are_refused_before_any_reading(tmp_path, flag, value):
    proc = run_cli("convert", SNLI_HARD, "--preset", "snli", flag, value, "--out", tmp_path / "o", check=False)
    assert proc.returncode == 2 and f"must be a positive integer, got {value}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "o").exists()
