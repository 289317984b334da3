"""accelerate: `cpu=True` wins over the default device, fp16 mixed precision on ember, and
"ember" as a Dynamo backend name.

accelerate reads ACCELERATE_TORCH_DEVICE (which torch_ember sets to ember unless the user did)
before it looks at `cpu=True`; while the value is ours, `PartialState(cpu=True)` is initialized
without it, so the CPU is chosen as the user asked.

`Accelerator.__init__` refuses fp16 unless the device type is in a hard-coded tuple, and would
build a CUDA GradScaler (which disables itself without CUDA, so the loss would go unscaled).
bf16 needs nothing: accelerate allows it and autocasts with the state's device type, which is
ember. For fp16 on ember the wrapper initializes with mixed precision off, then turns on what
the refused branch would have set up: the fp16 state, native AMP (autocast on ember) and an
ember GradScaler with the user's scaler arguments.

`DynamoBackend` is a closed enum of the compile backends accelerate knows; `dynamo_backend=
"ember"` (and TrainingArguments' `torch_compile_backend="ember"`, which goes through it) failed
with "'EMBER' is not a valid DynamoBackend". The enum gains an EMBER member, and accelerate then
calls `torch.compile(model, backend="ember")` as it does for its own names.
"""
import functools
import os

import torch

from . import device_is_our_default


def patch_state(module) -> None:
    cls = module.PartialState
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, cpu: bool = False, **kwargs):
        if not (cpu and device_is_our_default()):
            return original(self, cpu, **kwargs)
        value = os.environ.pop("ACCELERATE_TORCH_DEVICE")
        try:
            original(self, cpu, **kwargs)
        finally:
            os.environ["ACCELERATE_TORCH_DEVICE"] = value

    cls.__init__ = __init__


def _wants_fp16_on_ember(mixed_precision, kwargs) -> bool:
    requested = mixed_precision if mixed_precision is not None else os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    requested = str(getattr(requested, "value", requested)).lower()
    device = os.environ.get("ACCELERATE_TORCH_DEVICE", "")
    return requested == "fp16" and device.startswith("ember") and not kwargs.get("cpu", False)


def patch_accelerator(module) -> None:
    from accelerate.state import AcceleratorState
    from accelerate.utils import DistributedType

    cls = module.Accelerator
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, mixed_precision=None, **kwargs):
        if not _wants_fp16_on_ember(mixed_precision, kwargs):
            return original(self, *args, mixed_precision=mixed_precision, **kwargs)
        shared = AcceleratorState._shared_state
        if shared.get("_mixed_precision") == "fp16":  # a second Accelerator in this process
            shared["_mixed_precision"] = "no"
        original(self, *args, mixed_precision="no", **kwargs)
        if self.device.type != "ember" or self.distributed_type in (DistributedType.DEEPSPEED,
                                                                    DistributedType.MEGATRON_LM):
            raise ValueError(f"fp16 mixed precision on ember needs the ember device, got {self.device}")
        self.state._mixed_precision = "fp16"
        self.native_amp = True
        scaler_kwargs = self.scaler_handler.to_kwargs() if self.scaler_handler is not None else {}
        self.scaler = torch.amp.GradScaler("ember", **scaler_kwargs)

    cls.__init__ = __init__


def add_dynamo_backend(module) -> None:
    cls = module.DynamoBackend
    if "EMBER" in cls.__members__:
        return
    member = str.__new__(cls, "EMBER")
    member._name_ = member._value_ = "EMBER"
    member.__objclass__ = cls
    cls._member_map_["EMBER"] = member
    cls._value2member_map_["EMBER"] = member
    cls._member_names_.append("EMBER")
    type.__setattr__(cls, "EMBER", member)
