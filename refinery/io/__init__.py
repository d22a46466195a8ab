"""The I/O layer: the canonical schema and column maps (``schema``); what an input names and in which
format (``inputs``, ``splits``); raw files read into canonical batches (``readers``: JSON and JSONL, with
``delimited``, ``raw`` for Parquet and Arrow, ``lines``, ``canonical``, ``ids``); finished corpora and their
writer (``corpus``); local and object storage with atomic publishing (``storage``); DuckDB (``db``) and the
named queries of ``sql/`` over corpora (``queries``); spill runs (``spill``); the planted-bias synthetic
corpus (``synth``). It imports nothing else from refinery."""
