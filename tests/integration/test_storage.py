"""Object storage: a run whose URL lists, evaluation set and WORK are s3:// URLs on a real S3-API server
(moto's, started on 127.0.0.1 by the test) gives the local run's token files; a run killed mid-upload
leaves nothing a rerun takes for finished; a stage command reads and writes the store as a run does."""

import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.cli import run_cli
from support.files import write_jsonl
from support.runs import dataset_bytes, make_run
from textmill.demo import synthweb
from textmill.io import store
from textmill.workflows import MergeDataset


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """An S3-API server on 127.0.0.1, the environment that points clients at it, and an fsspec view of it."""
    moto_server = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    global REQUESTS
    REQUESTS = server._server.app = RequestCount(server._server.app)  # its werkzeug server's application
    host, port = server.get_host_and_port()
    env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "us-east-1", "TEXTMILL_CACHE": str(tmp_path_factory.mktemp("cache"))}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    yield fs
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()


def upload_inputs(fs, root: Path, bucket: str) -> None:
    """The run's URL lists and evaluation set, put in the bucket."""
    fs.mkdir(bucket)
    for path in sorted((root / "urls").iterdir()):
        fs.put_file(str(path), f"{bucket}/input/urls/{path.name}")
    fs.put_file(str(root / "eval.jsonl"), f"{bucket}/input/eval.jsonl")


def s3_config(root: Path, bucket: str, train: bool = False) -> Path:
    """root/run.toml rewritten with every input and WORK in the bucket, and the local inputs removed."""
    config = root / "run.toml"
    text = config.read_text().replace('work_dir = "work"', f'work_dir = "s3://{bucket}/work"')
    text = text.replace('urls = ["urls"]', f'urls = ["s3://{bucket}/input/urls"]')
    text = text.replace('"eval.jsonl"', f'"s3://{bucket}/input/eval.jsonl"')
    text = text.replace("train_iters = 20", "train_iters = 4").replace("eval_interval = 10", "eval_interval = 4")
    config.write_text(text)
    for path in [*(root / "urls").iterdir(), root / "eval.jsonl"]:
        path.unlink()
    return config


def test_a_bad_storage_table_is_one_error(tmp_path):
    (tmp_path / "run.toml").write_text('[storage]\ns3 = "http://x"\n')
    r = run_cli("run", str(tmp_path / "run.toml"))
    assert r.returncode == 2 and "[storage] holds one table per protocol" in r.stderr and len(r.stderr.splitlines()) == 1


def test_the_store_layer_fetches_what_changed_and_drops_what_the_store_lacks(s3, tmp_path):
    s3.mkdir("layer")
    path = store.local_path("s3://layer/a/b.json")
    assert store.url_of(path) == "s3://layer/a/b.json" and store.shown(path) == "s3://layer/a/b.json"
    assert store.local_path("file:///x/y") == Path("/x/y") and store.url_of(tmp_path) is None
    with pytest.raises(FileNotFoundError):
        store.fetch(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("one")
    assert not store.exists(path)  # a local copy is not the store's
    store.publish([path])
    assert s3.cat("layer/a/b.json") == b"one" and store.exists(path)
    s3.pipe("layer/a/b.json", b"two!")  # another worker wrote it again
    assert store.fetch(path).read_text() == "two!"
    s3.rm_file("layer/a/b.json")
    with pytest.raises(FileNotFoundError):
        store.fetch(path)
    assert not path.exists()  # the stale copy went with it
    for name in ("x/1.txt", "x/y/2.txt"):
        s3.pipe(f"layer/t/{name}", name.encode())
    tree = store.fetch_tree(store.local_path("s3://layer/t"))
    assert sorted(str(p.relative_to(tree)) for p in store.files_under_locally(tree)) == ["x/1.txt", "x/y/2.txt"]


class RequestCount:
    """The requests moto's server answers while the block runs, from every process (`lines`: method and path)."""

    def __init__(self, app):
        self.app, self.lines, self.counting = app, [], False

    def __call__(self, environ, start_response):  # the server's WSGI application, counting
        if self.counting:
            self.lines.append(f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}?{environ.get('QUERY_STRING', '')}")
        return self.app(environ, start_response)

    def __enter__(self):
        self.lines, self.counting = [], True
        return self

    def __exit__(self, *exc):
        self.counting = False


def test_inside_listed_folders_a_folder_is_listed_once_and_what_is_written_joins_the_listing(s3, tmp_path):
    s3.mkdir("listed")
    for name in ("a", "b", "c"):
        s3.pipe(f"listed/f/{name}.json", b"{}")
    paths = {name: store.local_path(f"s3://listed/f/{name}.json") for name in ("a", "b", "c", "d")}
    with REQUESTS as plain:
        answers = [store.exists(p) for p in paths.values()]
    plain = len(plain.lines)
    with REQUESTS as listed, store.listed_folders():
        assert [store.exists(p) for p in paths.values()] == answers == [True, True, True, False]
        assert store.fetch(paths["a"]).read_text() == "{}"  # its version from the listing, then one download
        paths["d"].write_text("[]")
        store.publish([paths["d"]])
        assert store.exists(paths["d"])
        store.remove(paths["b"])
        assert not store.exists(paths["b"])
    # a LIST; a.json's GET; d.json's PUT and HEAD (its version); b.json's DELETE (the listing says it is there)
    assert plain >= 4 and len(listed.lines) == 5, listed.lines
    assert not store.exists(paths["b"]) and store.fetch(paths["d"]).read_text() == "[]"


def test_a_walk_of_the_graph_on_s3_lists_each_folder_once_instead_of_asking_per_task(s3, tmp_path, site):
    """`textmill status` of a run not yet started, its work folder on S3: the requests grow with the stages, not
    with the tasks, each of which asked for its done file (a HEAD, then a LIST when it was not there): 203 tasks
    made 794 requests before, 65 now."""
    make_run(tmp_path, site)
    upload_inputs(s3, tmp_path, "walk")
    config = s3_config(tmp_path, "walk")
    config.write_text(config.read_text().replace("[blacklist]", "[blacklist]\nurls_per_shard = 4", 1)
                      if "[blacklist]" in config.read_text() else config.read_text() + "[blacklist]\nurls_per_shard = 4\n")
    with REQUESTS as walk:
        status = run_cli("status", str(config))
    walk = len(walk.lines)
    assert status.returncode == 0, status.stderr[-2000:]
    tasks = int(re.search(r"(\d+) task\(s\)", status.stdout).group(1))
    assert tasks > 100 and walk < tasks / 3, (tasks, walk)


def test_a_run_on_s3_gives_the_local_run_s_token_files_and_trains_from_a_local_copy(s3, tmp_path, site, finished_run):
    local = finished_run.root / "run.toml"

    config = make_run(tmp_path / "remote", site, train="true")
    upload_inputs(s3, tmp_path / "remote", "e2e")
    config = s3_config(tmp_path / "remote", "e2e")
    r = run_cli("run", str(config), "--workers", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "trained 4 iterations" in r.stdout and "eval.jsonl: accuracy" in r.stdout
    merged = MergeDataset(str(config))
    assert store.url_of(merged.output().prefix) == f"s3://e2e/work/9-dataset/{merged.key()}/corpus_text_document"
    # The token files in the bucket are the local run's, byte for byte.
    remote = b"".join(s3.cat(store.url_of(p)[5:]) for p in merged.output().token_files())
    assert remote == dataset_bytes(local)
    done = json.loads(s3.cat(store.url_of(merged.output().done)[5:]))
    assert {name: f["bytes"] for name, f in done["files"].items()} == \
        {p.name: p.stat().st_size for p in merged.output().token_files()}
    # Everything a later reader needs is in the bucket: checkpoints, the export, the run's record and report.
    for stage in ("10-train", "11-evaluate", "12-export", "runs"):
        assert s3.find(f"e2e/work/{stage}"), stage
    assert s3.exists("e2e/work/report.html") and s3.exists("e2e/work/results.md")

    assert f"-> s3://e2e/work/9-dataset/{merged.key()}/corpus_text_document.bin/.idx" in r.stdout

    # A machine with an empty cache finds the whole run complete in the bucket: no stage writes anything.
    before = stage_objects(s3, "e2e")
    os.environ["TEXTMILL_CACHE"], cache = str(tmp_path / "other-cache"), os.environ["TEXTMILL_CACHE"]
    try:
        again = run_cli("run", str(config))
        status = run_cli("status", str(config))
    finally:
        os.environ["TEXTMILL_CACHE"] = cache
    assert again.returncode == 0 and "textmill run: done:" in again.stdout, again.stderr[-2000:]
    assert stage_objects(s3, "e2e") == before
    assert status.returncode == 0 and re.search(r"(\d+) task\(s\): \1 done, 0 pending", status.stdout), status.stdout


def test_a_corpus_grown_in_parts_on_s3_takes_the_first_parts_files_on_a_machine_with_an_empty_cache(s3, tmp_path,
                                                                                                      site):
    """Day 1 of two URL lists on one machine, day 2 with the third on another (an empty cache): the earlier outputs a
    day-2 task takes are fetched from the bucket, and the first part's token files are day 1's, byte for byte."""
    from support.files import TEST_DATA
    from textmill.workflows.memos import forget

    root = tmp_path / "grown"
    make_run(root, site, files=3)
    third = (root / "urls" / "RS_2.txt").read_text()
    (root / "urls" / "RS_2.txt").unlink()
    upload_inputs(s3, root, "grown")
    config = s3_config(root, "grown")
    text = config.read_text().replace("vocab_size = 600", f'vocab_file = "{TEST_DATA / "gpt2-vocab.json"}"\n'
                                      f'merge_file = "{TEST_DATA / "gpt2-merges.txt"}"')
    config.write_text(text.replace("[run]\n", '[run]\ncorpus_form = "parts"\n'))
    first = run_cli("run", str(config))
    assert first.returncode == 0, first.stderr[-3000:]
    day1 = json.loads(s3.cat(store.url_of(MergeDataset(str(config)).output().done)[5:]))["blend"]

    s3.pipe("grown/input/urls/RS_2.txt", third.encode())
    os.environ["TEXTMILL_CACHE"], cache = str(tmp_path / "other-cache"), os.environ["TEXTMILL_CACHE"]
    try:
        second = run_cli("run", str(config))
        forget()  # this process's graph and paths: of day 1, under the other cache
        day2 = json.loads(s3.cat(store.url_of(MergeDataset(str(config)).output().done)[5:]))
    finally:
        os.environ["TEXTMILL_CACHE"] = cache
    assert second.returncode == 0, second.stderr[-3000:]
    assert day2["parts"] == 2 and day2["tasks"]["taken"] == len(day1), day2["tasks"]
    assert re.search(r"^clean: .*tasks: 1 made, 2 taken from earlier output", second.stdout, re.M), second.stdout
    for (_, before), (_, after) in zip(day1, day2["blend"], strict=False):  # the first part's shards, in order
        for suffix in (".bin", ".idx"):
            assert s3.cat(before[5:] + suffix) == s3.cat(after[5:] + suffix)


def stage_objects(fs, bucket: str) -> dict[str, str]:
    """The ETag of every object the stages wrote (not the run records and reports, which each run adds)."""
    fs.invalidate_cache()
    return {k: v["ETag"] for k, v in fs.find(f"{bucket}/work", detail=True).items()
            if not k.startswith((f"{bucket}/work/runs/", f"{bucket}/work/report", f"{bucket}/work/results"))}


def test_a_run_killed_mid_upload_leaves_nothing_a_rerun_takes_for_finished(s3, tmp_path, site, finished_run):
    local = finished_run.root / "run.toml"

    make_run(tmp_path / "remote", site)
    upload_inputs(s3, tmp_path / "remote", "killed")
    config = s3_config(tmp_path / "remote", "killed")
    # This run names its endpoint in the run file instead of the environment.
    config.write_text(config.read_text() + f'[storage.s3]\nendpoint_url = "{os.environ["AWS_ENDPOINT_URL"]}"\n')
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    # A session of its own: the signals go to its task and extraction processes too, not to it alone.
    run = subprocess.Popen([sys.executable, "-m", "textmill.cli", "run", str(config)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def data_without_manifest() -> bool:
        s3.invalidate_cache()
        names = {k.split("/", 4)[-1] for k in s3.find("killed/work/2-scrape")}  # relative to the stage's key folder
        return any(f".manifests/{n.split('.')[0]}.json" not in names for n in names if "/" not in n)

    deadline, uploading = time.monotonic() + 300, False
    while not uploading and time.monotonic() < deadline:  # a scraped shard's data is in, its manifest not yet
        os.killpg(run.pid, signal.SIGSTOP)  # the store as the kill will leave it, looked at while the run stands still
        # A request the run sent just before it stopped still lands: look again once it has.
        uploading = data_without_manifest() and (time.sleep(2) or data_without_manifest())
        if not uploading:
            os.killpg(run.pid, signal.SIGCONT)
            time.sleep(0.005)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    assert uploading, "the run was not seen uploading"
    # What the kill left: a shard's data without its manifest, which the rerun does not take for finished.
    assert data_without_manifest()

    r = run_cli("run", str(config), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    merged = MergeDataset(str(config))
    assert b"".join(s3.cat(store.url_of(p)[5:]) for p in merged.output().token_files()) == dataset_bytes(local)


def test_a_store_that_does_not_answer_is_one_error_line(s3, tmp_path, site):
    """The store down (nothing listens at its address) while a run or a status walks the graph: one line and exit
    status 1, a failure a rerun cures; the kill loop (benchmarks/kill_loop_s3.py) saw a traceback."""
    make_run(tmp_path, site)
    upload_inputs(s3, tmp_path, "down")
    config = s3_config(tmp_path, "down")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{free.getsockname()[1]}"
    env = {**os.environ, "AWS_ENDPOINT_URL": closed, "AWS_MAX_ATTEMPTS": "2", "AWS_RETRY_MODE": "standard"}
    for command in ("run", "status"):
        r = run_cli(command, str(config), env=env)
        assert r.returncode == 1, (command, r.stderr[-3000:])
        [line] = r.stderr.strip().splitlines()
        assert line.startswith("textmill: error: a server did not answer (") and closed in line, line


def test_a_part_of_an_object_is_read_without_downloading_it(s3, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    s3.mkdir("ranged")
    local = tmp_path / "groups.parquet"
    pq.write_table(pa.table({"x": list(range(100_000))}), local, row_group_size=10_000)
    s3.put_file(str(local), "ranged/groups.parquet")
    path = store.local_path("s3://ranged/groups.parquet")
    with store.open_ranged(path) as source:
        assert pq.ParquetFile(source).read_row_group(3)["x"].to_pylist() == list(range(30_000, 40_000))
    assert not path.exists()  # read in place, not downloaded
    store.fetch(path)
    with store.open_ranged(path) as source:
        assert source == path  # the local copy, now current


def test_a_stage_command_reads_and_writes_a_store_and_another_machine_finds_it_done(s3, tmp_path):
    rng = random.Random(2)
    write_jsonl(tmp_path / "docs" / "a.jsonl", [{"id": f"a{i}", "text": " ".join(synthweb.prose(rng, 3))} for i in range(60)])
    write_jsonl(tmp_path / "docs" / "b.jsonl", [{"id": f"b{i}", "text": " ".join(synthweb.prose(rng, 3))} for i in range(60)])
    s3.mkdir("command")
    for name in ("a.jsonl", "b.jsonl"):
        s3.put_file(str(tmp_path / "docs" / name), f"command/docs/{name}")
    local = run_cli("dedup", str(tmp_path / "docs"), "-o", str(tmp_path / "dedup"))
    assert local.returncode == 0, local.stderr[-3000:]
    r = run_cli("dedup", "s3://command/docs", "-o", "s3://command/dedup", "--workers", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "-> s3://command/dedup" in r.stdout
    for name in ("a.parquet", "b.parquet", ".rejects/a.parquet", ".clusters.json"):
        assert s3.cat(f"command/dedup/{name}") == (tmp_path / "dedup" / name).read_bytes(), name
    written = {p: s3.info(p)["ETag"] for p in s3.find("command/dedup")}
    assert any("/.textmill/3-minhash/" in p for p in written) and any("/.textmill/keys/" in p for p in written)

    again = run_cli("dedup", "s3://command/docs", "-o", "s3://command/dedup",
                    env={**os.environ, "TEXTMILL_CACHE": str(tmp_path / "other-machine")})
    assert again.returncode == 0 and "textmill dedup: " not in again.stderr  # no step ran again
    assert {p: s3.info(p)["ETag"] for p in s3.find("command/dedup")} == written


def test_a_scrape_resumed_on_another_machine_fetches_at_most_the_chunks_not_committed(s3, tmp_path):
    """A scrape writing to the store is killed once two chunks of 5 URLs are committed; its machine's cache is
    removed; a second machine (another cache) resumes: the pages of the committed chunks are not fetched
    again, and the shard is the uninterrupted scrape's but for the fetch times."""
    import pyarrow.parquet as pq

    s3.mkdir("resume")
    chunk, concurrency = 5, 2
    flags = ["--allow-private-addresses", "--extract-workers", "0", "--concurrency", str(concurrency),
             "--chunk-urls", str(chunk), "--timeout-s", "10", "--retries", "0"]
    web = synthweb.build_web(seed=3, articles=40, near_duplicates=0, foreign=0, mojibake=0, short=0, faults=False)
    with synthweb.serve(web, latency_s=0.05) as server:
        base = synthweb.base_url(server)
        (tmp_path / "urls.txt").write_text("".join(f"{base}{p}\n" for p in web.url_paths))
        assert run_cli("blacklist", str(tmp_path / "urls.txt"), "-o", "s3://resume/urls").returncode == 0
        alone = run_cli("scrape", "s3://resume/urls", "-o", str(tmp_path / "alone"), *flags)
        assert alone.returncode == 0, alone.stderr[-3000:]
        hits = dict(server.hits)

        first = {**os.environ, "TEXTMILL_CACHE": str(tmp_path / "first-machine")}
        run = subprocess.Popen([sys.executable, "-m", "textmill.cli", "scrape", "s3://resume/urls", "-o",
                                "s3://resume/pages", *flags], env=first, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        deadline, committed = time.monotonic() + 120, []
        while len(committed) < 2 and time.monotonic() < deadline:
            s3.invalidate_cache()
            committed = [k for k in s3.find("resume/pages") if "/.chunks/" in k]
            time.sleep(0.02)
        run.send_signal(signal.SIGKILL)
        run.wait()
        assert 2 <= len(committed) < len(web.url_paths) // chunk, committed
        assert not s3.exists("resume/pages/.manifests/urls-00000.json")
        shutil.rmtree(tmp_path / "first-machine")
        killed = {k: v - hits.get(k, 0) for k, v in server.hits.items()}

        second = {**os.environ, "TEXTMILL_CACHE": str(tmp_path / "second-machine")}
        resumed = run_cli("scrape", "s3://resume/urls", "-o", "s3://resume/pages", *flags, env=second)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        total = {k: v - hits.get(k, 0) for k, v in server.hits.items()}
    again = sorted(k for k, n in total.items() if n > 1)
    assert sum(killed.values()) >= len(committed) * chunk  # the kill came after two chunks
    # Fetched twice: at most the URLs of the chunk open at the kill, and those in flight beyond it.
    assert len(again) <= chunk + concurrency - 1, again
    manifest = json.loads(s3.cat("resume/pages/.manifests/urls-00000.json"))
    assert manifest["resumed"] >= len(committed) * chunk
    assert not [k for k in s3.find("resume/pages") if "/.chunks/" in k]  # the finished shard holds them
    for name in ("urls-00000.parquet", ".rejects/urls-00000.parquet"):
        store.fetch(store.local_path(f"s3://resume/pages/{name}"))
        ours = pq.read_table(store.local_path(f"s3://resume/pages/{name}")).drop_columns(["elapsed_s", "fetched_at"])
        assert ours == pq.read_table(tmp_path / "alone" / name).drop_columns(["elapsed_s", "fetched_at"]), name
