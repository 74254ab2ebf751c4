"""`python -m textmill.cli.train_process SETTINGS.json`: the trainer as `textmill run` and torchrun start
it. Its settings cross the process boundary as one table file (TrainConfig.write), typed, never as
command-line options: argparse is for people (`textmill train`). It prints what `textmill train` prints,
and ends the same way on bad input (one `textmill: error:` line, exit 2)."""

import os
import sys
from pathlib import Path

from textmill.cli import guarded
from textmill.cli.models import train
from textmill.trainer.train_config import TrainConfig

if len(sys.argv) != 2:
    sys.exit("usage: python -m textmill.cli.train_process SETTINGS.json (a file TrainConfig.write wrote)")
status = guarded(lambda: train(TrainConfig.read(Path(sys.argv[1]))))
if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    # One of torchrun's processes: its work is written and it has left the process group, but gloo's threads can
    # still abort the interpreter's own ending (SIGABRT, "terminate called without an active exception": 2 of 29
    # multi-process runs of the integration lane once), which torchrun reports as the run failing. So it ends here.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
sys.exit(status)
