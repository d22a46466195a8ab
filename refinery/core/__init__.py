"""The core: pure functions and small estimators on Arrow tables, knowing nothing of Ray or files.
Features and tokenization (``features``), compiled feature counting (``feature_counts``), exact,
sketched and incremental counts (``counts``), z-statistics (``stats``), corpus profiles (``inspect``)."""
