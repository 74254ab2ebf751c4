"""Training only: the trainer's settings (`config`), the GPT model, data indices and blends, the optimizer,
checkpoints, the training loop and its launch; `parallel/` holds one module per kind of parallelism."""
