"""`textmill slurm`: the job script runs the whole chain on several nodes through the job's own scheduler. Slurm
is not here: the test runs the script as sbatch would, with `srun` and `hostname` standing in for the cluster's
(srun starts the command once per node: a process of this machine, or one in each node's network namespace)."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from support.cli import run_cli
from support.netns import UNAVAILABLE, hosts
from support.runs import EVAL_PASSAGES, dataset_bytes, make_run, write_config
from textmill.demo import synthweb
from textmill.demo.archive import write_archive

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


def stand_ins(folder: Path, srun: str, hostname: str) -> dict:
    """The environment with `srun` (this script) and `hostname` (saying this name) standing in for the cluster's."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(srun)
    (bin_dir / "hostname").write_text(f"#!/bin/sh\necho {hostname}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def archive_run(folder: Path) -> Path:
    """A run file whose input is a web archive of 60 generated pages (no web needed), 20 responses a unit."""
    web = synthweb.build_web(seed=5, articles=60, near_duplicates=0, foreign=0, mojibake=0, short=0, faults=False)
    write_archive(web, "http://127.0.0.1:8000", folder / "archives" / "crawl.warc.gz")
    (folder / "eval.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in EVAL_PASSAGES))
    config = write_config(folder, work="work", min_tokens=32, vocab_size=600, train="false", train_iters=20)
    config.write_text(config.read_text().replace('urls = ["urls"]', 'warcs = ["archives"]\n[warc]\nresponses_per_shard = 20'))
    return config


def test_the_job_script_runs_the_chain_on_two_nodes_each_unit_once(tmp_path, site, finished_run):
    web, server = site
    config = make_run(tmp_path, site, files=3)
    r = run_cli("slurm", str(config), "--nodes", "2", "--workers", "2", "--time", "00:30:00", "-o", str(tmp_path / "job.sh"))
    assert r.returncode == 0 and r.stdout.startswith(f"slurm: wrote {tmp_path / 'job.sh'}; `sbatch"), r.stderr
    script = (tmp_path / "job.sh").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --cpus-per-task=2" in script and "#SBATCH --time=00:30:00" in script

    hits = dict(server.hits)
    env = {**stand_ins(tmp_path, SRUN, "127.0.0.1"), "SLURM_JOB_ID": "4242"}
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


# srun on the nodes of $NODES (network namespaces), the command once in each.
SRUN_ON_NODES = """#!/bin/bash
while [[ $1 == --* ]]; do shift; done
pids=()
i=0
for node in $NODES; do SLURM_PROCID=$i ip netns exec "$node" "$@" > "node-$i.log" 2>&1 & pids+=($!); i=$((i + 1)); done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
"""


@pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))
def test_a_node_reaches_the_jobs_scheduler_though_the_head_nodes_name_is_127_0_1_1_at_home(tmp_path):
    """Two nodes, each a network namespace with its own address; the head node's /etc/hosts maps its own name to
    127.0.1.1 (Debian's default), the other node's to the head's address. The job's luigid listens on every interface,
    so both nodes' workers reach it by that name (bound to the name's address, the other node's worker found nothing
there and failed after its minute of retries), and the run from a web archive finishes on both."""
    config = archive_run(tmp_path)
    r = run_cli("slurm", str(config), "--nodes", "2", "--workers", "1", "-o", str(tmp_path / "job.sh"))
    assert r.returncode == 0, r.stderr
    tools = stand_ins(tmp_path, SRUN_ON_NODES, "tmhead")
    with hosts("head", "node") as net:
        (head, head_address), (node, _) = net["head"], net["node"]
        named = {head: "127.0.1.1", node: head_address}  # what `tmhead` is on each node (ip netns exec mounts it)
        try:
            for ns, address in named.items():
                Path("/etc/netns", ns).mkdir(parents=True)
                Path("/etc/netns", ns, "hosts").write_text(f"127.0.0.1 localhost\n{address} tmhead\n")
            env = {**tools, "SLURM_JOB_ID": "4343", "NODES": f"{head} {node}"}
            job = subprocess.run(["ip", "netns", "exec", head, "bash", str(tmp_path / "job.sh")], cwd=tmp_path,
                                 env=env, capture_output=True, text=True, timeout=600)
        finally:
            for ns in named:
                shutil.rmtree(Path("/etc/netns", ns), ignore_errors=True)
    logs = "\n".join((tmp_path / f"node-{i}.log").read_text() for i in range(2) if (tmp_path / f"node-{i}.log").exists())
    assert job.returncode == 0, job.stderr[-2000:] + logs[-3000:]
    runs = [json.loads(p.read_text()) for p in (tmp_path / "work" / "runs").glob("*/run.json")]
    assert len(runs) == 2 and {r["status"] for r in runs} == {"done"}, runs
    units = [p for p in (tmp_path / "work" / "2-warc").rglob("*.parquet") if not p.parent.name.startswith(".")]
    assert len(units) == 3  # 60 pages, 20 responses a unit
    assert all("textmill run: done" in (tmp_path / f"node-{i}.log").read_text() for i in range(2)), logs[-3000:]


def test_a_job_whose_scheduler_port_is_taken_stops_with_one_line_before_any_node_starts(tmp_path):
    import socket

    config = write_config(tmp_path, work="work", min_tokens=32, vocab_size=600, train="false", train_iters=20)
    assert run_cli("slurm", str(config), "--nodes", "2", "-o", str(tmp_path / "job.sh")).returncode == 0
    tools = stand_ins(tmp_path, "#!/bin/sh\ntouch srun-ran\n", "127.0.0.1")
    for port in range(23456, 40000):  # another service, on a port a job id gives (20000 + id % 20000)
        try:
            taken = socket.create_server(("127.0.0.1", port))
            break
        except OSError:
            continue
    with taken:
        env = {**tools, "SLURM_JOB_ID": str(port - 20000 + 40000)}
        job = subprocess.run(["bash", str(tmp_path / "job.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=60)
    assert job.returncode == 1 and not (tmp_path / "srun-ran").exists()
    assert job.stderr.strip().splitlines() == [f"textmill slurm: port {port} on 127.0.0.1, the job's scheduler port "
                                              "(from its id), is taken"]


def slurm_missing() -> str | None:
    if os.geteuid() != 0:
        return "starting slurmctld and slurmd takes root"
    tools = ("slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "munged", "munge")
    missing = [tool for tool in tools if not shutil.which(tool)]
    return f"Slurm and munge are not installed here (no {', '.join(missing)}: apt-get install slurm-wlm)" if missing else None


SLURM_MISSING = slurm_missing()


@pytest.fixture
def slurm_node(tmp_path):
    """Slurm itself on this machine: slurmctld and slurmd, one node of its CPUs, a partition; munged started if it is
    not running. Yields the environment that points sbatch at it; shuts them down after."""
    node = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
    folder = tmp_path / "slurm"
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True)
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=textmill-test", f"SlurmctldHost={node}", "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU", "ReturnToService=2", "MpiDefault=none", "JobCompType=jobcomp/none",
        f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}", f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}", f"SlurmdLogFile={folder / 'slurmd.log'}",
        f"NodeName={node} CPUs={os.cpu_count()} State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    if subprocess.run(["munge", "-n"], capture_output=True).returncode:
        Path("/run/munge").mkdir(exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "munged"], check=True)
    subprocess.run(["slurmctld", "-c"], env=env, check=True)
    subprocess.run(["slurmd"], env=env, check=True)
    try:
        for _ in range(60):
            if "idle" in subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the Slurm node did not come up: {(folder / 'slurmctld.log').read_text()[-2000:]}")
        yield env
    finally:
        subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True)
        for daemon in ("slurmd", "slurmctld"):  # gone before the next test starts its own on the same ports
            pid_file = folder / f"{daemon}.pid"
            for _ in range(100):
                if not pid_file.exists() or not Path("/proc", pid_file.read_text().strip()).exists():
                    break
                time.sleep(0.1)


@pytest.mark.skipif(SLURM_MISSING is not None, reason=str(SLURM_MISSING))
def test_the_job_script_runs_under_slurm_itself(tmp_path, slurm_node):
    """sbatch --wait of the written script on a real slurmctld and slurmd (one node): the job completes, its run
    from a web archive finishes, and the job's luigid is gone after it."""
    import socket

    config = archive_run(tmp_path)
    r = run_cli("slurm", str(config), "--nodes", "1", "--workers", "1", "--time", "10:00",
                "--job-output", str(tmp_path / "job-%j.log"), "-o", str(tmp_path / "job.sh"))
    assert r.returncode == 0, r.stderr
    job = subprocess.run(["sbatch", "--wait", "--parsable", str(tmp_path / "job.sh")], cwd=tmp_path, env=slurm_node,
                         capture_output=True, text=True, timeout=600)
    job_id = job.stdout.strip().split(";")[0]
    log = (tmp_path / f"job-{job_id}.log").read_text() if (tmp_path / f"job-{job_id}.log").exists() else ""
    assert job.returncode == 0, job.stderr + log[-3000:]
    assert "textmill run: done" in log, log[-3000:]
    runs = [json.loads(p.read_text()) for p in (tmp_path / "work" / "runs").glob("*/run.json")]
    assert [r["status"] for r in runs] == ["done"]
    port = 20000 + int(job_id) % 20000
    with pytest.raises(OSError):  # the job's luigid stopped with it
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
