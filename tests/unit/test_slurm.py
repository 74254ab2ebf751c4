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
    ("account", "lab --exclusive"), ("account", "lab;id"),
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
    assert words[:7] == ["srun", "--nodes=2", "--ntasks-per-node=1", sys.executable, "-m", "textmill.cli", "run"]
    assert words[7] == str(config)
    assert shlex.split(next(line for line in lines if line.startswith("cd ")))[1] == str(config.parent)
