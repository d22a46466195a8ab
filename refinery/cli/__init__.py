"""The ``refinery`` command line: a thin layer over the Python API (``main``: the verbs;
``options``: the option groups they share)."""
