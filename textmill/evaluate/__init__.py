"""Scoring a trained model: LAMBADA last-word accuracy and perplexity as Megatron's tasks/zeroshot_gpt
scores them (`lambada`), and bits per byte of held-out text (`bits_per_byte`)."""

from pathlib import Path

# The held-out text every ablation is measured on: the first 500 passages of LAMBADA's test set (data/SOURCES.md).
LAMBADA_PASSAGES = Path(__file__).parent / "data" / "lambada_passages.jsonl"
