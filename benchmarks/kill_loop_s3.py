"""A whole `textmill run` with WORK in an S3 bucket, interrupted again and again, then finished: its token files
must be an uninterrupted run's, byte for byte (issue 47 section 7).

    python benchmarks/kill_loop_s3.py [--kills 20] [--seed 0] [--workers 2] [--articles 100]

The web is the tests' synthetic web with --articles pages of prose, served on 127.0.0.1; the S3 server is
moto's, in this process; the scheduler is a real luigid (`textmill scheduler`). First an uninterrupted run
with WORK on local disk gives the reference token files. Then the run on S3 is started, interrupted, and
started again (as a user or cron would), with these interruptions in a seeded random order:
- `time`: SIGKILL of the run's whole process group (the run, its workers, their extraction processes) at a
  random moment, 1 to 6 s after it started;
- `write`: SIGKILL while the run writes to WORK: at its K-th PUT or POST (K from 1 to 12) the group is killed
  from inside the S3 server, either before the request reaches moto (`write-lost`: the object never lands) or
  after moto has stored it (`write-landed`: the run never hears that it did);
- `s3-down`: the S3 server stopped (connections refused) for 5 s and started again with its objects, the run
  left running;
- `luigid`: luigid killed with SIGKILL and started again on its port 3 s later, the run left running.
A run left running after s3-down or luigid is given 20 s more, then killed as well if it has not ended (so
that it does not finish with interruptions left to make; said on its line, not counted in --kills).
--kills counts the SIGKILLs of the run (time and write); one s3-down and one luigid come on top. An
interruption that finds the run ended is not counted: a run that ends with interruptions left to make ends
the loop (the summary then says fewer were made). Each attempt prints one line; the summary says whether
the finished run's token files equal the reference's, and the seconds spent; the exit status is 0 only
when they do and all --kills were made.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "killloop"


class Interceptor:
    """moto's WSGI application, which kills the run's process group at the K-th write to WORK (a PUT or a POST
    under the bucket's work/ folder), before or after passing that request on."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()
        self.writes = 0
        self.kill_at: int | None = None  # the write that kills, counted from arming
        self.land = False  # pass the killing request on to moto first
        self.group: int | None = None
        self.fired = threading.Event()

    def arm(self, group: int, writes: int, land: bool) -> None:
        with self.lock:
            self.group, self.kill_at, self.land, self.writes = group, writes, land, 0
            self.fired.clear()

    def disarm(self) -> None:
        with self.lock:
            self.kill_at = None

    def __call__(self, environ, start_response):
        fire = False
        if environ["REQUEST_METHOD"] in ("PUT", "POST") and environ["PATH_INFO"].startswith(f"/{BUCKET}/work/"):
            with self.lock:
                self.writes += 1
                if self.kill_at is not None and self.writes >= self.kill_at:
                    fire, self.kill_at = True, None
        if not fire:
            return self.app(environ, start_response)
        if self.land:
            body = b"".join(self.app(environ, start_response))  # moto has stored it
            kill_group(self.group)
            self.fired.set()
            return [body]
        kill_group(self.group)
        self.fired.set()
        start_response("503 Service Unavailable", [("Content-Length", "0")])
        return [b""]


class S3Server:
    """moto's server in this process, on a fixed port once started, which can be stopped and started again with
    its objects (moto keeps them in this process)."""

    def __init__(self):
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.interceptor = None
        self.start()
        self.port = self.server.get_host_and_port()[1]
        self.server._port = self.port

    def start(self) -> None:
        self.server.start()
        app = self.server._server.app
        if self.interceptor is None:
            self.interceptor = Interceptor(app)
        else:
            self.interceptor.app = app
        self.server._server.app = self.interceptor

    def stop(self) -> None:
        self.server.stop()
        self.server._server.server_close()  # refuse connections while down, and free the port for start()


def kill_group(group: int | None) -> None:
    if group is not None:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_luigid(port: int, folder: Path) -> subprocess.Popen:
    luigid = subprocess.Popen([sys.executable, "-m", "textmill.cli", "scheduler", "--port", str(port),
                               "--state-path", str(folder / "luigid.pickle"), "--logdir", str(folder / "luigid-logs")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return luigid
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("luigid did not start")


def still_running_after(run: subprocess.Popen, seconds: float) -> bool:
    try:
        run.wait(timeout=seconds)
        return False
    except subprocess.TimeoutExpired:
        return True


def then_killed(run: subprocess.Popen, hit: bool) -> str:
    """A run that lived through an s3-down or luigid interruption, given 20 s more, then killed if still running."""
    if hit and still_running_after(run, 20):
        kill_group(run.pid)
        return ", killed 20 s later"
    return ""


def put_inputs(root: Path, env: dict) -> Path:
    """The run file of `root` rewritten with its URL lists, evaluation set and WORK in the bucket."""
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, client_kwargs={"endpoint_url": env["AWS_ENDPOINT_URL"]},
                           key="test", secret="test")
    fs.mkdir(BUCKET)
    for path in sorted((root / "urls").iterdir()):
        fs.put_file(str(path), f"{BUCKET}/input/urls/{path.name}")
    fs.put_file(str(root / "eval.jsonl"), f"{BUCKET}/input/eval.jsonl")
    config = root / "run-s3.toml"
    text = (root / "run.toml").read_text().replace('work_dir = "work"', f'work_dir = "s3://{BUCKET}/work"')
    text = text.replace('urls = ["urls"]', f'urls = ["s3://{BUCKET}/input/urls"]')
    config.write_text(text.replace('"eval.jsonl"', f'"s3://{BUCKET}/input/eval.jsonl"'))
    return config


def interruptions(kills: int, rng: random.Random) -> list[str]:
    kinds = [rng.choice(["time", "write-lost", "write-landed"]) for _ in range(kills)] + ["s3-down", "luigid"]
    rng.shuffle(kinds)
    return kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20, help="SIGKILLs of the run (one s3-down and one luigid on top)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the interruptions' order, moments and writes")
    ap.add_argument("--workers", type=int, default=2, help="textmill run --workers")
    ap.add_argument("--articles", type=int, default=100, help="articles of the synthetic web (the tests' has 40)")
    ap.add_argument("--logs", type=Path, help="a folder to keep each attempt's output in (default: none kept)")
    ap.add_argument("--max-attempts", type=int, default=60, help="give up after this many starts of the run")
    args = ap.parse_args()

    from support.runs import EVAL_PASSAGES, dataset_bytes, make_run
    from textmill.demo import synthweb

    rng = random.Random(args.seed)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"--kills {args.kills} --seed {args.seed} --workers {args.workers} --articles {args.articles}", flush=True)
    web = synthweb.build_web(seed=7, articles=args.articles, near_duplicates=4, foreign=3, mojibake=2, short=2,
                             planted=tuple(EVAL_PASSAGES))
    with tempfile.TemporaryDirectory() as tmp, synthweb.serve(web) as site_server:
        tmp = Path(tmp)
        config = make_run(tmp / "run", (web, site_server))
        started = time.perf_counter()
        reference = subprocess.run([sys.executable, "-m", "textmill.cli", "run", str(config), "--workers",
                                    str(args.workers)], capture_output=True, text=True)
        if reference.returncode:
            sys.exit(f"the uninterrupted run failed:\n{reference.stderr[-3000:]}")
        expected = dataset_bytes(config)
        uninterrupted = time.perf_counter() - started
        print(f"uninterrupted run, WORK on local disk: {uninterrupted:.1f} s, token files {len(expected):,} bytes",
              flush=True)

        s3 = S3Server()
        env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3.port}", "AWS_ACCESS_KEY_ID": "test",
               "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
               "TEXTMILL_CACHE": str(tmp / "cache"), "PYTHONUNBUFFERED": "1"}
        os.environ.update({k: env[k] for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                               "AWS_DEFAULT_REGION", "TEXTMILL_CACHE")})
        s3_config = put_inputs(tmp / "run", env)
        luigid_port = free_port()
        luigid = start_luigid(luigid_port, tmp)
        command = [sys.executable, "-m", "textmill.cli", "run", str(s3_config), "--workers", str(args.workers),
                   "--scheduler-url", f"http://127.0.0.1:{luigid_port}"]

        planned = interruptions(args.kills, rng)
        landed: list[str] = []
        attempts, exits = 0, {}
        loop_started = time.perf_counter()
        finished = False
        while not finished:
            kind = planned[len(landed)] if len(landed) < len(planned) else None
            attempts += 1
            logs = args.logs or tmp
            logs.mkdir(parents=True, exist_ok=True)
            log = open(logs / f"attempt-{attempts}.log", "w")
            run = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            t0 = time.perf_counter()
            hit = False
            if kind == "time":
                delay = rng.uniform(1.0, 6.0)
                hit = still_running_after(run, delay)
                if hit:
                    kill_group(run.pid)
                what = f"time {delay:.1f} s"
            elif kind in ("write-lost", "write-landed"):
                writes = rng.randint(1, 12)
                s3.interceptor.arm(run.pid, writes, kind == "write-landed")
                while run.poll() is None and not s3.interceptor.fired.is_set():
                    time.sleep(0.05)
                s3.interceptor.disarm()
                hit = s3.interceptor.fired.is_set()
                what = f"{kind} at write {writes}"
            elif kind == "s3-down":
                delay = rng.uniform(2.0, 10.0)
                hit = still_running_after(run, delay)
                if hit:
                    s3.stop()
                    time.sleep(5)
                    s3.start()
                what = f"S3 down for 5 s at {delay:.1f} s" + then_killed(run, hit)
            elif kind == "luigid":
                delay = rng.uniform(2.0, 10.0)
                hit = still_running_after(run, delay)
                if hit:
                    luigid.kill()
                    luigid.wait()
                    time.sleep(3)
                    luigid = start_luigid(luigid_port, tmp)
                what = f"luigid killed at {delay:.1f} s" + then_killed(run, hit)
            else:
                what = "no interruption"
            code = run.wait()
            log.close()
            kill_group(run.pid)  # nothing of a killed run outlives it
            exits[code] = exits.get(code, 0) + 1
            last = (logs / f"attempt-{attempts}.log").read_text().strip().splitlines()[-1:] or [""]
            print(f"attempt {attempts:2d}: {what:32s} {'hit' if hit else 'missed':6s} exit {code:3d} "
                  f"{time.perf_counter() - t0:6.1f} s  {last[0][:110]}", flush=True)
            if hit:
                landed.append(kind)
            if code == 0 and len(landed) < len(planned):
                print("the run finished with interruptions left to make: the loop ends here", flush=True)
            finished = code == 0 or attempts >= args.max_attempts
        loop_seconds = time.perf_counter() - loop_started

        from textmill.io import store
        from textmill.workflows import MergeDataset

        merged = MergeDataset(str(s3_config)).output()
        got = b"".join(store.fetch(p).read_bytes() for p in merged.token_files())
        luigid.terminate()
        luigid.wait(timeout=30)
    kills = sum(k in ("time", "write-lost", "write-landed") for k in landed)
    same = got == expected
    print(f"\ninterruptions that hit a running run: {len(landed)} ({kills} SIGKILLs: "
          f"{landed.count('time')} time, {landed.count('write-lost')} write-lost, {landed.count('write-landed')} "
          f"write-landed; {landed.count('s3-down')} S3 down, {landed.count('luigid')} luigid killed)")
    print(f"attempts: {attempts}, exit statuses {dict(sorted(exits.items()))}, {loop_seconds:.0f} s in all "
          f"(uninterrupted on local disk: {uninterrupted:.0f} s)")
    print(f"token files byte-identical to the uninterrupted run's: {'yes' if same else 'NO'}")
    sys.exit(0 if same and kills >= args.kills else 1)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    main()
