"""Progress of long work, on stderr: a tqdm bar on a terminal; where no terminal is attached (cron, CI, a
log file), a line every TEXTMILL_PROGRESS_S seconds (default 30) with what is done, the rate and, when
the total is known, the time left, so a long step is never silent."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Iterable, Iterator

from tqdm import tqdm

from textmill.errors import TextmillError

INTERVAL_VARIABLE = "TEXTMILL_PROGRESS_S"


class ProgressLines:
    """The part of tqdm's interface textmill uses (update, set_postfix_str, iteration, with), writing a
    line at most every `every` seconds instead of redrawing a bar."""

    def __init__(self, iterable: Iterable | None, total: int | None, desc: str, unit: str, unit_scale: bool,
                 initial: int, every: float):
        self.iterable, self.total, self.desc, self.unit, self.unit_scale = iterable, total, desc, unit, unit_scale
        self.n, self.start_n, self.every, self.postfix = initial, initial, every, ""
        self.started = self.last = time.monotonic()
        self.printed = False

    def amount(self, n: float) -> str:
        return f"{tqdm.format_sizeof(n)}{self.unit}" if self.unit_scale else f"{n:,.0f} {self.unit}"

    def line(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        rate = (self.n - self.start_n) / elapsed
        parts = [self.amount(self.n) + (f" of {self.amount(self.total)} ({self.n / self.total:.0%})" if self.total else ""),
                 f"{self.amount(rate)}/s"]
        if self.total and rate > 0:
            parts.append(f"about {tqdm.format_interval((self.total - self.n) / rate)} left")
        return f"{self.desc}: {', '.join(parts)}{f' ({self.postfix})' if self.postfix else ''} [{tqdm.format_interval(elapsed)}]"

    def update(self, n: float = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every:
            print(self.line(now), file=sys.stderr, flush=True)
            self.last, self.printed = now, True

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    @staticmethod
    def write(text: str) -> None:
        """A line of its own on stdout (as tqdm.write puts one above its bar)."""
        print(text, flush=True)

    def close(self) -> None:
        if self.printed:  # a long step ends with its last count, as a bar would
            print(self.line(time.monotonic()) + " done", file=sys.stderr, flush=True)
            self.printed = False

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_interval() -> float:
    """The seconds between progress lines (TEXTMILL_PROGRESS_S, default 30), or one error line naming a bad value:
    the commands ask before they start work, so the error does not come from a task."""
    try:
        return float(os.environ.get(INTERVAL_VARIABLE, "30"))
    except ValueError:
        raise TextmillError(f"{INTERVAL_VARIABLE} must be a number of seconds, not {os.environ[INTERVAL_VARIABLE]!r}") from None


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it",
             unit_scale: bool = False, initial: int = 0, leave: bool = True, enabled: bool = True):
    """A progress counter for `iterable` or for `update` calls: a bar on a terminal, lines elsewhere,
    nothing when not `enabled`."""
    if not enabled or sys.stderr.isatty():
        return tqdm(iterable, total=total, desc=desc, unit=unit, unit_scale=unit_scale, initial=initial, leave=leave,
                    disable=not enabled)
    every = progress_interval()
    if total is None and iterable is not None and hasattr(iterable, "__len__"):
        total = len(iterable)
    return ProgressLines(iterable, total, desc, unit, unit_scale, initial, every)


@contextlib.contextmanager
def ticking(counter, every: float = 5.0) -> Iterator:
    """`counter` (a progress) asked to show itself every `every` seconds from a thread while the block runs, so
    that a step that takes long between updates is not silent: a line every TEXTMILL_PROGRESS_S seconds still
    comes, a bar's clock still runs. The counter is closed at the end."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every):
            counter.update(0)

    thread = threading.Thread(target=tick, name="textmill-progress", daemon=True)
    thread.start()
    try:
        with counter:
            yield counter
    finally:
        stop.set()
        thread.join()


class _Noting:
    """A text stream that notes the time of each write (the rest of it is the stream's)."""

    def __init__(self, stream, written: list[float]):
        self._stream, self._written = stream, written

    def write(self, text: str) -> int:
        self._written[0] = time.monotonic()
        return self._stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def heartbeat(what: str, every: float = 10.0) -> Iterator[None]:
    """While the block runs, a line `what: still working (N s)` on stderr whenever this process wrote nothing to its
    stdout or stderr for `every` seconds: a command whose steps are each quiet for a while is never silent long."""
    written, started, stop = [time.monotonic()], time.monotonic(), threading.Event()
    outer = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Noting(sys.stdout, written), _Noting(sys.stderr, written)

    def beat() -> None:
        while not stop.wait(min(every, 1.0)):
            now = time.monotonic()
            if now - written[0] >= every:
                print(f"{what}: still working ({now - started:.0f} s)", file=sys.stderr, flush=True)

    thread = threading.Thread(target=beat, name="textmill-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sys.stdout, sys.stderr = outer
