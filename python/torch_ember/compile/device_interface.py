"""Dynamo's device interface for "ember": how Dynamo (and code written against
torch._dynamo.device_interface) queries devices, streams and events. A thin map onto
torch.ember. Imported only once Dynamo is loaded."""
from collections import namedtuple

import torch
from torch._dynamo.device_interface import DeviceInterface

_Properties = namedtuple("EmberProperties", ["name", "multi_processor_count", "total_memory"])


class EmberInterface(DeviceInterface):
    device = torch.ember.device
    Event = torch.Event
    Stream = torch.Stream

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.ember.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.ember.current_device()

        @staticmethod
        def get_device_properties(device=None):
            import os

            return _Properties("ember", os.cpu_count() or 1, 0)

    @staticmethod
    def current_device() -> int:
        return torch.ember.current_device()

    @staticmethod
    def set_device(device) -> None:
        torch.ember.set_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        prev = torch.ember.current_device()
        if device != prev:
            torch.ember.set_device(device)
        return prev

    @staticmethod
    def exchange_device(device: int) -> int:
        return EmberInterface.maybe_exchange_device(device)

    @staticmethod
    def device_count() -> int:
        return torch.ember.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.ember.is_available()

    @staticmethod
    def stream(stream):
        return torch.ember.stream(stream)

    @staticmethod
    def current_stream():
        return torch.ember.current_stream()

    @staticmethod
    def set_stream(stream) -> None:
        torch.ember.set_stream(stream)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        torch.ember.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index,
                                            device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return torch.ember.current_stream(device_idx).stream_id

    @staticmethod
    def synchronize(device=None) -> None:
        torch.ember.synchronize(device)

    @classmethod
    def get_device_properties(cls, device=None):
        return cls.Worker.get_device_properties(device)

    @staticmethod
    def get_compute_capability(device=None):
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def memory_allocated(device=None) -> int:
        return torch.ember.memory_allocated(device)
