"""--cpu-offload-activations: what the forward pass saves for the backward pass waits in pinned host memory.

torch's `save_on_cpu` copies each saved tensor to the host on the compute stream, so the GPU computes nothing
while a copy runs. Here the device-to-host copies run on a stream of their own, which the copy engine works
through while the compute stream goes on with the next layer; an event per tensor marks its copy done, and the
backward pass waits for that event before copying the tensor back. On a CPU nothing is copied.
"""

from __future__ import annotations

import torch
from torch.autograd.graph import saved_tensors_hooks


class ActivationOffload(saved_tensors_hooks):
    """Saved tensors to pinned host memory on a copy stream, and back to the device when the backward pass
    needs them."""

    def __init__(self, device: torch.device):
        self.copy_stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        super().__init__(self.to_host, self.to_device)

    def to_host(self, tensor: torch.Tensor):
        if self.copy_stream is None or not tensor.is_cuda or tensor.is_sparse:
            return tensor
        host = torch.empty(tensor.size(), dtype=tensor.dtype, layout=tensor.layout, pin_memory=True)
        self.copy_stream.wait_stream(torch.cuda.current_stream(tensor.device))  # the tensor is computed before it is read
        with torch.cuda.stream(self.copy_stream):
            host.copy_(tensor, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(self.copy_stream)
        tensor.record_stream(self.copy_stream)  # its device memory is not reused before the copy has read it
        return tensor.device, host, copied

    @staticmethod
    def to_device(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        device, host, copied = packed
        torch.cuda.current_stream(device).wait_event(copied)
        return host.to(device, non_blocking=True)
