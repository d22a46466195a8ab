"""Model backends on real data and real models: probes, MiniLM fine-tuning, SmolLM2 generation
(transformers, vLLM on CPU, an OpenAI-compatible server on 127.0.0.1), Ray Data stages, confidence filter."""
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import requests
from conftest import DATA, REFINERY, REPO, SNLI_DEV, SNLI_HARD, SNLI_TEST, run_cli

from refinery.io.corpus import Corpus, load
from refinery.io.schema import PRESETS
from refinery.models import registry
from refinery.models.generate import OpenAIGenerator, Sampling, TransformersGenerator

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def test_hypothesis_only_probe_learns_the_artifacts(tmp_path):
    run_cli("probe", "--inputs", "hypothesis", SNLI_DEV, "--eval", SNLI_TEST, "--eval", SNLI_HARD,
            "--preset", "snli", "--out", tmp_path / "probe", "--save-model", tmp_path / "model")
    report = json.loads((tmp_path / "probe" / "report.json").read_text())
    assert report["accuracy"] >= 0.50  # chance is 1/3
    assert report["eval"]["snli_test_hard"]["accuracy"] < report["accuracy"] - 0.2
    preds = pq.read_table(tmp_path / "probe" / "predictions.parquet")
    assert preds.num_rows == report["eval"]["snli_test"]["rows"] + report["eval"]["snli_test_hard"]["rows"]
    assert set(preds.column_names) >= {"id", "split", "label", "prediction", "p_label"}


def test_probe_reads_each_eval_through_its_own_preset_and_says_what_it_rejected(tmp_path):
    """HANS read through SNLI's preset lost half its rows without a word (accuracy 0.0001 on 15,000); two evals of
    one name overwrote each other; --mode skip kept a result whose eval file had changed."""
    hans = str(DATA / "hans" / "hans_regenerated.tsv")
    (tmp_path / "ev.jsonl").write_text("".join(open(SNLI_TEST).readlines()[:300]))
    args = ("probe", SNLI_HARD, "--preset", "snli", "--eval", hans, "--eval", f"hans={hans}:hans",
            "--eval", tmp_path / "ev.jsonl", "--out", tmp_path / "p", "--mode", "skip")
    proc = run_cli(*args)
    scores = json.loads((tmp_path / "p" / "report.json").read_text())["eval"]
    assert proc.stdout.startswith("rows in 3,261 = 3,261 trained on + 0 input rejects (ok)\n")
    assert scores["hans"]["rows"] == 30_000 and scores["hans"]["rejected"] == 0 and scores["hans"]["preset"] == "hans"
    assert scores["hans_regenerated"]["rows"] == scores["hans_regenerated"]["rejected"] == 15_000
    assert "evaluation corpus hans_regenerated is scored on 15,000 of its 30,000 rows" in proc.stderr
    assert f"give its preset: hans_regenerated={hans}:PRESET" in proc.stderr
    (tmp_path / "ev.jsonl").write_text("".join(open(SNLI_TEST).readlines()[:200]))   # an eval file changes
    again = run_cli(*args, check=False)
    assert again.returncode == 2 and "holds a result made from other inputs" in again.stderr, again.stdout
    assert again.stderr.rstrip().endswith("[output-exists]"), again.stderr
    refused = [run_cli("probe", SNLI_HARD, "--preset", "snli", *extra, "--out", tmp_path / "q", check=False)
               for extra in (("--eval", SNLI_TEST, "--eval", tmp_path / "snli_test.jsonl"),
                             ("--save-model", tmp_path / "q" / "model"))]
    assert [r.returncode for r in refused] == [2, 2] and not (tmp_path / "q").exists()
    assert "two evaluation corpora are named 'snli_test'" in refused[0].stderr and "overlap" in refused[1].stderr
    assert refused[0].stderr.rstrip().endswith("[invalid-setting]"), refused[0].stderr
    assert refused[1].stderr.rstrip().endswith("[output-overlaps-input]"), refused[1].stderr
    assert "--save-model" in refused[1].stderr and "--out" in refused[1].stderr


def test_probe_trains_on_the_train_split_and_its_printed_pipeline_reads_the_sets_alike(tmp_path):
    """An input of named splits trains on its train split, never its test split pooled in (SNLI-hard is drawn from
    SNLI test: pooled, the probe scored its own training rows); the rows of the others are counted apart. The verb's
    --print-config writes the command line's preset onto an evaluation set, which a pipeline reads without it, and
    the pipeline scores the same."""
    args = ("probe", "--input", f"train={SNLI_DEV}", "--input", f"test={SNLI_TEST}", "--preset", "snli",
            "--eval", f"hard={SNLI_HARD}")
    proc = run_cli(*args, "--out", tmp_path / "p")
    report = json.loads((tmp_path / "p" / "report.json").read_text())
    assert report["train_rows"] == 9_842 and report["other_splits_left_out"] == 9_824
    assert report["eval"]["hard"]["overlap_rows"] == 0
    leaked = run_cli("probe", SNLI_TEST, "--preset", "snli", "--eval", f"hard={SNLI_HARD}", "--out", tmp_path / "l")
    assert "evaluation corpus hard: 3,261 of its 3,261 rows are also training rows" in leaked.stderr
    assert json.loads((tmp_path / "l" / "report.json").read_text())["eval"]["hard"]["overlap_rows"] == 3_261
    assert proc.stdout.startswith("rows in 19,666 = 9,842 trained on + 9,824 other splits, not trained on + 0 input "
                                  "rejects (ok)\n")
    printed = run_cli(*args, "--out", tmp_path / "pipe", "--print-config").stdout
    assert f"hard={SNLI_HARD}:snli" in printed
    (tmp_path / "p.yaml").write_text(printed)
    run_cli("run", tmp_path / "p.yaml")
    piped = json.loads((tmp_path / "pipe" / "01-probe" / "report.json").read_text())
    assert piped["eval"]["hard"]["accuracy"] == report["eval"]["hard"]["accuracy"]


def test_confidence_filter_keeps_only_rows_above_tau(tmp_path):
    run_cli("probe", SNLI_DEV, "--preset", "snli", "--out", tmp_path / "p", "--save-model", tmp_path / "m")
    out = run_cli("confidence", SNLI_TEST, "--preset", "snli", "--model", tmp_path / "m", "--tau", "0.6",
                  "--out", tmp_path / "c").stdout
    assert "rows in 9,824 = " in out and "+ 0 input rejects (ok)" in out, out
    assert (tmp_path / "c" / "_SUCCESS").exists()
    kept = Corpus.open(str(tmp_path / "c" / "kept")).read()
    rejected = Corpus.open(str(tmp_path / "c" / "rejected")).read()
    assert kept.num_rows + rejected.num_rows == 9_824
    assert kept.num_rows > 100 and rejected.num_rows > 100
    assert min(kept["confidence"].to_pylist()) > 0.6 >= max(rejected["confidence"].to_pylist())
    assert all("tau 0.6" in r for r in rejected["reason"].to_pylist())
    hans = run_cli("confidence", DATA / "hans" / "hans_regenerated.tsv", "--preset", "hans", "--model", tmp_path / "m",
                   "--out", tmp_path / "h", check=False)   # its non-entailment rows would all score 0
    assert hans.returncode == 2 and not (tmp_path / "h").exists(), hans.stderr
    line = hans.stderr.splitlines()[-1]
    assert line.startswith(f"error: --model {tmp_path / 'm'} ") and line.endswith("[model]"), line
    assert "contradiction, entailment, neutral" in line and "'non-entailment' (15,000 rows)" in line, line
    assert "give a model trained on this corpus's labels" in line and "--map" in line, line


@pytest.fixture(scope="module")
def snli():
    dev, _ = load([SNLI_DEV], PRESETS["snli"])
    test, _ = load([SNLI_TEST], PRESETS["snli"])
    return dev, test


def test_minilm_classifier_fine_tunes_saves_and_runs_as_ray_stage(snli, tmp_path, ray_local):
    from refinery.models.base import load_classifier
    from refinery.models.actors import classify_table
    from refinery.models.transformer import TransformerClassifier

    dev, test = snli
    model = TransformerClassifier(epochs=1, max_length=64, batch_size=32).fit(dev.slice(0, 1_200))
    sample = test.slice(0, 600)
    proba = model.predict_proba(sample)
    accuracy = np.mean(np.array(model.classes_)[proba.argmax(1)] == np.array(sample["label"].to_pylist()))
    assert accuracy > 0.45, accuracy  # 1,200 rows, one epoch: well above chance (1/3)
    model.save(str(tmp_path / "minilm"))
    again = load_classifier(str(tmp_path / "minilm")).predict_proba(sample.slice(0, 64))
    np.testing.assert_allclose(again, proba[:64], atol=1e-5)
    staged = classify_table(sample.slice(0, 64), str(tmp_path / "minilm"), engine="ray", batch_size=16)
    assert staged["id"].equals(sample.slice(0, 64)["id"])
    np.testing.assert_allclose(np.array(staged["proba"].to_pylist()), proba[:64], atol=1e-5)


def test_registry_resolves_packaged_names_and_explains_missing_ones(monkeypatch):
    ref = registry.resolve("all-MiniLM-L6-v2")
    assert (Path(ref.path) / "model.safetensors").exists()
    smol = registry.resolve("SmolLM2-135M-Instruct")
    assert smol.gguf_file and (Path(smol.path) / smol.gguf_file).exists()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(registry.ModelNotFound, match="neither a local path nor a packaged model") as missing:
        registry.resolve("some-org/not-installed-model")
    assert missing.value.code == "model" and "some-org/not-installed-model" in str(missing.value)


def test_generator_fine_tuning_learns_the_target_only():
    gen = TransformersGenerator()
    prompt = "Label: b1 contradiction. Write the hypothesis."
    before = gen.generate([prompt], Sampling(temperature=0, max_new_tokens=8))[0][0]
    gen.fit([prompt] * 4, ["zebra lantern quietly"] * 4, epochs=4, lr=5e-4, batch_size=4)
    after = gen.generate([prompt], Sampling(temperature=0, max_new_tokens=8))[0][0]
    assert "zebra lantern" not in before and after.startswith("zebra lantern"), (before, after)


def test_lora_fine_tuning_trains_adapters_and_merges():
    gen = TransformersGenerator()
    gen._load()
    frozen = {n: p.detach().clone() for n, p in gen.model.named_parameters()}
    gen.fit(["Say the code."] * 4, ["violet harbor"] * 4, epochs=5, lr=3e-3, batch_size=2,
            lora={"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]})
    after = gen.generate(["Say the code."], Sampling(temperature=0, max_new_tokens=6))[0][0]
    assert after.startswith("violet harbor"), after
    changed = {n for n, p in gen.model.named_parameters() if not np.allclose(p.detach().numpy(), frozen[n].numpy())}
    assert changed and all("q_proj" in n or "v_proj" in n for n in changed)  # only the adapted projections


def test_label_conditioned_generation_local_and_ray_stage(tmp_path):
    args = ["generate", SNLI_TEST, "--preset", "snli", "--limit", "3", "--target-labels", "all",
            "--max-new-tokens", "12", "--batch-size", "3"]
    proc = run_cli(*args, "--out", tmp_path / "local")
    out = proc.stdout
    assert "rows in 9,824 = 3 prompted + 9,821 beyond limit + 0 input rejects (ok)" in out, out
    assert "de-quantizing" not in proc.stderr and "\r" not in proc.stderr + out, proc.stderr   # no bar in a pipe
    run_cli(*args, "--out", tmp_path / "ray", "--engine", "ray")
    local = Corpus.open(str(tmp_path / "local" / "corpus")).read()
    ray_rows = Corpus.open(str(tmp_path / "ray" / "corpus")).read()
    assert local.num_rows == 9 and set(local["label"].to_pylist()) == {"entailment", "neutral", "contradiction"}
    assert set(local["source"].to_pylist()) == {"generated"}
    assert all(t.strip() for t in local["text_b"].to_pylist())
    assert local.select(["id", "label", "origin_id"]).equals(ray_rows.select(["id", "label", "origin_id"]))
    assert local["text_b"].equals(ray_rows["text_b"])  # same seed, same batches: same samples


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    proc = subprocess.Popen([REFINERY, "serve", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if requests.get(f"{url}/health", timeout=1).ok:
                break
        except requests.ConnectionError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("refinery serve did not come up: " + proc.stderr.read().decode()[-2000:])
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_openai_backend_round_trips_with_a_local_server_and_caches(server, tmp_path):
    gen = OpenAIGenerator(f"{server}/v1", cache_dir=str(tmp_path / "cache"), concurrency=2)
    prompts = ["Write a sentence about a dog.", "Write a sentence about the sea."]
    texts = gen.generate(prompts, Sampling(max_new_tokens=16, n=2))
    assert [len(t) for t in texts] == [2, 2] and all(s for t in texts for s in t)
    assert len(list((tmp_path / "cache").glob("*.json"))) == 2
    offline = OpenAIGenerator("http://127.0.0.1:9/v1", cache_dir=str(tmp_path / "cache"), retries=0)
    assert offline.generate(prompts, Sampling(max_new_tokens=16, n=2)) == texts  # served from the cache
    with pytest.raises(Exception):
        offline.generate(["not cached"], Sampling(max_new_tokens=4))
    completions = OpenAIGenerator(f"{server}/v1", chat=False).generate(["The capital of France is"],
                                                                       Sampling(max_new_tokens=4))
    assert completions[0][0]


def test_generate_verb_through_openai_backend(server, tmp_path):
    run_cli("generate", SNLI_TEST, "--preset", "snli", "--limit", "2", "--backend", "openai", "--base-url",
            f"{server}/v1", "--out", tmp_path / "g", "--max-new-tokens", "16")
    rows = Corpus.open(str(tmp_path / "g" / "corpus")).read()
    assert rows.num_rows == 2 and all(rows["text_b"].to_pylist())


VLLM_PYTHON = os.environ.get("REFINERY_VLLM_PYTHON", str(REPO / ".venv-vllm" / "bin" / "python"))


def _vllm_available() -> str | None:
    if not Path(VLLM_PYTHON).exists():
        return f"no vLLM venv at {VLLM_PYTHON} (make .venv-vllm/.installed builds it)"
    proc = subprocess.run([VLLM_PYTHON, "-c", "import vllm"], capture_output=True, text=True)
    return None if proc.returncode == 0 else f"vllm does not import: {proc.stderr[-500:]}"


@pytest.mark.skipif(_vllm_available() is not None, reason=str(_vllm_available()))
def test_vllm_backend_runs_the_same_ray_data_stage(tmp_path):
    refinery = str(Path(VLLM_PYTHON).parent / "refinery")
    proc = subprocess.run([refinery, "generate", SNLI_TEST, "--preset", "snli", "--limit", "2", "--target-labels",
                           "all", "--backend", "vllm", "--engine", "ray", "--batch-size", "6", "--max-new-tokens",
                           "12", "--enforce-eager", "--out", str(tmp_path / "v")], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
                               "RAY_ADDRESS": ""}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = Corpus.open(str(tmp_path / "v" / "corpus")).read()
    assert rows.num_rows == 6 and set(rows["label"].to_pylist()) == {"entailment", "neutral", "contradiction"}
    assert all(t.strip() for t in rows["text_b"].to_pylist())
