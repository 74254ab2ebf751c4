"""Small, quick training settings on the test corpus (the `corpus` fixture)."""

from pathlib import Path

LLAMA = dict(position_embedding_type="rope", normalization="RMSNorm", swiglu=True, untie_embeddings_and_output_weights=True,
             disable_bias_linear=True)

# No dropout: each rank draws its own dropout masks, so only the dropout-free math can be compared across layouts.
PARALLEL = dict(micro_batch_size=2, global_batch_size=8, hidden_dropout=0.0, attention_dropout=0.0, eval_interval=3)


def train_config(corpus, **settings):
    """A small, quick TrainConfig on the corpus; `settings` replace or add to its values."""
    from textmill.trainer.train_config import TrainConfig

    return TrainConfig(**{**dict(
        data_path=(str(corpus["prefix"]),), vocab_file=Path(corpus["vocab"]), merge_file=Path(corpus["merges"]),
        seq_length=64, micro_batch_size=4, global_batch_size=8, lr=3e-3, lr_warmup_iters=2, log_interval=1,
        eval_interval=5, eval_iters=2, split="90,10,0", no_index_cache=True), **settings})


def parallel_config(corpus, **settings):
    """train_config without dropout, for comparing layouts of parallelism."""
    return train_config(corpus, **{**PARALLEL, **settings})


def train_checkpoint(corpus, save, **settings):
    from textmill.trainer.train import Trainer

    Trainer(train_config(corpus, train_iters=20, eval_interval=20, save=save, **settings)).train()
    return save
