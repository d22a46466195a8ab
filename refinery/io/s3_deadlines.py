"""S3 through s3fs with one deadline a call and every failure named: refinery's implementation of ``s3://`` and
``s3a://`` (``location.get_fs`` registers it with fsspec, so every reader reaches it: refinery's own code, Arrow's
datasets over fsspec, DuckDB's scans of those, Ray's reads).

Each call to the store (a listing, a read's request, a write, a removal), botocore's retries of it included, ends
within the I/O timeout (``store_failures.io_timeout``, ``--io-timeout``): a store that accepts and never answers fails
the run in that time, not in one timeout per attempt (issue 64: 3 × 60 s). A call that sends data may take a
second more per ``UPLOAD_RATE`` bytes, so that a large part on a slow link is not cut for its size; the body of a
read is bounded by botocore's read timeout, a silence of the I/O timeout, not by its size.

A store that let a call's deadline pass is not waited on again for the next I/O timeout: a call to the same
endpoint meanwhile fails at once, with the same reason (``SILENT``). A library that takes a failed call for an
answer (fsspec's ``isfile`` takes any error for "no"), the clean-up after the failure and a pipeline's report of it
then cost no further timeout each: a silent store ends the run within one I/O timeout and a few seconds. A failure
is never taken for a missing file (``_isfile``).

A failure leaves the store named, ``s3://BUCKET/KEY: OPERATION failed: REASON`` (``store_failures.StoreError``),
whatever carries it on: an ``on_store`` block, Arrow, DuckDB (which keeps only its text), a Ray task. A missing object
(``FileNotFoundError``) or one that exists where it must not (``FileExistsError``) is an answer, not a failure:
the callers look for them.
"""
from __future__ import annotations

import asyncio
import contextlib
import copy
import time

import s3fs
from fsspec.asyn import sync_wrapper
from s3fs.core import version_id_kw

from refinery.io import store_answers
from refinery.io.store_failures import io_timeout, store_error
from refinery.messages import Message, Setting

UPLOAD_RATE = 1 << 20   # bytes a second a call that sends data is given beyond the I/O timeout
# what each call does, in the words of an error line; a call not listed is named by its own words
OPERATIONS = {"get_object": "reading", "head_object": "looking up", "head_bucket": "looking up the bucket",
              "list_objects_v2": "listing", "list_objects": "listing", "put_object": "writing",
              "create_multipart_upload": "writing", "upload_part": "writing", "complete_multipart_upload": "writing",
              "abort_multipart_upload": "abandoning an upload of", "copy_object": "copying", "upload_part_copy":
              "copying", "delete_object": "removing", "delete_objects": "removing"}
ANSWERS = (FileNotFoundError, FileExistsError)   # what a store says of an object, raised as they are
SILENT: dict[str, tuple[float, str]] = {}   # endpoint → (until when it is not waited on, the reason)


class S3WithDeadlines(s3fs.S3FileSystem):
    """``s3fs.S3FileSystem`` whose calls each end within the I/O timeout, their failures named (module docstring)."""

    async def _call_s3(self, method, *akwarglist, **kwargs):
        """The store's answer to one call, within its deadline and named; a lookup already answered within the run
        is answered again from ``store_answers`` (a read's body kept: a ``KeptBody``)."""
        name = method if isinstance(method, str) else method.__name__
        request = store_answers.request(self._endpoint(), name, akwarglist, kwargs)
        kept = store_answers.kept(request)   # raises the FileNotFoundError it was
        if kept is not None:
            return _given_again(kept)
        store_answers.changed(name, kwargs)
        asked_at = store_answers.generation()
        try:
            answer = await self._asked(name, method, akwarglist, kwargs)
        except FileNotFoundError as e:
            store_answers.keep(request, e, asked_at)
            raise
        if name == "put_object":
            store_answers.written(self._endpoint(), kwargs)
        if request is None:
            return answer
        if "Body" in answer:
            if answer.get("ContentLength", store_answers.KEPT_BYTES + 1) > store_answers.KEPT_BYTES:
                return answer   # a shard's data: streamed, not kept
            answer = {**answer, "Body": await answer["Body"].read()}
        store_answers.keep(request, answer, asked_at)   # the caller gets a copy: s3fs changes the listings it is given
        return _given_again(answer)

    async def _asked(self, name: str, method, akwarglist, kwargs):
        """The store's own answer to one call (``_call_s3``)."""
        url = "s3://" + "/".join(str(p) for p in (kwargs.get("Bucket", ""), kwargs.get("Key", kwargs.get("Prefix")))
                                 if p)
        body = kwargs.get("Body")
        seconds = io_timeout() + (len(body) / UPLOAD_RATE if isinstance(body, (bytes, bytearray, memoryview)) else 0)
        async with _named(url, OPERATIONS.get(name, name.replace("_", " ")), seconds, self._endpoint()):
            answer = await super()._call_s3(method, *akwarglist, **kwargs)
        if isinstance(answer, dict) and "Body" in answer:   # a read's data, streamed after the call has answered
            answer["Body"] = NamedBody(answer["Body"], url)
        return answer

    call_s3 = sync_wrapper(_call_s3)   # what s3fs's files call to write a part: s3fs's own bypassed the above

    async def _isfile(self, path):
        """Whether ``path`` is a file, in one request (s3fs's own lists the prefix after a miss, to tell a folder); a
        store that fails to say raises its failure (fsspec's own takes any error for "no": Arrow's datasets then
        read a store that died as a missing file)."""
        bucket, key, version = self.split_path(path)
        if not key:
            return False
        if not version and store_answers.read_whole(self._endpoint(), bucket, key):
            return True
        try:
            await self._call_s3("head_object", Bucket=bucket, Key=key, **version_id_kw(version), **self.req_kw)
        except FileNotFoundError:
            return False
        return True

    async def _cat_file(self, path, version_id=None, start=None, end=None, chunksize=None, max_concurrency=None):
        """A whole file in one request (s3fs asks its size first, to read a large one in parallel: refinery reads
        whole only its records)."""
        whole = start is None and end is None and max_concurrency is None
        return await super()._cat_file(path, version_id, start, end, chunksize, 1 if whole else max_concurrency)

    def _endpoint(self) -> str:
        """The store this filesystem calls: its endpoint URL (AWS's own where none is given)."""
        return str(self.endpoint_url or self.client_kwargs.get("endpoint_url") or "aws")


def _given_again(answer: dict) -> dict:
    """A copy of a kept answer for its caller (s3fs changes the listings it is given), its body a ``KeptBody``."""
    again = copy.deepcopy(answer)
    if "Body" in again:
        again["Body"] = KeptBody(again["Body"])
    return again


class KeptBody:
    """A read's body kept within a run (``store_answers``), read again as the store's stream is."""

    def __init__(self, data: bytes):
        self._data, self._at = data, 0

    async def read(self, amount: int = -1) -> bytes:
        end = len(self._data) if amount is None or amount < 0 else self._at + amount
        chunk, self._at = self._data[self._at:end], min(end, len(self._data))
        return chunk

    def close(self) -> None:
        pass


class NamedBody:
    """The body of a read's answer whose failures name the object: its reads are bounded by botocore's read
    timeout (a silence of the I/O timeout), not by a deadline on the whole, which a large object on a slow
    link would miss."""

    def __init__(self, body, url: str):
        self._body, self._url = body, url

    async def read(self, *args, **kwargs):
        async with _named(self._url, "reading", None, None):
            return await self._body.read(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._body, name)


@contextlib.asynccontextmanager
async def _named(url: str, operation: str, seconds: float | None, endpoint: str | None):
    """The work inside ended within ``seconds`` (None: no deadline of its own), a failure raised as one named
    ``StoreError``; ``ANSWERS`` pass as they are. An ``endpoint`` that let a deadline pass is marked ``SILENT`` for
    the next I/O timeout, and the work inside a call to it meanwhile is not started."""
    until, reason = SILENT.get(endpoint, (0.0, ""))
    if time.monotonic() < until:
        raise store_error(url, operation, reason)
    deadline = asyncio.timeout(seconds)
    try:
        async with deadline:
            yield
    except ANSWERS:
        raise
    except TimeoutError as e:
        if not deadline.expired():
            raise store_error(url, operation, e) from e
        allowance = seconds - io_timeout()   # what a call that sends data is given for its size
        reason = str(Message(f"no answer within {io_timeout():g} s (", Setting("io_timeout"), ")", (
            f" and {allowance:.0f} s for the data it sent" if allowance >= 0.5 else "")))
        SILENT[endpoint] = (time.monotonic() + io_timeout(), reason)
        raise store_error(url, operation, reason) from e
    except Exception as e:  # noqa: BLE001 — any failure of the store or of the way to it, named
        raise store_error(url, operation, e) from e
