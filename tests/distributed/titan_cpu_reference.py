"""The TorchTitan recipe of titan_llama3_ember.toml on CPU tensors over Gloo: the reference that
the ember run's losses are compared with. Same command line as the ember run, with this file in
place of `-m torchtitan.train`:

    PYTHONPATH=tests/distributed torchrun --nproc_per_node=2 tests/distributed/titan_cpu_reference.py \
        --job.config_file tests/distributed/titan_llama3_ember.toml

TorchTitan picks its device once, at import, from torch._utils._get_available_device_type(),
which prefers an accelerator (ember, once torch_ember is loaded) and never returns "cpu". So
this launcher answers "cpu" before TorchTitan is imported, fills in the few torch.cpu calls that
TorchTitan makes of an accelerator's device module (memory statistics, current_device), drops
the device_ids of its barrier (they name an accelerator), and makes FSDP2 reduce
gradients with SUM where TorchTitan's gradient divide factor of 1.0 would ask Gloo for
PREMUL_SUM(1.0), which Gloo lacks (the ember backend emulates it; a factor of 1 is a plain sum
either way). Then it runs TorchTitan's own entry point. Nothing here is used by the ember run.
"""
import runpy
import sys

import torch
import torch._utils

torch._utils._get_available_device_type = lambda: "cpu"

_cpu = torch.cpu
for name, value in {
    "set_device": lambda device: None,
    "current_device": lambda: 0,
    "reset_peak_memory_stats": lambda device=None: None,
    "empty_cache": lambda: None,
    "memory_stats": lambda device=None: {"active_bytes.all.peak": 0, "reserved_bytes.all.peak": 0,
                                         "num_alloc_retries": 0, "num_ooms": 0},
    "get_device_name": lambda device=None: "cpu",
    "get_device_properties": lambda device=None: type("Props", (), {"total_memory": 1 << 34})(),
}.items():
    if not hasattr(_cpu, name) or name in ("set_device", "current_device"):
        setattr(_cpu, name, value)

import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

_barrier = dist.barrier


def _cpu_barrier(group=None, async_op=False, device_ids=None):
    # TorchTitan passes device_ids=[current_device()], which barrier resolves on the current
    # accelerator (ember, loaded): a Gloo group has no backend for it. A CPU barrier needs none.
    return _barrier(group=group, async_op=async_op)


dist.barrier = _cpu_barrier

_set_factor = FSDPModule.set_gradient_divide_factor


def _set_factor_sum_on_gloo(self, factor: float) -> None:
    _set_factor(self, factor)
    self.set_force_sum_reduction_for_comms(True)


FSDPModule.set_gradient_divide_factor = _set_factor_sum_on_gloo

if __name__ == "__main__":
    sys.argv[0] = "torchtitan.train"
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
