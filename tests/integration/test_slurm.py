"""`textmill slurm`: the job script runs the whole chain on several nodes through the job's own scheduler. Slurm
is not here: the test runs the script as sbatch would, with `srun` and `hostname` standing in for the cluster's
(srun starts the command once per node, here each a process of this machine)."""

import json
import os
import subprocess

from support.cli import run_cli
from support.runs import dataset_bytes, make_run

SRUN = """#!/bin/bash
# srun --nodes=N --ntasks-per-node=1 COMMAND...: the command once per node, each with its SLURM_PROCID.
nodes=1
while [[ $1 == --* ]]; do case $1 in --nodes=*) nodes=${1#--nodes=};; esac; shift; done
pids=()
for ((i = 0; i < nodes; i++)); do SLURM_PROCID=$i "$@" > "node-$i.log" 2>&1 & pids+=($!); done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
"""


def test_the_job_script_runs_the_chain_on_two_nodes_each_unit_once(tmp_path, site, finished_run):
    web, server = site
    config = make_run(tmp_path, site, files=3)
    r = run_cli("slurm", str(config), "--nodes", "2", "--workers", "2", "--time", "00:30:00", "-o", str(tmp_path / "job.sh"))
    assert r.returncode == 0 and r.stdout.startswith(f"slurm: wrote {tmp_path / 'job.sh'}; `sbatch"), r.stderr
    script = (tmp_path / "job.sh").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --cpus-per-task=2" in script and "#SBATCH --time=00:30:00" in script

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN)
    (bin_dir / "hostname").write_text("#!/bin/sh\necho 127.0.0.1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    hits = dict(server.hits)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}
    job = subprocess.run(["bash", str(tmp_path / "job.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=900)
    logs = "\n".join((tmp_path / f"node-{i}.log").read_text() for i in range(2) if (tmp_path / f"node-{i}.log").exists())
    assert job.returncode == 0, job.stderr[-2000:] + logs[-3000:]
    runs = [json.loads(p.read_text()) for p in (tmp_path / "work" / "runs").glob("*/run.json")]
    assert len(runs) == 2 and {r["status"] for r in runs} == {"done"}, runs
    assert any(r.get("corpus", {}) and r["corpus"]["documents"] > 20 for r in runs)
    fetched = {k: v - hits.get(k, 0) for k, v in server.hits.items() if v != hits.get(k, 0)}
    assert fetched == finished_run.fetched  # every page fetched as often as by one run: no unit done twice
    assert dataset_bytes(config) == dataset_bytes(finished_run.root / "run.toml")
    assert (tmp_path / ".textmill-slurm" / "4242" / "luigid.log").exists()
