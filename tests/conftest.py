import json
import os
import sys
from pathlib import Path

import pytest

from textmill import synthweb

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def small_web():
    return synthweb.build_web(seed=7, articles=30, near_duplicates=4, foreign=3, mojibake=2, short=2)


@pytest.fixture()
def server(small_web):
    with synthweb.serve(small_web) as srv:
        yield srv


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run_cli(*args: str, cwd: Path | None = None):
    """Run the real `textmill` entry point in a subprocess (the way a user does)."""
    import subprocess

    return subprocess.run(
        [sys.executable, "-m", "textmill.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        timeout=600,
    )
