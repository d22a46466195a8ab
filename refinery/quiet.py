"""Whether progress bars are drawn: ``refinery --quiet`` (``REFINERY_QUIET``, inherited by Ray workers and
subprocesses) turns refinery's off, and other libraries' bars follow refinery's. Apart from the bars themselves
(``refinery.progress``), so that a command's start does not load tqdm."""
from __future__ import annotations

import os
import sys

QUIET_ENV = "REFINERY_QUIET"   # set by ``refinery --quiet``; inherited by Ray workers and subprocesses


def quiet() -> bool:
    return os.environ.get(QUIET_ENV, "") not in ("", "0")


def set_quiet(value: bool = True) -> None:
    if value:
        os.environ[QUIET_ENV] = "1"
    else:
        os.environ.pop(QUIET_ENV, None)


# what other libraries' bars obey: transformers' ("Loading weights", "Writing model shards") and the Hugging Face
# Hub's downloads follow the first, read when they are imported (here, in Ray workers and subprocesses alike); a bare
# tqdm (transformers' "Converting and de-quantizing GGUF tensors") follows TQDM_DISABLE, a default that refinery's
# own bars (``refinery.progress``, which pass ``disable`` themselves) do not take
OTHER_BARS_OFF = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}


def quiet_other_bars() -> None:
    """Other libraries' progress bars are drawn only where refinery's are: on a terminal, not under ``--quiet``
    (in a pipe, a log file or a Ray worker they would print a line per update). Call before they load a model."""
    if not quiet() and sys.stderr.isatty():
        return
    os.environ.update(OTHER_BARS_OFF)
    if "transformers" in sys.modules:        # imported already: its switch was read
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
