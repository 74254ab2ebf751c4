"""GPT model, data indices, training loop, checkpoints, evaluation, export and serving."""
