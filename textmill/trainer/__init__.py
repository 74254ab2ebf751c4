"""Training only: settings (`train_config`), the GPT model, data indices and blends, optimizer, what a trainer is
built of (`parts`), checkpoint files (`checkpoint`, `dcp_metadata`) and saving a run into them (`checkpointer`),
device, metrics file, the loop and its launch (`train`); `parallel/`."""
