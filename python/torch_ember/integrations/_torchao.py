"""torchao's low-bit optimizers (AdamW8bit, AdamW4bit, AdamWFp8, _AdamW) compile their
per-parameter update with `torch.compile(single_param_adam, fullgraph=True, dynamic=False)`
inside `step()`, with the default backend, Inductor, which has no code generator for ember
tensors; the user has no setting to change it. For a parameter on ember the update compiles
with backend="ember" instead; every other device keeps the library's own call."""
import torch


class _TorchRoutingCompile:
    """The `torch` module as torchao.optim.adam sees it: the same, except that `compile` picks
    the ember backend when the compiled update runs on ember tensors."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def compile(fn, **kwargs):
        compiled = {}  # one compiled callable per choice of backend, made on first use

        def run(*args, **kw):
            on_ember = "backend" not in kwargs and any(
                isinstance(a, torch.Tensor) and a.device.type == "ember" for a in args)
            if on_ember not in compiled:
                compiled[on_ember] = torch.compile(fn, **({**kwargs, "backend": "ember"} if on_ember else kwargs))
            return compiled[on_ember](*args, **kw)
        return run


def route_optimizer_compile(module) -> None:
    if isinstance(getattr(module, "torch", None), _TorchRoutingCompile):
        return
    module.torch = _TorchRoutingCompile()
