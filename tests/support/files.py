"""Where the repository and the committed test data (tests/data, see its SOURCES.md) are, and small file writers."""

import json
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPOSITORY = TESTS.parent
TEST_DATA = TESTS / "data"
VOCAB, MERGES = TEST_DATA / "gpt2-vocab.json", TEST_DATA / "gpt2-merges.txt"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
