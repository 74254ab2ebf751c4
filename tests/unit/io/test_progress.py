"""Progress where no terminal is attached: a line per interval with the amount, the rate and the time left,
and a last line when the work is done."""

import re

import pytest

from textmill.errors import TextmillError
from textmill.io.progress import progress


def test_without_a_terminal_long_work_prints_lines_and_ends_with_done(monkeypatch, capsys):
    monkeypatch.setenv("TEXTMILL_PROGRESS_S", "0")
    assert sum(progress(range(4), desc="tokenize docs", unit="doc")) == 6
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 5 and all(line.startswith("tokenize docs: ") for line in lines)
    assert re.match(r"tokenize docs: 1 doc of 4 doc \(25%\), [\d,.]+ doc/s, about \S+ left \[\S+\]$", lines[0]), lines[0]
    assert lines[-1].endswith(" done") and "4 doc of 4 doc (100%)" in lines[-1]


def test_a_quiet_interval_prints_nothing_and_a_bad_one_is_an_error(monkeypatch, capsys):
    monkeypatch.setenv("TEXTMILL_PROGRESS_S", "3600")
    with progress(total=10, desc="scrape") as bar:
        bar.update(10)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("TEXTMILL_PROGRESS_S", "often")
    with pytest.raises(TextmillError, match="TEXTMILL_PROGRESS_S must be a number of seconds, not 'often'"):
        progress(total=1)


def test_a_step_long_between_updates_still_prints_its_lines(monkeypatch, capsys):
    """ticking: the counter shows itself from a thread, so one long task in a batch is not silent."""
    import time

    from textmill.io.progress import ticking

    monkeypatch.setenv("TEXTMILL_PROGRESS_S", "0.05")
    with ticking(progress(total=2, desc="4-clean tasks 0-1", unit="task"), every=0.01) as done:
        time.sleep(0.3)  # the first task, long, with no update
        done.update(2)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3 and lines[0].startswith("4-clean tasks 0-1: 0 task of 2 task (0%)"), lines
    assert lines[-1].endswith(" done") and "2 task of 2 task (100%)" in lines[-1]


def test_a_heartbeat_speaks_only_when_the_process_was_quiet(capsys):
    import sys
    import time

    from textmill.io.progress import heartbeat

    with heartbeat("demo", every=0.3):
        for _ in range(8):  # a line every 0.1 s: never quiet long enough
            print("working", file=sys.stderr)
            time.sleep(0.1)
        assert "still working" not in capsys.readouterr().err
        time.sleep(0.8)  # quiet: a beat at least every 0.3 s of it
    beats = [line for line in capsys.readouterr().err.splitlines() if line.startswith("demo: still working")]
    assert 2 <= len(beats) <= 3
    assert sys.stdout is sys.__stdout__ or not hasattr(sys.stdout, "_written")  # the streams are given back
