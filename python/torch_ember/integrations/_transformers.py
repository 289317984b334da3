"""transformers: bf16 on ember.

`TrainingArguments(bf16=True)` raises unless `is_torch_bf16_gpu_available()` is true, and that
check knows only CUDA, XPU, NPU, MLU, MUSA, HPU and MPS. When the Trainer's device will be ember
(no CUDA, ACCELERATE_TORCH_DEVICE names ember), bf16 is available: ember computes it natively.
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
