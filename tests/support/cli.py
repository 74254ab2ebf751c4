"""The real `textmill` entry point in a subprocess, the way a user runs it."""

import os
import subprocess
import sys


def run_cli(*args: str, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """`textmill ARGS...` with this environment (or `env`), its output captured."""
    return subprocess.run([sys.executable, "-m", "textmill.cli", *args], capture_output=True, text=True,
                          env={**(env or os.environ), "PYTHONUNBUFFERED": "1"}, timeout=timeout)
