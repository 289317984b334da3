"""torch.ember: the torch.cuda-shaped API for ember devices."""
import torch

from .device import (  # noqa: F401
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
from .random import (  # noqa: F401
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


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]
