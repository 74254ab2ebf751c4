"""The single-process trainer: Megatron's data index, the schedule, the loss, training, resuming, recomputation,
offloading and compiling."""

import dataclasses
import json
import shutil
import warnings

import numpy as np
import pytest
import torch

from support.training import LLAMA, train_config
from textmill.errors import TextmillError
from textmill.megatron.indexed import IndexedDataset, IndexedDatasetWriter
from textmill.trainer.data import GPTDataset, build_indices, split_ranges
from textmill.trainer.optim import LRSchedule
from textmill.trainer.train import Trainer


def unique_token_dataset(path, doc_lengths):
    """Every token id is its global position, so coverage and leakage can be checked exactly."""
    w = IndexedDatasetWriter(path, np.int32)
    start = 0
    for n in doc_lengths:
        w.add_document(np.arange(start, start + n))
        start += n
    w.finalize()
    return IndexedDataset(path)


def test_indices_equal_megatron_core_gpt_dataset(tmp_path):
    from megatron.core.datasets.gpt_dataset import GPTDataset as MegatronGPTDataset
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexedDataset
    from megatron.core.datasets.utils import Split

    rng = np.random.default_rng(1)
    unique_token_dataset(tmp_path / "ds", rng.integers(1, 60, 300))

    class Tokenizer:  # what GPTDatasetConfig reads of a tokenizer
        eod, pad, vocab_size, unique_identifiers = 0, 1, 10**6, {"name": "test"}

    cfg = GPTDatasetConfig(random_seed=1234, sequence_length=32, blend=None, split="969,30,1", tokenizer=Tokenizer(),
                           reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
                           path_to_cache=None, mmap_bin_files=True)
    theirs_data, ours_data = MegatronIndexedDataset(str(tmp_path / "ds")), IndexedDataset(tmp_path / "ds")
    # 1500 samples need several epochs with a short last one; 40 valid samples fit in one.
    for split, name, num in ((0, Split.train, 1500), (1, Split.valid, 40), (0, Split.train, 300)):
        docs = split_ranges(len(ours_data), "969,30,1")[split]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = MegatronGPTDataset(theirs_data, str(tmp_path / "ds"), docs, num, name, cfg)
        ours = GPTDataset(ours_data, name.name, docs, 32, num, 1234, "969,30,1")
        assert np.array_equal(theirs.document_index, ours.doc_idx)
        assert np.array_equal(theirs.sample_index, ours.sample_idx)
        assert np.array_equal(theirs.shuffle_index, ours.shuffle_idx)
        for i in (0, 7, len(ours) - 1):
            sample = theirs[i]
            assert np.array_equal(sample["tokens"].numpy(), ours[i][:-1])
            assert np.array_equal(sample["labels"].numpy(), ours[i][1:])


def test_every_training_token_once_per_epoch_and_no_leaks(tmp_path):
    lengths = [5, 17, 3, 40, 9, 26, 11, 8, 30, 12] * 10
    data = unique_token_dataset(tmp_path / "u", lengths)
    train, valid, test = split_ranges(len(data), "80,15,5")
    S = 16
    samples = (int(data.lengths[train].sum()) - 1) // S
    doc_idx, sample_idx, shuffle_idx = build_indices(data.lengths, train, S, samples, seed=7)
    assert len(doc_idx) == len(train)  # one epoch
    ds = GPTDataset(data, "train", train, S, samples, 7, "80,15,5")
    # Inputs of all samples, plus the label that ends the last sample of the stream.
    stream_last = int(np.flatnonzero(shuffle_idx == samples - 1)[0])
    seen = np.sort(np.concatenate([ds[i][:-1] for i in range(len(ds))] + [ds[stream_last][-1:]]))
    train_tokens = np.sort(np.concatenate([data[int(d)] for d in train]))
    assert len(np.unique(seen)) == len(seen)  # nothing twice
    assert len(seen) == samples * S + 1 and np.isin(seen, train_tokens).all()  # all but the final partial sample
    held_out = np.concatenate([data[int(d)] for d in np.concatenate([valid, test])])
    assert not np.isin(held_out, seen).any()
    crossing = [j for j in range(samples) if sample_idx[j][0] != sample_idx[j + 1][0]]
    assert crossing  # samples run across document boundaries, as in Megatron
    assert sorted(shuffle_idx.tolist()) == list(range(samples))


def test_index_cache_is_reused_and_keyed_by_parameters(tmp_path):
    data = unique_token_dataset(tmp_path / "c", [20] * 50)
    docs = split_ranges(len(data), "1,0,0")[0]
    first = GPTDataset(data, "train", docs, 8, 100, 1, "1,0,0", tmp_path / "cache")
    files = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len(files) == 4  # three arrays and the description written last
    stamp = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").iterdir()}
    again = GPTDataset(data, "train", docs, 8, 100, 1, "1,0,0", tmp_path / "cache")
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").iterdir()} == stamp
    assert np.array_equal(first.shuffle_idx, again.shuffle_idx)
    GPTDataset(data, "train", docs, 8, 100, 2, "1,0,0", tmp_path / "cache")  # another seed: new entry
    assert len(list((tmp_path / "cache").iterdir())) == 8


def test_learning_rate_schedule_matches_megatron():
    s = LRSchedule(max_lr=1.0, min_lr=0.1, warmup_iters=10, decay_iters=110, style="cosine")
    assert [s.lr(n) for n in (0, 5, 10)] == [0.0, 0.5, 1.0]
    assert s.lr(60) == pytest.approx(0.55) and s.lr(110) == pytest.approx(0.1) and s.lr(500) == 0.1
    lin = LRSchedule(1.0, 0.0, 0, 100, "linear")
    assert lin.lr(25) == pytest.approx(0.75)
    assert LRSchedule(1.0, 0.0, 4, 100, "constant").lr(50) == 1.0


def test_training_lowers_validation_loss_and_resumes_bit_identically(corpus, tmp_path):
    whole = Trainer(train_config(corpus, train_iters=20)).train()
    losses = [r["lm_loss"] for r in whole["log"] if "lm_loss" in r]
    valid = [r["valid_loss"] for r in whole["log"] if "valid_loss" in r]
    assert len(valid) == 4 and valid == sorted(valid, reverse=True) and valid[-1] < valid[0] - 0.3

    save = tmp_path / "ckpt"
    first = Trainer(train_config(corpus, train_iters=20, save=save, save_interval=10))
    first.config = dataclasses.replace(first.config, train_iters=10)  # stop after 10 of 20, as a killed run would
    first.train()
    assert (save / "latest_checkpointed_iteration.txt").read_text().strip() == "10"
    resumed = Trainer(train_config(corpus, train_iters=20, save=save, load=save)).train()
    resumed_losses = [r["lm_loss"] for r in first.state.log + resumed["log"] if "lm_loss" in r]
    assert resumed_losses == losses  # bit-identical, not merely close
    assert (save / "iter_0000020" / "mp_rank_00" / "model_optim_rng.pt").exists()
    assert (save / "tokenizer" / "vocab.json").exists()


def test_a_checkpoint_written_in_the_background_resumes_bit_identically(corpus, tmp_path):
    """--async-save in one process: torch_dist shards written by a thread while training goes on."""
    whole = Trainer(train_config(corpus, train_iters=6)).train()
    save = tmp_path / "ckpt"
    first = Trainer(train_config(corpus, train_iters=6, save=save, exit_interval=3, async_save=True)).train()
    assert first["saved_at"] == 3 and list((save / "iter_0000003").glob("*.distcp"))
    resumed = Trainer(train_config(corpus, train_iters=6, save=save, load=save, async_save=True)).train()
    losses = [r["lm_loss"] for r in first["log"] + resumed["log"] if "lm_loss" in r]
    assert losses == [r["lm_loss"] for r in whole["log"] if "lm_loss" in r]
    assert (save / "latest_checkpointed_iteration.txt").read_text() == "6\n"


def test_activation_recomputation_changes_memory_not_results(corpus):
    def losses(**settings):
        log = Trainer(train_config(corpus, train_iters=4, hidden_dropout=0.0, attention_dropout=0.0, **settings)).train()["log"]
        return [r["lm_loss"] for r in log if "lm_loss" in r]

    plain = losses()
    for settings in (dict(recompute_granularity="full"), dict(recompute_activations=True)):
        assert losses(**settings) == pytest.approx(plain, rel=1e-6)


def test_fp16_overflow_skips_steps_and_says_so(corpus, capsys):
    result = Trainer(train_config(corpus, train_iters=3, fp16=True, initial_loss_scale=2.0**40, hidden_dropout=0.0,
                                  attention_dropout=0.0)).train()
    assert result["skipped_iterations"] >= 1
    assert "fp16 gradients overflowed; step skipped" in capsys.readouterr().out


def test_llama_style_blocks_train_with_tensorboard(corpus, tmp_path):
    result = Trainer(train_config(corpus, train_iters=4, **LLAMA, bf16=True, tensorboard_dir=tmp_path / "tb")).train()
    assert np.isfinite(result["valid_loss"])
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert len(events.Scalars("train/lm_loss")) == 4 and len(events.Scalars("valid/lm_loss")) == 1


def test_the_split_must_leave_training_documents(corpus):
    with pytest.raises(TextmillError, match="no training documents"):
        Trainer(train_config(corpus, train_iters=2, split="0,1,0"))


def test_a_checkpoint_of_textmill_0_1_with_its_empty_extra_field_still_loads(gpt2_ckpt, tmp_path):
    from textmill.trainer.checkpoint import load_model

    old = tmp_path / "old"
    shutil.copytree(gpt2_ckpt, old)
    meta_file = next(old.glob("iter_*/textmill.json"))
    meta = json.loads(meta_file.read_text())
    meta["model_config"]["extra"] = {}  # what GPTConfig.to_dict wrote in textmill 0.1
    meta_file.write_text(json.dumps(meta))
    model, _ = load_model(old)
    reference, _ = load_model(gpt2_ckpt)
    assert model.config == reference.config


def test_offloaded_activations_give_the_same_losses_and_weights(corpus):
    """--cpu-offload-activations moves what the backward pass needs to host memory and back: on a CPU the
    memory cannot show, but the losses and the trained weights must be those of the run without it, with and
    without recomputation."""
    for recompute in (None, "full"):
        runs = []
        for offload in (False, True):
            trainer = Trainer(train_config(corpus, train_iters=4, eval_interval=4, recompute_granularity=recompute,
                                           cpu_offload_activations=offload))
            result = trainer.train()
            runs.append(([r["lm_loss"] for r in result["log"] if "lm_loss" in r],
                         {k: v.clone() for k, v in trainer.parts.models[0].state_dict().items()}))
        (plain_losses, plain_weights), (offloaded_losses, offloaded_weights) = runs
        assert plain_losses == offloaded_losses and len(plain_losses) == 4
        assert all(torch.equal(plain_weights[k], offloaded_weights[k]) for k in plain_weights)


def test_compiled_blocks_give_the_eager_losses_with_and_without_recomputation(corpus, tmp_path):
    """Without dropout: compiled dropout draws its own random numbers (inductor's generator), so with it the
    curves differ as two seeds' would."""
    no_dropout = dict(hidden_dropout=0.0, attention_dropout=0.0)
    for recompute in (None, "full"):
        losses = []
        for compiled in (False, True):
            result = Trainer(train_config(corpus, train_iters=3, eval_interval=3, recompute_granularity=recompute,
                                          compile=compiled, save=tmp_path / f"{recompute}-{compiled}",
                                          **no_dropout)).train()
            losses.append([r["lm_loss"] for r in result["log"] if "lm_loss" in r])
        assert losses[0] == pytest.approx(losses[1], rel=1e-4) and len(losses[0]) == 3
    # Compiled blocks keep their parameter names: the checkpoint loads into an eager model.
    resumed = Trainer(train_config(corpus, train_iters=4, eval_interval=4, load=tmp_path / "full-True", **no_dropout))
    assert resumed.state.iteration == 3


def test_ctrl_c_says_the_iteration_reached_and_the_checkpoint_to_resume_from(corpus, tmp_path):
    import os
    import signal

    from textmill.errors import Interrupted

    save = tmp_path / "ckpt"
    trainer = Trainer(train_config(corpus, train_iters=10, save=save, save_interval=2))
    step = trainer.train_step

    def interrupted_at_five():
        if trainer.state.iteration == 5:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, as the terminal sends it
        return step()

    trainer.train_step = interrupted_at_five
    with pytest.raises(Interrupted) as stopped:
        trainer.train()
    assert str(stopped.value) == (f"training reached iteration 5 of 10; the newest checkpoint is iteration 4 in {save}: "
                                  f"--load {save} resumes from it")


def test_cpu_threads_sets_the_threads_training_computes_with_and_says_so(corpus, capsys):
    before = torch.get_num_threads()
    try:
        Trainer(train_config(corpus, train_iters=1, cpu_threads=1)).train()
        assert torch.get_num_threads() == 1
        assert "tokens on cpu (1 thread)" in capsys.readouterr().out
    finally:
        torch.set_num_threads(before)
