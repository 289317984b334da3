"""transformers: bf16 on ember, ember graph capture counts as tracing, and flex attention in eager
models compiles for ember.

`TrainingArguments(bf16=True)` raises unless `is_torch_bf16_gpu_available()` is true, and that
check knows only CUDA, XPU, NPU, MLU, MUSA, HPU and MPS. When the Trainer's device will be ember
(no CUDA, ACCELERATE_TORCH_DEVICE names ember), bf16 is available: ember computes it natively.

`is_tracing()` tells models to skip data-dependent checks (the packed-sequence test of the mask
helpers reads a value back) while Dynamo traces or a CUDA/XPU stream captures a graph; an ember
graph capture refuses such reads, so it counts too.

`attn_implementation="flex_attention"` in an eager model wraps flex_attention in
`torch.compile` with the default backend (Inductor), which has no code generator for ember
tensors: the model failed at its first forward. For ember queries the wrapper compiles it with
`backend="ember"` instead (once per process, as transformers does).
"""
import functools
import os

import torch


def patch_training_args(module) -> None:
    original = module.is_torch_bf16_gpu_available

    @functools.wraps(original)
    def is_torch_bf16_gpu_available() -> bool:
        if not torch.cuda.is_available() and os.environ.get("ACCELERATE_TORCH_DEVICE", "").startswith("ember"):
            return True
        return original()

    module.is_torch_bf16_gpu_available = is_torch_bf16_gpu_available


def patch_is_tracing(module) -> None:
    original = module.is_xpu_stream_capturing

    @functools.wraps(original)
    def is_xpu_stream_capturing() -> bool:
        if torch.ember.is_initialized() and torch.ember.is_current_stream_capturing():
            return True
        return original()

    module.is_xpu_stream_capturing = is_xpu_stream_capturing


def patch_flex_attention(module) -> None:
    original = getattr(module, "compile_friendly_flex_attention", None)
    if original is None or getattr(original, "_ember", False):
        return
    compiled = []

    @functools.wraps(original)
    def compile_friendly_flex_attention(query, key, value, training=False, **kwargs):
        if query.device.type != "ember" or module.is_torchdynamo_compiling():
            return original(query, key, value, training=training, **kwargs)
        if not compiled:
            compiled.append(torch.compile(module.flex_attention, backend="ember"))
        return compiled[0](query, key, value, **kwargs)

    compile_friendly_flex_attention._ember = True
    module.compile_friendly_flex_attention = compile_friendly_flex_attention
