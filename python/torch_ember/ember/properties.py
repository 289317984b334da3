"""What a device is: name, properties, capability, supported dtypes — torch.cuda's queries.

An ember device is a virtual accelerator run by the host CPU, so its properties describe that:
`multi_processor_count` is the number of compute threads, `total_memory` the device capacity
(EMBER_DEVICE_MEMORY), `is_integrated` is true (device memory is host memory), and
`cpu_features` lists the SIMD/matrix extensions the kernels dispatch on.
"""
import functools
from typing import Any

import torch

from .. import _C
from .device import _device_index

# Ember's own device generation, the analogue of a CUDA compute capability.
CAPABILITY = (1, 0)
_FEATURES = ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16", "avx512_vnni",
             "amx_tile", "amx_bf16", "amx_int8", "amx_fp16")


@functools.lru_cache(maxsize=None)
def _host_cpu() -> tuple:
    """(model name, feature flags, L2 bytes) of the host CPU, from /proc/cpuinfo."""
    model, flags, l2 = "unknown CPU", set(), 0
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model == "unknown CPU":
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
                elif key == "cache size" and not l2:
                    size = value.strip().split()
                    l2 = int(size[0]) * 1024 if size and size[0].isdigit() else 0
    except OSError:
        pass
    return model, tuple(f for f in _FEATURES if f in flags), l2


class _EmberDeviceProperties:
    """The fields of torch.cuda's device properties that mean something for ember."""

    def __init__(self, index: int):
        model, features, l2 = _host_cpu()
        self.index = index
        self.name = f"Ember virtual accelerator ({model})"
        self.type = "ember"
        self.major, self.minor = CAPABILITY
        self.total_memory = _C._device_memory_capacity(index)
        self.multi_processor_count = _C._num_threads(index)
        self.max_threads_per_multi_processor = 1
        self.warp_size = 16 if "avx512f" in features else 8  # float32 lanes of one vector
        self.L2_cache_size = l2
        self.is_integrated = True
        self.is_multi_gpu_board = False
        self.cpu_model = model
        self.cpu_features = features
        self.uuid = f"ember-{index}"

    def __repr__(self) -> str:
        return (f"_EmberDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"multi_processor_count={self.multi_processor_count}, "
                f"cpu_features={list(self.cpu_features)})")


def get_device_properties(device: Any = None) -> _EmberDeviceProperties:
    index = _device_index(device)
    if not 0 <= index < _C._device_count():
        raise ValueError(f"ember: invalid device index {index} (there are {_C._device_count()} devices)")
    return _EmberDeviceProperties(index)


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: Any = None) -> tuple:
    prop = get_device_properties(device)
    return prop.major, prop.minor


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 runs natively on every ember device: kernels compute it in float32."""
    return True


def is_tf32_supported() -> bool:
    return False


def get_amp_supported_dtype() -> list:
    return [torch.float16, torch.bfloat16]


def get_arch_list() -> list:
    return [f"ember_{CAPABILITY[0]}{CAPABILITY[1]}"]
