"""`textmill slurm` (textmill/slurm.py): names and values reach the job script quoted or not at all (issue 62: a
newline in a run file's name, its folder's, or --partition/--time ran the line after it; a space made a second
#SBATCH option)."""

import shlex
import subprocess
import sys

import pytest

from textmill.errors import TextmillError
from textmill.slurm import job_script


def run_file(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "urls").mkdir(exist_ok=True)
    (folder / "urls" / "list.txt").write_text("http://a.example/page\n")
    config = folder / "run.toml"
    config.write_text("[train]\nenabled = false\n")
    return config


@pytest.mark.parametrize("option, value", [
    ("partition", "cpu\ntouch /tmp/pwned"), ("partition", "cpu --mem=1T"), ("partition", ""),
    ("time", "01:00:00\ntouch /tmp/pwned"), ("time", "1 hour"), ("time", "１２:00"),
    ("account", "lab --exclusive"), ("account", "lab;id"), ("mem", "64 G"), ("mem", "lots"),
    ("output", "log file.txt"), ("output", "a\nb"), ("error", "x'y"),
])
def test_an_sbatch_value_that_is_not_one_word_of_its_shape_is_refused(tmp_path, option, value):
    with pytest.raises(TextmillError, match=f"--{option} .*: give "):
        job_script(run_file(tmp_path), 2, 2, **{option: value})


@pytest.mark.parametrize("value", ["cpu", "cpu,gpu-a100", "debug.short"])
def test_partitions_as_sbatch_takes_them_pass(tmp_path, value):
    assert f"#SBATCH --partition={value}\n" in job_script(run_file(tmp_path), 1, 1, partition=value)


@pytest.mark.parametrize("value", ["30", "30:00", "12:00:00", "2-00", "2-12:30", "2-12:30:00", "UNLIMITED"])
def test_times_as_sbatch_takes_them_pass(tmp_path, value):
    assert f"#SBATCH --time={value}\n" in job_script(run_file(tmp_path), 1, 1, time=value)


@pytest.mark.parametrize("folder, name", [("nd\ntouch pwned", "run.toml"), ("ok", "x\ntouch pwned\n.toml"),
                                          ("ok", "x\rtouch.toml")])
def test_a_run_file_whose_path_holds_a_control_character_is_refused(tmp_path, folder, name):
    config = run_file(tmp_path / folder)
    config.rename(config.with_name(name))
    with pytest.raises(TextmillError, match="holds a control character"):
        job_script(config.with_name(name), 2, 2)


def test_an_odd_but_printable_path_is_one_quoted_word_and_never_in_a_comment(tmp_path):
    """Spaces, quotes, `$(...)` and `;` in the folder's name: the script is valid bash, the srun line gives the
    path back exactly, no comment line names it, and the job's name holds only what sbatch reads as one word."""
    config = run_file(tmp_path / "a b$(touch pwned)'q;x").rename(tmp_path / "a b$(touch pwned)'q;x" / "my run $x.toml")
    script = job_script(config, 2, 2, partition="cpu", time="1-00:00:00", account="lab")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    lines = script.splitlines()
    assert [line for line in lines if line.startswith("#SBATCH")] == [
        "#SBATCH --job-name=textmill-my_run__x", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=2", "#SBATCH --partition=cpu", "#SBATCH --time=1-00:00:00", "#SBATCH --account=lab"]
    assert not [line for line in lines if line.startswith("#") and str(tmp_path) in line]
    srun = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    words = shlex.split(lines[srun].rstrip("\\") + lines[srun + 1])
    assert words[:8] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=2", sys.executable, "-m",
                         "textmill.cli", "run"]
    assert words[8] == str(config)
    assert shlex.split(next(line for line in lines if line.startswith("cd ")))[1] == str(config.parent)


def test_srun_gives_each_node_its_cpus_and_luigid_listens_where_the_other_nodes_reach_it(tmp_path):
    """Since Slurm 22.05 srun does not pass the job's --cpus-per-task on; luigid bound to the name's address is
    unreachable where that name is 127.0.1.1 (Debian); a service already on the port passed for the scheduler."""
    lines = job_script(run_file(tmp_path), 3, 8).splitlines()
    srun = next(line for line in lines if line.startswith("srun "))
    assert "--nodes=3" in srun and "--cpus-per-task=8" in srun
    scheduler = next(line for line in lines if "textmill.cli scheduler" in line)
    assert "--address 0.0.0.0" in scheduler
    checks = "\n".join(lines[: lines.index(scheduler)])
    assert "create_server" in checks and "is taken" in checks  # the port is free before luigid starts on it
    ready = next(line for line in lines if line.startswith("until "))
    assert 'kill -0 "$scheduler"' in ready and "/api/task_list" in ready  # our luigid alive, and answering as one


def test_workers_and_nodes_are_bounded_and_memory_and_logs_pass_as_sbatch_takes_them(tmp_path):
    for nodes, workers in ((1, 100000000000000000000), (0, 1), (1, 0), (10**6, 1)):
        with pytest.raises(TextmillError, match="--nodes must be 1 to"):
            job_script(run_file(tmp_path), nodes, workers)
    script = job_script(run_file(tmp_path), 1, 1024, mem="64G", output="textmill-%j.log", error="textmill-%j.err")
    assert "#SBATCH --cpus-per-task=1024\n#SBATCH --mem=64G\n#SBATCH --output=textmill-%j.log\n" \
           "#SBATCH --error=textmill-%j.err\n" in script


def test_the_scripts_readiness_check_knows_luigid_from_another_service(tmp_path):
    """The check the script runs (LUIGID_ANSWERS) fails against a plain web server on the port (the integration test
    runs the script, whose check passes against the job's luigid)."""
    import http.server
    import threading

    from textmill.slurm import LUIGID_ANSWERS

    plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    try:
        check = subprocess.run([sys.executable, "-c", LUIGID_ANSWERS, "127.0.0.1", str(plain.server_address[1])],
                               cwd=tmp_path, capture_output=True)
        assert check.returncode != 0
    finally:
        plain.shutdown()
