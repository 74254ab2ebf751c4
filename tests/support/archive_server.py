"""A web archive served from 127.0.0.1 as Common Crawl serves one: WARC files answering HTTP range requests, and an
index server's API (pywb's `INDEX?url=URL&output=json`: JSON lines, 404 when there is no capture), built from a
CDXJ file. A test may script the index's next answers for a URL (an error status, a body that is not JSON)."""

import contextlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit


class _Handler(BaseHTTPRequestHandler):
    server: "ArchiveServer"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path == "/index":
            self.server.lookups += 1
            url = parse_qs(parts.query)["url"][0]
            if self.server.scripted.get(url):  # an answer the test set for this URL, once
                return self._send(*self.server.scripted[url].pop(0))
            found = [entry for entry in self.server.entries if entry["url"] == url]
            body = "".join(json.dumps(entry) + "\n" for entry in found).encode()
            return self._send(200 if found else 404, body or b"No Captures found for: " + url.encode())
        path = self.server.folder / parts.path.lstrip("/")
        if not path.is_file():
            return self._send(404, b"not found")
        data = path.read_bytes()
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if not match:
            return self._send(200, data)
        self.server.ranges += 1
        start, end = int(match[1]), int(match[2])
        self._send(206, data[start:end + 1], {"Content-Range": f"bytes {start}-{end}/{len(data)}"})

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        for key, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)


class ArchiveServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, folder: Path, index: Path):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.folder = folder
        self.entries = [{**json.loads(line.split(" ", 2)[2]), "urlkey": line.split(" ")[0],
                         "timestamp": line.split(" ")[1]} for line in index.read_text().splitlines()]
        self.lookups = self.ranges = 0
        # URL -> answers (status, body, headers) its next lookups get, in order, before the index's own
        self.scripted: dict[str, list[tuple[int, bytes, dict]]] = {}

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"


@contextlib.contextmanager
def serve_archive(folder: Path, index: Path):
    server = ArchiveServer(folder, index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
