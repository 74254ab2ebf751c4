"""One scrape worker against a simulated web shaped like the real one, at several settings.

    python benchmarks/bench_scrape_web.py [--urls 2000] [--hosts 128] [--settings "" "concurrency=64" ...] [--hog 4]

The web: `--hosts` sites on 127.0.0.1, 127.0.0.2, ... (one port, served by aiohttp in a process of its own);
the list's URLs fall on the hosts by a Zipf law (a few hosts hold most of them, as in a Reddit-sourced list).
What a URL does is a function of its path alone (a hash), so every run and every setting meet the same web:
an answer after a latency drawn from a lognormal law (median 0.3 s, cut at 10 s); of the URLs, 5% never
answer (the connection is accepted, nothing is sent), 1.5% answer 500, 1.5% answer 503 with Retry-After: 1
the first time and the page after, 5% redirect once, 1% are pages of 1 to 5 MiB, 1% drip their page at
2 KiB a second, the others are article pages of 2 to 10 KiB of English prose. Every host serves a robots.txt.
(https is not simulated: the scraper verifies certificates, and a self-signed one is not trusted.)

For each setting (`name=value,...` of [scrape], on top of allow_private_addresses), one `scrape_shard` in a
fresh process, as a worker runs it, prints: URLs per second; CPU seconds per URL in the worker's process
(event loop, decoding, Parquet) and in its extraction processes; the slot time by outcome (the seconds URLs of
each outcome held a fetch slot, retries and waits included, and the longest); the largest process's memory;
and what was kept. A busy spell of the shared machine shows in URLs/s, much less in CPU per URL. With --hog N,
the first setting runs again beside N processes that only burn CPU, and the kept pages of the two runs are
compared (the goal: the same pages).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import platform
import random
import subprocess
import sys
import tempfile
from pathlib import Path

NEVER, ERROR, BUSY_ONCE, REDIRECT, LARGE, DRIP = 0.05, 0.065, 0.08, 0.13, 0.14, 0.15  # cumulative shares


def uniform(path: str, salt: str) -> float:
    digest = hashlib.blake2b(f"{salt}:{path}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def behaviour(path: str) -> str:
    u = uniform(path, "kind")
    for kind, upto in (("never", NEVER), ("error", ERROR), ("busy_once", BUSY_ONCE), ("redirect", REDIRECT),
                       ("large", LARGE), ("drip", DRIP)):
        if u < upto:
            return kind
    return "page"


def latency(path: str) -> float:
    import math
    from statistics import NormalDist

    z = NormalDist().inv_cdf(min(max(uniform(path, "latency"), 1e-9), 1 - 1e-9))
    return min(0.3 * math.exp(1.1 * z), 10.0)


def serve(hosts: int, ready) -> None:
    """The simulated web, until killed; sends its port through `ready`."""
    import asyncio

    from aiohttp import web

    from textmill.demo import synthweb

    rng = random.Random(0)
    pages = [synthweb.html_page(f"Article {n}", synthweb.prose(rng, rng.randint(3, 14))).encode() for n in range(64)]
    big_paragraphs = "".join(f"<p>{synthweb.paragraph(rng, 6)}</p>" for _ in range(40))
    answered_busy: set[str] = set()

    async def handle(request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow: /private/\n")
        page_path = path.removesuffix("/moved")
        kind = behaviour(page_path)
        await asyncio.sleep(latency(path))
        if kind == "never":
            await asyncio.Event().wait()
        if kind == "error":
            return web.Response(status=500, text="error")
        if kind == "busy_once" and page_path not in answered_busy:
            answered_busy.add(page_path)
            return web.Response(status=503, headers={"Retry-After": "1"}, text="busy")
        if kind == "redirect" and not path.endswith("/moved"):
            raise web.HTTPFound(path + "/moved")
        body = pages[int(uniform(page_path, "page") * len(pages))]
        if kind == "large":
            size = int((1 + 4 * uniform(page_path, "size")) * 2**20)
            body = (b"<html><head><title>Long</title></head><body>" + big_paragraphs.encode() * (size // len(big_paragraphs))
                    + b"</body></html>")
        if kind == "drip":
            response = web.StreamResponse(headers={"Content-Type": "text/html"})
            await response.prepare(request)
            for start in range(0, len(body), 2048):
                await response.write(body[start:start + 2048])
                await asyncio.sleep(1.0)
            await response.write_eof()
            return response
        return web.Response(body=body, content_type="text/html")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        first = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
        await first.start()
        port = first._server.sockets[0].getsockname()[1]
        for h in range(2, hosts + 1):
            await web.TCPSite(runner, f"127.0.0.{h}", port, backlog=4096).start()
        ready.send(port)
        await asyncio.Event().wait()

    asyncio.run(main())


WORKER = r"""
import json, resource, sys, time
from pathlib import Path
import pyarrow as pa
import pyarrow.parquet as pq
from textmill.pipeline.scrape import ScrapeConfig, scrape_shard
from textmill.pipeline.shards import URL_SCHEMA, rejects_path, write_table

shard, out, settings = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
cfg = ScrapeConfig(allow_private_addresses=True, **settings)
started = time.perf_counter()
manifest = scrape_shard(shard, out, cfg)
seconds = time.perf_counter() - started
me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
rows = pq.read_table(out, columns=["id", "elapsed_s"]).to_pylist()
rejected = pq.read_table(rejects_path(out), columns=["elapsed_s", "reason"]).to_pylist()
print(json.dumps({"seconds": seconds, "main_cpu": me.ru_utime + me.ru_stime,
                  "extract_cpu": children.ru_utime + children.ru_stime,
                  "rss_mb": max(me.ru_maxrss, children.ru_maxrss) // 1024, "kept": manifest["counts"]["kept"],
                  "kept_ids": sorted(r["id"] for r in rows),
                  "slots": [["kept", r["elapsed_s"]] for r in rows] +
                           [[r["reason"].split("=")[0], r["elapsed_s"]] for r in rejected]}))
"""


def url_list(urls: int, hosts: int, port: int) -> list[str]:
    rng = random.Random(1)
    weights = [1 / (rank + 1) ** 0.9 for rank in range(hosts)]
    return [f"http://127.0.0.{rng.choices(range(hosts), weights)[0] + 1}:{port}/p/{n}" for n in range(urls)]


def parsed(setting: str) -> dict:
    from textmill.pipeline.stage_configs import ScrapeConfig

    types = {f: type(getattr(ScrapeConfig(), f)) for f in ScrapeConfig.__dataclass_fields__}
    pairs = [item.split("=", 1) for item in setting.split(",") if item]
    return {name: types[name](value) for name, value in pairs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, default=2000, help="URLs in the worker's unit")
    parser.add_argument("--hosts", type=int, default=128, help="sites, on 127.0.0.1 to 127.0.0.N")
    parser.add_argument("--settings", nargs="+", default=[""], help="[scrape] settings per run, name=value,... "
                        "('' for the defaults)")
    parser.add_argument("--hog", type=int, default=0, metavar="N",
                        help="run the first setting again beside N CPU-burning processes and compare what is kept")
    args = parser.parse_args()
    import pyarrow as pa

    from textmill.pipeline.shards import URL_SCHEMA, write_table

    print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}, "
          f"{multiprocessing.cpu_count()} cores; {args.urls} URLs on {args.hosts} hosts\n")
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    web = context.Process(target=serve, args=(args.hosts, sender), daemon=True)
    web.start()
    port = receiver.recv()
    urls = url_list(args.urls, args.hosts, port)
    kinds: dict[str, int] = {}
    for url in urls:
        kinds[behaviour(url.split(str(port), 1)[1])] = kinds.get(behaviour(url.split(str(port), 1)[1]), 0) + 1
    print("the web: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + "\n")
    print("| settings | URLs/s | main CPU-s per URL | extraction CPU-s per URL | slot s by outcome (total / longest) "
          "| peak RSS MB | kept |\n|---|---:|---:|---:|---|---:|---:|")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            shard = Path(tmp) / "urls.parquet"
            write_table(pa.Table.from_pylist([{"id": f"u{n}", "url": u, "source": f"bench:{n}"}
                                              for n, u in enumerate(urls)], schema=URL_SCHEMA), shard)
            runs = [(setting, 0) for setting in args.settings] + ([(args.settings[0], args.hog)] if args.hog else [])
            kept: dict[int, list[str]] = {}
            for n, (setting, hogs) in enumerate(runs):
                out = Path(tmp) / f"run-{n}" / "urls.parquet"
                burning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
                try:
                    done = subprocess.run([sys.executable, "-c", WORKER, str(shard), str(out),
                                           json.dumps(parsed(setting))], capture_output=True, text=True)
                finally:
                    for hog in burning:
                        hog.kill()
                label = (setting or "defaults") + (f", beside {hogs} CPU hogs" if hogs else "")
                if done.returncode:
                    print(f"| {label} | failed: {done.stderr.strip().splitlines()[-1]} |", flush=True)
                    continue
                r = json.loads(done.stdout.strip().splitlines()[-1])
                kept[hogs] = r["kept_ids"]
                slots: dict[str, list[float]] = {}
                for outcome, seconds in r["slots"]:
                    slots.setdefault(outcome, []).append(seconds or 0.0)
                busiest = sorted(slots.items(), key=lambda kv: -sum(kv[1]))
                shown = "; ".join(f"{k} {sum(v):.0f} / {max(v):.1f}" for k, v in busiest)
                print(f"| {label} | {args.urls / r['seconds']:.1f} | {r['main_cpu'] / args.urls:.4f} | "
                      f"{r['extract_cpu'] / args.urls:.4f} | {shown} | {r['rss_mb']} | {r['kept']} |", flush=True)
        if args.hog and len(kept) == 2:
            alone, beside = set(kept[0]), set(kept[args.hog])
            print(f"\nkept alone {len(alone)}, beside {args.hog} CPU hogs {len(beside)}: "
                  f"{'the same pages' if alone == beside else f'{len(alone ^ beside)} pages differ'}")
    finally:
        web.kill()


if __name__ == "__main__":
    main()
