"""The requests an S3 server answered, read from ``rclone serve s3 -vv``'s log (``test_remote.S3Server.start(log)``):
how many of each kind, the objects read (a GET of an object that is there afterwards: not a "no such key") and
the objects written. rclone logs no removal (a run removes an earlier run's files in one request per 1,000)."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REQUEST = re.compile(r"serve s3: (HEAD|GET|LIST|CREATE|DELETE|COPY|PUT|POST|INIT|UPLOAD|COMPLETE|ABORT)[A-Z]* ")
READ = re.compile(r"serve s3: GET OBJECT Bucket: (\S+) Object: (\S+)")
WRITTEN = re.compile(r"serve s3: CREATE OBJECT: (\S+) (\S+)")
SLACK = 10   # the output's claim, the pointers looked for above the input, the commit's listings


@dataclass(frozen=True)
class Requests:
    kinds: Counter
    read: int
    written: int

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    @property
    def bound(self) -> int:
        """What issue 66 allows a command: the files it reads and writes, and ``SLACK``."""
        return self.read + self.written + SLACK


def requests(log_text: str, root: Path) -> Requests:
    """The requests in ``log_text`` (a part of the log), the server serving the folder ``root``."""
    read = {(b, k) for b, k in READ.findall(log_text) if (root / b / k).is_file()}
    return Requests(Counter(REQUEST.findall(log_text)), len(read), len(set(WRITTEN.findall(log_text))))
