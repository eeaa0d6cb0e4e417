"""An example consumer pipeline: per-minute event counts by partition key, as Parquet."""
