"""Corpus stages as plain functions over Parquet shards. Nothing in here imports Luigi."""
