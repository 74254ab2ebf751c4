"""A process group of one (gloo, in the test's own process) for the parallel pieces that run in-process: the
trainer's, and Megatron-core's model in the interop tests."""

import pytest
import torch.distributed as dist


@pytest.fixture()
def mesh(tmp_path):
    """A one-rank device mesh over a gloo group of this process, torn down after the test."""
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()
