"""How a label is described in a prompt (generation's and RAZOR's): the words of the NLI and FEVER labels, and
``labelled 'X'`` for any other."""
from __future__ import annotations

LABEL_DESCRIPTIONS = {
    "entailment": "definitely true given the premise",
    "neutral": "possibly true given the premise, but not implied by it",
    "contradiction": "definitely false given the premise",
    "SUPPORTS": "supported by the evidence", "REFUTES": "refuted by the evidence",
}


def label_description(label: str) -> str:
    """The words a prompt describes ``label`` by."""
    return LABEL_DESCRIPTIONS.get(label, f"labelled '{label}'")
