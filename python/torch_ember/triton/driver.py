"""Triton's driver interface for Ember: which device and stream a launch uses, how a compiled
kernel is loaded, and the launcher that runs it.

A kernel's shared object is loaded with ctypes; its `ember_launch(args, gx, gy, gz, nthreads)`
runs every program of the grid on host threads (as many as the device has compute threads, from
one pool shared by all kernels: cache.load_runtime) and returns when all are done. A launch is
asynchronous, like any ember kernel: it is queued on the current ember stream as a task that calls
ember_launch with a copy of the arguments, so it runs after the ops queued before it and before
those queued after it, and the host goes on. A launch that is handed a CPU tensor runs at the call
instead, after the stream drains (the caller may read that memory at once).
While torch.profiler or Ember's profiler records, each launch (the wait and the run) is a span
named after the kernel and its source line ("triton add_kernel @ kernels.py:12").

This module must hold exactly one concrete DriverBase subclass: Triton's backend discovery
looks the class up by scanning the module.
"""
from __future__ import annotations

import ctypes
import functools
import struct

from triton.backends.driver import DriverBase

_SCALAR = {
    "i1": ctypes.c_bool, "u1": ctypes.c_bool, "i8": ctypes.c_int8, "u8": ctypes.c_uint8,
    "i16": ctypes.c_int16, "u16": ctypes.c_uint16, "i32": ctypes.c_int32, "u32": ctypes.c_uint32,
    "i64": ctypes.c_int64, "u64": ctypes.c_uint64, "fp32": ctypes.c_float, "f32": ctypes.c_float,
    "fp64": ctypes.c_double, "f64": ctypes.c_double,
}
_CPP = {
    "i1": "bool", "u1": "bool", "i8": "int8_t", "u8": "uint8_t", "i16": "int16_t", "u16": "uint16_t",
    "i32": "int32_t", "u32": "uint32_t", "i64": "int64_t", "u64": "uint64_t", "fp16": "em::f16",
    "bf16": "em::bf16", "fp32": "float", "f32": "float", "fp64": "double", "f64": "double",
}


def _half_bits(x: float, ty: str) -> ctypes.c_uint16:
    if ty == "fp16":
        return ctypes.c_uint16(struct.unpack("<H", struct.pack("<e", x))[0])
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u += 0x7FFF + ((u >> 16) & 1)
    return ctypes.c_uint16((u >> 16) & 0xFFFF)


def _pointer(arg):
    if arg is None:
        return ctypes.c_void_p(0)
    if isinstance(arg, int):
        return ctypes.c_void_p(arg)
    dev = getattr(arg, "device", None)
    if dev is not None and dev.type not in ("ember", "cpu"):
        raise ValueError(f"the Ember Triton backend cannot pass a tensor on {dev} to a kernel; "
                         "move it to the ember device first")
    return ctypes.c_void_p(arg.data_ptr())


def _converter(ty: str):
    if ty.startswith("*"):
        return _pointer
    if ty in ("fp16", "bf16"):
        return lambda x: _half_bits(float(x), ty)
    if ty in _SCALAR:
        c = _SCALAR[ty]
        return lambda x: c(x)
    raise NotImplementedError(f"the Ember Triton backend cannot pass a kernel argument of type {ty}")


class EmberLauncher:
    def __init__(self, src, metadata):
        signature = dict(src.signature)
        self.converters = []
        for name, ty in signature.items():
            if ty == "constexpr":
                self.converters.append(None)
            elif isinstance(ty, tuple) or (isinstance(ty, str) and ty.startswith("tensordesc")):
                raise NotImplementedError(
                    f"the Ember Triton backend does not take {ty} kernel arguments yet ({name})")
            else:
                self.converters.append(_converter(ty))
        self.name = metadata.name
        self.label = _label(src, metadata.name)

    def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata,
                 launch_enter_hook, launch_exit_hook, *args):
        cargs = [conv(a) for conv, a in zip(self.converters, args) if conv is not None]
        on_host = any(getattr(getattr(a, "device", None), "type", None) == "cpu" for a in args)
        if launch_enter_hook is not None:
            launch_enter_hook(launch_metadata)
        if gridX * gridY * gridZ > 0:
            if _profiling():
                from torch.autograd.profiler import record_function
                with record_function(self.label):
                    self._run(stream, function, cargs, gridX, gridY, gridZ, on_host)
            else:
                self._run(stream, function, cargs, gridX, gridY, gridZ, on_host)
        if launch_exit_hook is not None:
            launch_exit_hook(launch_metadata)

    def _run(self, stream, function, cargs, gridX, gridY, gridZ, on_host):
        if stream is None or on_host:
            if stream is not None:
                stream.synchronize()
            arr = (ctypes.c_void_p * max(1, len(cargs)))(*[ctypes.cast(ctypes.pointer(c), ctypes.c_void_p)
                                                           for c in cargs])
            function(arr, gridX, gridY, gridZ, _threads())
            return
        from torch_ember import _C
        blob = b"".join(bytes(c).ljust(8, b"\0") for c in cargs)
        _C._enqueue_launch(stream.device_index, stream.stream_id, self.label,
                           ctypes.cast(function, ctypes.c_void_p).value, blob, gridX, gridY, gridZ,
                           _threads_of(stream.device_index))


def _label(src, name: str) -> str:
    """What a profiler shows for a launch: "triton add_kernel @ kernels.py:12" (the kernel's
    name and the line of its `def`)."""
    import os
    fn = getattr(src, "fn", None)
    code = getattr(getattr(fn, "fn", None), "__code__", None)
    if code is None:
        return f"triton {name}"
    line = getattr(fn, "def_file_line_number", None) or code.co_firstlineno
    return f"triton {name} @ {os.path.basename(code.co_filename)}:{line}"


def _profiling() -> bool:
    """Whether torch.profiler or Ember's profiler is recording (a launch is then a named span:
    RecordFunction, which both observe)."""
    from torch.autograd import profiler
    if profiler._is_profiler_enabled:
        return True
    from torch_ember import _C
    return bool(_C._profiler_running())


@functools.lru_cache(maxsize=None)
def _threads_of(index: int) -> int:
    import torch
    return max(1, int(torch.ember.get_device_properties(index).multi_processor_count))


def _threads() -> int:
    import torch
    return _threads_of(torch.ember.current_device())


class EmberUtils:
    def load_binary(self, name, kernel, shared, device):
        from .cache import load_runtime, loadable_path
        load_runtime()
        lib = ctypes.CDLL(str(loadable_path(kernel)))
        fn = lib.ember_launch
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
        # (module, function, n_regs, n_spills, max threads per program)
        return lib, fn, 0, 0, 1 << 30

    def unload_module(self, module):
        pass  # ctypes keeps the library mapped; kernels are small and reused

    def get_device_properties(self, device):
        return {"max_shared_mem": 1 << 30, "multiprocessor_count": _threads_of(device),
                "max_num_regs": 1 << 30, "warpSize": 1, "sm_clock_rate": 0, "mem_clock_rate": 0,
                "mem_bus_width": 0}


class EmberDriver(DriverBase):
    def __init__(self):
        super().__init__()
        import torch
        self.utils = EmberUtils()
        self.launcher_cls = EmberLauncher
        self._torch = torch

    @staticmethod
    def is_active():
        # Only the sole device Triton may use: on a machine where CUDA or ROCm is available the
        # GPU driver stays Triton's default (Triton refuses to choose between two active
        # drivers); torch_ember.triton.activate() switches to Ember explicitly there.
        import sys
        torch = sys.modules.get("torch")
        if torch is None or "torch_ember" not in sys.modules:
            return False
        return not torch.cuda.is_available()

    def map_python_to_cpp_type(self, ty: str) -> str:
        if ty.startswith("*"):
            return "void*"
        return _CPP[ty]

    def get_current_target(self):
        from .compiler import TARGET
        return TARGET

    def get_current_device(self):
        return self._torch.ember.current_device()

    def set_current_device(self, device):
        self._torch.ember.set_device(device)

    def get_current_stream(self, device=None):
        if device is None:
            device = self.get_current_device()
        return self._torch.ember.current_stream(device)

    def get_active_torch_device(self):
        return self._torch.device("ember", self.get_current_device())

    def get_device_interface(self):
        return self._torch.ember

    def get_benchmarker(self):
        from triton.testing import do_bench
        return do_bench

    def get_empty_cache_for_benchmark(self):
        return self._torch.empty(64 * 1024 * 1024 // 4, dtype=self._torch.int, device="ember")

    def clear_cache(self, cache):
        cache.zero_()

    def allocate_default_profile_scratch(self, size, alignment, stream):
        return self._torch.zeros(size, dtype=self._torch.int8, device=self.get_active_torch_device())
