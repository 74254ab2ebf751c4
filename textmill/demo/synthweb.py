"""A small synthetic web for the demo, the tests and the benchmarks: seeded, generated English prose
pages plus the junk the corpus stages exist to remove (near-duplicate copies, other languages, mojibake,
short pages, blacklisted domains and extensions, broken links) and every server fault the scraper must
survive. `serve()` runs it on 127.0.0.1 (or on an address of a network namespace a test made); nothing here
reaches out to any address.
"""

from __future__ import annotations

import gzip
import random
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

DATA = Path(__file__).parent / "data"
NOVEL = DATA / "pride-and-prejudice.txt.gz"
OTHER_NOVEL = DATA / "emma-opening.txt.gz"

_DET = "the a this that every some one another each no".split()
_ADJ = (
    "quiet bright ancient modern careful sudden narrow broad gentle bitter distant familiar hidden "
    "local honest patient curious heavy simple rapid strange silent golden frozen crowded empty "
    "northern southern early late private public wooden painted grateful nervous steady"
).split()
_NOUN = (
    "river teacher village market engineer harbor garden council museum farmer library journey "
    "doctor bridge station festival kitchen painter island forest report window letter captain "
    "student mountain factory neighbor orchestra valley lighthouse merchant bakery committee "
    "gardener sailor clinic stadium newspaper mayor tunnel workshop hospital camera theater"
).split()
_VERB = (
    "opened visited described repaired followed discovered watched answered carried remembered "
    "praised questioned crossed measured painted recorded welcomed avoided finished explained "
    "noticed shared changed protected studied built"
).split()
_PREP = "near behind across beside under above through beyond around toward".split()
_ADV = "slowly quickly quietly carefully suddenly finally rarely often eventually gladly".split()
_CONJ = ["because", "although", "while", "after", "before", "since", "when", "until"]
_NAMES = "Alice Bruno Clara Daniel Elena Felix Grace Hugo Irene James Karen Louis Maria Nadia Oscar".split()

_FOREIGN = {
    "fr": (
        "le la les un une des et est dans pour avec sur que qui pas plus mais nous vous ils elles "
        "maison rivière village marché jardin ville travail famille école livre temps jour soir "
        "toujours jamais souvent beaucoup très petit grand nouveau ancien belle"
    ).split(),
    "de": (
        "der die das und ist nicht ein eine mit auf für von dem den zu sich auch nach wie aber "
        "Haus Fluss Dorf Markt Garten Stadt Arbeit Familie Schule Buch Zeit Tag Abend immer nie "
        "oft sehr klein groß neu alt schön heute morgen"
    ).split(),
    "es": (
        "el la los las un una y es en para con sobre que quien no más pero nosotros ellos casa "
        "río pueblo mercado jardín ciudad trabajo familia escuela libro tiempo día noche siempre "
        "nunca mucho muy pequeño grande nuevo antiguo hermosa"
    ).split(),
}


def sentence(rng: random.Random) -> str:
    """One English sentence from a small grammar: varied, function-word rich, langdetect-friendly."""
    subject = f"{rng.choice(_DET)} {rng.choice(_ADJ)} {rng.choice(_NOUN)}"
    if rng.random() < 0.2:
        subject = rng.choice(_NAMES)
    clause = f"{subject} {rng.choice(_VERB)} {rng.choice(_DET)} {rng.choice(_NOUN)} {rng.choice(_PREP)} the {rng.choice(_NOUN)}"
    if rng.random() < 0.5:
        clause += f" {rng.choice(_CONJ)} {rng.choice(_DET)} {rng.choice(_NOUN)} {rng.choice(_VERB)} it {rng.choice(_ADV)}"
    if rng.random() < 0.15:
        clause += f" in {rng.randint(1801, 2023)}"
    return clause[0].upper() + clause[1:] + rng.choice(".....!?")


def novel_paragraphs(path: Path = NOVEL) -> list[str]:
    """Jane Austen's Pride and Prejudice (1813, public domain; data/SOURCES.md), a paragraph a line, in order:
    real English for a web whose model is measured on real text, which the small grammar above is not. With
    OTHER_NOVEL: the first 300 paragraphs of her Emma (1815), text of the same kind that the web does not hold."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(sentence(rng) for _ in range(sentences))


def prose(rng: random.Random, paragraphs: int) -> list[str]:
    return [paragraph(rng, rng.randint(3, 7)) for _ in range(paragraphs)]


def foreign_paragraph(rng: random.Random, lang: str, words: int) -> str:
    vocab = _FOREIGN[lang]
    text = " ".join(rng.choice(vocab) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def html_page(title: str, paragraphs: list[str], lang: str = "en") -> str:
    body = "\n".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        f'<!DOCTYPE html>\n<html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title></head>\n'
        f"<body><nav><a href=\"/\">Home</a> | <a href=\"/about\">About</a></nav>\n"
        f"<article><h1>{title}</h1>\n{body}\n</article>\n<footer>Copyright the authors</footer></body></html>\n"
    )


def mutate(rng: random.Random, text: str, rate: float) -> str:
    """A near-duplicate: replace about `rate` of the words with other words."""
    words = text.split(" ")
    for i in range(len(words)):
        if rng.random() < rate:
            words[i] = rng.choice(_NOUN + _ADJ)
    return " ".join(words)


def corpus_documents(seed: int, documents: int, planted: tuple[str, ...] = ()) -> Iterator[dict]:
    """Extracted documents as the corpus stages read them (`id`, `url`, `text`), for the benchmarks: mostly
    articles, with what the stages exist to catch mixed in at fixed rates: near-duplicate and case-changed
    copies of earlier articles, boilerplate-repeating and list-like pages, too-short notes, other languages,
    and `planted` passages (evaluation texts) inside some articles."""
    rng = random.Random(seed)
    articles: list[str] = []
    for i in range(documents):
        roll = rng.random()
        if articles and roll < 0.08:
            kind, text = "near_duplicate", mutate(rng, rng.choice(articles), 0.02)
        elif articles and roll < 0.12:
            kind, text = "copy", rng.choice(articles).upper()
        elif roll < 0.17:
            boiler = f"Subscribe to the {rng.choice(_NOUN)} newsletter for more stories."
            paragraphs = prose(rng, rng.randint(2, 4))
            kind, text = "boilerplate", "\n".join([boiler] * rng.randint(4, 12) + paragraphs)
        elif roll < 0.21:
            kind, text = "list", "\n".join(f"- {rng.choice(_ADJ)} {rng.choice(_NOUN)}" for _ in range(rng.randint(20, 60)))
        elif roll < 0.24:
            kind, text = "short", sentence(rng)
        elif roll < 0.29:
            lang = ("fr", "de", "es")[i % 3]
            kind, text = lang, "\n\n".join(foreign_paragraph(rng, lang, rng.randint(40, 80)) for _ in range(rng.randint(3, 6)))
        else:
            paragraphs = prose(rng, rng.randint(3, 12))
            if planted and rng.random() < 0.05:
                paragraphs.insert(len(paragraphs) // 2, rng.choice(planted))
            kind, text = "article", "\n\n".join(paragraphs)
            articles.append(text)
        yield {"id": f"doc-{i}", "url": f"https://site{i % 97}.example.com/{kind}/{i}", "text": text}


@dataclass
class Page:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    location: str | None = None
    behaviour: str = "static"  # static | hang | drip


@dataclass
class SyntheticWeb:
    """Routes of the synthetic web and the URL list that points at them (and at junk)."""

    pages: dict[str, Page] = field(default_factory=dict)
    url_paths: list[str] = field(default_factory=list)  # paths on this server, in list order
    external_urls: list[str] = field(default_factory=list)  # blacklisted or malformed lines, never fetched
    kinds: dict[str, str] = field(default_factory=dict)  # path -> what it is (for ground truth)
    texts: dict[str, str] = field(default_factory=dict)  # path -> article text as generated


def build_web(
    seed: int = 1234,
    articles: int = 200,
    near_duplicates: int = 30,
    foreign: int = 15,
    mojibake: int = 10,
    short: int = 15,
    faults: bool = True,
    planted: tuple[str, ...] = (),
    real_paragraphs: list[str] | None = None,
) -> SyntheticWeb:
    """`planted` passages (say, evaluation texts) are appended as a paragraph to the first articles,
    one each, so decontamination has something to find. With `real_paragraphs` (say, `novel_paragraphs()`) the
    articles are those paragraphs cut in order into `articles` runs, instead of generated prose."""
    rng = random.Random(seed)
    web = SyntheticWeb()
    if real_paragraphs is not None and len(real_paragraphs) < articles:
        raise ValueError(f"{len(real_paragraphs)} real paragraphs cannot make {articles} articles")

    def add(path: str, page: Page, kind: str, listed: bool = True) -> None:
        web.pages[path] = page
        web.kinds[path] = kind
        if listed:
            web.url_paths.append(path)

    article_texts = []
    for i in range(articles):
        if real_paragraphs is None:
            paragraphs = prose(rng, rng.randint(4, 9))
        else:
            paragraphs = real_paragraphs[len(real_paragraphs) * i // articles: len(real_paragraphs) * (i + 1) // articles]
        if i < len(planted):
            paragraphs.insert(len(paragraphs) // 2, planted[i])
        title = f"{rng.choice(_ADJ).title()} {rng.choice(_NOUN).title()} {i}"
        web.texts[f"/article/{i}.html"] = "\n\n".join(paragraphs)
        article_texts.append((title, paragraphs))
        add(f"/article/{i}.html", Page(body=html_page(title, paragraphs).encode()), "article")
    for i in range(min(near_duplicates, articles)):
        title, paragraphs = article_texts[rng.randrange(articles)]
        copy = [mutate(rng, p, 0.01) for p in paragraphs]
        add(f"/mirror/{i}.html", Page(body=html_page(title, copy).encode()), "near_duplicate")
    for i in range(foreign):
        lang = ("fr", "de", "es")[i % 3]
        paragraphs = [foreign_paragraph(rng, lang, rng.randint(40, 80)) for _ in range(rng.randint(4, 8))]
        add(f"/{lang}/{i}.html", Page(body=html_page(f"Page {i}", paragraphs, lang).encode()), "foreign")
    for i in range(mojibake):
        paragraphs = [p.replace("The ", "The café’s ") for p in prose(rng, rng.randint(4, 8))]
        garbled = html_page(f"Café {i}", paragraphs).encode("utf-8").decode("cp1252", "replace").encode("utf-8")
        add(f"/mojibake/{i}.html", Page(body=garbled), "mojibake")
    for i in range(short):
        add(f"/short/{i}.html", Page(body=html_page(f"Note {i}", [sentence(rng)]).encode()), "short")

    if faults:
        add("/missing.html", Page(status=404, body=b"not found"), "fault")
        add("/error.html", Page(status=500, body=b"server error"), "fault")
        add("/hang.html", Page(behaviour="hang"), "fault")
        add("/drip.html", Page(behaviour="drip"), "fault")
        add("/huge.html", Page(body=html_page("Huge", prose(rng, 4) * 6000).encode()), "fault")
        add("/loop/a.html", Page(status=302, location="/loop/b.html"), "fault")
        add("/loop/b.html", Page(status=302, location="/loop/a.html"), "fault", listed=False)
        add("/redirect/0.html", Page(status=301, location="/article/0.html"), "redirect")
        add("/binary.html", Page(body=bytes(rng.randrange(256) for _ in range(20000))), "fault")
        add("/report.pdf.html", Page(body=b"%PDF-1.4 ...", content_type="application/pdf"), "fault")
        add("/empty.html", Page(body=b"<html><head><title>x</title></head><body></body></html>"), "fault")

    web.external_urls = [
        "https://www.youtube.com/watch?v=dQw4w9WgXcQ",
        "http://i.imgur.com/abc123.gifv",
        "https://en.wikipedia.org/wiki/Corpus",
        "https://news.example.org/photo.JPG",
        "https://files.example.org/archive.tar.gz?dl=1",
        "ftp://files.example.org/pub/data",
        "http://a.b",
        "not a url at all",
        "https://exa mple.com/space",
    ]
    return web


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        with self.server.lock:
            self.server.hits[path] = self.server.hits.get(path, 0) + 1
        if self.server.latency_s:
            time.sleep(self.server.latency_s)
        page = self.server.web.pages.get(path)
        if page is None:
            self._send(Page(status=404, body=b"no such page"))
        elif page.behaviour == "hang":
            self.server.stopping.wait(60)  # never answers within any sane deadline
        elif page.behaviour == "drip":
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            deadline = time.monotonic() + 60
            try:
                while time.monotonic() < deadline and not self.server.stopping.is_set():
                    self.wfile.write(b"5\r\n<p>x\n\r\n")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass  # the client gave up, as it should
        else:
            self._send(page)

    def _send(self, page: Page) -> None:
        self.send_response(page.status)
        self.send_header("Content-Type", page.content_type)
        if page.location:
            self.send_header("Location", page.location)
        self.send_header("Content-Length", str(len(page.body)))
        self.end_headers()
        try:
            self.wfile.write(page.body)
        except OSError:
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # socketserver's default backlog of 5 drops connections under load

    def __init__(self, web: SyntheticWeb, latency_s: float, port: int, host: str):
        super().__init__((host, port), _Handler)
        self.web = web
        self.latency_s = latency_s
        self.hits: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def handle_error(self, request, client_address) -> None:
        """A client that hangs up mid-request (a scraper's deadline, a connection pool closed) is normal for a web
        server: said nothing. Anything else is reported as socketserver reports it."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


@contextmanager
def serve(web: SyntheticWeb, latency_s: float = 0.0, port: int = 0, host: str = "127.0.0.1") -> Iterator[_Server]:
    """Serve `web` on `host` (127.0.0.1, or the address of a network namespace a test made) at `port` (0: a
    free one) in a background thread; `server.hits` counts requests."""
    server = _Server(web, latency_s, port, host)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()


def base_url(server: _Server) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}"


def url_list(web: SyntheticWeb, server: _Server, duplicates: int = 5) -> list[str]:
    """The URL list a user would feed the blacklist: every listed page, a few duplicate lines, a
    link to a closed port, and the external junk URLs."""
    base = base_url(server)
    urls = [base + p for p in web.url_paths]
    urls += urls[:duplicates]
    urls.append("http://127.0.0.1:9/closed-port.html")
    urls += web.external_urls
    random.Random(len(urls)).shuffle(urls)
    return urls
