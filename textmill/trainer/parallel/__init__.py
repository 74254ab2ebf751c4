"""Parallel training on torch.distributed, one small module per kind of parallelism, composed over one
("pp", "dp", "tp") DeviceMesh (torchtitan's arrangement): `dims` (the layout, the process group, the mesh
and the torchrun launch), `tensor_parallel` (DTensor plans, sequence parallelism), `pipeline_parallel`
(stages and 1F1B / interleaved schedules) and `data_parallel` (DDP, or FSDP2 sharding for Megatron's
--use-distributed-optimizer)."""
