"""Several machines, as far as one test can make them: luigid, two workers, the synthetic web and an S3 server,
each in a network namespace of its own with its own address (joined by a bridge in another namespace the
test makes), the workers with separate caches and WORK in the bucket, so they share nothing but the
scheduler and the store. Their token files equal those of one worker working alone. Needs root and
iproute2 (`ip netns`); skipped, with the reason, where the machine does not allow it."""

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.netns import UNAVAILABLE, hosts
from support.runs import CONFIG, EVAL_PASSAGES


def on(host: tuple[str, str], *command: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", host[0], *command], env={**os.environ, **(env or {})}, **kw)


def wait_for(host: tuple[str, str], port: int, timeout: float = 60) -> None:
    """Until something listens on host:port, asked from inside that namespace."""
    probe = f"import socket; socket.create_connection(('{host[1]}', {port}), timeout=1).close()"
    deadline = time.monotonic() + timeout
    while subprocess.run(["ip", "netns", "exec", host[0], sys.executable, "-c", probe], capture_output=True).returncode:
        assert time.monotonic() < deadline, f"nothing listens on {host[1]}:{port}"
        time.sleep(0.2)


WEB = f"""
import sys, time
from textmill.demo import synthweb
web = synthweb.build_web(seed=7, articles=40, near_duplicates=4, foreign=3, mojibake=2, short=2,
                         planted=tuple({list(EVAL_PASSAGES)!r}))
with synthweb.serve(web, host=sys.argv[1], port=8000) as server:
    print("\\n".join(synthweb.url_list(web, server)), file=open(sys.argv[2], "w"))
    time.sleep(3600)
"""


SHOW_TOKENS = """
import sys
from textmill.io.store import fetch
from textmill.workflows import MergeDataset
merged = MergeDataset(sys.argv[1])
sys.stdout.buffer.write(b"".join(fetch(p).read_bytes() for p in merged.output().token_files()))
"""


@pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))
def test_luigid_two_workers_the_web_and_s3_on_separate_hosts_give_one_worker_s_tokens(tmp_path):
    with hosts("sched", "web", "s3", "w1", "w2") as net, contextlib.ExitStack() as stack:
        def serve(host, *command):
            process = on(host, *command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            stack.callback(process.wait, 30)
            stack.callback(process.kill)
        serve(net["web"], sys.executable, "-c", WEB, net["web"][1], str(tmp_path / "urls.txt"))
        serve(net["s3"], sys.executable, "-m", "moto.server", "-H", net["s3"][1], "-p", "5000")
        serve(net["sched"], sys.executable, "-m", "textmill.cli", "scheduler", "--address", net["sched"][1],
              "--port", "8082", "--logdir", str(tmp_path / "luigid"), "--state-path", str(tmp_path / "state.pickle"))
        for name, port in (("web", 8000), ("s3", 5000), ("sched", 8082)):
            wait_for(net[name], port)

        # The run's inputs: three URL lists and the evaluation set, local for the lone worker, in the bucket for
        # the two.
        urls = (tmp_path / "urls.txt").read_text().splitlines()
        inputs = tmp_path / "inputs"
        (inputs / "urls").mkdir(parents=True)
        size = -(-len(urls) // 3)
        for k in range(3):
            (inputs / "urls" / f"RS_{k}.txt").write_text("\n".join(urls[k * size:(k + 1) * size]) + "\n")
        (inputs / "eval.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in EVAL_PASSAGES))
        settings = dict(min_tokens=32, vocab_size=600, train="false", train_iters=20)
        alone = inputs / "alone.toml"
        alone.write_text(CONFIG.format(work=tmp_path / "alone-work", **settings))
        shared = inputs / "shared.toml"
        shared.write_text(CONFIG.format(work="s3://hosts/work", **settings)
                          .replace('urls = ["urls"]', 'urls = ["s3://hosts/urls"]')
                          .replace('"eval.jsonl"', '"s3://hosts/eval.jsonl"'))
        s3_env = {"AWS_ENDPOINT_URL": f"http://{net['s3'][1]}:5000", "AWS_ACCESS_KEY_ID": "test",
                  "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
        upload = ("import fsspec, sys; fs = fsspec.filesystem('s3'); fs.mkdir('hosts'); "
                  "fs.put(sys.argv[1] + '/urls', 'hosts/urls', recursive=True); fs.put_file(sys.argv[1] + '/eval.jsonl', "
                  "'hosts/eval.jsonl')")
        assert on(net["w1"], sys.executable, "-c", upload, str(inputs), env=s3_env).wait(60) == 0

        lone = on(net["w1"], sys.executable, "-m", "textmill.cli", "run", str(alone),
                  env={"TEXTMILL_CACHE": str(tmp_path / "c0")}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = lone.communicate(timeout=600)
        assert lone.returncode == 0, err[-3000:]

        workers = [on(net[w], sys.executable, "-m", "textmill.cli", "run", str(shared), "--scheduler-url",
                      f"http://{net['sched'][1]}:8082", env={**s3_env, "TEXTMILL_CACHE": str(tmp_path / f"cache-{w}")},
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in ("w1", "w2")]
        results = [w.communicate(timeout=600) for w in workers]
        assert [w.returncode for w in workers] == [0, 0], [r[1][-2000:] for r in results]
        # Each worker ran part of the graph: both caches hold shards of their own.
        for w in ("w1", "w2"):
            assert list((tmp_path / f"cache-{w}").rglob(".manifests/*.json")), f"{w} ran no shard task"

        def tokens(config: Path, env: dict) -> bytes:
            show = on(net["w1"], sys.executable, "-c", SHOW_TOKENS, str(config), env=env, stdout=subprocess.PIPE)
            data, _ = show.communicate(timeout=120)
            assert show.returncode == 0
            return data

        mine = tokens(alone, {"TEXTMILL_CACHE": str(tmp_path / "c0")})
        assert len(mine) > 1000
        assert tokens(shared, {**s3_env, "TEXTMILL_CACHE": str(tmp_path / "cache-reader")}) == mine
