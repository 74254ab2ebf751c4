"""The Luigi graph: a tiny run end to end, reruns that redo only what changed or failed."""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.cli import run_cli
from support.files import TEST_DATA
from support.hf_models import write_hf_gptj, write_hf_llama
from support.runs import (
    PER_URL_FILE,
    STAGES,
    central_scheduler,
    copy_run,
    dataset_bytes,
    folders,
    make_run,
    stage_files,
    write_config,
)
from textmill.megatron.indexed import IndexedDataset
from textmill.workflows import MergeDataset, ScrapeShard
from textmill.workflows.framework import RunTask
from textmill.workflows.memos import run_config
from textmill.workflows.run_records import run_graph
from textmill.workflows.runner import run_workflow
from textmill.workflows.stages import StageRecord, run_stages


def test_the_command_builds_the_corpus_and_a_rerun_does_nothing(tmp_path, finished_run):
    assert "textmill run: done:" in finished_run.output.stdout
    config = copy_run(finished_run.root, tmp_path)
    dataset = IndexedDataset(MergeDataset(str(config)).output().prefix)
    assert dataset.num_documents > 20
    [decontaminated] = (tmp_path / "work" / "6-decontaminate").glob("*/.task.json")
    assert json.loads(decontaminated.read_text())["documents_touched"] >= 1
    before = stage_files(tmp_path / "work")
    again = run_cli("run", str(config))
    assert again.returncode == 0 and "textmill run: done:" in again.stdout
    assert stage_files(tmp_path / "work") == before

    # Each run is dated, with its report; the results table has both, side by side.
    runs = sorted((tmp_path / "work" / "runs").iterdir())
    assert len(runs) == 2 and all((r / "run.json").exists() and (r / "report.html").exists() for r in runs)
    assert f"report: {runs[1] / 'report.html'}" in again.stdout
    # Every corpus stage of the run is in its funnel, in order, and every step of the graph in its time per stage.
    record = json.loads((runs[1] / "run.json").read_text())
    assert [s["stage"] for s in record["funnel"]] == [stage.name for stage in run_stages(run_config(str(config)))]
    steps = {task.step for task in run_graph(config) if isinstance(task, RunTask)
             and not isinstance(task, StageRecord)}
    assert set(record["seconds_per_stage"]) == steps
    table = (tmp_path / "work" / "results.md").read_text().splitlines()
    assert [line.split(" | ")[0].lstrip("| ") for line in table[-2:]] == [r.name for r in runs]
    documents = IndexedDataset(MergeDataset(str(config)).output().prefix).num_documents
    assert all("| done | " in line and f"| {documents} |" in line for line in table[-2:])
    report = (tmp_path / "work" / "report.html").read_text()
    assert report == (runs[1] / "report.html").read_text()
    # funnel, dedup clusters, characters and tokens per document, time per stage (no training in this run)
    assert report.count("data:image/png;base64,") == 5
    assert "<h2>Corpus funnel</h2>" in report and "<h2>Training</h2>" not in report

    stage_commands_write_what_the_run_wrote(tmp_path, tmp_path / "work")

    bad = run_cli("run", str(tmp_path / "nope.toml"))
    assert bad.returncode == 2 and bad.stderr.startswith("textmill: error:") and len(bad.stderr.splitlines()) == 1
    (tmp_path / "typo.toml").write_text("[clean]\nmin_token = 3\n")
    bad = run_cli("run", str(tmp_path / "typo.toml"))
    assert bad.returncode == 2 and "[clean] has no field 'min_token'" in bad.stderr


def test_a_runs_corpus_exports_to_one_folder_that_datasets_loads(tmp_path, finished_run):
    """Each unit's shard sits in a folder keyed by its own inputs: `textmill export corpus` gathers a finished
    stage in one folder (hard links), which datasets.load_dataset reads as the run's corpus."""
    import datasets

    config = copy_run(finished_run.root, tmp_path)
    r = run_cli("export", "corpus", str(config), "-o", str(tmp_path / "corpus"))
    assert r.returncode == 0, r.stderr[-2000:]
    documents = IndexedDataset(MergeDataset(str(config)).output().prefix).num_documents
    assert re.match(rf"export corpus: the decontaminate stage, 2 shard\(s\), {documents:,} documents -> "
                    rf"{re.escape(str(tmp_path / 'corpus'))}, as hard links to the run's shards: the same files, so "
                    r"editing one edits both; deleting WORK keeps them \[", r.stdout), r.stdout
    loaded = datasets.load_dataset("parquet", data_dir=str(tmp_path / "corpus"), split="train")
    assert len(loaded) == documents and len(set(loaded["id"])) == documents
    assert all(p.stat().st_nlink == 2 for p in (tmp_path / "corpus").glob("*.parquet"))  # linked, not copied
    work = sorted(str(p) for p in (tmp_path / "work").rglob("*"))
    r = run_cli("export", "corpus", str(config), "-o", str(tmp_path / "work"))  # issue 62: deleted the work folder
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "the run keeps" in r.stderr, r.stderr
    assert sorted(str(p) for p in (tmp_path / "work").rglob("*")) == work
    r = run_cli("export", "corpus", str(config), "-o", str(tmp_path / "corpus"))  # an earlier export: replaced
    assert r.returncode == 0 and len(list((tmp_path / "corpus").glob("*.parquet"))) == 2, r.stderr

    r = run_cli("export", "corpus", str(config), "--stage", "clean", "-o", str(tmp_path / "clean"))
    assert r.returncode == 0 and len(list((tmp_path / "clean").glob("*.parquet"))) == 3, r.stderr  # a shard a unit
    r = run_cli("export", "corpus", str(config), "--stage", "quality", "-o", str(tmp_path / "q"))
    assert r.returncode == 2 and "has no quality stage (its stages: blacklist, scrape, dedup, clean, shuffle, " \
                                 "decontaminate)" in r.stderr, r.stderr
    config.write_text(config.read_text().replace("min_tokens = 32", "min_tokens = 33"))  # clean not run for these
    r = run_cli("export", "corpus", str(config), "--stage", "clean", "-o", str(tmp_path / "clean"))
    assert r.returncode == 2 and "has not finished its clean stage (3 of 3 task(s) left)" in r.stderr, r.stderr


def stage_commands_write_what_the_run_wrote(root: Path, work: Path) -> None:
    """Each `textmill STAGE` on the run's input to that stage, with the run's settings, writes the shards,
    rejects and records the run's stage folder holds (scrape's fetch times aside): one driver, the tasks."""
    import pyarrow.parquet as pq

    def run_files(stage: str, pattern: str) -> list[Path]:
        return sorted((work / stage).glob(f"*/{pattern}"), key=lambda p: p.name)

    def command(stage: str, inputs: list[Path], *options: str) -> Path:
        out = root / "commands" / stage
        r = run_cli(stage, *map(str, inputs), "-o", str(out), *options)
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"textmill {stage}: " in r.stderr  # a progress line per finished step
        return out

    def same(run: list[Path], out: Path, exclude: tuple = ()) -> None:
        assert run and sorted(p.name for p in out.glob("*.parquet")) == sorted(p.name for p in run)
        for path in run:
            ours = out / path.name
            if exclude:
                assert pq.read_table(ours).drop_columns(list(exclude)) == pq.read_table(path).drop_columns(list(exclude))
            else:
                assert ours.read_bytes() == path.read_bytes(), path

    out = command("blacklist", [root / "urls"])
    same(run_files("1-blacklist", "RS_*.parquet"), out)
    out = command("scrape", run_files("1-blacklist", "RS_?-00000.parquet"), "--timeout-s", "1", "--allow-private-addresses",
                  "--extract-workers", "0", "--workers", "2")
    same(run_files("2-scrape", "RS_*.parquet"), out, exclude=("elapsed_s", "fetched_at"))
    out = command("dedup", run_files("2-scrape", "RS_?-00000.parquet"))
    same(run_files("3-dedup", "RS_*.parquet"), out)
    assert (out / ".clusters.json").read_bytes() == run_files("3-dedup", ".clusters.json")[0].read_bytes()
    out = command("clean", run_files("3-dedup", "RS_?-00000.parquet"), "--min-tokens", "32")
    same(run_files("4-clean", "RS_*.parquet"), out)
    out = command("shuffle", run_files("4-clean", "RS_?-00000.parquet"), "--num-shards", "2", "--seed", "1234")
    same(run_files("5-shuffle", "part-*.parquet"), out)
    out = command("decontaminate", run_files("5-shuffle", "part-?????.parquet"), "--eval-files", str(root / "eval.jsonl"))
    same(run_files("6-decontaminate", "part-*.parquet"), out)
    assert (out / ".selected.json").read_bytes() == run_files("6-decontaminate", ".selected.json")[0].read_bytes()


def test_with_num_shards_0_the_shuffle_sizes_its_shards_by_target_shard_mb(tmp_path, finished_run):
    config = copy_run(finished_run.root, tmp_path)
    config.write_text(config.read_text().replace("num_shards = 2", "num_shards = 0\ntarget_shard_mb = 0.01"))
    work = tmp_path / "work"
    before = folders(work)
    r = run_cli("run", str(config), "--workers", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    [shuffled, decontaminated, tokenized] = [work / stage / name for stage in ("5-shuffle", "6-decontaminate", "8-tokenize")
                                             for name in folders(work)[stage] - before[stage]]
    plan = json.loads((shuffled / ".plan.json").read_text())
    cleaned = sum(json.loads(m.read_text())["bytes"] for m in (work / "4-clean").glob("*/.manifests/*.json"))
    assert plan["input_bytes"] == cleaned and plan["num_shards"] == math.ceil(cleaned / (0.01 * 2**20)) > 2
    # Every step after the plan has one task per shard it planned: gathers, counts, cuts, token files.
    assert len(list(shuffled.glob(".manifests/part-*.json"))) == plan["num_shards"]
    assert len(list(decontaminated.glob(".counts/*.counts.json"))) == plan["num_shards"]
    assert len(list(tokenized.glob("part-*.manifest.json"))) == plan["num_shards"]
    assert IndexedDataset(MergeDataset(str(config)).output().prefix).num_documents > 20
    before = stage_files(work)
    assert run_cli("run", str(config)).returncode == 0 and stage_files(work) == before


def test_a_changed_setting_reruns_its_stage_and_everything_after_it_only(tmp_path, finished_run):
    config = copy_run(finished_run.root, tmp_path)
    first = folders(tmp_path / "work")
    assert all(first[s] for s in STAGES)

    write_config(tmp_path, work="work", min_tokens=64, vocab_size=600, train="false", train_iters=20)  # a cleanup setting
    assert run_workflow(config)[0]
    second = folders(tmp_path / "work")
    for stage in STAGES:
        new = second[stage] - first[stage]
        assert bool(new) == (stage >= "4-clean"), stage

    write_config(tmp_path, work="work", min_tokens=64, vocab_size=700, train="false", train_iters=20)  # the tokenizer
    assert run_workflow(config)[0]
    third = folders(tmp_path / "work")
    for stage in STAGES:
        assert bool(third[stage] - second[stage]) == (stage >= "7-tokenizer"), stage


def test_a_failed_and_a_killed_shard_are_redone_alone_and_give_the_same_bytes(tmp_path, site, finished_run):
    config = make_run(tmp_path / "broken", site)
    # Each stage one batch (workflows/batches.py): shard 1's failure must not stop shard 2 in the same task, and
    # the rerun of that task must redo its unfinished shards only.
    config.write_text(config.read_text().replace("[run]\n", "[run]\ntasks_per_stage = 1\n"))
    # A failure in scrape shard 1: something in the way of its output (a folder where the file goes).
    blocked = ScrapeShard(str(config), 1).output().shard
    blocked.mkdir(parents=True)
    (blocked / "in-the-way").write_text("x")
    # A kill in the middle of scrape shard 2: as soon as it has fetched a page.
    victim = ScrapeShard(str(config), 2).output().shard
    proc = subprocess.Popen([sys.executable, "-m", "textmill.cli", "run", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(
            journal.stat().st_size > 0 for journal in victim.parent.glob(f".{victim.stem}.chunk-*.journal.jsonl")):
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not ScrapeShard(str(config), 2).complete() and not MergeDataset(str(config)).complete()

    ok, summary, record, folder = run_workflow(config)
    assert not ok and "ScrapeShard" in summary and not MergeDataset(str(config)).complete()
    # The failed run is recorded too: what failed, the stages it got through, a row in the results.
    assert record.status == "failed" and "ScrapeShard(RS_1-00000): IsADirectoryError" in record.failed[0]
    assert [s.stage for s in record.funnel] == ["blacklist"] and record.corpus is None
    assert "IsADirectoryError" in (folder / "report.html").read_text()
    assert (tmp_path / "broken" / "work" / "results.tsv").read_text().splitlines()[-1].split("\t")[1] == "failed"
    assert ScrapeShard(str(config), 2).complete() and not ScrapeShard(str(config), 1).complete()
    [failure] = (tmp_path / "broken" / "work" / ".textmill" / "failures").iterdir()
    assert "ScrapeShard" in failure.name and "IsADirectoryError" in failure.read_text()
    status = run_cli("status", str(config))
    assert status.returncode == 0
    assert re.search(r"^failed +ScrapeShard\(RS_1-00000\) +IsADirectoryError", status.stdout, re.M), status.stdout
    assert re.search(r"^pending +MergeDataset\(\)", status.stdout, re.M) and "1 failed" in status.stdout
    shutil.rmtree(blocked)

    done_before = {t: ScrapeShard(str(config), t).output().done.stat().st_mtime_ns for t in (0, 2)}
    ok, summary, *_ = run_workflow(config)
    assert ok, summary
    for t, stamp in done_before.items():  # finished shards were not redone
        assert ScrapeShard(str(config), t).output().done.stat().st_mtime_ns == stamp
    assert dataset_bytes(config) == dataset_bytes(finished_run.root / "run.toml")
    assert not failure.exists()  # the shard's success cleared its failure record


def test_new_url_lists_scrape_only_the_new_shard_and_dedup_against_everything(tmp_path, site, finished_run):
    config = make_run(tmp_path / "grow", site, files=2)
    assert run_workflow(config)[0]
    first = folders(tmp_path / "grow" / "work")
    signatures = {p: p.stat().st_mtime_ns for p in (tmp_path / "grow" / "work" / "3-minhash").rglob("*.parquet")}

    make_run(tmp_path / "grow", site, files=3)  # the third list file arrives
    assert run_workflow(config)[0]
    second = folders(tmp_path / "grow" / "work")
    for stage in PER_URL_FILE:
        assert len(second[stage] - first[stage]) == 1, stage  # the new file's folder only
    assert {p: p.stat().st_mtime_ns for p in signatures} == signatures  # old signatures reused as they were
    for stage in set(STAGES) - set(PER_URL_FILE):
        assert second[stage] - first[stage], stage
    # Cleanup is taken, not redone, for each old unit whose documents dedup left as they were: its input's bytes decide.
    work = tmp_path / "grow" / "work"
    [old_dedup], [new_dedup] = first["3-dedup"], second["3-dedup"] - first["3-dedup"]
    [old_clean], [new_clean] = first["4-clean"], second["4-clean"] - first["4-clean"]
    reused = 0
    for old_shard in sorted((work / "3-dedup" / old_dedup).glob("*.parquet")):
        unchanged = old_shard.read_bytes() == (work / "3-dedup" / new_dedup / old_shard.name).read_bytes()
        manifest = json.loads((work / "4-clean" / new_clean / ".manifests" / f"{old_shard.stem}.json").read_text())
        assert manifest.get("reused_from") == (old_clean if unchanged else None), old_shard.name
        if unchanged:
            reused += 1
            assert ((work / "4-clean" / new_clean / old_shard.name).read_bytes()
                    == (work / "4-clean" / old_clean / old_shard.name).read_bytes())
    assert reused >= 1
    [record] = [json.loads(p.read_text()) for p in sorted((work / "runs").glob("*/run.json"))[-1:]]
    [clean] = [s for s in record["funnel"] if s["stage"] == "clean"]
    assert clean["tasks"]["taken"] == reused

    # The same corpus as the run that had all three files from the start.
    assert dataset_bytes(config) == dataset_bytes(finished_run.root / "run.toml")


def test_one_big_list_cut_into_units_gives_the_corpus_of_the_same_urls_in_files(tmp_path, site, finished_run):
    """The finished run's three URL lists as ONE list, cut into units of a third of it: the same token files.
    Lines appended to the list (the third's URLs, arriving later) are blacklisted, scraped and MinHashed as
    a new unit alone: the earlier units' folders and signatures stay as they were."""
    lists = sorted((finished_run.root / "urls").iterdir())
    parts = [path.read_text() for path in lists]
    size = parts[0].count("\n")
    root = tmp_path / "one-list"
    make_run(root, site)
    for path in (root / "urls").iterdir():
        path.unlink()
    big = root / "urls" / "clean_urls.txt"
    big.write_text(parts[0] + parts[1])
    config = root / "run.toml"
    config.write_text(config.read_text().replace("[scrape]", f"[blacklist]\nurls_per_shard = {size}\n[scrape]"))
    assert run_workflow(config)[0]
    first = folders(root / "work")
    signatures = {p: p.stat().st_mtime_ns for p in (root / "work" / "3-minhash").rglob("*.parquet")}
    assert sorted(p.name for p in (root / "work" / "2-scrape").rglob("*.parquet") if p.parent.name != ".rejects"
                  and not p.parent.name.startswith(".")) == ["clean_urls-00000.parquet", "clean_urls-00001.parquet"]

    with open(big, "a") as f:
        f.write(parts[2])
    assert run_workflow(config)[0]
    second = folders(root / "work")
    for stage in PER_URL_FILE:
        assert len(second[stage] - first[stage]) == 1, stage  # the new unit's folder only
    assert {p: p.stat().st_mtime_ns for p in signatures} == signatures
    assert dataset_bytes(config) == dataset_bytes(finished_run.root / "run.toml")


def start_worker(config: Path, url: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "textmill.cli", "run", str(config), "--scheduler-url", url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_workers_on_a_central_luigid_do_each_shard_once(tmp_path, site, finished_run):
    web, server = site

    with central_scheduler(tmp_path) as url:
        shared = make_run(tmp_path / "two-workers", site)
        hits = dict(server.hits)
        workers = [start_worker(shared, url) for _ in range(2)]
        results = [w.communicate(timeout=600) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], [r[1][-2000:] for r in results]
    fetched_shared = {k: v - hits.get(k, 0) for k, v in server.hits.items() if v != hits.get(k, 0)}
    assert fetched_shared == finished_run.fetched  # every page fetched as often as by one run: no shard done twice
    assert dataset_bytes(shared) == dataset_bytes(finished_run.root / "run.toml")


def holding_open(pids: list[int], path: Path) -> int | None:
    """Which of the processes has `path` open (Linux /proc), if any."""
    for pid in pids:
        try:
            if any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir()):
                return pid
        except OSError:  # the process or one of its descriptors went away meanwhile
            continue
    return None


def test_a_worker_killed_mid_scrape_is_replaced_by_the_other(tmp_path, site, finished_run):

    with central_scheduler(tmp_path) as url:
        shared = make_run(tmp_path / "two-workers", site)
        workers = {w.pid: w for w in (start_worker(shared, url) for _ in range(2))}
        victim, deadline = None, time.monotonic() + 300
        while victim is None and time.monotonic() < deadline:  # a worker that is writing a scrape journal
            for journal in (tmp_path / "two-workers" / "work" / "2-scrape").glob("*/.*.journal.jsonl"):
                if journal.stat().st_size > 0:
                    victim = holding_open(list(workers), journal)
                    if victim:
                        break
            time.sleep(0.01)
        assert victim, "no worker was seen scraping"
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        [survivor] = [w for pid, w in workers.items() if pid != victim]
        out, err = survivor.communicate(timeout=600)
        print(f"the graph finished {time.monotonic() - killed_at:.0f} s after the kill")
    assert survivor.returncode == 0, err[-3000:]
    assert dataset_bytes(shared) == dataset_bytes(finished_run.root / "run.toml")


def test_end_to_end_trains_evaluates_exports_and_retrains_alone(tmp_path, finished_run):
    """Training switched on in a finished corpus run: the corpus is found complete, and the model is trained,
    evaluated and exported; then only a training setting changes, and only the model is trained again."""
    config = copy_run(finished_run.root, tmp_path)
    write_config(tmp_path, work="work", min_tokens=32, vocab_size=600, train="true", train_iters=20)
    r = run_cli("run", str(config))
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"trained 20 iterations, validation loss \d", r.stdout)
    assert re.search(r"eval.jsonl: accuracy [\d.]+% \(\d/3\)", r.stdout)
    assert "Hugging Face gpt2 model ->" in r.stdout
    assert "iteration       20/20" in r.stdout  # the trainer's log, streamed
    corpus = folders(tmp_path / "work")
    [hf] = (tmp_path / "work" / "12-export").glob("*/hf/config.json")
    report = (tmp_path / "work" / "report.html").read_text()
    assert "<h2>Training</h2>" in report and "<h2>Evaluation</h2>" in report and "eval</td><td>" in report
    assert report.count("data:image/png;base64,") == 6  # the loss curves besides the corpus charts

    # Only a training setting changes: the corpus is found complete, the model is trained again.
    write_config(tmp_path, work="work", min_tokens=32, vocab_size=600, train="true", train_iters=30)
    r = run_cli("run", str(config))
    assert r.returncode == 0 and "trained 30 iterations" in r.stdout
    assert {s: v for s, v in folders(tmp_path / "work").items() if s in STAGES} == corpus
    assert len(list((tmp_path / "work" / "10-train").iterdir())) == 2


def test_a_retrain_on_a_grown_corpus_starts_from_the_latest_model_when_asked(tmp_path, site):
    config = make_run(tmp_path, site, files=2, train="true")
    text = config.read_text().replace("vocab_size = 600", f'vocab_file = "{TEST_DATA / "gpt2-vocab.json"}"\n'
                                      f'merge_file = "{TEST_DATA / "gpt2-merges.txt"}"')
    config.write_text(text.replace("enabled = true", 'enabled = true\nresume = "latest"'))
    first = run_workflow(config)
    assert first.ok and first.record.train.started_from is None  # nothing earlier: from scratch

    make_run(tmp_path, site, files=3, train="true")  # a new URL list arrives
    config.write_text(text.replace("enabled = true", 'enabled = true\nresume = "latest"'))
    second = run_workflow(config)
    assert second.ok and second.record.train.started_from == first.record.train.checkpoints
    [log] = [p for p in (tmp_path / "work" / "10-train").glob("*/train.log") if str(p.parent) in second.record.train.checkpoints]
    assert f"--load {first.record.train.checkpoints} --finetune" in log.read_text()

    third = run_workflow(config)  # nothing new: the model of this corpus is there already
    assert third.ok and third.record.train == second.record.train
    assert len(list((tmp_path / "work" / "10-train").iterdir())) == 2
    rows = (tmp_path / "work" / "results.md").read_text().splitlines()[-3:]
    assert [row.split(" | ")[1] for row in rows] == ["done"] * 3

    config.write_text(text.replace("enabled = true", 'enabled = true\nresume = "fresh"'))
    fresh = run_workflow(config)
    assert fresh.ok and fresh.record.train.started_from is None
    assert fresh.record.train.checkpoints != second.record.train.checkpoints


def test_schedule_prints_installs_and_removes_the_daily_crontab_line_which_runs_the_chain(tmp_path, finished_run):
    config = copy_run(finished_run.root, tmp_path)
    r = run_cli("schedule", str(config), "--at", "04:30")
    assert r.returncode == 0, r.stderr
    line = r.stdout.splitlines()[0]
    fields = line.split(" ", 5)
    assert fields[:5] == ["30", "4", "*", "*", "*"] and line.endswith(f"# textmill schedule {config}")
    assert "--install" in r.stdout.splitlines()[-1]

    # The command part of the line, as cron would run it (cron hands it to sh): the run is recorded.
    command = fields[5].rsplit(" # textmill schedule ", 1)[0]
    done = subprocess.run(["sh", "-c", command], cwd="/", env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "textmill run: done:" in (tmp_path / "work" / "cron.log").read_text()
    assert len(list((tmp_path / "work" / "runs").iterdir())) == 2  # the finished run's, and cron's

    # --install and --remove edit the user's crontab through the crontab command. This machine has none,
    # so a stand-in keeps the table in a file (the same -l / - interface; -l fails while it is empty).
    bin_dir, table = tmp_path / "bin", tmp_path / "crontab.txt"
    bin_dir.mkdir()
    (bin_dir / "crontab").write_text(f"""#!/bin/sh
if [ "$1" = "-l" ]; then [ -s {table} ] || {{ echo "no crontab for $(id -un)" >&2; exit 1; }}; cat {table}; exit 0; fi
if [ "$1" = "-" ]; then cat > {table}; exit 0; fi
exit 2
""")
    (bin_dir / "crontab").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    assert run_cli("schedule", str(config), "--install", env=env).returncode == 0
    table.write_text("0 1 * * * echo someone else's job\n" + table.read_text())
    # Installing again replaces its own line only.
    assert run_cli("schedule", str(config), "--install", "--at", "05:00", env=env).returncode == 0
    lines = table.read_text().splitlines()
    assert lines[0] == "0 1 * * * echo someone else's job"
    assert len(lines) == 2 and lines[1].startswith("0 5 * * * ") and lines[1].endswith(str(config))
    removed = run_cli("schedule", str(config), "--remove", env=env)
    assert removed.returncode == 0 and "removed 1 crontab line" in removed.stdout
    assert table.read_text().splitlines() == ["0 1 * * * echo someone else's job"]
    bad = run_cli("schedule", str(config), "--at", "25:00", env=env)
    assert bad.returncode == 2 and bad.stderr.strip() == "textmill: error: [schedule] at: '25:00' is not a time of day HH:MM"


def test_a_run_fine_tunes_a_hugging_face_model_on_its_corpus_with_the_models_tokenizer(tmp_path, finished_run):
    """[train] init_from = "hf:PATH": the model imported, the corpus tokenized with its tokenizer (no BPE
    trained), trained from its weights in its shape, evaluated and exported."""
    import transformers

    from textmill.trainer.checkpoint import load_model

    config = copy_run(finished_run.root, tmp_path)
    tokenizers, datasets = folders(tmp_path / "work")["7-tokenizer"], folders(tmp_path / "work")["9-dataset"]
    write_config(tmp_path, work="work", min_tokens=32, vocab_size=600, train="true", train_iters=4)
    write_hf_llama(tmp_path / "llama", 2)
    config.write_text(config.read_text().replace("[train]\n", '[train]\ninit_from = "hf:llama"\n'))
    r = run_cli("run", str(config))
    assert r.returncode == 0, r.stderr[-3000:]
    work = tmp_path / "work"
    assert folders(work)["7-tokenizer"] == tokenizers  # no BPE trained
    assert list((work / "7-import").glob("*/ckpt/tokenizer/tokenizer.json"))
    [log] = (work / "10-train").glob("*/train.log")
    assert "--finetune --use-checkpoint-args" in log.read_text() and "--tokenizer-type HuggingFaceTokenizer" in log.read_text()
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path / "llama")
    [dataset] = [work / "9-dataset" / name / "corpus_text_document.idx" for name in folders(work)["9-dataset"] - datasets]
    documents = IndexedDataset(dataset.with_suffix(""))
    assert documents[0][0] == reference.bos_token_id and documents[0][-1] == reference.eos_token_id
    [ckpt] = (work / "10-train").glob("*/ckpt")
    trained, meta = load_model(ckpt)
    assert trained.config.kv_heads == 2 and meta.meta["iteration"] == 4
    [exported] = (work / "12-export").glob("*/hf")
    again = transformers.AutoModelForCausalLM.from_pretrained(exported)
    assert again.config.num_key_value_heads == 2 and (exported / "tokenizer.json").is_file()
    rerun = run_cli("run", str(config))
    assert rerun.returncode == 0 and "7-import" not in rerun.stderr  # all done: nothing imported or trained again


def test_a_run_fine_tunes_a_gptj_with_gpt2_tokenizer_files_and_spare_embedding_rows(tmp_path, finished_run):
    """init_from with a folder holding GPT-2's vocab.json and merges.txt (no tokenizer.json) and more
    embedding rows than tokens, as GPT-J 6B: tokenized with those files, trained, exported whole."""
    import transformers

    config = copy_run(finished_run.root, tmp_path)
    write_config(tmp_path, work="work", min_tokens=32, vocab_size=600, train="true", train_iters=2)
    write_hf_gptj(tmp_path / "gptj")
    config.write_text(config.read_text().replace("[train]\n", '[train]\ninit_from = "hf:gptj"\n'))
    r = run_cli("run", str(config))
    assert r.returncode == 0, r.stderr[-3000:]
    work = tmp_path / "work"
    [log] = (work / "10-train").glob("*/train.log")
    assert "/ckpt/tokenizer/vocab.json --merge-file" in log.read_text()
    assert "vocab 50257 (the model's 50400) padded to 50432" in log.read_text()
    [exported] = (work / "12-export").glob("*/hf")
    again = transformers.AutoModelForCausalLM.from_pretrained(exported)
    assert type(again).__name__ == "GPTJForCausalLM" and again.config.vocab_size == 50400
