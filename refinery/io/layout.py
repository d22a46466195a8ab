"""How a refinery corpus is cut into files: rows per Parquet shard and per row group (``corpus_writer`` writes
them; a verb's options show them without importing the writer)."""

DEFAULT_SHARD_ROWS = 250_000
ROW_GROUP_ROWS = 65_536   # the least a shard's row group holds (but the last)
