"""Where a call writes: its stage folder and a scratch folder for the Parquet of in-memory data, with the
scratch folder's lifetime tied to the results that read it."""
from __future__ import annotations

import contextlib
import os
import weakref

from refinery.io.location import join
from refinery.io.scratch import remove_folder, scratch_folder


class CallFolder:
    """``out`` when the caller gave one (in-memory input's Parquet in a scratch folder beside it), else
    ``NAME`` in a new scratch folder. The scratch folder is removed when the call fails, when no result needs
    it any more (the results hold their ``CallFolder``), and at the latest when the process exits."""

    def __init__(self, out: str | None, name: str):
        if out is None:
            self.scratch = scratch_folder(f"{name}-")
            self.out = join(self.scratch, name)
        else:
            self.scratch = scratch_folder(f"{name}-input-")
            self.out = os.fspath(out)
        self.remove = weakref.finalize(self, remove_folder, self.scratch)

    def keep_until_exit(self) -> None:
        """Keep the scratch folder until the process exits, whatever holds a result: its path was handed out (a
        refined corpus of files is ``result.data``, a path)."""
        _UNTIL_EXIT.append(self)

    @contextlib.contextmanager
    def removed_on_failure(self):
        """The scratch folder removed at once when the work inside fails, unless the error names rejects written
        there (every row rejected): they stay until the process exits, for the caller to read."""
        try:
            yield self
        except BaseException as e:
            if str(getattr(e, "rejects", None) or "").startswith(self.scratch):
                self.keep_until_exit()
            else:
                self.remove()
            raise


_UNTIL_EXIT: list[CallFolder] = []   # calls whose scratch folders are removed only when the process exits
