"""The corpus stages, one module each (blacklist, scrape with extract, dedup, clean, shuffle, decontaminate),
their settings (`config`), over Parquet shards (`shards`, `documents`). Nothing in here imports Luigi."""
