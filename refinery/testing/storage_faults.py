"""A store that dies at its Nth call: counts the storage calls a run makes under a folder and, armed at call N, fails
that call and every one after it, as a killed process or a store that went away would leave things.

Local disk: Python's audit events (``sys.addaudithook``) of every write, rename, removal, folder made and listing
under the folder, and the ``renameat2`` exchange (its ``ctypes`` lookup, just before the call). S3: every call s3fs makes
(``S3FileSystem._call_s3``: each put, part upload, delete, copy and listing). Reads are not counted, and fail too
once the store is gone."""
from __future__ import annotations

import errno
import os
import sys

COUNTED_S3 = ("put_object", "upload_part", "create_multipart_upload", "complete_multipart_upload", "delete_object",
              "delete_objects", "copy_object", "list_objects_v2", "list_objects")
COUNTED_EVENTS = {"os.rename", "os.replace", "os.remove", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.listdir",
                  "os.scandir", "os.link", "os.symlink"}


class StoreGone(OSError):
    def __init__(self):
        super().__init__(errno.EIO, "injected fault: the store is gone")


class StorageFaults:
    """``count`` the calls under ``root``; with ``at`` set, call ``at`` and every one after it fail."""

    def __init__(self):
        self.root: str | None = None
        self.bucket: str | None = None
        self.at: int | None = None
        self.count = 0
        self.calls: list[str] = []
        self._hooked = False

    def watch(self, root: str, at: int | None = None) -> "StorageFaults":
        self.root, self.at, self.count, self.calls = root, at, 0, []
        if root.startswith("s3://"):
            self.bucket = root.removeprefix("s3://").split("/")[0]
            self._patch_s3()
        elif not self._hooked:
            sys.addaudithook(self._audit)
            self._hooked = True
        return self

    def stop(self) -> None:
        self.root = None

    @property
    def gone(self) -> bool:
        return self.at is not None and self.count >= self.at

    def _call(self, what: str, counted: bool) -> None:
        if counted:
            self.count += 1
            self.calls.append(what)
        if self.gone:
            raise StoreGone()

    # -- the local disk
    def _under(self, path) -> bool:
        try:
            text = os.fsdecode(path) if not isinstance(path, int) else ""
        except TypeError:
            return False
        return bool(text) and os.path.abspath(text).startswith(self.root)

    def _audit(self, event: str, args) -> None:
        if self.root is None or self.root.startswith("s3://"):
            return
        if event == "open":
            path, mode, flags = args
            if not self._under(path):
                return
            writes = any(c in mode for c in "wax+") if isinstance(mode, str) else \
                bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            self._call(f"open {os.fsdecode(path)}", writes)
        elif event == "ctypes.dlsym" and args[1] == "renameat2":   # the exchange of two folders, called next
            self._call("renameat2", True)
        elif event in COUNTED_EVENTS:
            if any(isinstance(p, (str, bytes, os.PathLike)) and self._under(p) for p in args[:2]):
                self._call(f"{event} {args[0]!r}", True)

    # -- S3
    def _patch_s3(self) -> None:
        import s3fs

        if getattr(s3fs.S3FileSystem._call_s3, "faults", None) is self:
            return
        original = s3fs.S3FileSystem._call_s3
        faults = self

        async def call_s3(fs, method, *akwarglist, **kwargs):
            name = method if isinstance(method, str) else getattr(method, "__name__", str(method))
            if faults.root is not None and kwargs.get("Bucket") == faults.bucket:
                faults._call(f"{name} {kwargs.get('Key', kwargs.get('Prefix', ''))}", name in COUNTED_S3)
            return await original(fs, method, *akwarglist, **kwargs)

        call_s3.faults = self
        s3fs.S3FileSystem._call_s3 = call_s3
