"""`textmill slurm run.toml --nodes N --workers W`: the Slurm job that runs a TOML file's whole chain on N
nodes of a cluster. `sbatch` it: the node the script runs on starts the job's own central scheduler (luigid,
`textmill scheduler`) on a port of the job, then `srun` starts `textmill run --workers W --scheduler-url ...` on
every node; each worker asks the scheduler for work, so each unit is done once, and a job run again (or after a
node was lost) redoes only what is not finished. The job's exit status is srun's: 0 when every node's run
finished its part."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from textmill.errors import TextmillError
from textmill.run_file import load_config

# luigid's port: one of the job's own, from its id, so two jobs on one node do not meet.
PORT_BASE, PORTS = 20000, 20000

# What sbatch takes for each option the command passes on: one word each, so a value can never become a second
# #SBATCH option or a line of the script. Times as sbatch reads them (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM,
# D-HH:MM:SS, or no limit); partitions a comma-separated list of names.
_NAME = r"[A-Za-z0-9_.\-]+"
SBATCH_VALUES = {
    "partition": (re.compile(rf"{_NAME}(,{_NAME})*"), "a partition name, or names separated by commas"),
    "time": (re.compile(r"[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}|UNLIMITED|INFINITE|unlimited|infinite"),
             "a time as sbatch takes it: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"),
    "account": (re.compile(_NAME), "an account name (letters, digits, _ . -)"),
}


def sbatch_options(nodes: int, workers: int, job_name: str, **given: str | None) -> list[str]:
    """The script's #SBATCH options, each value checked to be one word of the shape sbatch takes."""
    options = [f"--job-name={job_name}", f"--nodes={nodes}", "--ntasks-per-node=1", f"--cpus-per-task={workers}"]
    for name, value in given.items():
        if value is None:
            continue
        shape, wanted = SBATCH_VALUES[name]
        if not shape.fullmatch(value):
            raise TextmillError(f"--{name} {value!r}: give {wanted}")
        options.append(f"--{name}={value}")
    return options


def job_name(config: Path) -> str:
    """textmill-STEM, with what is not a letter, digit, _ . or - of the run file's name made `_`."""
    return "textmill-" + re.sub(r"[^A-Za-z0-9_.\-]", "_", config.stem)


def job_script(config: Path, nodes: int, workers: int, partition: str | None = None, time: str | None = None,
               account: str | None = None) -> str:
    """The sbatch script, with this Python (the environment textmill is installed in, which every node must see).
    Every path in it is shell-quoted, and a path holding a control character (a newline would end the quoted
    word's line in a comment, and is no name a user means) is refused."""
    if nodes < 1 or workers < 1:
        raise TextmillError(f"--nodes and --workers must be at least 1, not {nodes} and {workers}")
    config = Path(config).resolve()
    for path in (str(config), sys.executable):
        if any(ord(c) < 32 or ord(c) == 127 for c in path):
            raise TextmillError(f"{path!r} holds a control character (a newline?): the job script would run what "
                                "follows it; rename it")
    load_config(config)  # a bad file is one error line now, not on the cluster
    textmill = f"{shlex.quote(sys.executable)} -m textmill.cli"
    options = sbatch_options(nodes, workers, job_name(config), partition=partition, time=time, account=account)
    state = shlex.quote(str(config.parent / ".textmill-slurm")) + '/"${SLURM_JOB_ID:-local}"'
    return "\n".join([
        "#!/bin/bash",
        f"# Written by `textmill slurm` (--nodes {nodes} --workers {workers}) for the run file srun names below: sbatch "
        "this file.",
        *(f"#SBATCH {option}" for option in options),
        "set -euo pipefail",
        f"cd {shlex.quote(str(config.parent))}",
        "# The job's central scheduler, on this node, on a port of the job's own.",
        'head=$(hostname)',
        f'port=$(( {PORT_BASE} + ${{SLURM_JOB_ID:-0}} % {PORTS} ))',
        f"state={state}",
        'mkdir -p "$state"',
        f'{textmill} scheduler --address "$head" --port "$port" --state-path "$state/luigi-state.pickle" \\',
        '    --logdir "$state" > "$state/luigid.log" 2>&1 &',
        "scheduler=$!",
        "trap 'kill $scheduler 2>/dev/null || true' EXIT",
        f'until {shlex.quote(sys.executable)} -c "import socket, sys; socket.create_connection((sys.argv[1], '
        'int(sys.argv[2])), 2)" "$head" "$port" 2>/dev/null; do',
        '    kill -0 "$scheduler" 2>/dev/null ||',
        '        { echo "textmill slurm: the scheduler did not start: $state/luigid.log" >&2; exit 1; }',
        "    sleep 1",
        "done",
        f"# A worker of {workers} processes on every node; each unit is done once, whichever node asks first.",
        f'srun --nodes={nodes} --ntasks-per-node=1 {textmill} run {shlex.quote(str(config))} --workers {workers} \\',
        '    --scheduler-url "http://$head:$port"',
        "",
    ])


def cmd_slurm(args) -> str | None:
    script = job_script(args.config, args.nodes, args.workers, args.partition, args.time, args.account)
    if args.output is None:
        print(script, end="")
        return None
    args.output.write_text(script)
    args.output.chmod(0o755)
    return (f"slurm: wrote {args.output}; `sbatch {args.output}` runs {args.config} on {args.nodes} node(s) of "
            f"{args.workers} worker(s)")


def add_slurm_parser(sub) -> None:
    import argparse

    p = sub.add_parser("slurm", help="Write the Slurm job that runs a TOML file's whole chain on several nodes.",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", type=Path, help="the run's TOML file (on a file system every node sees)")
    p.add_argument("--nodes", type=int, required=True, help="nodes to run on")
    p.add_argument("--workers", type=int, default=1, help="tasks each node runs at once (textmill run --workers; "
                   "also the job's --cpus-per-task; default 1)")
    p.add_argument("--partition", help="the Slurm partition (#SBATCH --partition; default: the cluster's)")
    p.add_argument("--time", help="the job's time limit, as sbatch takes it, e.g. 12:00:00 (default: the partition's)")
    p.add_argument("--account", help="the account the job is charged to (default: yours)")
    p.add_argument("--output", "-o", type=Path, help="write the script here (default: print it)")
    p.set_defaults(func=cmd_slurm)
