"""An example consumer pipeline: every event exactly once in a Parquet table, across crashes."""
