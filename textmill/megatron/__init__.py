"""Megatron-LM's mmap indexed dataset, the `.bin/.idx` token files every later stage reads: writer, reader
and merge (`indexed`)."""
