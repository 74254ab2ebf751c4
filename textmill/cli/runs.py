"""`textmill run | status`: the whole chain as one Luigi graph, and where it stands."""

from __future__ import annotations

import sys
from pathlib import Path

from textmill.cli.options import ArgumentDefaults, DocstringHelpFormatter
from textmill.errors import NothingKept, TextmillError


def cmd_run(args) -> str:
    from textmill.report.lines import failed_run_lines, nothing_kept
    from textmill.report.results import run_lines
    from textmill.run_file import example_config, load_config
    from textmill.workflows.runner import run_workflow

    if args.example_config:
        return example_config().rstrip()
    if args.config is None:
        raise TextmillError("give the run's TOML file (textmill run --example-config prints a documented one)")
    load_config(args.config)  # a bad config is one error line before Luigi starts
    ok, summary, record, folder = run_workflow(args.config, args.workers, args.scheduler_url)
    if not ok:
        print("\n".join([summary, *failed_run_lines(record, folder)]), file=sys.stderr)
        raise SystemExit(1)
    if record.corpus is not None and not record.corpus.documents:
        print("\n".join(run_lines(record, folder)), flush=True)
        emptied = next((s for s in record.funnel if not s.kept), None)
        raise NothingKept("the run's corpus holds no documents" + (f": {nothing_kept(emptied)}" if emptied else ""))
    return "\n".join(run_lines(record, folder))


def cmd_ablate(args) -> str:
    from textmill.report.ablation import answer_lines
    from textmill.run_file import load_config
    from textmill.workflows.ablation import run_ablation

    load_config(args.config)  # a bad config is one error line before Luigi starts
    record, folder = run_ablation(args.config, args.workers, args.scheduler_url)
    variants, seeds = len(record.variants), len(record.variants[0].seeds)
    return "\n".join([*answer_lines(record),
                      f"ablate: {variants} variant(s) x {seeds} seed(s) in {record.seconds:.0f} s -> {folder}"])


ABLATE_HELP = """\
Measure what a corpus (or one setting of its chain) is worth by the model it makes: every variant the run
file's [ablation] table names, each the run file with its overrides, is built as one Luigi graph (a stage a
variant does not change is computed once for all of them), its model trained once per seed on the same
number of tokens (the run file's [train] settings), and measured in bits per byte of held-out text (LAMBADA's
passages, shipped; [ablation] held_out) and in LAMBADA accuracy ([evaluate] lambada). The last lines are a
table (each evaluation's mean over the seeds, its spread, the difference to the baseline, * where the seeds
do not overlap) and which variant won on what. Written to WORK/ablations/<date_time>/; docs/ablations.md
says how to read it.

    [ablation]
    seeds = [1, 2]
    [ablation.variants.default]
    [ablation.variants.gopher]
    quality = { preset = "gopher" }
"""


RUN_HELP = """\
Run the whole chain a TOML file describes as one Luigi graph: blacklist, scrape, dedup, clean, shuffle,
decontaminate, tokenize, then (with [train] enabled) train, evaluate and export. Only what is not
finished runs; `textmill run --example-config` prints a TOML file documenting every field.

What it writes, under [run] work_dir (WORK):
  WORK/<stage>/<key>/        each stage's output, in a folder named by the settings that made it
  WORK/runs/<date_time>/     this run's record (run.json) and report.html
  WORK/report.html           the newest run's report: funnel, histograms, loss curves, evaluation, timings
  WORK/results.md            the last runs side by side, with REGRESSION notes (WORK/results.tsv: all runs)

WORK and every input may be URLs in a store fsspec reaches (s3://bucket/prefix: the s3 extra, '.[s3]').
Each machine then works in a local copy under $TEXTMILL_CACHE (default ~/.cache/textmill): a task
downloads what it reads and uploads what it wrote, its manifest last. Credentials and endpoints come from
the usual places (AWS_ENDPOINT_URL, the credential chain) or a [storage.PROTOCOL] table.

When it fails it exits with status 1, Luigi's summary, and a last line naming the failed task and its
cause; `textmill status CONFIG` lists each failed task with its error. Fix the cause and run again:
finished tasks are kept, only the rest runs. Without --scheduler-url one run works in WORK at a time: a
second one refuses at once.
"""


def cmd_status(args) -> str:
    from collections import Counter

    from textmill.run_file import load_config
    from textmill.workflows.run_records import task_states

    load_config(args.config)
    states = task_states(args.config)
    for s in states:
        if args.all or s["state"] != "done":
            print(f"{s['state']:<8} {s['task']}" + (f"  {s['reason']}" if s["reason"] else ""))
    counts = Counter(s["state"] for s in states)
    return (f"status: {len(states)} task(s): {counts['done']} done, {counts['pending']} pending, {counts['failed']} failed"
            + ("" if args.all else " (--all lists the done ones too)"))


SCHEDULER_HELP = """Start Luigi's central scheduler (luigid) with textmill's settings for it, for `textmill run
--scheduler-url` on every machine. A worker that dies (killed, its machine lost) is noticed within 30 s and the
task it was running is handed to another worker 10 s later, instead of after Luigi's default quarter of an
hour. The settings are in the file --print-config shows; luigid runs in this process until stopped.
"""


def cmd_scheduler(args) -> str:
    import os
    import sys
    from importlib import resources

    config = resources.files("textmill.workflows").joinpath("luigid.cfg")
    if args.print_config:
        return config.read_text().rstrip()
    args.logdir.mkdir(parents=True, exist_ok=True)
    print(f"scheduler: luigid on http://{args.address}:{args.port} with {config} (state {args.state_path}, logs "
          f"{args.logdir}); workers: textmill run RUN.toml --scheduler-url http://HOST:{args.port}; Ctrl-C stops",
          flush=True)
    argv = [sys.executable, "-c", "from luigi.cmdline import luigid; luigid()", "--address", args.address,
            "--port", str(args.port), "--state-path", str(args.state_path), "--logdir", str(args.logdir)]
    os.execve(sys.executable, argv, {**os.environ, "LUIGI_CONFIG_PATH": str(config)})


def add_build_options(p) -> None:
    """How a graph is built: the options of run and ablate."""
    p.add_argument("--workers", type=int, default=1,
                   help="tasks run at once: this many long-lived worker processes, which end with the command "
                   "(with --scheduler-url, Luigi's worker with this many processes)")
    p.add_argument("--scheduler-url", help="a central luigid scheduler, e.g. http://127.0.0.1:8082 "
                   "(default: a local scheduler in this process)")


def add_parsers(sub) -> None:
    fmt = ArgumentDefaults

    p = sub.add_parser("run", help="Run the whole graph a TOML file describes, redoing only what is not finished.",
                       description=RUN_HELP, formatter_class=DocstringHelpFormatter)
    p.add_argument("config", type=Path, nargs="?", help="the run's TOML file")
    add_build_options(p)
    p.add_argument("--example-config", action="store_true", help="print a TOML file documenting every field, and exit")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("ablate", help="Train and compare a model per variant of a run file ([ablation]).",
                       description=ABLATE_HELP, formatter_class=DocstringHelpFormatter)
    p.add_argument("config", type=Path, help="the run's TOML file, with an [ablation] table")
    add_build_options(p)
    p.set_defaults(func=cmd_ablate)

    p = sub.add_parser("status", help="List the tasks of a run: done, pending, or failed with the last failure's reason.",
                       description="List every task of the run a TOML file describes that is not done (all of them "
                       "with --all), and for a failed one the error of its last failure. Reads the work folder only.",
                       formatter_class=fmt)
    p.add_argument("config", type=Path, help="the run's TOML file")
    p.add_argument("--all", action="store_true", help="list the done tasks too")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("scheduler", help="Start Luigi's central scheduler with textmill's settings (lost workers retried).",
                       description=SCHEDULER_HELP, formatter_class=DocstringHelpFormatter)
    p.add_argument("--address", default="127.0.0.1", help="address to listen on: for workers on other machines, an "
                   "address of a private network they share (luigid has no authentication)")
    p.add_argument("--port", type=int, default=8082, help="port to listen on")
    p.add_argument("--state-path", type=Path, default=Path("luigi-state.pickle"),
                   help="where luigid keeps its task states across restarts (a pickle luigid loads: keep it where "
                   "only the scheduler's user can write)")
    p.add_argument("--logdir", type=Path, default=Path("luigi-logs"), help="folder of luigid's logs")
    p.add_argument("--print-config", action="store_true", help="print textmill's luigid settings, and exit")
    p.set_defaults(func=cmd_scheduler)
