"""`python -m textmill.cli.train_process SETTINGS.json`: the trainer as `textmill run` and torchrun start
it. Its settings cross the process boundary as one table file (TrainConfig.write), typed, never as
command-line options: argparse is for people (`textmill train`). It prints what `textmill train` prints,
and ends the same way on bad input (one `textmill: error:` line, exit 2)."""

import sys
from pathlib import Path

from textmill.cli import guarded
from textmill.cli.models import train
from textmill.trainer.train_config import TrainConfig

if len(sys.argv) != 2:
    sys.exit("usage: python -m textmill.cli.train_process SETTINGS.json (a file TrainConfig.write wrote)")
sys.exit(guarded(lambda: train(TrainConfig.read(Path(sys.argv[1])))))
