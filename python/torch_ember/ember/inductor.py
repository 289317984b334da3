"""What Inductor finds for ember: a code generator that says to use Ember's own compiler.

`torch.compile(model)` with its default backend (Inductor) looks up a code generator per device
type, and for ember it found none: the compile failed with a bare `assert scheduling_ctor`. These
names are what Inductor's registration reads from the device module (`torch.ember.Scheduling`
and the wrapper code generators); each refuses with the fix instead.
"""

_MESSAGE = ("Inductor has no code generator for ember tensors. Compile for ember with "
            "torch.compile(model, backend='ember') (Hugging Face Trainer: "
            "TrainingArguments(torch_compile=True, torch_compile_backend='ember'); accelerate: "
            "dynamo_backend='ember'), or move the model to the CPU for Inductor.")


class _Refusing(type):
    """Any attribute Inductor asks the class for (supports_caching, create, ...) raises."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(_MESSAGE)


class Scheduling(metaclass=_Refusing):
    def __init__(self, *args, **kwargs):
        raise RuntimeError(_MESSAGE)


PythonWrapperCodegen = CppWrapperCodegen = WrapperFxCodegen = Scheduling
