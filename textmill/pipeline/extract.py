"""Extraction of title and text from fetched HTML, with newspaper3k or trafilatura, under a hard deadline
per page.

An extractor can take minutes on a hostile page (a few MB of short paragraphs), so extraction runs in
worker processes that can be killed: `ExtractorPool` sends one page at a time to an idle worker and, when
the answer does not come within the deadline, kills that worker and starts a new one in its place. The
page is rejected as `extraction_timeout` and the stage goes on.
"""

from __future__ import annotations

import multiprocessing
import queue
from multiprocessing.connection import Connection


def extract(url: str, html: str, extractor: str = "newspaper") -> tuple[str, str]:
    """(title, text) of a page, from HTML we fetched and decoded ourselves, by newspaper3k (never its
    downloader, never its `nlp()`) or trafilatura (main text without comments; tables kept)."""
    if extractor == "trafilatura":
        return extract_trafilatura(url, html)
    from newspaper import Article, Config

    config = Config()
    config.fetch_images = False
    config.memoize_articles = False
    article = Article(url, config=config)
    article.download(input_html=html)
    article.parse()
    return article.title or "", article.text or ""


def extract_trafilatura(url: str, html: str) -> tuple[str, str]:
    import trafilatura

    document = trafilatura.bare_extraction(html, url=url, with_metadata=True, include_comments=False)
    if document is None:
        return "", ""
    # a blank line between paragraphs, as newspaper3k gives them (and OpenWebText has them)
    return document.title or "", "\n\n".join(line for line in (document.text or "").split("\n") if line.strip())


def failure_text(exc: Exception) -> str:
    """What failed, for a reject reason: the exception's name and the start of its message, on one line."""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message[:120]}" if message else type(exc).__name__


def _serve(conn: Connection) -> None:
    """A worker: extract each (url, html, extractor) it is sent and send back ("ok", (title, text)) or
    ("error", what)."""
    while True:
        try:
            url, html, extractor = conn.recv()
        except EOFError:  # the pool closed its end
            return
        try:
            conn.send(("ok", extract(url, html, extractor)))
        except Exception as exc:  # a page the extractor cannot parse is the page's fault
            conn.send(("error", failure_text(exc)))


class ExtractionTimeout(Exception):
    """The page was not extracted within the deadline; its worker was replaced."""


class ExtractionFailed(Exception):
    """The extractor raised on the page (the message says what it raised), or the worker died."""


class ExtractorPool:
    """`workers` processes running the extractors; `extract()` is blocking and thread-safe (the scraper calls it
    from asyncio's thread pool) and gives each page at most `timeout_s` seconds of a worker's time."""

    def __init__(self, workers: int, timeout_s: float):
        self._context = multiprocessing.get_context("spawn")  # no fork of a threaded event loop
        self.timeout_s = timeout_s
        self._idle: queue.Queue = queue.Queue()
        self._all = [self._start() for _ in range(workers)]
        for worker in self._all:
            self._idle.put(worker)

    def _start(self):
        ours, theirs = self._context.Pipe()
        process = self._context.Process(target=_serve, args=(theirs,), daemon=True, name="textmill-extract")
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

    def extract(self, url: str, html: str, extractor: str = "newspaper") -> tuple[str, str]:
        """(title, text); raises ExtractionTimeout past the deadline, ExtractionFailed otherwise."""
        worker = self._idle.get()
        try:
            _, conn = worker
            try:
                conn.send((url, html, extractor))
                answered = conn.poll(self.timeout_s)
                status, value = conn.recv() if answered else (None, None)
            except (EOFError, OSError):  # the worker died (a crash in a C extension, say)
                worker = self._replace(worker)
                raise ExtractionFailed("WorkerDied") from None
            if not answered:
                worker = self._replace(worker)
                raise ExtractionTimeout(f"no answer within {self.timeout_s:g}s")
            if status == "error":
                raise ExtractionFailed(value)
            return value
        finally:
            self._idle.put(worker)

    def close(self) -> None:
        for process, conn in self._all:
            conn.close()  # the worker sees EOF and returns
        for process, _ in self._all:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
