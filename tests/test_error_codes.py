"""Every refusal names its kind (docs/errors.md): the command line ends its one line with the code, Python gives it
as the exception's ``code``, and a refusal made in a Ray worker arrives with it."""
import json
import pickle

import pandas as pd
import pytest
from conftest import SNLI_DEV, run_cli

import refinery as rf
from refinery.io.corpus import AllRejected
from refinery.messages import CODES, Refusal, Setting


@pytest.fixture(scope="module")
def claims(tmp_path_factory):
    """SNLI dev's first 200 pairs under a fact-verification file's column names (no preset reads them)."""
    path = tmp_path_factory.mktemp("codes") / "claims.jsonl"
    with open(SNLI_DEV, encoding="utf-8") as fh, open(path, "w", encoding="utf-8") as out:
        for line in list(fh)[:200]:
            r = json.loads(line)
            out.write(json.dumps({"claim": r["sentence1"], "evidence": r["sentence2"], "verdict": r["gold_label"]})
                      + "\n")
    return path


def test_the_command_line_ends_a_refusal_with_its_code(claims, tmp_path):
    unmapped = run_cli("zfilter", claims, "--out", tmp_path / "z", check=False)
    assert unmapped.returncode == 2 and unmapped.stderr.strip().endswith("[missing-columns]"), unmapped.stderr
    assert "claim, evidence, verdict" in unmapped.stderr   # the words still name the file's columns
    wrong = run_cli("zfilter", SNLI_DEV, "--preset", "snli", "--k", "0", "--out", tmp_path / "z", check=False)
    assert wrong.returncode == 2 and wrong.stderr.strip().endswith("[invalid-setting]"), wrong.stderr
    onto = run_cli("zfilter", claims, "--preset", "fever", "--out", claims.parent, check=False)
    assert onto.returncode == 2 and onto.stderr.strip().endswith("[output-overlaps-input]"), onto.stderr
    assert not (tmp_path / "z").exists()


def test_a_command_line_spelled_wrong_ends_with_its_code_too(tmp_path):
    """click's usage errors (an option or verb that does not exist, a missing option, a value click refuses) end
    as every refusal's line does."""
    for args, code in ((["zfiltr", SNLI_DEV], "unknown-setting"),
                       (["zfilter", SNLI_DEV, "--kk", "3"], "unknown-setting"), (["compare"], "missing-setting"),
                       (["zfilter", SNLI_DEV, "--preset", "snl"], "invalid-setting"),
                       (["convert", SNLI_DEV, "--preset", "snli", "--batch-rows", "0"], "invalid-setting")):
        said = run_cli(*args, "--out", tmp_path / "o", check=False)
        assert said.returncode == 2 and said.stderr.rstrip().endswith(f"[{code}]"), (args, said.stderr)
    assert not (tmp_path / "o").exists()


def test_python_gives_the_code_on_the_exception(claims):
    frame = pd.read_json(claims, lines=True)
    with pytest.raises(Refusal) as unmapped:
        rf.zfilter(frame)
    assert unmapped.value.code == "missing-columns"
    with pytest.raises(Refusal) as wrong:
        rf.zfilter(frame, map={"text_a": "claim", "text_b": "evidence", "label": "verdict"}, k=0)
    assert wrong.value.code == "invalid-setting" and "k must be" in str(wrong.value)


def test_a_refusal_keeps_its_code_through_pickling_and_codes_are_checked():
    """A Ray task's refusal is pickled to the driver: its code and words come with it, a subclass's too."""
    made = pickle.loads(pickle.dumps(Refusal("give ", Setting("labels"), code="missing-setting")))
    assert made.code == "missing-setting" and str(made) == "give labels=…"
    rejected = pickle.loads(pickle.dumps(AllRejected(["a.jsonl"], __import__("collections").Counter({"x": 3}))))
    assert rejected.code == "all-rejected" and set(CODES) >= {made.code, rejected.code}
    with pytest.raises(TypeError):
        Refusal("no such kind", code="no-such-code")
