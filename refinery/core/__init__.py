"""The core: pure functions and small estimators on Arrow tables, knowing nothing of Ray; it stands on
``refinery.io`` alone. Features and tokenization (``features``), compiled feature counting (``kernels``,
``vocabulary``, ``feature_counts``), exact, sketched and incremental counts (``exact_counts``,
``sketch_counts``, ``incremental_counts``; ``counts`` picks by mode), z-statistics (``stats``), corpus
profiles (``inspect``)."""
