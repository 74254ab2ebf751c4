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
# The most nodes and worker processes per node a job asks for (a larger number is a typo, not a cluster).
MAX_NODES, MAX_WORKERS = 65536, 1024

# What sbatch takes for each option the command passes on: one word each, so a value can never become a second
# #SBATCH option or a line of the script. Times as sbatch reads them (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM,
# D-HH:MM:SS, or no limit); partitions a comma-separated list of names.
_NAME = r"[A-Za-z0-9_.\-]+"
SBATCH_VALUES = {
    "partition": (re.compile(rf"{_NAME}(,{_NAME})*"), "a partition name, or names separated by commas"),
    "time": (re.compile(r"[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}|UNLIMITED|INFINITE|unlimited|infinite"),
             "a time as sbatch takes it: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"),
    "account": (re.compile(_NAME), "an account name (letters, digits, _ . -)"),
    "mem": (re.compile(r"[0-9]+[KMGT]?"), "memory per node as sbatch takes it: a number of megabytes, or with K, M, G "
            "or T (0: all of a node's)"),
    "output": (re.compile(r"[^\s\"'\\]+"), "a file name without spaces or quotes (sbatch's patterns: %j the job's id, "
               "%N the node)"),
    "error": (re.compile(r"[^\s\"'\\]+"), "a file name without spaces or quotes (sbatch's patterns: %j the job's id, "
              "%N the node)"),
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


# Whether HOST:PORT answers a question only luigid answers (its task list, as JSON with a "response").
LUIGID_ANSWERS = ("import json, sys, urllib.request; url = f'http://{sys.argv[1]}:{sys.argv[2]}/api/task_list?data=%7B%7D'; "
                  "sys.exit('response' not in json.load(urllib.request.urlopen(url, timeout=5)))")


def job_name(config: Path) -> str:
    """textmill-STEM, with what is not a letter, digit, _ . or - of the run file's name made `_`."""
    return "textmill-" + re.sub(r"[^A-Za-z0-9_.\-]", "_", config.stem)


def job_script(config: Path, nodes: int, workers: int, **sbatch: str | None) -> str:
    """The sbatch script, with this Python (the environment textmill is installed in, which every node must see);
    `sbatch`: the options passed on (partition, time, account, mem, output, error). Every path in it is shell-quoted,
    and a path holding a control character (a newline would end the quoted word's line in a comment, and is no name
    a user means) is refused."""
    if not (1 <= nodes <= MAX_NODES and 1 <= workers <= MAX_WORKERS):
        raise TextmillError(f"--nodes must be 1 to {MAX_NODES:,} and --workers 1 to {MAX_WORKERS:,}, not {nodes} and "
                            f"{workers}")
    config = Path(config).resolve()
    for path in (str(config), sys.executable):
        if any(ord(c) < 32 or ord(c) == 127 for c in path):
            raise TextmillError(f"{path!r} holds a control character (a newline?): the job script would run what "
                                "follows it; rename it")
    load_config(config)  # a bad file is one error line now, not on the cluster
    python = shlex.quote(sys.executable)
    textmill = f"{python} -m textmill.cli"
    options = sbatch_options(nodes, workers, job_name(config), **sbatch)
    state = shlex.quote(str(config.parent / ".textmill-slurm")) + '/"${SLURM_JOB_ID:-local}"'
    return "\n".join([
        "#!/bin/bash",
        f"# Written by `textmill slurm` (--nodes {nodes} --workers {workers}) for the run file srun names below: sbatch "
        "this file.",
        *(f"#SBATCH {option}" for option in options),
        "set -euo pipefail",
        f"cd {shlex.quote(str(config.parent))}",
        "# The job's central scheduler, on this node, on a port of the job's own, which must be free here: a service",
        "# already on it would pass for the scheduler.",
        'head=$(hostname)',
        f'port=$(( {PORT_BASE} + ${{SLURM_JOB_ID:-0}} % {PORTS} ))',
        f"state={state}",
        'mkdir -p "$state"',
        f'if ! {python} -c "import socket, sys; socket.create_server((\'\', int(sys.argv[1])))" "$port" 2>/dev/null; then',
        '    echo "textmill slurm: port $port on $head, the job\'s scheduler port (from its id), is taken" >&2; exit 1',
        "fi",
        "# On every interface of this node: the other nodes reach it by this node's name, whatever address that name",
        "# has here (Debian maps a machine's own name to 127.0.1.1, which no other node reaches).",
        f'{textmill} scheduler --address 0.0.0.0 --port "$port" --state-path "$state/luigi-state.pickle" \\',
        '    --logdir "$state" > "$state/luigid.log" 2>&1 &',
        "scheduler=$!",
        "trap 'kill $scheduler 2>/dev/null || true' EXIT",
        "# Ready when this job's scheduler is alive and answers on the port as luigid does.",
        f'until kill -0 "$scheduler" 2>/dev/null && {python} -c "{LUIGID_ANSWERS}" "$head" "$port" 2>/dev/null; do',
        '    kill -0 "$scheduler" 2>/dev/null ||',
        '        { echo "textmill slurm: the scheduler did not start: $state/luigid.log" >&2; exit 1; }',
        "    sleep 1",
        "done",
        f"# A worker of {workers} processes on every node, each with {workers} CPUs (srun does not pass the job's",
        "# --cpus-per-task on since Slurm 22.05); each unit is done once, whichever node asks first.",
        f'srun --nodes={nodes} --ntasks-per-node=1 --cpus-per-task={workers} {textmill} run {shlex.quote(str(config))} \\',
        f'    --workers {workers} --scheduler-url "http://$head:$port"',
        "",
    ])


def cmd_slurm(args) -> str | None:
    script = job_script(args.config, args.nodes, args.workers, partition=args.partition, time=args.time,
                        account=args.account, mem=args.mem, output=args.job_output, error=args.job_error)
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
    p.add_argument("--workers", type=int, default=1, help=f"tasks each node runs at once (textmill run --workers; "
                   f"also the job's and srun's --cpus-per-task; 1 to {MAX_WORKERS:,}; default 1)")
    p.add_argument("--partition", help="the Slurm partition (#SBATCH --partition; default: the cluster's)")
    p.add_argument("--time", help="the job's time limit, as sbatch takes it, e.g. 12:00:00 (default: the partition's)")
    p.add_argument("--account", help="the account the job is charged to (default: yours)")
    p.add_argument("--mem", help="memory per node (#SBATCH --mem), e.g. 64G; 0: all of it (default: the partition's)")
    p.add_argument("--job-output", help="the job's log file (#SBATCH --output), e.g. textmill-%%j.log (default: "
                   "sbatch's, slurm-JOBID.out in the folder sbatch ran in)")
    p.add_argument("--job-error", help="the job's error log (#SBATCH --error; default: with its output)")
    p.add_argument("--output", "-o", type=Path, help="write the script here (default: print it)")
    p.set_defaults(func=cmd_slurm)
