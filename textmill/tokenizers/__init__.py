"""GPT-2 byte-level BPE and the Megatron-LM mmap indexed dataset (.bin/.idx)."""
