"""Training only: settings (`config`), the GPT model, data indices and blends, optimizer, checkpoints and the
state they hold (`training_state`), device, metrics file, the loop and its launch (`train`); `parallel/`."""
