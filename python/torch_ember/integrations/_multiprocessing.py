"""Ember tensors sent between processes (DataLoader workers, torch.multiprocessing queues).

PyTorch pickles a CPU tensor through shared memory and a CUDA tensor through a CUDA IPC handle;
an ember tensor reached the CPU branch, whose `_share_fd_` refuses non-CPU storage. That error is
raised on the queue's feeder thread, which prints it and drops the item, so a DataLoader whose
workers return ember tensors waited forever. An ember tensor now travels as a CPU copy in shared
memory and is moved back to the same ember device index in the receiving process (which imports
torch_ember to unpickle it). Unlike CUDA IPC the receiver gets a copy, not the sender's memory:
in-place changes on one side are not seen on the other, and views of one tensor arrive as
separate tensors.
"""
import torch

_original = None


def _rebuild(cpu: torch.Tensor, index: int, requires_grad: bool, parameter: bool) -> torch.Tensor:
    t = cpu.to(torch.device("ember", index))
    if parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t


def _reduce_tensor(tensor):
    if tensor.device.type != "ember" or tensor.layout != torch.strided:
        return _original(tensor)
    if tensor.requires_grad and not tensor.is_leaf:
        return _original(tensor)  # PyTorch's own refusal: autograd does not cross processes
    cpu = tensor.detach().cpu()  # waits for the work that produces the tensor
    return (_rebuild, (cpu, tensor.device.index, tensor.requires_grad,
                       isinstance(tensor, torch.nn.Parameter)))


def patch_reductions(reductions) -> None:
    """Registers the ember-aware reducer for every tensor class PyTorch registered its own for."""
    global _original
    from multiprocessing.reduction import ForkingPickler

    if _original is not None:
        return
    _original = reductions.reduce_tensor
    for cls in (*torch._tensor_classes, torch.Tensor, torch.nn.Parameter):
        ForkingPickler.register(cls, _reduce_tensor)
