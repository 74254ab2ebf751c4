"""`textmill run` when things go wrong (docs/RELIABILITY.md): damaged records, a full disk, a second run on
the same work folder, and a failure that a retry would not cure."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from support.cli import run_cli
from support.runs import central_scheduler, copy_run, dataset_bytes, make_run
from textmill.workflows import BlacklistShard, Shuffle
from textmill.workflows.runner import work_lock
from textmill.workflows.stages import StageRecord


def no_traceback(r):
    assert "Traceback" not in r.stdout + r.stderr, r.stdout[-3000:] + r.stderr[-3000:]


def cut_in_half(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_damaged_records_are_reported_ignored_and_rebuilt(tmp_path, finished_run):
    config = copy_run(finished_run.root, tmp_path)
    expected = dataset_bytes(config)
    work = tmp_path / "work"
    timing = next(p for p in sorted((work / ".textmill" / "times").iterdir()) if p.name.startswith("CleanShard"))
    manifest = BlacklistShard(str(config), 0).output().done
    task_file = Shuffle(str(config)).output().done
    stage_record = StageRecord(str(config), "clean").output().done  # rebuilt, it reads the cleaned shards' times
    [run_record] = (work / "runs").glob("*/run.json")
    for path in (timing, manifest, task_file, stage_record, run_record):
        cut_in_half(path)

    status = run_cli("status", str(config))
    no_traceback(status)
    assert status.returncode == 0 and re.search(r"^pending +BlacklistShard\(RS_0-00000\)", status.stdout, re.M)
    assert re.search(r"^pending +Shuffle\(\)", status.stdout, re.M)
    assert f"textmill: {manifest} is damaged (not a whole JSON object); its task will run again" in status.stderr

    again = run_cli("run", str(config))
    no_traceback(again)
    assert again.returncode == 0, again.stderr[-3000:]
    for path, consequence in [(timing, "ignored (it is rewritten when the task next runs)"),
                              (task_file, "its task will run again"), (stage_record, "its task will run again"),
                              (run_record, "that run is left out of results.md and the report")]:
        assert f"textmill: {path} is damaged (not a whole JSON object); {consequence}" in again.stderr
    for path in (manifest, task_file, stage_record):  # rebuilt whole
        assert json.loads(path.read_text())
    assert dataset_bytes(config) == expected
    assert len((work / "results.tsv").read_text().splitlines()) == 2  # header and the new run; the damaged one left out


def mount_tmpfs(folder, size):
    folder.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")


def test_a_full_disk_fails_in_one_line_and_a_rerun_with_room_finishes(tmp_path, site, finished_run):
    clean = finished_run.root / "run.toml"
    used = sum(p.stat().st_size for p in (finished_run.root / "work").rglob("*") if p.is_file())
    work = tmp_path / "full" / "work"
    mount_tmpfs(work, f"{used // 3 // 1024}k")  # room for a third of what the run writes
    try:
        config = make_run(tmp_path / "full", site)
        r = run_cli("run", str(config))
        no_traceback(r)
        assert r.returncode in (1, 2)
        assert "No space left on device" in r.stderr.strip().splitlines()[-1], r.stderr[-2000:]
        status = run_cli("status", str(config))
        no_traceback(status)
        assert status.returncode == 0 and "pending" in status.stdout
        subprocess.run(["mount", "-o", f"remount,size={used * 4 // 1024}k", str(work)], check=True)
        r = run_cli("run", str(config))
        assert r.returncode == 0, r.stderr[-3000:]
        assert dataset_bytes(config) == dataset_bytes(clean)
    finally:
        subprocess.run(["umount", str(work)], check=True)


def test_a_second_run_on_the_same_work_folder_refuses_in_one_line(tmp_path, site):
    config = make_run(tmp_path, site)
    work = tmp_path / "work"
    with work_lock(work):  # what a first `textmill run` holds while it works
        r = run_cli("run", str(config))
    no_traceback(r)
    assert r.returncode == 2
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"textmill: error: another `textmill run` is working in {work} (pid {os.getpid()}, started ")
    assert line.endswith("wait for it to finish, or run several workers through a central scheduler (--scheduler-url)")
    assert not (work / "1-blacklist").exists()


def test_a_killed_run_leaves_no_lock_behind(tmp_path, site):
    config = make_run(tmp_path, site)
    lock = tmp_path / "work" / ".textmill" / "run.lock"
    proc = subprocess.Popen([sys.executable, "-m", "textmill.cli", "run", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert f"pid {proc.pid}" in lock.read_text()
    r = run_cli("run", str(config))
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("scheduler", ["its own", "luigid"])
def test_a_run_with_two_workers_killed_mid_stage_leaves_nothing_working_and_nothing_locked(tmp_path, site, scheduler):
    """kill -9 of `textmill run --workers 2` while its worker processes run tasks (its own long-lived workers, or
    with a central scheduler Luigi's process per task): every process it forked ends with it (none keeps the
    work folder's lock or goes on writing), and the next run works in the folder and finishes."""
    import psutil

    config = make_run(tmp_path, site)
    # One task a stage: a forked process that outlived the run would go on with the whole scrape, for seconds.
    config.write_text(config.read_text().replace("[run]\n", "[run]\ntasks_per_stage = 1\n"))
    work = tmp_path / "work"
    with contextlib.ExitStack() as stack:
        central = [] if scheduler == "its own" else ["--scheduler-url", stack.enter_context(central_scheduler(tmp_path))]
        proc = subprocess.Popen([sys.executable, "-m", "textmill.cli", "run", str(config), "--workers", "2", *central],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline, forked = time.monotonic() + 300, []
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(psutil.NoSuchProcess):
                forked = psutil.Process(proc.pid).children(recursive=True)
            if forked and (work / "2-scrape").exists():  # tasks are running in forked processes
                break
            time.sleep(0.05)
        assert forked and proc.poll() is None, "the run ended before its forked processes were caught working"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        gone, alive = psutil.wait_procs(forked, timeout=1)  # the kernel signals them at once
        working = [p.pid for p in alive if status_of(p) not in (None, psutil.STATUS_ZOMBIE)]  # a zombie has ended
        assert not working, f"processes outlived the killed run: {working}"
    r = run_cli("run", str(config), "--workers", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r)


def status_of(process) -> str | None:
    """A process's state, None once it is gone."""
    import psutil

    try:
        return process.status()
    except psutil.NoSuchProcess:
        return None


def test_a_deterministic_failure_is_tried_once_and_every_report_says_its_cause(tmp_path, site):
    config = make_run(tmp_path, site, train="true")
    config.write_text(config.read_text().replace('split = "90,10,0"', 'split = "0,100,0"'))
    cause = "textmill train: --split 0,100,0 leaves no training documents"
    r = run_cli("run", str(config))
    no_traceback(r)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"textmill run: failed: TrainGPT(): {cause} ("), last
    [log] = (tmp_path / "work" / "10-train").glob("*/train.log")
    assert log.read_text().count("\n$ ") + log.read_text().startswith("$ ") == 1  # one try, no retries
    status = run_cli("status", str(config))
    assert re.search(rf"^failed +TrainGPT\(\) +{re.escape(cause)} \(", status.stdout, re.M), status.stdout
    assert cause in (tmp_path / "work" / "report.html").read_text()


def test_a_task_luigid_disabled_for_failing_twice_is_tried_again_by_the_next_run(tmp_path, site):
    """A task that fails twice in a run (as when two runs are killed while it works) is disabled by luigid for
    a day, and a worker cannot undo that by scheduling it again (Luigi's rule): every later run on the same
    luigid ended "not finished" at once. The next run asks luigid for its disabled tasks and re-enables those of
    its graph: the rerun finishes once the cause is gone."""
    from textmill.workflows import ScrapeShard

    config = make_run(tmp_path, site)
    blocked = ScrapeShard(str(config), 1).output().shard  # a folder where the shard's file goes: not a bad input,
    blocked.mkdir(parents=True)                          # so the run tries it twice
    (blocked / "in-the-way").write_text("x")
    with central_scheduler(tmp_path) as url:
        first = run_cli("run", str(config), "--scheduler-url", url)
        assert first.returncode == 1 and "IsADirectoryError" in first.stdout + first.stderr, first.stderr[-3000:]
        for name in (blocked / "in-the-way", blocked):
            name.unlink() if name.is_file() else name.rmdir()
        again = run_cli("run", str(config), "--scheduler-url", url)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "textmill run: done:" in again.stdout
