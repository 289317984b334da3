"""A class decorator for the process group's and its Work objects' methods: PyTorch calls them
from C++ (DDP's reducer rebuilding its buckets, a Work's wait) in the middle of a compiled
module's call, where Dynamo's frame hook would try to trace them and fail on the process group
(an opaque object to it). Disabled for Dynamo, they run as the plain Python they are."""
import inspect

import torch


def untraced(cls):
    for name, fn in list(vars(cls).items()):
        if inspect.isfunction(fn) and not name.startswith("__"):
            setattr(cls, name, torch._dynamo.disable(fn, recursive=True))
    return cls
