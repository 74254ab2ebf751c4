"""GPT-2 byte-level BPE (load, train, encode; `gpt2`, `train`) and the tokenize stage that writes Megatron
token files (`preprocess`, its settings in `config`)."""
