"""examples/quickstart.ipynb runs top to bottom in a real kernel, shows the audit inline, and the README's
Python API section is its first cells."""
import re

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO

NOTEBOOK = REPO / "examples" / "quickstart.ipynb"


@pytest.fixture(scope="module")
def executed():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "store the notebook without outputs"
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    return [c for c in nb.cells if c.cell_type == "code"]


def _result(cell, kind="text/plain") -> str:
    return next(o["data"][kind] for o in cell.outputs if o.output_type == "execute_result")


def test_the_quickstart_runs_and_its_figures_hold(executed):
    figures = eval(_result(executed[-1]))   # the final cell's dict, as the kernel printed it
    assert figures["rows"] == 9842 and 0 < figures["kept"] < figures["rows"]
    assert figures["max z* after"] < figures["threshold"] < figures["max z* before"]
    assert -1 < figures["gain on SNLI hard"] < 1


def test_the_audit_renders_inline_with_its_plot_and_top_features(executed):
    audit = next(c for c in executed if c.source.startswith("audit = rf.audit"))
    page = _result(audit, "text/html")
    assert "<svg" in page and "sleeping@hypothesis" in page and "nobody@hypothesis" in page
    assert _result(audit).startswith("<refinery audit: rows in 9,842 = 9,842 counted")


def test_the_readme_python_api_section_is_the_notebooks_first_cells():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Python API", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1).strip()
    cells = [c.source.strip() for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"]
    joined = ""
    for source in cells:
        joined = f"{joined}\n\n{source}".strip()
        if joined == block:
            return
    pytest.fail("the README's Python API block is not the notebook's first code cells, verbatim")
