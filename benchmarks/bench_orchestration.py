"""What coordinating a run costs before and around its work, with WORK on an S3 server (moto's, on 127.0.0.1).

    python benchmarks/bench_orchestration.py [--units 500 2000] [--workers 1 2]

For each graph size: one URL list of --units lines cut one URL a unit ([blacklist] urls_per_shard = 1, so each
task is no bigger than its coordination), WORK in a bucket of the S3 server.
1. `textmill run --workers N` from a cold cache, stopped once its first task has written to WORK: S3 requests
   and seconds until then (the server counts the requests of every process), per task of the graph.
2. `textmill status` of the same run: requests and seconds of one walk of the graph.
3. Luigi's scheduler in this process (what luigid runs, with textmill's settings), every task textmill hands it
   (the graph's tasks in batches, at most [run] tasks_per_stage a stage: workflows/batches.py) added as a worker
   adds them: microseconds per add_task, and per get_work (median of 20 calls by the worker that added them,
   each handing it one more task): luigid is one thread, so 1 / get_work is the most tasks a second it hands
   out to all machines together; then the arithmetic for 64 machines registering the graph.
4. With --finished-run UNITS: a whole run (no training) over a generated web served on 127.0.0.1, WORK in the
   bucket, then `textmill run` again on the finished graph, from the machine that ran it and from a machine with
   an empty cache: the requests of each (the walk, and the run's record and report; nothing is left to run);
   then the requests of the run's record alone, as every process that ends a run builds it.
5. A real luigid (`textmill scheduler`) on 127.0.0.1, and `textmill run --workers N --scheduler-url` registering
   the run with it: requests and seconds until the first task ran, luigid's CPU until then, and get_work over
   HTTP for an assistant (which looks at every task luigid holds).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


class Counting:
    """moto's WSGI application, counting requests (method, path) in order."""

    def __init__(self, app):
        self.app, self.requests = app, []

    def __call__(self, environ, start_response):
        self.requests.append((environ["REQUEST_METHOD"], environ["PATH_INFO"]))
        return self.app(environ, start_response)


def s3_server() -> tuple[Counting, dict]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    counting = server._server.app = Counting(server._server.app)
    host, port = server.get_host_and_port()
    return counting, {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "test",
                      "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


def write_run(root: Path, units: int, bucket: str, env: dict) -> Path:
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, client_kwargs={"endpoint_url": env["AWS_ENDPOINT_URL"]},
                           key="test", secret="test")
    fs.mkdir(bucket)
    urls = "".join(f"http://127.0.0.1:9/site{i % 97}/article-{i}.html\n" for i in range(units))
    fs.pipe(f"{bucket}/input/urls/list.txt", urls.encode())
    config = root / "run.toml"
    config.write_text(f'[run]\nwork_dir = "s3://{bucket}/work"\nurls = ["s3://{bucket}/input/urls"]\n'
                      '[blacklist]\nurls_per_shard = 1\n[scrape]\nallow_private_addresses = true\n'
                      '[train]\nenabled = false\n')
    return config


def until_first_task(config: Path, workers: int, counting: Counting, env: dict, *options: str) -> tuple[int, float]:
    """Requests and seconds from the start of `textmill run` until its first PUT into a stage folder of WORK (a task's
    output: WORK/1-blacklist-check/..., not the run's own record under WORK/runs, written as it starts)."""
    counting.requests.clear()
    started = time.perf_counter()
    run = subprocess.Popen([sys.executable, "-m", "textmill.cli", "run", str(config), "--workers", str(workers),
                            *options], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while run.poll() is None:
            puts = [i for i, (method, path) in enumerate(counting.requests)
                    if method == "PUT" and re.search(r"/work/\d-", path)]
            if puts:
                return puts[0], time.perf_counter() - started
            time.sleep(0.01)
        raise RuntimeError(f"textmill run ended ({run.returncode}) before a task wrote anything")
    finally:
        run.kill()
        run.wait()


def scheduler_costs(config: Path) -> tuple[int, int, float, float]:
    """(tasks, tasks scheduled, seconds per add_task, seconds per get_work) of Luigi's scheduler with the whole
    graph pending: the tasks of the graph, and what textmill hands the scheduler, their batches."""
    import luigi.scheduler

    from textmill.workflows.batches import batched, tasks_per_stage
    from textmill.workflows.framework import graph
    from textmill.workflows.model_tasks import EndToEnd
    from textmill.workflows.runner import configure_luigi

    configure_luigi()
    units = graph([EndToEnd(str(config))])
    tasks = graph(batched([EndToEnd(str(config))], tasks_per_stage(str(config), 1, "luigid")))  # what luigid holds
    scheduler = luigi.scheduler.Scheduler(prune_on_get_work=True, record_task_history=False)
    deps = {task.task_id: [d.task_id for d in luigi.task.flatten(task.requires())] for task in tasks}  # the worker's
    started = time.perf_counter()
    for task in tasks:
        scheduler.add_task(worker="w", task_id=task.task_id, status="PENDING", runnable=True, deps=deps[task.task_id],
                           family=task.task_family)
    add = (time.perf_counter() - started) / len(tasks)
    calls = []
    for _ in range(20):  # the worker that added the graph asks: each call hands it one more task
        started = time.perf_counter()
        scheduler.get_work(worker="w", host="h")
        calls.append(time.perf_counter() - started)
    return len(units), len(tasks), add, statistics.median(calls)


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a process has used (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def with_luigid(config: Path, units: int, workers: list[int], counting: Counting, env: dict, root: Path) -> None:
    """Part 5: a real luigid (`textmill scheduler`) on 127.0.0.1, `textmill run --scheduler-url` registering the
    run with it: requests and seconds until the first task, luigid's CPU until then (per task registered), and
    get_work over HTTP for an assistant (which looks at every task of the graph), median of 10."""
    import socket

    import luigi.rpc

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    luigid = subprocess.Popen([sys.executable, "-m", "textmill.cli", "scheduler", "--port", str(port),
                               "--state-path", str(root / "luigid.pickle"), "--logdir", str(root / "luigid-logs")],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        for count in workers:
            before = cpu_seconds(luigid.pid)
            requests, seconds = until_first_task(config, count, counting, env, "--scheduler-url", url)
            cpu = cpu_seconds(luigid.pid) - before
            scheduler = luigi.rpc.RemoteScheduler(url)
            tasks = len(scheduler.task_list(limit=False))
            calls = []
            for _ in range(10):
                started = time.perf_counter()
                scheduler.get_work(worker="bench-probe", host="bench", assistant=True)
                calls.append(time.perf_counter() - started)
            get_work = statistics.median(calls)
            print(f"| {units:,} | {count} | {tasks:,} | {requests:,} | {seconds:.1f} | {cpu:.2f} | "
                  f"{1e6 * cpu / max(tasks, 1):.0f} | {1e3 * get_work:.1f} | {1 / get_work:,.0f} |", flush=True)
    finally:
        luigid.terminate()
        luigid.wait()


def finished_run(units: int, counting: Counting, s3: dict, root: Path, dead: bool) -> None:
    """Part 4: requests of `textmill run` on a finished graph, from the machine that ran it and from another.
    `dead`: each unit one URL that no server answers, so every stage runs on empty units (no-op-sized work)."""
    import contextlib

    import fsspec

    from textmill.demo import synthweb

    web = None if dead else synthweb.build_web(seed=7, articles=4 * units, near_duplicates=4, foreign=3, mojibake=2,
                                               short=2)
    with contextlib.nullcontext() if dead else synthweb.serve(web) as server:
        env = {**os.environ, **s3}
        config = write_run(root, units, "finished", env)
        if not dead:
            urls = "\n".join(synthweb.url_list(web, server)) + "\n"
            fs = fsspec.filesystem("s3", skip_instance_cache=True,
                                   client_kwargs={"endpoint_url": s3["AWS_ENDPOINT_URL"]}, key="test", secret="test")
            fs.pipe("finished/input/urls/list.txt", urls.encode())
            config.write_text(config.read_text().replace("urls_per_shard = 1",
                                                         f"urls_per_shard = {-(-len(urls.split()) // units)}"))
        config.write_text(config.read_text().replace("[scrape]", "[scrape]\ntimeout_s = 1.0\nretries = 0\nextract_workers = 0")
                          + "[clean]\nmin_tokens = 32\n[tokenize]\nvocab_size = 600\n")
        subprocess.run([sys.executable, "-m", "textmill.cli", "run", str(config)], check=True, capture_output=True,
                       env={**env, "TEXTMILL_CACHE": str(root / "machine-a")})
        print(f"\n### A finished run of {units} units, run again (nothing left to run)\n")
        print("| machine | S3 requests | seconds |\n|---|---:|---:|")
        for machine in ("machine-a", "machine-b"):
            counting.requests.clear()
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "textmill.cli", "run", str(config)], check=True, capture_output=True,
                           env={**env, "TEXTMILL_CACHE": str(root / machine)})
            shown = "the one that ran it" if machine == "machine-a" else "another, empty cache"
            print(f"| {shown} | {len(counting.requests):,} | {time.perf_counter() - started:.1f} |", flush=True)
        # The run's record alone, as each process that ends the run builds it, on a machine with an empty cache.
        counting.requests.clear()
        subprocess.run([sys.executable, "-c", "import sys; from textmill.workflows.run_records import run_record; "
                        "run_record(sys.argv[1], 'bench', '', 0.0, True)", str(config)], check=True,
                       capture_output=True, env={**env, "TEXTMILL_CACHE": str(root / "machine-c")})
        print(f"\nThe run's record alone (run_records.run_record), empty cache: {len(counting.requests):,} S3 requests")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--units", type=int, nargs="+", default=[500, 2000], help="units of the URL list")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker processes of textmill run")
    parser.add_argument("--finished-run", type=int, metavar="UNITS", help="also part 4, a finished run of UNITS units")
    parser.add_argument("--dead-urls", action="store_true", help="part 4 with a URL no server answers per unit (every "
                        "stage on empty units: a large graph in minutes)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}\n")
    counting, s3 = s3_server()
    print("| units | tasks | tasks scheduled | workers | S3 requests before the first task | per task | seconds "
          "| status: requests | status: seconds | add_task µs | get_work ms | tasks/s luigid hands out "
          "| 64 machines registering, min |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for units in args.units:
            root = Path(tmp) / f"run-{units}"
            root.mkdir()
            env = {**os.environ, **s3}
            config = write_run(root, units, f"bench-{units}", env)
            os.environ.update(s3)
            tasks, scheduled, add, get_work = scheduler_costs(config)
            counting.requests.clear()
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "textmill.cli", "status", str(config)],
                           env={**env, "TEXTMILL_CACHE": str(root / "status-cache")}, capture_output=True, check=True)
            walk, walk_s = len(counting.requests), time.perf_counter() - started
            for workers in args.workers:
                cache = root / f"cache-{workers}"
                requests, seconds = until_first_task(config, workers, counting, {**env, "TEXTMILL_CACHE": str(cache)})
                print(f"| {units:,} | {tasks:,} | {scheduled:,} | {workers} | {requests:,} | {requests / tasks:.2f} "
                      f"| {seconds:.1f} | "
                      f"{walk:,} | {walk_s:.1f} | {1e6 * add:.0f} | {1e3 * get_work:.1f} | {1 / get_work:,.0f} | "
                      f"{64 * scheduled * add / 60:.1f} |", flush=True)
        print("\n### With a real luigid on 127.0.0.1 (`textmill run --scheduler-url`)\n")
        print("| units | workers | tasks luigid holds | S3 requests before the first task | seconds | luigid CPU s "
              "until then | per task, µs | get_work ms (assistant, over HTTP) | tasks/s luigid hands out |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for units in args.units:
            root = Path(tmp) / f"luigid-{units}"
            root.mkdir()
            config = write_run(root, units, f"luigid-{units}", {**os.environ, **s3})
            with_luigid(config, units, args.workers, counting, {**os.environ, **s3, "TEXTMILL_CACHE": str(root / "cache")},
                        root)
        if args.finished_run:
            (Path(tmp) / "finished").mkdir()
            finished_run(args.finished_run, counting, s3, Path(tmp) / "finished", args.dead_urls)


if __name__ == "__main__":
    main()
