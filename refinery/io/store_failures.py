"""What a store's failure is called: one line naming the URL and the operation (``StoreError``, made by
``store_error``), found again where a library kept only its text (``store_failure_in``); and the deadline of one
call to a store (``io_timeout``). ``location`` names every failure with these; ``s3_deadlines`` holds S3's calls to
the deadline.
"""
from __future__ import annotations

import collections
import errno
import os
import shutil

from refinery.messages import Refusal

IO_TIMEOUT = 60.0


def io_timeout() -> float:
    """Seconds a store may take to answer one call, its retries included: ``REFINERY_IO_TIMEOUT`` (set by
    ``--io-timeout``)."""
    value = os.environ.get("REFINERY_IO_TIMEOUT")
    try:
        timeout = float(value) if value else IO_TIMEOUT
    except ValueError:
        raise Refusal(f"REFINERY_IO_TIMEOUT={value!r} is not a number of seconds", code="invalid-setting") from None
    if timeout <= 0:
        raise Refusal(f"the I/O timeout must be a positive number of seconds, got {value}", code="invalid-setting")
    return timeout


# botocore's checksum settings: {Config keyword: environment variable}; refinery's default is "when_required"
CHECKSUM_SETTINGS = {"request_checksum_calculation": "AWS_REQUEST_CHECKSUM_CALCULATION",
                     "response_checksum_validation": "AWS_RESPONSE_CHECKSUM_VALIDATION"}


class StoreError(OSError):
    """A store's or a disk's failure, one line: ``URL: OPERATION failed: REASON`` (``store_error``)."""

    code = "storage"   # what kind of refusal (``messages.CODES``); ``errno`` is the system's code

    def __init__(self, url: str, operation: str, reason: str, code: int | None = None):
        super().__init__(f"{url}: {operation} failed: {reason}")
        self.url, self.operation, self.reason, self.errno = url, operation, reason, code

    def __reduce__(self):   # a Ray task's error crosses to the driver whole
        return StoreError, (self.url, self.operation, self.reason, self.errno)


_FAILURES: collections.deque = collections.deque(maxlen=16)   # the latest named failures (``store_failure_in``)


def store_error(url: str, operation: str, error: BaseException | str) -> StoreError:
    """One line naming what failed where: the URL, the operation, and the store's or the disk's answer (a full
    disk with the space left on it; of an error named already, its reason). Kept among the latest failures, for
    ``store_failure_in`` to find when a library hands on only its text."""
    text = error.reason if isinstance(error, StoreError) else " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, OSError) and error.errno == errno.ENOSPC and "://" not in url:
        probe = url
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe)
        free = shutil.disk_usage(probe or ".").free
        text = f"no space left on device ({free / 2**20:,.1f} MiB free there)"
    elif "checksum" in text.lower() and not isinstance(error, StoreError):
        text += (" (a store that does not support checksums: set " +
                 " and ".join(f"{variable}=when_required" for variable in CHECKSUM_SETTINGS.values()) + ")")
    failure = StoreError(url, operation, text, getattr(error, "errno", None))
    _FAILURES.append(failure)
    return failure


def store_failure_in(error: BaseException) -> StoreError | None:
    """The named store failure that ``error`` is or carries: itself or its cause (``raise … from``), or one whose
    line its text holds (DuckDB's error for an Arrow stream that failed, Arrow's for a Python file, keep only the
    text: ``reading the stream registered as '__shard_1' failed: IOError: s3://…: reading failed: …``); else None.
    An error raised while handling a store's failure is its own (``__context__`` is not followed)."""
    link, seen = error, set()
    while link is not None and id(link) not in seen:
        if isinstance(link, StoreError):
            return link
        seen.add(id(link))
        link = link.__cause__
    text = " ".join(str(error).split())
    return next((failure for failure in reversed(_FAILURES) if str(failure) in text), None)
