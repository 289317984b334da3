"""torch.ember: the torch.cuda-shaped API for ember devices (docs/device_api.md lists what
torch.cuda has and what ember has of it)."""
import sys

import torch


from .device import (  # noqa: F401
    can_device_access_peer,
    current_device,
    device,
    device_count,
    device_of,
    init,
    is_available,
    is_initialized,
    set_device,
    synchronize,
    _is_in_bad_fork,
    _lazy_init,
)
from .memory import (  # noqa: F401
    device_memory_used,
    host_memory_stats,
    max_memory_cached,
    memory_cached,
    reset_max_memory_allocated,
    reset_max_memory_cached,
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from .graphs import EmberGraph, graph, is_current_stream_capturing  # noqa: F401
from .inductor import CppWrapperCodegen, PythonWrapperCodegen, Scheduling, WrapperFxCodegen  # noqa: F401
from .random import (  # noqa: F401
    default_generators,
    _get_generator,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (  # noqa: F401
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
    _sleep,
)
from .properties import (  # noqa: F401
    get_amp_supported_dtype,
    get_arch_list,
    get_device_capability,
    get_device_name,
    get_device_properties,
    is_bf16_supported,
    is_tf32_supported,
)
from . import amp  # noqa: E402

# The runtime starts when the extension loads. PyTorch probes this attribute before saving and
# restoring a device's RNG state (torch.utils.checkpoint recomputation, for one); without it,
# a checkpointed dropout would draw a different mask in the backward.
_initialized = True
OutOfMemoryError = torch.OutOfMemoryError

sys.modules.setdefault("torch.ember.amp", amp)

from .storage import STORAGE_CLASSES as _STORAGE_CLASSES  # noqa: E402

globals().update(_STORAGE_CLASSES)
