"""nn.DataParallel across ember devices.

DataParallel's device handling goes through torch.accelerator, but its data movement
(`torch.nn.parallel.comm`: broadcast, scatter, gather) calls C++ functions built for CUDA tensors
only, so with two ember devices (the default) the first forward failed with
`module 'torch._C' has no attribute '_scatter'`. For ember tensors these functions are copies
between devices, which is what they do on CUDA without NCCL; other devices keep PyTorch's own.
"""
import warnings

import torch


def _ember(tensors) -> bool:
    return any(isinstance(t, torch.Tensor) and t.device.type == "ember" for t in tensors)


def _device(d) -> torch.device:
    if isinstance(d, torch.device):
        return d
    if isinstance(d, str):
        return torch.device(d)
    return torch.device("cpu") if d == -1 else torch.device("ember", d)


def patch_comm(comm) -> None:
    broadcast, broadcast_coalesced, scatter, gather = comm.broadcast, comm.broadcast_coalesced, comm.scatter, comm.gather

    def ember_broadcast(tensor, devices=None, *, out=None):
        if not _ember([tensor]):
            return broadcast(tensor, devices, out=out)
        if (devices is None) == (out is None):
            raise RuntimeError("Exactly one of 'devices' and 'out' must be specified")
        if out is not None:
            return tuple(o.copy_(tensor) for o in out)
        return tuple(tensor if _device(d) == tensor.device else tensor.to(_device(d)) for d in devices)

    def ember_broadcast_coalesced(tensors, devices, buffer_size=10485760):
        if not _ember(tensors):
            return broadcast_coalesced(tensors, devices, buffer_size)
        # As the CUDA version, the source device's entry holds the tensors themselves.
        return [[t if _device(d) == t.device else t.to(_device(d)) for t in tensors] for d in devices]

    def ember_scatter(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
        if not _ember([tensor]):
            return scatter(tensor, devices, chunk_sizes, dim, streams, out=out)
        if out is not None:
            sizes = [o.size(dim) for o in out]
            return tuple(o.copy_(c) for o, c in zip(out, tensor.split(sizes, dim)))
        devices = [_device(d) for d in devices]
        chunks = tensor.split(list(chunk_sizes), dim) if chunk_sizes else tensor.chunk(len(devices), dim)
        return tuple(c.to(d) for c, d in zip(chunks, devices))

    def ember_gather(tensors, dim=0, destination=None, *, out=None):
        if not _ember(tensors):
            return gather(tensors, dim, destination, out=out)
        if out is not None:
            return torch.cat([t.to(out.device) for t in tensors], dim, out=out)
        dest = torch.device("ember", torch.ember.current_device()) if destination is None else _device(destination)
        return torch.cat([t.to(dest) for t in tensors], dim)

    def quiet(reduce):
        # reduce_add asks torch.cuda.nccl whether NCCL applies, which warns that this build has
        # none: true, and irrelevant to ember tensors, which are added by copies.
        def run(inputs, *args, **kwargs):
            if not _ember(inputs):
                return reduce(inputs, *args, **kwargs)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="PyTorch is not compiled with NCCL support")
                return reduce(inputs, *args, **kwargs)
        return run

    comm.reduce_add = quiet(comm.reduce_add)
    comm.broadcast, comm.broadcast_coalesced = ember_broadcast, ember_broadcast_coalesced
    comm.scatter, comm.gather = ember_scatter, ember_gather
