"""torch.distributed on ember: a c10d backend named "ember" on PyTorch's own engine, with Gloo
as the transport.

Why a Python process group: PyTorch's Gloo backend accepts only CPU and CUDA tensors, and a
C++ `c10d::Backend` cannot be written in Python (only `ProcessGroup` has a Python trampoline).
So `init_process_group("ember")` builds an `EmberProcessGroup` (process_group.py) that runs an
inner `ProcessGroupGloo` over host views of the ember tensors (staging.py), in stream order on a
communication stream and thread per device, so collectives overlap compute and Work.wait()
orders the current stream as NCCL's does (comm.py); it emulates the reductions Gloo lacks
(reduce_ops.py: AVG, PREMUL_SUM).

Registration is cheap and needs nothing beyond torch.distributed, which `import torch` has
already loaded: `import torch_ember` calls `register()`; the process group module loads when
the first group is created.
"""
import torch

BACKEND_NAME = "ember"
_registered = False


def _create(store, group_rank: int, group_size: int, timeout):
    from .process_group import EmberProcessGroup

    return EmberProcessGroup(store, group_rank, group_size, timeout)


def register() -> None:
    """Register the "ember" c10d backend as the default for ember devices (idempotent)."""
    global _registered
    if _registered or not torch.distributed.is_available():
        return
    from torch.distributed import Backend

    if BACKEND_NAME not in Backend.backend_list:
        # "cpu" too: object collectives and barrier run on CPU tensors of the same group.
        Backend.register_backend(BACKEND_NAME, _create, devices=["ember", "cpu"])
    _registered = True


__all__ = ["BACKEND_NAME", "register"]
