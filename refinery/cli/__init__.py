"""The ``refinery`` command line: a thin layer over the Python API (``main``: the verbs;
``options``: the option groups they share)."""
import os

# OpenBLAS (numpy's, and scipy's once numba loads it) starts a thread per core that spins for 2**28 cycles
# before it first sleeps: ~0.1 CPU-second a library, taken from the reading of every command on a small
# machine. 2**4 cycles lets them sleep at once (BLAS calls still use every core). Read when the library
# loads, so it is set here, before numpy is imported; a value the user set is kept.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
