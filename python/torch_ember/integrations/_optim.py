"""torch.optim: an optimizer step inside an ember graph capture that would bake host state into
the graph is refused.

A step captured with `capturable=False` keeps its step count on the CPU and bakes the learning
rate's bias correction of the capture's step into the kernels, so every replay would repeat that
step's arithmetic: silently wrong training. `Optimizer._accelerator_graph_capture_health_check`
refuses it for CUDA and XPU captures only; the wrapper adds ember's, with the same message.
Optimizers without a `capturable` flag (Adagrad's step count, lr_decay) have no such check: a
global step pre-hook refuses any step whose state or hyperparameters hold CPU tensors (a CPU-tensor
lr that a scheduler updates between replays) while an ember graph captures.
"""
import functools

import torch

from .. import _C


def patch_capture_check(module) -> None:
    patch_step_hook(module)
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


def _refuse_host_state(optimizer, args, kwargs):
    # is_compiling() first: Dynamo traces step() with its hooks and folds this to an early return.
    if torch.compiler.is_compiling() or not _C._any_capture() or not torch.ember.is_current_stream_capturing():
        return
    def refuse(what):
        raise RuntimeError(
            f"Attempting EMBER graph capture of step() for an instance of {type(optimizer).__name__} whose "
            f"{what} is a CPU tensor: its value at capture time would be baked into every replay. Use "
            "capturable=True where the optimizer has it, and keep tensor hyperparameters (lr) on the device.")

    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.device.type == "cpu":
                refuse(f"state {key!r}")
    for group in optimizer.param_groups:
        for key, value in group.items():
            if isinstance(value, torch.Tensor) and value.device.type == "cpu":
                refuse(f"param_groups {key!r}")


def patch_step_hook(module) -> None:
    module.register_optimizer_step_pre_hook(_refuse_host_state)


def patch_dynamo_capturable(module) -> None:
    """Dynamo traces a compiled optimizer step as capturable (step counts on the device, no host
    reads) and, for CUDA and XPU parameters only, sets `capturable=True` on the real param groups
    too, so that `_init_group` creates the step counts on the device to match. For ember it traced
    the capturable form over CPU step counts, copied to the device at every compiled step. Ember
    groups get the same flag as CUDA's, under the same condition: every parameter on the device and
    no state yet."""
    cls = module.OptimizerVariable
    original = cls._set_capturable

    @functools.wraps(original)
    def set_capturable(self, tx):
        for group in self.value.param_groups:
            params = group.get("params", [])
            if "capturable" in group and params and all(p.device.type == "ember" for p in params) and \
                    all(p not in self.value.state for p in params):
                group["capturable"] = True
        return original(self, tx)

    cls._set_capturable = set_capturable
