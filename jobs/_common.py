"""Shared argument handling for Ray job entrypoints (each calls the Python API)."""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the working dir on a cluster


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("inputs", nargs="*")
    p.add_argument("--out", required=True)
    p.add_argument("--preset")
    p.add_argument("--map", dest="mapping")
    return p
