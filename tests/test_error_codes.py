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


def test_what_a_newcomer_tried_is_refused_with_its_name_and_code(claims, tmp_path):
    """A missing model, an empty SQL file, JSON given where Parquet is read, a pipeline file that is a folder: one
    line naming the path, with its code (they said `2No such file or directory`, or ended with exit 1)."""
    (tmp_path / "empty.sql").write_text("-- nothing yet\n")
    for args, code, named in ((["confidence", SNLI_DEV, "--preset", "snli", "--model", tmp_path / "nosuch", "--out",
                                tmp_path / "c"], "model", "nosuch"),
                              (["sql", tmp_path / "empty.sql", SNLI_DEV, "--preset", "snli"], "invalid-setting",
                               "empty.sql"),
                              (["evaluate", "--predictions", claims], "bad-input", "claims.jsonl"),
                              (["run", tmp_path, "--out", tmp_path / "r"], "bad-input", str(tmp_path))):
        said = run_cli(*args, check=False)
        assert said.returncode == 2 and said.stderr.rstrip().endswith(f"[{code}]"), (args, said.stderr)
        assert named in said.stderr and len(said.stderr.strip().splitlines()) == 1, said.stderr


def test_python_refusals_are_refusals_whatever_else_they_are(claims, tmp_path):
    """An output folder of the user's, a finished output under mode='error', a missing file and broken pipeline YAML
    are each caught by ``except Refusal`` (and still by what they were: FileExistsError, FileNotFoundError)."""
    frame = pd.read_json(claims, lines=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    fever = {"text_a": "claim", "text_b": "evidence", "label": "verdict"}
    rf.audit(frame, map=fever, out=str(tmp_path / "done"))
    for call, code, kind in ((lambda: rf.audit(frame, map=fever, out=str(tmp_path / "mine")), "not-refinerys",
                              FileExistsError),
                             (lambda: rf.audit(frame, map=fever, out=str(tmp_path / "done"), mode="error"),
                              "output-exists", FileExistsError),
                             (lambda: rf.audit(str(tmp_path / "nosuch.jsonl"), preset="snli"), "bad-input",
                              FileNotFoundError),
                             (lambda: rf.run("stages: [audit\n"), "bad-input", Refusal)):
        with pytest.raises(Refusal) as refused:
            call()
        assert refused.value.code == code and isinstance(refused.value, kind), refused.value
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"
