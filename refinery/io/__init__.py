"""The I/O layer: the canonical schema and column maps (``schema``), readers of raw files
(``readers``), finished corpora and their writer (``corpus``), local and object storage with atomic
publishing (``storage``), DuckDB over Parquet with the named queries in ``sql/`` (``queries``), and
the planted-bias synthetic corpus (``synth``). It imports nothing else from refinery."""
