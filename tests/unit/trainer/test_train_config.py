"""The trainer's settings cross a process boundary (textmill run to the trainer, torchrun's launcher to its
workers) as one table file, typed; a process checks them once."""

import json
from pathlib import Path

import pytest

from support.training import train_config
from textmill.errors import TextmillError
from textmill.trainer import train
from textmill.trainer.train_config import TrainConfig


def test_the_settings_file_reads_back_as_the_same_settings(corpus, tmp_path):
    config = train_config(corpus, train_iters=3, save=tmp_path / "ckpt", load=tmp_path / "ckpt", finetune=True,
                          lr=1e-3, nproc_per_node=2, position_embedding_type="rope")
    assert TrainConfig.read(config.write(tmp_path / "train.json")) == config


def test_a_bad_settings_file_is_one_error_naming_the_field(corpus, tmp_path):
    path = train_config(corpus, train_iters=3).write(tmp_path / "train.json")
    table = json.loads(path.read_text())
    path.write_text(json.dumps({**table, "train_iters": "three"}))
    with pytest.raises(TextmillError, match="train_iters"):
        TrainConfig.read(path)
    (tmp_path / "cut.json").write_text(path.read_text()[:20])
    with pytest.raises(TextmillError, match="not a trainer settings file"):
        TrainConfig.read(tmp_path / "cut.json")


def test_a_training_process_checks_its_settings_once(corpus, tmp_path, monkeypatch):
    calls = []
    check = train.check_config

    def counted(*args, **kwargs):
        calls.append(args[1])
        return check(*args, **kwargs)

    monkeypatch.setattr(train, "check_config", counted)
    result = train.run(train_config(corpus, train_iters=2, save=tmp_path / "ckpt"))
    assert result["iterations"] == 2 and calls == [1]
    assert Path(tmp_path / "ckpt").is_dir()


def test_blocks_compile_by_default_on_gpus_only_and_either_way_on_request(corpus):
    default, forced, eager = (train_config(corpus, train_iters=1, **flags) for flags in
                              ({}, {"compile": True}, {"no_compile": True}))
    assert (default.compiles_on("cuda"), default.compiles_on("cpu")) == (True, False)
    assert (forced.compiles_on("cuda"), forced.compiles_on("cpu")) == (True, True)
    assert (eager.compiles_on("cuda"), eager.compiles_on("cpu")) == (False, False)
    with pytest.raises(TextmillError, match="--compile and --no-compile exclude each other"):
        train_config(corpus, train_iters=1, compile=True, no_compile=True)
