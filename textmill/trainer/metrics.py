"""The trainer's metrics file: one JSON record per logged iteration, in the --save folder."""

from __future__ import annotations

import json
from pathlib import Path

METRICS = "metrics.jsonl"


def read_metrics(save: Path) -> list[dict]:
    """The records the trainer logged into `save` (none when it logged nothing there)."""
    path = Path(save) / METRICS
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
