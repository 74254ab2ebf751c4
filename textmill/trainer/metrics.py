"""The trainer's logged records: the metrics file (one JSON record per logged iteration, in the --save folder),
and the other places they go."""

from __future__ import annotations

import json
from pathlib import Path

from textmill.errors import TextmillError

METRICS = "metrics.jsonl"


def read_metrics(save: Path) -> list[dict]:
    """The records the trainer logged into `save` (none when it logged nothing there)."""
    path = Path(save) / METRICS
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class MetricSinks:
    """Where rank 0 writes each logged record: the metrics file in --save, TensorBoard (--tensorboard-dir)
    and Weights & Biases (--wandb-project, Megatron's flags; `wandb` installed, e.g. `textmill[wandb]`; its
    mode, online or offline, comes from WANDB_MODE as wandb reads it)."""

    def __init__(self, config, enabled: bool):
        self.metrics = self.tensorboard = self.wandb = None
        if not enabled:
            return
        if config.save:
            config.save.mkdir(parents=True, exist_ok=True)
            self.metrics = open(config.save / METRICS, "a")
        if config.tensorboard_dir:
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(str(config.tensorboard_dir))
        if config.wandb_project:
            try:
                import wandb
            except ImportError:
                raise TextmillError("--wandb-project needs wandb: pip install 'textmill[wandb]'") from None
            save_dir = config.wandb_save_dir or (config.save / "wandb" if config.save else None)
            if save_dir:
                Path(save_dir).mkdir(parents=True, exist_ok=True)
            self.wandb = wandb.init(project=config.wandb_project, name=config.wandb_exp_name,
                                    dir=str(save_dir) if save_dir else None, config=config.to_dict())

    def write(self, record: dict) -> None:
        if self.metrics:
            self.metrics.write(json.dumps(record) + "\n")
            self.metrics.flush()
        it = record["iteration"]
        values = {("valid/lm_loss" if k == "valid_loss" else f"train/{k}"): v for k, v in record.items()
                  if k != "iteration" and v is not None}
        if self.tensorboard:
            for name, value in values.items():
                self.tensorboard.add_scalar(name, value, it)
        if self.wandb:
            self.wandb.log(values, step=it)

    def close(self) -> None:
        for sink, close in ((self.tensorboard, "close"), (self.metrics, "close"), (self.wandb, "finish")):
            if sink:
                getattr(sink, close)()
