"""Parallel training on torch.distributed, one small module per kind of parallelism, composed over one
DeviceMesh (torchtitan's arrangement): `dims` (the layout, the process group and the mesh) and
`data_parallel` (DDP, or FSDP2 sharding for Megatron's --use-distributed-optimizer)."""
