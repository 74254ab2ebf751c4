"""Extraction of title and text from fetched HTML, with newspaper3k or trafilatura, under a limit per page.

An extractor can take minutes on a hostile page (a few MB of short paragraphs), so extraction runs in worker
processes: `ExtractorPool` sends one page at a time to an idle worker. The limit is CPU time, counted by the
worker itself (the kernel's profiling timer): a busy machine stretches a page's wall time, not its CPU time,
so which pages are kept does not depend on the load. A page over it is rejected as `extraction_timeout` and
the worker goes on with the next (no new process, no imports paid again). A page that holds a worker in code
the timer cannot interrupt (a C extension that never returns) is cut off by a wall-clock backstop,
WALL_BACKSTOP times the limit: that worker is killed and replaced.
"""

from __future__ import annotations

import multiprocessing
import queue
import signal
from multiprocessing.connection import Connection

WALL_BACKSTOP = 20  # wall seconds per CPU second of the limit before a silent worker is killed


def extract(url: str, html: str, extractor: str) -> tuple[str, str]:
    """(title, text) of a page, from HTML we fetched and decoded ourselves, by newspaper3k (never its
    downloader, never its `nlp()`) or trafilatura (main text without comments; tables kept)."""
    if extractor == "trafilatura":
        return extract_trafilatura(url, html)
    from newspaper import Article, Config  # the megatron-fidelity extra

    config = Config()
    config.fetch_images = False
    config.memoize_articles = False
    article = Article(url, config=config)
    article.download(input_html=html)
    article.parse()
    return article.title or "", article.text or ""


def extract_trafilatura(url: str, html: str) -> tuple[str, str]:
    import trafilatura
    from trafilatura.utils import load_html

    tree = load_html(html)
    if tree is None:
        return "", ""
    title = page_title(tree)  # read before the extraction prunes the tree, as its own metadata step reads it
    document = trafilatura.bare_extraction(tree, url=url, with_metadata=False, include_comments=False)
    if document is None:
        return "", ""
    # a blank line between paragraphs, as newspaper3k gives them (and OpenWebText has them)
    return title or "", "\n\n".join(line for line in (document.text or "").split("\n") if line.strip())


def page_title(tree) -> str | None:
    """The title trafilatura's metadata step finds (meta tags, then JSON-LD, then the page's title and headings),
    without the rest of that step: its date search alone (htmldate) took a third of each page's extraction, for a
    date textmill does not keep. The same titles and texts as with_metadata=True on the 291 real pages of
    tests/data/extraction-pages (tests/unit/pipeline/test_extract.py)."""
    from trafilatura.metadata import examine_meta, extract_meta_json, extract_title
    from trafilatura.settings import Document

    found = examine_meta(tree)
    try:
        found = extract_meta_json(tree, found)
    except Exception:  # trafilatura's own step logs and goes on: a page's broken JSON-LD is not its failure
        pass
    trimmed = Document()
    trimmed.title = found.title or extract_title(tree)
    trimmed.clean_and_trim()
    return trimmed.title


def failure_text(exc: Exception) -> str:
    """What failed, for a reject reason: the exception's name and the start of its message, on one line."""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message[:120]}" if message else type(exc).__name__


class CpuLimitReached(BaseException):
    """Raised in a worker by its profiling timer; a BaseException, so an extractor's `except Exception` does not
    swallow it."""


def _limit_reached(signum, frame) -> None:
    raise CpuLimitReached


def _serve(conn: Connection, cpu_s: float) -> None:
    """A worker: extract each (url, html, extractor) it is sent within `cpu_s` seconds of its CPU time and send
    back ("ok", (title, text)), ("timeout", None) or ("error", what). Ctrl-C and the pool's end are its parent's
    to report: it leaves quietly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGPROF, _limit_reached)
    while True:
        try:
            url, html, extractor = conn.recv()
        except (EOFError, OSError):  # the pool closed its end, or its process ended
            return
        try:
            # Again each CPU second after the first, should an extractor catch even a BaseException.
            signal.setitimer(signal.ITIMER_PROF, cpu_s, 1.0)
            try:
                answer = ("ok", extract(url, html, extractor))
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
        except CpuLimitReached:
            answer = ("timeout", None)
        except Exception as exc:  # a page the extractor cannot parse is the page's fault
            answer = ("error", failure_text(exc))
        try:
            conn.send(answer)
        except OSError:  # BrokenPipeError, ConnectionResetError: the pool is gone
            return


class ExtractionTimeout(Exception):
    """The page was not extracted within the deadline; its worker was replaced."""


class ExtractionFailed(Exception):
    """The extractor raised on the page (the message says what it raised), or the worker died."""


class ExtractorPool:
    """`workers` processes running the extractors; `extract()` is blocking and thread-safe (the scraper calls it
    from asyncio's thread pool) and gives each page at most `timeout_s` seconds of a worker's CPU time."""

    def __init__(self, workers: int, timeout_s: float):
        self._context = multiprocessing.get_context("spawn")  # no fork of a threaded event loop
        self.timeout_s = timeout_s
        self._idle: queue.Queue = queue.Queue()
        self._all = [self._start() for _ in range(workers)]
        for worker in self._all:
            self._idle.put(worker)

    def _start(self):
        ours, theirs = self._context.Pipe()
        process = self._context.Process(target=_serve, args=(theirs, self.timeout_s), daemon=True,
                                        name="textmill-extract")
        process.start()
        theirs.close()
        return process, ours

    def _replace(self, worker):
        process, conn = worker
        process.kill()
        process.join()
        conn.close()
        fresh = self._start()
        self._all[self._all.index(worker)] = fresh
        return fresh

    def extract(self, url: str, html: str, extractor: str) -> tuple[str, str]:
        """(title, text); raises ExtractionTimeout past the deadline, ExtractionFailed otherwise."""
        worker = self._idle.get()
        try:
            _, conn = worker
            try:
                conn.send((url, html, extractor))
                answered = conn.poll(WALL_BACKSTOP * self.timeout_s)
                status, value = conn.recv() if answered else (None, None)
            except (EOFError, OSError):  # the worker died (a crash in a C extension, say)
                worker = self._replace(worker)
                raise ExtractionFailed("WorkerDied") from None
            if not answered:
                worker = self._replace(worker)
                raise ExtractionTimeout(f"no answer within {WALL_BACKSTOP * self.timeout_s:g}s of wall time")
            if status == "timeout":
                raise ExtractionTimeout(f"more than {self.timeout_s:g}s of CPU time")
            if status == "error":
                raise ExtractionFailed(value)
            return value
        finally:
            self._idle.put(worker)

    def close(self) -> None:
        for _, conn in self._all:
            conn.close()  # the worker sees EOF and returns
        for process, _ in self._all:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
