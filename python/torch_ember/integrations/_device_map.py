"""accelerate / transformers `device_map="auto"`: ember devices get the model's layers.

accelerate's `get_max_memory` (which `infer_auto_device_map`, `get_balanced_memory` and
transformers' loader use) lists the free memory of CUDA, NPU, XPU, ... devices by index and then
the CPU; with none of those it offers only the CPU, so `from_pretrained(device_map="auto")`
loaded every layer there. When ember is the current accelerator (integer devices mean ember
then: `torch.device(0)` is `ember:0`) and the library found no device of its own, ember devices
are listed first with their free memory, as CUDA's would be. A `max_memory` the user passes is
left as it is.
"""
import functools

import torch

from . import ember_is_the_accelerator, rebind


def _free_memory() -> dict:
    free = {}
    for index in range(torch.ember.device_count()):
        available, _ = torch.ember.mem_get_info(index)
        # The caching allocator's reserved-but-unused blocks are free for the model too.
        free[index] = available + torch.ember.memory_reserved(index) - torch.ember.memory_allocated(index)
    return free


def _to_bytes(value) -> int:
    from accelerate.utils import convert_file_size_to_int

    return convert_file_size_to_int(value) if isinstance(value, str) else value


def patch_get_max_memory(module) -> None:
    original = module.get_max_memory

    @functools.wraps(original)
    def get_max_memory(max_memory=None):
        if not ember_is_the_accelerator():
            return original(max_memory)
        if max_memory is None:
            found = original(None)
            return found if any(isinstance(k, int) for k in found) else {**_free_memory(), **found}
        # The original would warn that integer devices (CUDA's) do not exist: check them here.
        # Sizes given as strings are converted in the caller's dict, as the original does
        # (transformers compares the dict's values with the result afterwards).
        for key, value in max_memory.items():
            max_memory[key] = _to_bytes(value)
        others = original({k: v for k, v in max_memory.items() if not isinstance(k, int)})
        ember = dict(sorted((k, v) for k, v in max_memory.items() if isinstance(k, int)))
        count = torch.ember.device_count()
        missing = [k for k in ember if not 0 <= k < count]
        if missing:
            raise ValueError(f"max_memory names ember devices {missing}, but there are {count} "
                             "(EMBER_DEVICE_COUNT sets how many)")
        return {**ember, **others}

    module.get_max_memory = get_max_memory
    # accelerate.utils re-exports it, and transformers binds that at import.
    rebind(original, get_max_memory, ("accelerate.utils", "transformers.integrations.accelerate"),
           ("get_max_memory", "accelerate_max_memory"))
