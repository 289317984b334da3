"""torch.optim: a non-capturable optimizer step inside an ember graph capture is refused.

A step captured with `capturable=False` keeps its step count on the CPU and bakes the learning
rate's bias correction of the capture's step into the kernels, so every replay would repeat that
step's arithmetic: silently wrong training. `Optimizer._accelerator_graph_capture_health_check`
refuses it for CUDA and XPU captures only; the wrapper adds ember's, with the same message.
"""
import functools

import torch


def patch_capture_check(module) -> None:
    cls = module.Optimizer
    original = cls._accelerator_graph_capture_health_check

    @functools.wraps(original)
    def check(self):
        if not torch.compiler.is_compiling() and torch.ember.is_initialized() and \
                torch.ember.is_current_stream_capturing() and \
                not all(group["capturable"] for group in self.param_groups):
            raise RuntimeError("Attempting EMBER graph capture of step() for an instance of " +
                               self.__class__.__name__ + " but param_groups' capturable is False.")
        return original(self)

    cls._accelerator_graph_capture_health_check = check
