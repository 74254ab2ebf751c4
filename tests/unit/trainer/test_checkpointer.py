"""The checkpointer saves what it is handed and reads it back: here a model's parts and a run state that is not
a Trainer, so nothing it does depends on the Trainer's attributes."""

from pathlib import Path

import pytest
import torch

from textmill.errors import TextmillError
from textmill.trainer.checkpointer import Checkpointer, CheckpointSettings
from textmill.trainer.gpt_config import GPTConfig
from textmill.trainer.model import GPT
from textmill.trainer.optim import make_optimizer
from textmill.trainer.parts import ModelParts

CONFIG = GPTConfig(vocab_size=96, hidden_size=32, num_layers=2, num_attention_heads=4, max_position_embeddings=16)


class Counter:
    """The smallest run state: a step count, a loss scale and the default random stream."""

    def __init__(self):
        self.step, self.scale = 0, 1.0

    def state_dict(self) -> dict:
        return {"iteration": self.step, "grad_scaler": {"scale": self.scale}, "rng": {"torch": torch.get_rng_state()}}

    def load_state_dict(self, state: dict) -> None:
        self.step = state.get("iteration", self.step)
        self.scale = state.get("grad_scaler", {"scale": self.scale})["scale"]
        if "rng" in state:
            torch.set_rng_state(state["rng"]["torch"])


def model_parts(seed: int) -> ModelParts:
    model = GPT(CONFIG, seed=seed)
    optimizer = make_optimizer(list(model.parameters()), 1e-3, 0.01, (0.9, 0.95), 1e-8)
    return ModelParts([(0, model)], [model], [optimizer], None, None, None, model.num_parameters())


def settings(save: Path, **changes) -> CheckpointSettings:
    fields = dict(save=save, format="torch", async_save=False, finetune=False, no_load_optim=False, no_load_rng=False,
                  tokenizer=(None, None, None), rank=0, world=1, vocab_size=96, model_config=CONFIG,
                  record={"model_config": CONFIG.to_dict(), "parallel": {"world": 1}})
    return CheckpointSettings(**{**fields, **changes})


def trained(parts: ModelParts, steps: int) -> None:
    tokens = torch.arange(2 * 9).reshape(2, 9) % CONFIG.vocab_size
    for _ in range(steps):
        parts.models[0](tokens[:, :-1], tokens[:, 1:]).backward()
        parts.optimizers[0].step()
        parts.optimizers[0].zero_grad()


@pytest.mark.parametrize("fmt", ["torch", "torch_dist"])
def test_what_is_saved_is_what_is_loaded(tmp_path, fmt):
    parts, run = model_parts(seed=1), Counter()
    trained(parts, 2)
    run.step, run.scale = 7, 512.0
    torch.manual_seed(11)
    path = Checkpointer(settings(tmp_path, format=fmt), print).save(7, parts, run)
    assert path.name == "iter_0000007"
    expected_draw = torch.rand(3)

    fresh, fresh_run = model_parts(seed=2), Counter()
    Checkpointer(settings(tmp_path, format=fmt), print).load(tmp_path, fresh, fresh_run)
    assert (fresh_run.step, fresh_run.scale) == (7, 512.0)
    assert torch.equal(torch.rand(3), expected_draw)  # the random state came back with it
    saved, loaded = parts.state_dict(), fresh.state_dict()
    assert saved["model"].keys() == loaded["model"].keys()
    assert all(torch.equal(saved["model"][k], loaded["model"][k]) for k in saved["model"])
    for k, state in saved["optimizer_state"].items():
        assert all(torch.equal(state[n], loaded["optimizer_state"][k][n]) for n in ("exp_avg", "exp_avg_sq"))


def test_finetuning_loads_weights_and_leaves_the_run_at_its_start(tmp_path):
    parts, run = model_parts(seed=1), Counter()
    trained(parts, 1)
    run.step, run.scale = 5, 64.0
    Checkpointer(settings(tmp_path), print).save(5, parts, run)
    fresh, fresh_run = model_parts(seed=2), Counter()
    Checkpointer(settings(tmp_path, finetune=True), print).load(tmp_path, fresh, fresh_run)
    assert (fresh_run.step, fresh_run.scale) == (0, 1.0)
    assert torch.equal(fresh.models[0].wte.weight, parts.models[0].wte.weight)
    assert not fresh.optimizers[0].state  # a fresh optimizer


def test_a_checkpoint_of_another_model_is_refused_in_one_line(tmp_path):
    Checkpointer(settings(tmp_path), print).save(1, model_parts(seed=1), Counter())
    other = GPTConfig(**{**CONFIG.to_dict(), "num_layers": 3})
    with pytest.raises(TextmillError, match="num_layers"):
        Checkpointer(settings(tmp_path, model_config=other), print).load(tmp_path, model_parts(seed=1), Counter())


def test_a_run_that_would_replace_and_un_name_a_newer_checkpoint_is_refused(tmp_path):
    """Issue 62: `textmill train --save CK` without --load, into a folder holding a finished run, replaced its
    iteration 3 and moved the tracker from 6 back to 3, without a word."""
    for iteration in (3, 6):
        Checkpointer(settings(tmp_path), print).save(iteration, model_parts(seed=1), Counter())
    tracker = (tmp_path / "latest_checkpointed_iteration.txt").read_text()
    for start in (0, 3, 5):
        with pytest.raises(TextmillError, match=f"holds a checkpoint of iteration 6, newer than where this run starts "
                                                f"\\({start}\\).*--load {tmp_path}"):
            Checkpointer(settings(tmp_path), print).check_save_folder(start)
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == tracker
    Checkpointer(settings(tmp_path), print).check_save_folder(6)  # resumed from it: goes on
    Checkpointer(settings(tmp_path / "new"), print).check_save_folder(0)
    Checkpointer(settings(None), print).check_save_folder(0)
