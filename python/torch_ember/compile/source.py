"""The user's source line of an FX node ("file:line"), for error messages and the profiler.

FX keeps the Python stack of the traced call in node.meta["stack_trace"]; AOTAutograd copies a
forward node's trace onto the backward nodes derived from it (matched by seq_nr), so backward
ops point at the forward line that produced them. The user's frame is the innermost one that
is not inside torch or torch_ember itself."""
import os
import re

import torch

_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep
    for m in (torch,)
) + (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)
_cache: dict = {}


def user_frame(stack_trace: str | None) -> str:
    if not stack_trace:
        return ""
    hit = _cache.get(stack_trace)
    if hit is not None:
        return hit
    frames = _FRAME.findall(stack_trace)
    result = ""
    for path, line in reversed(frames):
        if not os.path.abspath(path).startswith(_LIBRARY_DIRS):
            result = f"{path}:{line}"
            break
    if not result and frames:
        result = "{}:{}".format(*frames[-1])
    _cache[stack_trace] = result
    return result


def node_source(node: torch.fx.Node) -> str:
    return user_frame(node.meta.get("stack_trace"))
