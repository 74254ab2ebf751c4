"""Run by path, alone or under torchrun, with a TrainConfig file and a folder: builds that trainer and writes
FOLDER/rank-R.json, how much host memory the rank's peak grew by while it was built (Linux: the peak resident
set, VmHWM, reset just before). A file per rank: lines the ranks print to one pipe can interleave."""

import json
import sys
from pathlib import Path


def resident_peak() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    from textmill.trainer.train import training_session
    from textmill.trainer.train_config import TrainConfig

    config = TrainConfig.read(Path(sys.argv[1]))
    Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from what is resident now
    before = resident_peak()
    with training_session(config) as trainer:
        growth = resident_peak() - before
        (Path(sys.argv[2]) / f"rank-{trainer.rank}.json").write_text(
            json.dumps({"rank": trainer.rank, "growth": growth, "parameters": trainer.parts.num_parameters}))


if __name__ == "__main__":
    main()
