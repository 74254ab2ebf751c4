"""Daily runs from cron. `textmill schedule run.toml` prints the crontab line that runs the whole chain at
[schedule] at; `--install` puts it in this user's crontab (in place of an earlier line for the same TOML
file) and `--remove` takes it out.

The line runs `textmill run` with this Python, from the TOML file's folder, under `flock -n` where flock
exists (a run still going when the next one is due makes the next one skip rather than pile up), and
appends its output to work_dir/cron.log. Each run is dated (work_dir/runs/), so the results table shows
the scheduled runs side by side.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from textmill.errors import TextmillError
from textmill.run_file import ScheduleSection, load_config

MARK = "# textmill schedule "


def cron_quote(path: Path | str) -> str:
    """A shell word cron passes through unchanged (cron turns a bare % into a newline)."""
    return shlex.quote(str(path)).replace("%", "\\%")


def crontab_line(config: Path, at: str | None = None, workers: int = 1, scheduler_url: str | None = None) -> str:
    config = Path(config).resolve()
    settings = load_config(config)
    hour, minute = (ScheduleSection(at) if at else settings.schedule).hour_minute()
    work = settings.run.work_dir
    run = [sys.executable, "-m", "textmill.cli", "run", str(config), "--workers", str(workers)]
    if scheduler_url:
        run += ["--scheduler-url", scheduler_url]
    flock = shutil.which("flock")
    if flock:
        run = [flock, "-n", str(work / ".textmill" / "cron.lock")] + run
    command = (f"mkdir -p {cron_quote(work / '.textmill')} && cd {cron_quote(config.parent)} && "
               f"{' '.join(map(cron_quote, run))} >> {cron_quote(work / 'cron.log')} 2>&1")
    return f"{minute} {hour} * * * {command} {MARK}{config}"


def crontab() -> str:
    path = shutil.which("crontab")
    if path is None:
        raise TextmillError("no crontab command on this machine: add the line `textmill schedule` prints to your scheduler")
    return path


def current_crontab() -> list[str]:
    listed = subprocess.run([crontab(), "-l"], capture_output=True, text=True)
    if listed.returncode != 0:
        if "no crontab" in listed.stderr.lower():
            return []
        raise TextmillError(f"crontab -l failed: {listed.stderr.strip()}")
    return listed.stdout.splitlines()


def install(config: Path, line: str | None) -> int:
    """Put `line` in the crontab in place of the lines for `config` (None: only take those out); the
    number of lines taken out."""
    mark = MARK + str(Path(config).resolve())
    lines = current_crontab()
    kept = [x for x in lines if not x.endswith(mark)]
    new = kept + ([line] if line else [])
    written = subprocess.run([crontab(), "-"], input="\n".join(new) + "\n", capture_output=True, text=True)
    if written.returncode != 0:
        raise TextmillError(f"crontab - failed: {written.stderr.strip()}")
    return len(lines) - len(kept)


def cmd_schedule(args) -> str:
    config = Path(args.config).resolve()
    if args.remove:
        removed = install(config, None)
        return f"schedule: removed {removed} crontab line(s) for {config}"
    line = crontab_line(config, args.at, args.workers, args.scheduler_url)
    print(line)
    if not args.install:
        return "schedule: add this line with `crontab -e`, or run again with --install"
    removed = install(config, line)
    return f"schedule: installed in the crontab ({removed} earlier line(s) for this file replaced)"


def add_schedule_parser(sub) -> None:
    import argparse

    p = sub.add_parser("schedule", help="Print (or install) the crontab line that runs a TOML file's whole chain daily.",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", type=Path, help="the run's TOML file")
    p.add_argument("--at", help="time of day HH:MM (default: the file's [schedule] at, itself 03:00 by default)")
    p.add_argument("--workers", type=int, default=1, help="tasks run at once (textmill run --workers; default 1)")
    p.add_argument("--scheduler-url", help="a central luigid for the scheduled run (default: a local scheduler)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--install", action="store_true", help="put the line in this user's crontab, replacing an "
                       "earlier line for the same file")
    group.add_argument("--remove", action="store_true", help="take this file's line out of the crontab")
    p.set_defaults(func=cmd_schedule)
